"""The Bayesian selectors' estimator, calibrated on the source llms (no MCMC, fast).

The IRT prediction of a target's unchosen items is recalibrated, for each subset,
by the line ``t = alpha + beta m + gamma s`` fitted on the source llms
(``bayes_fisher.source_calibration``). Where the model misfits the benchmark (here:
items that stronger llms answer worse, which a positive-slope model cannot fit) the
calibrated estimate of held-out llms' full accuracy is closer to the truth; where
the model holds it changes next to nothing; the selection weights follow the line.
"""

from __future__ import annotations

import numpy as np
import pytest

from bayes_microbench.selectors import bayes_fisher as bf
from bayes_microbench.selectors.bayes_fisher import BayesFisherSelector, linearized_weights


def world(seed: int, n_anti: int, n_items: int = 160, n_src: int = 300, n_tgt: int = 200):
    """Source and target responses of a 2PL whose first ``n_anti`` items have slope -0.7."""
    rng = np.random.default_rng(seed)
    a = rng.lognormal(0.0, 0.4, n_items)
    a[:n_anti] = -0.7
    b = rng.normal(0.0, 1.0, n_items)
    theta = rng.standard_normal(n_src + n_tgt)
    p = 1.0 / (1.0 + np.exp(-a * (theta[:, None] - b)))
    y = (rng.random(p.shape) < p).astype(np.float64)
    return y[:n_src], y[n_src:]


def rmse_ratio(seed: int, n_anti: int, n: int) -> float:
    """RMSE of the calibrated estimate over that of the raw one, held-out targets."""
    src, tgt = world(seed, n_anti)
    truth = tgt.mean(axis=1)
    codes = np.zeros(src.shape[1], dtype=np.int64)
    rmse = []
    for calibrate in (False, True):
        prepared = BayesFisherSelector(calibrate=calibrate).prepare(src, codes, None, seed)
        sel = prepared.select(n)
        assert ("calibration" in sel.info) is calibrate
        est = prepared.estimate(sel, tgt[:, sel.items])
        rmse.append(np.sqrt(np.mean((est - truth) ** 2)))
    return rmse[1] / rmse[0]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_calibration_corrects_a_model_that_misfits(seed):
    # measured, seeds 0-3: ratio 0.77-0.90 at n = 40 (mean 0.83), 0.57-0.68 at n = 100
    assert rmse_ratio(seed, n_anti=30, n=100) < 0.75
    assert rmse_ratio(seed, n_anti=30, n=40) < 0.95


@pytest.mark.parametrize("seed", [0, 1])
def test_the_calibration_costs_next_to_nothing_where_the_model_holds(seed):
    # measured, seeds 0-3: ratio 0.98-1.02 at n = 10, 40 and 100
    for n in (10, 100):
        assert rmse_ratio(seed, n_anti=0, n=n) < 1.05


def test_the_weights_follow_the_calibration():
    src, _ = world(0, n_anti=0)
    prepared = BayesFisherSelector(calibrate=False).prepare(
        src, np.zeros(src.shape[1], dtype=np.int64), None, 0
    )
    chosen = prepared.select(30).items
    raw = linearized_weights(prepared.draws, chosen)
    # beta 1, gamma 0: the raw estimator's weights, whatever alpha
    same = linearized_weights(prepared.draws, chosen, np.array([0.3, 1.0, 0.0]))
    np.testing.assert_allclose(same, raw, rtol=1e-12)
    # beta 0: the model's prediction is gone, every answer counts alike
    flat = linearized_weights(prepared.draws, chosen, np.array([0.1, 0.0, 0.8]))
    np.testing.assert_allclose(flat, np.full(30, 1 / 30), rtol=1e-12)
    # in between: less spread than the raw weights, more than none
    half = linearized_weights(prepared.draws, chosen, np.array([0.0, 0.5, 0.3]))
    assert 0 < np.ptp(half) < np.ptp(raw)


def test_too_few_sources_or_no_unchosen_item_leave_the_raw_estimator():
    src, tgt = world(2, n_anti=10, n_src=300)
    codes = np.zeros(src.shape[1], dtype=np.int64)
    few = BayesFisherSelector().prepare(src[: bf.MIN_CALIBRATION_SOURCES - 1], codes, None, 0)
    assert few.folds is None
    assert "calibration" not in few.select(20).info
    prepared = BayesFisherSelector().prepare(src, codes, None, 0)
    assert "calibration" in prepared.select(20).info
    everything = prepared.select(src.shape[1])
    assert "calibration" not in everything.info
    # every item asked: the estimate is the observed accuracy
    est = prepared.estimate(everything, tgt[:, everything.items])
    np.testing.assert_allclose(est, tgt.mean(axis=1), atol=1e-12)


def test_a_target_without_a_response_gets_the_models_prediction():
    src, tgt = world(3, n_anti=20)
    prepared = BayesFisherSelector().prepare(src, np.zeros(src.shape[1], np.int64), None, 0)
    sel = prepared.select(25)
    y = tgt[:3, sel.items].copy()
    y[0] = np.nan  # no answer at all: no subset mean to recalibrate with
    est = prepared.estimate(sel, y)
    raw = BayesFisherSelector(calibrate=False).prepare(
        src, np.zeros(src.shape[1], np.int64), None, 0
    )
    np.testing.assert_allclose(est[0], raw.estimate(raw.select(25), y)[0], rtol=1e-12)
    assert np.isfinite(est).all() and ((est >= 0) & (est <= 1)).all()


def test_the_calibration_is_deterministic_given_the_seed():
    src, _ = world(4, n_anti=15)
    codes = np.zeros(src.shape[1], dtype=np.int64)
    one = BayesFisherSelector().prepare(src, codes, None, 7).select(40).info["calibration"]
    two = BayesFisherSelector().prepare(src, codes, None, 7).select(40).info["calibration"]
    assert one == two
    assert len(one) == 3 and all(np.isfinite(one))

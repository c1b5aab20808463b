"""The Bayesian selectors hand a size over to a random subset where that ranks pairs better.

``PreparedBayes.select`` compares, on close pairs of source llms
(``bayes_fisher.close_pairs``), the calibrated estimator's error on the pair's
accuracy difference (leave-one-out residuals of its line) on the informative
items and on a random subset. Where one ability carries the benchmark the
informative items win at every size tried here; where llms differ by subtask
beyond their ability, large subsets go random, and held-out llms' pairs are then
ranked with a smaller error than the informative items' and the random subset's
plain mean give.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from bayes_microbench import Responses, save_responses
from bayes_microbench.cli import main
from bayes_microbench.selectors import bayes_fisher as bf
from bayes_microbench.selectors.bayes_fisher import BayesFisherSelector
from bayes_microbench.selectors.bayes_ranking import BayesRankingSelector


def subtask_world(
    seed: int, effect: float, n_sub: int = 8, per_sub: int = 50, n_llms: int = 400
) -> tuple[np.ndarray, np.ndarray]:
    """A 2PL plus an llm-by-subtask ability shift of sd ``effect``; (responses, subtask codes).

    With ``effect`` > 0 the subtasks' discriminations differ too (log-sd 0.8 between
    subtasks), so that the most informative items crowd into a few subtasks, as on BBH.
    """
    y, codes, _ = subtask_world_with_items(seed, effect, n_sub, per_sub, n_llms)
    return y, codes


def subtask_world_with_items(
    seed: int, effect: float, n_sub: int = 8, per_sub: int = 50, n_llms: int = 400
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """:func:`subtask_world` and the items' true (discrimination, difficulty)."""
    rng = np.random.default_rng(seed)
    codes = np.repeat(np.arange(n_sub), per_sub)
    spread = 0.8 if effect > 0 else 0.0
    a = np.exp(rng.normal(0.0, spread, n_sub)[codes] + rng.normal(0.0, 0.3, codes.size))
    b = rng.normal(0.0, 1.0, codes.size)
    theta = rng.standard_normal(n_llms)[:, None] + effect * rng.standard_normal((n_llms, n_sub))
    p = 1.0 / (1.0 + np.exp(-a * (theta[:, codes] - b)))
    return (rng.random(p.shape) < p).astype(np.float64), codes, (a, b)


def bbh_like(seed: int, n_llms: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """16 subtasks of 50 items, llm-by-subtask shifts of sd 1: one ability does not carry it."""
    return subtask_world(seed, effect=1.0, n_sub=16, per_sub=50, n_llms=n_llms)


def pair_rmse(est: np.ndarray, truth: np.ndarray) -> float:
    """Root mean square error over all pairs of the estimated accuracy difference."""
    err = est - truth
    i, j = np.triu_indices(err.size, 1)
    return float(np.sqrt(np.mean((err[i] - err[j]) ** 2)))


def test_close_pairs_are_the_pairs_within_the_gap_with_their_item_variance():
    rng = np.random.default_rng(0)
    y = (rng.random((40, 80)) < rng.uniform(0.2, 0.8, (40, 1))).astype(np.float64)
    y[3, :5] = np.nan  # a missing cell counts as its llm's mean
    filled = np.where(np.isnan(y), np.nanmean(y, axis=1, keepdims=True), y)
    acc = np.nanmean(y, axis=1)
    a, b, item_var = bf.close_pairs(y)
    i, j = np.triu_indices(40, 1)
    want = np.abs(acc[i] - acc[j]) <= bf.CLOSE_GAP
    assert want.sum() >= bf.MIN_CLOSE_PAIRS
    assert set(zip(a.tolist(), b.tolist(), strict=True)) == set(
        zip(i[want].tolist(), j[want].tolist(), strict=True)
    )
    brute = np.var(filled[a] - filled[b], axis=1, ddof=1)
    np.testing.assert_allclose(item_var, brute, rtol=1e-10)
    # too few close pairs: every pair counts
    spread = np.vstack([np.full(80, k / 10) for k in range(6)])
    a, b, _ = bf.close_pairs(spread)
    assert len(a) == 15


def test_close_pairs_give_a_random_subsets_error_on_them():
    rng = np.random.default_rng(1)
    y = (rng.random((12, 60)) < rng.uniform(0.3, 0.6, (12, 1))).astype(np.float64)
    a, b, item_var = bf.close_pairs(y)
    full = y.mean(axis=1)
    sq = []
    for _ in range(20000):
        items = rng.choice(60, size=15, replace=False)
        err = y[:, items].mean(axis=1) - full
        sq.append(np.mean((err[a] - err[b]) ** 2))
    # Monte Carlo se of the mean of 20000 draws: about 1% here
    assert np.mean(sq) == pytest.approx((1 - 15 / 60) / 15 * item_var.mean(), rel=0.04)


def test_close_pairs_are_drawn_from_at_most_the_cap_of_sources():
    y = (np.random.default_rng(2).random((bf.MAX_PAIR_SOURCES + 50, 30)) < 0.5).astype(float)
    a, b, _ = bf.close_pairs(y)
    assert len(np.union1d(a, b)) <= bf.MAX_PAIR_SOURCES
    assert a.max() <= y.shape[0] - 1 and b.max() == y.shape[0] - 1


@pytest.mark.parametrize("seed", [0, 1])
def test_where_one_ability_holds_the_informative_items_are_kept(seed):
    y, codes = subtask_world(seed, effect=0.0)
    prepared = BayesFisherSelector().prepare(y[:250], codes, None, seed)
    for n in (10, 50, 150):
        sel = prepared.select(n, random_seed=seed)
        assert "calibration" in sel.info, n
        np.testing.assert_array_equal(sel.items, prepared.order(n))


@pytest.mark.long
@pytest.mark.parametrize("seed", [0, 1])
def test_where_llms_differ_by_subtask_large_subsets_go_random_and_rank_better(seed):
    y, codes = bbh_like(seed)
    src, tgt = y[:250], y[250:]
    truth = tgt.mean(axis=1)
    on = BayesFisherSelector().prepare(src, codes, None, seed)
    off = BayesFisherSelector(random_fallback=False).prepare(src, codes, None, seed)
    large = on.select(200, random_seed=seed)
    assert large.info["estimator"] == bf.RANDOM_FALLBACK
    assert "random subset of 200" in large.info["note"]
    assert len(large.info["calibration"]) == 3
    assert np.all(large.weights > 0) and large.weights.sum() == pytest.approx(1.0)
    drawn = bf.PreparedRandom(name="x", n_seen=y.shape[1]).select(200, seed).items
    np.testing.assert_array_equal(large.items, np.sort(drawn))  # the random selector's draw
    est = on.estimate(large, tgt[:, large.items])
    kept = off.select(200, random_seed=seed)
    assert kept.info["estimator"] != bf.RANDOM_FALLBACK
    ours = pair_rmse(est, truth)
    informative = pair_rmse(off.estimate(kept, tgt[:, kept.items]), truth)
    plain = pair_rmse(tgt[:, large.items].mean(axis=1), truth)
    # measured, seeds 0-2: 0.036-0.038 against 0.051-0.062 (ratio 0.59-0.72)
    assert ours < 0.85 * informative
    # the calibrated estimate of the random items beats their plain mean (0.96-0.97)
    assert ours < plain
    again = on.select(200, random_seed=seed)
    np.testing.assert_array_equal(again.items, large.items)


@pytest.mark.long
def test_bayes_ranking_falls_back_alike_and_without_a_calibration_never():
    y, codes = bbh_like(2)
    ranking = BayesRankingSelector().prepare(y[:250], codes, None, 2)
    assert ranking.select(200, random_seed=0).info["estimator"] == bf.RANDOM_FALLBACK
    few = BayesFisherSelector().prepare(y[: bf.MIN_CALIBRATION_SOURCES - 1], codes, None, 2)
    assert few.select(200, random_seed=0).info["estimator"] == "posterior mean"


def test_select_says_when_it_returned_a_random_subset(tmp_path, capsys):
    y, codes = bbh_like(3, n_llms=250)
    resp = Responses.from_arrays(
        y,
        [f"llm{i}" for i in range(y.shape[0])],
        [f"q{i}" for i in range(y.shape[1])],
        subtask=[f"s{c}" for c in codes],
    )
    path = save_responses(resp, tmp_path / "bench.csv")[0]
    out = tmp_path / "subset.json"
    args = ["select", "--responses", str(path), "--selector", "bayes-fisher", "--n", "200"]
    assert main([*args, "--output", str(out), "--seed", "0"]) == 0
    printed = capsys.readouterr().out
    assert "note: bayes-fisher returned a random subset of 200" in printed
    doc = json.loads(out.read_text())
    assert doc["n_items"] == 200
    weights = np.array([i["weight"] for i in doc["items"]])
    assert np.all(weights > 0) and weights.sum() == pytest.approx(1.0, abs=1e-6)


def test_pair_noise_is_blind_to_shrinkage_and_sees_the_noise():
    """The fallback's yardstick: shrinking every estimate toward the mean changes
    nothing (the pairs' order is the same), more noise is worse, a constant
    estimate ranks nothing."""
    rng = np.random.default_rng(3)
    truth = rng.uniform(0.2, 0.8, 200)
    noise = rng.normal(0.0, 0.02, 200)
    a, b = np.triu_indices(200, 1)
    close = np.abs(truth[a] - truth[b]) <= bf.CLOSE_GAP
    a, b = a[close], b[close]
    base = bf.pair_noise(truth, truth + noise, a, b)
    shrunk = bf.pair_noise(truth, 0.5 + 0.1 * (truth - 0.5) + 0.1 * noise, a, b)
    assert shrunk == pytest.approx(base, rel=1e-9)
    # what a plain mean square error of the differences would have preferred
    mse = np.mean(((truth + noise)[a] - (truth + noise)[b] - (truth[a] - truth[b])) ** 2)
    mse_shrunk = np.mean(((0.1 * (truth + noise))[a] - (0.1 * (truth + noise))[b]
                          - (truth[a] - truth[b])) ** 2)  # fmt: skip
    assert mse_shrunk < mse
    # the noise of the difference, about 2 * 0.02**2 before the line takes its share
    assert base == pytest.approx(2 * 0.02**2, rel=0.2)
    assert bf.pair_noise(truth, truth + 2 * noise, a, b) > 3.5 * base
    assert bf.pair_noise(truth, np.full(200, 0.5), a, b) == np.inf
    assert bf.pair_noise(truth, 1.0 - truth, a, b) == np.inf  # ranks every pair backwards


@pytest.mark.parametrize("seed", [0, 1])
def test_few_random_items_do_not_displace_the_informative_ones_on_one_ability(seed):
    """At 10 items a calibrated line on random items shrinks every source to the mean:
    a small error, no order. Where one ability holds the informative items stay."""
    y, codes = subtask_world(seed, effect=0.0)
    prepared = BayesFisherSelector().prepare(y[:250], codes, None, seed)
    for n in (5, 10, 25):
        sel = prepared.select(n, random_seed=seed)
        assert sel.info["estimator"] != bf.RANDOM_FALLBACK, n


@pytest.mark.parametrize(("effect", "want"), [(1.0, bf.RANDOM_FALLBACK), (0.0, "calibrated")])
def test_select_from_a_posterior_sees_the_misfit_its_calibration_carries(effect, want):
    """From a posterior alone the simulated llms follow the model and the informative
    items are always kept; with the fitted llms' population (a calibration) the simulated
    llms miss the model as the fitted ones did, so a subset of a third of a benchmark that
    one ability does not carry goes random, and one that it carries stays informative."""
    import types

    import pandas as pd

    from bayes_microbench.design import select_from_posterior
    from bayes_microbench.population import estimate_population
    from bayes_microbench.testing import posterior_from_truth
    from bayes_microbench.validate import FittedPosterior

    y, codes, (a, b) = subtask_world_with_items(4, effect, n_sub=16, per_sub=40, n_llms=300)
    items = [f"q{i}" for i in range(y.shape[1])]
    truth = types.SimpleNamespace(
        difficulty=pd.Series(b, index=items),
        discrimination=pd.Series(a, index=items),
        guessing=pd.Series(np.zeros(len(items)), index=items),
        config=types.SimpleNamespace(benchmark="subtasks"),
    )
    labels = [f"s{c}" for c in codes]
    post = posterior_from_truth(truth, n_draws=50, subtask=labels, random_seed=0)
    resp = Responses.from_arrays(y, [f"llm{i}" for i in range(len(y))], items, subtask=labels)
    population = estimate_population(post, resp)
    carried = FittedPosterior(post, types.SimpleNamespace(population=population))
    plain = select_from_posterior(post, "bayes-fisher", 200, random_seed=0)[3]
    assert plain["estimator"] == "posterior mean" and "note" not in plain
    info = select_from_posterior(carried, "bayes-fisher", 200, random_seed=0)[3]
    assert "misfit" in info["source"]
    if want == "calibrated":
        assert info["estimator"] == "posterior mean, calibrated on the source llms", info
    else:
        assert info["estimator"] == want, info
        assert "returned a random subset of 200" in info["note"]

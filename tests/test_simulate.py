from __future__ import annotations

import numpy as np
import pytest

from bayes_microbench import simulate_responses
from bayes_microbench.exceptions import ConfigurationError


def test_shapes_seed_and_truth():
    r1, t1 = simulate_responses("gpqa", n_llms=60, n_items=80, random_seed=3, return_truth=True)
    r2 = simulate_responses("gpqa", n_llms=60, n_items=80, random_seed=3)
    r3 = simulate_responses("gpqa", n_llms=60, n_items=80, random_seed=4)
    assert r1.values.shape == (60, 80)
    np.testing.assert_array_equal(r1.values, r2.values)
    assert not np.array_equal(r1.values, r3.values)
    assert t1.ability.shape == (60,) and t1.difficulty.shape == (80,)
    assert (t1.guessing == 0.25).all()
    assert t1.subtask_mean.shape == (3,)
    np.testing.assert_allclose(t1.expected_accuracy.to_numpy(), t1.p_correct.mean(axis=1))
    assert set(r1.data["subtask"].to_numpy()) == set(t1.subtask_mean.index)


def test_gpqa_preset_resembles_gpqa():
    r, t = simulate_responses("gpqa", random_seed=0, return_truth=True)
    assert r.values.shape == (420, 448)
    # GPQA on the leaderboard: mean accuracy 0.29 over a 0.25 floor
    assert 0.27 < r.mean_accuracy < 0.33
    assert (t.expected_accuracy > 0.25).all()


def test_observed_accuracy_tracks_truth_and_error_shrinks_with_items():
    errs = []
    for n_items in (100, 400, 1600):
        r, t = simulate_responses(
            "gpqa", n_llms=100, n_items=n_items, random_seed=7, return_truth=True
        )
        errs.append(np.abs(r.accuracy().to_numpy() - t.expected_accuracy.to_numpy()).mean())
    # binomial error ~ sqrt(p(1-p)/n): halves for every 4x items
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 0.015


def test_models_and_missing():
    r, t = simulate_responses(
        "gpqa", model="1pl", n_llms=30, n_items=40, random_seed=1, return_truth=True
    )
    assert (t.discrimination == 1).all() and (t.guessing == 0).all()
    r = simulate_responses("gpqa", n_llms=40, n_items=50, missing_rate=0.3, random_seed=1)
    frac = r.n_missing / r.values.size
    assert 0.2 < frac < 0.35
    assert r.observed.any(axis=0).all() and r.observed.any(axis=1).all()


def test_bad_configuration():
    with pytest.raises(ConfigurationError, match="unknown preset"):
        simulate_responses("nope")
    with pytest.raises(ConfigurationError, match="unknown simulation parameter"):
        simulate_responses(n_lms=3)
    with pytest.raises(ConfigurationError, match="n_options >= 2"):
        simulate_responses(n_options=1)

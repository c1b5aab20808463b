"""Honest Bayesian numbers: planning, few-draw intervals, unconverged fits, check on a MAP fit.

Tiny posteriors only (``posterior_from_truth`` around a simulation, or a MAP fit of a
small matrix); no NUTS.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayes_microbench import design as D
from bayes_microbench import simulate_responses
from bayes_microbench.scoring import item_draws, posterior_from_truth


@pytest.fixture(scope="module")
def small_world():
    resp, truth = simulate_responses(
        "gpqa", n_llms=40, n_items=60, random_seed=5, return_truth=True
    )
    post = posterior_from_truth(
        truth, n_chains=2, n_draws=6, noise=0.05, subtask=resp.item_subtask, random_seed=2
    )
    return resp, truth, post


# ------------------------------------------------------------------ plan
def test_plan_reports_a_gap_the_population_cannot_produce(small_world):
    """A 100-point gap has no pair in the population: not 0 items, not the 10-point row."""
    _, _, post = small_world
    res = D.plan(post, 100.0, table_gaps=(2.0, 10.0), max_draws=12, random_seed=0)
    assert float(res["producible"].sel(gap=100.0)) == 0.0
    assert np.isnan(float(res["n_required"].sel(gap=100.0)))
    assert not bool(res["reached"].sel(gap=100.0))
    assert float(res["producible"].sel(gap=10.0)) == 1.0
    assert np.isfinite(float(res["n_required"].sel(gap=10.0)))


def test_design_curves_leave_unproduced_gaps_undefined(small_world):
    _, _, post = small_world
    res = D.design_curves(post, sizes=[10], gaps=[5.0, 100.0], max_draws=4)
    assert np.isnan(res["p_correct_mean"].sel(gap=100.0)).all()
    assert np.isfinite(res["p_correct_mean"].sel(gap=5.0)).all()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(delta=st.floats(min_value=0.5, max_value=100.0, allow_nan=False))
def test_plan_rows_do_not_depend_on_delta_and_grow_as_the_gap_shrinks(small_world, delta):
    _, _, post = small_world
    table = (1.0, 2.0, 3.0, 5.0, 10.0, 20.0)
    draws = item_draws(post, max_draws=6)
    ref = D.plan(post, 10.0, table_gaps=table, draws=draws, random_seed=3)
    res = D.plan(post, delta, table_gaps=table, draws=draws, random_seed=3)
    for name in ("n_required", "producible", "p_correct_at_n"):
        np.testing.assert_array_equal(
            res[name].sel(gap=list(table)), ref[name].sel(gap=list(table))
        )
    np.testing.assert_array_equal(
        res["n_required_interval"].sel(gap=list(table)),
        ref["n_required_interval"].sel(gap=list(table)),
    )
    # n is non-decreasing as the gap shrinks, over the producible gaps
    ok = res["producible"].to_numpy() > 0
    n = res["n_required"].to_numpy()[ok]
    n = np.where(np.isfinite(n), n, np.inf)
    assert (np.diff(n) <= 0).all(), dict(zip(res["gap"].to_numpy()[ok], n, strict=True))

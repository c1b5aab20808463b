"""The Bayesian selectors' cost savings change nothing they compute (no MCMC, fast).

- the 2PL objective of the quick item fit (logistic form) has the same optimum as
  the general ``c``-floor form it replaced;
- the joint mode is memoized by content (the same source gives the same mode,
  the cache is bounded, callers cannot corrupt it);
- without subtask balance only a prefix of the greedy order is computed, and it
  equals the same prefix of the full order.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import approx_fprime

from bayes_microbench import simulate_responses
from bayes_microbench.selectors import bayes_fisher as bf
from bayes_microbench.selectors import get_selector


@pytest.fixture(scope="module")
def source() -> np.ndarray:
    resp = simulate_responses("gpqa", model="2pl", n_llms=40, n_items=120, random_seed=5)
    return resp.values


@pytest.fixture(autouse=True)
def _fresh_cache():
    bf._MODE_CACHE.clear()
    yield
    bf._MODE_CACHE.clear()


def _reference_log_posterior(x: np.ndarray, y: np.ndarray, c: float) -> float:
    """The quick model's log posterior in its general form (log p, log 1 - p), no shortcuts."""
    n_l, n_i = y.shape
    theta, d, log_a = x[:n_l], x[n_l : n_l + n_i], x[n_l + n_i :]
    eta = theta[:, None] * np.exp(log_a)[None, :] + d[None, :]
    p = c + (1 - c) / (1 + np.exp(-eta))
    mask = ~np.isnan(y)
    yy = np.where(mask, y, 0.0)
    ll = np.where(mask, yy * np.log(p) + (1 - yy) * np.log1p(-p), 0.0).sum()
    return float(
        ll - 0.5 * theta @ theta - 0.5 * d @ d / bf._SD_D**2 - 0.5 * log_a @ log_a / bf._SD_LOG_A**2
    )


@pytest.mark.parametrize("c", [0.0, 0.25])
def test_joint_mode_is_a_stationary_point_of_the_reference_posterior(source, c):
    y = source.copy()
    y[np.random.default_rng(0).random(y.shape) < 0.05] = np.nan  # the masked path too
    theta, d, log_a, converged = bf._joint_mode(y, ~np.isnan(y), c)
    assert converged
    x = np.concatenate([theta, d, log_a])
    grad = approx_fprime(x, _reference_log_posterior, 1e-6, y, c)
    # at the optimum every partial derivative of the reference objective vanishes
    # (finite differences and the optimizer's tolerance: well below the ~1-10
    # gradient entries of a point away from the mode)
    assert np.abs(grad).max() < 0.05
    moved = x + 0.05
    assert _reference_log_posterior(moved, y, c) < _reference_log_posterior(x, y, c)


def test_joint_mode_is_memoized_by_content_and_bounded(source, monkeypatch):
    mask = ~np.isnan(source)
    first = bf._joint_mode(source, mask, 0.0)
    first[0][:] = 99.0  # a caller mutating its copy must not reach the cache
    second = bf._joint_mode(source.copy(), mask, 0.0)
    assert len(bf._MODE_CACHE) == 1
    assert not np.any(second[0] == 99.0)
    fresh = bf._MODE_CACHE.copy()
    bf._MODE_CACHE.clear()
    third = bf._joint_mode(source, mask, 0.0)
    for a, b in zip(second[:3], third[:3], strict=True):
        np.testing.assert_array_equal(a, b)
    assert fresh.keys() == bf._MODE_CACHE.keys()
    # a different floor or different responses are different entries; the cache is bounded
    monkeypatch.setattr(bf, "_MODE_CACHE_SIZE", 2)
    bf._joint_mode(source, mask, 0.25)
    flipped = source.copy()
    flipped[0, 0] = 1.0 - flipped[0, 0]
    bf._joint_mode(flipped, mask, 0.0)
    assert len(bf._MODE_CACHE) == 2


def test_cached_mode_gives_the_same_posterior_as_a_fresh_fit(source):
    a = bf.quick_item_posterior(source, n_draws=50, random_seed=1)
    cached = bf.quick_item_posterior(source, n_draws=50, random_seed=1)
    other_seed = bf.quick_item_posterior(source, n_draws=50, random_seed=2)
    assert len(bf._MODE_CACHE) == 1
    bf._MODE_CACHE.clear()
    fresh = bf.quick_item_posterior(source, n_draws=50, random_seed=1)
    for var in ("difficulty", "discrimination"):
        np.testing.assert_array_equal(a[var].values, cached[var].values)
        np.testing.assert_array_equal(a[var].values, fresh[var].values)
        assert not np.allclose(a[var].values, other_seed[var].values)


@pytest.mark.parametrize("name", ["bayes-fisher", "bayes-ranking"])
def test_greedy_prefix_equals_the_full_order(source, name):
    # the greedy order itself: the random fallback (its own tests) would draw its random
    # subset from fresh entropy here, and on these 40 llms it can take n = 3
    selector = get_selector(name)
    selector.random_fallback = False
    prepared = selector.prepare(source, np.zeros(source.shape[1], int), None, 0)
    assert isinstance(prepared, bf.PreparedBayes)
    full = prepared.order_fn(prepared.n_seen, None)
    for n in (3, 10, 25, 60):
        got = prepared.select(n).items
        np.testing.assert_array_equal(got, full[:n])
    # only a prefix was computed (doubling from the largest size asked), not all items
    assert len(prepared._cache[-1]) < prepared.n_seen
    np.testing.assert_array_equal(prepared.select(prepared.n_seen).items, full)

"""The exact analytic baseline: enumeration on tiny cases, Monte Carlo on a real-sized one."""

from __future__ import annotations

from itertools import combinations, pairwise
from math import comb

import numpy as np
import pytest

from bayes_microbench.analytic import (
    analytic_mdad,
    expected_agreement,
    pair_counts,
    prob_first_ahead,
)
from bayes_microbench.exceptions import UserInputError


def _enumerate(a: int, b: int, n_seen: int, n: int) -> float:
    """P(first ahead) by listing every n-subset of the items (brute force)."""
    kinds = [1] * a + [-1] * b + [0] * (n_seen - a - b)
    ahead = sum(1 for sub in combinations(range(n_seen), n) if sum(kinds[k] for k in sub) > 0)
    return ahead / comb(n_seen, n)


def test_matches_enumeration_exactly_on_all_tiny_cases():
    n_seen = 8
    a = np.array([x for x in range(n_seen + 1) for y in range(n_seen + 1 - x)])
    b = np.array([y for x in range(n_seen + 1) for y in range(n_seen + 1 - x)])
    for n in range(1, n_seen + 1):
        exact = prob_first_ahead(a, b, n_seen, n)
        brute = np.array([_enumerate(int(x), int(y), n_seen, n) for x, y in zip(a, b, strict=True)])
        np.testing.assert_allclose(exact, brute, rtol=0, atol=1e-12)


def test_symmetry_ties_and_limits():
    a, b = np.array([5, 3, 0, 4]), np.array([3, 5, 0, 4])
    p_ab = prob_first_ahead(a, b, 20, 7)
    p_ba = prob_first_ahead(b, a, 20, 7)
    # the two directions are mirror images; ties make them sum to less than 1
    assert p_ab[0] == pytest.approx(p_ba[1])
    assert p_ab[3] == pytest.approx(p_ba[3])
    assert (p_ab + p_ba < 1).all()
    assert p_ab[2] == 0.0  # no discordant item: always a tie, never "ahead"
    # the full set (n = N) reproduces the true ordering with certainty
    full = prob_first_ahead(a, b, 20, 20)
    np.testing.assert_array_equal(full, [1.0, 0.0, 0.0, 0.0])


def test_expected_agreement_increases_with_n():
    a, b = np.full(1, 40), np.full(1, 30)
    probs = [
        float(expected_agreement(a, b, np.array([0.05]), 224, n)[0]) for n in (10, 25, 50, 100, 200)
    ]
    assert all(x < y for x, y in pairwise(probs)), probs


def test_pair_counts_and_missing_data_refused():
    x = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 1]], dtype=float)
    first, second, only_first, only_second = pair_counts(x)
    assert list(zip(first, second, strict=True)) == [(0, 1), (0, 2), (1, 2)]
    assert only_first.tolist() == [1, 2, 2] and only_second.tolist() == [1, 1, 1]
    x[0, 0] = np.nan
    with pytest.raises(UserInputError, match="complete responses"):
        pair_counts(x)
    with pytest.raises(UserInputError, match="sample size"):
        prob_first_ahead(np.array([1]), np.array([1]), 10, 11)


def test_analytic_agrees_with_monte_carlo_within_sampling_error():
    """Seeded: for 400 random pairs, the mean MC success over 4000 draws matches."""
    rng = np.random.default_rng(3)
    n_seen, n, n_pairs, n_draws = 60, 12, 400, 4000
    a = rng.integers(0, 25, n_pairs)
    b = rng.integers(0, 25, n_pairs)
    exact = prob_first_ahead(a, b, n_seen, n)
    kinds = np.zeros((n_pairs, n_seen))
    for p in range(n_pairs):  # test scaffolding only
        kinds[p, : a[p]] = 1
        kinds[p, a[p] : a[p] + b[p]] = -1
    draws = np.argsort(rng.random((n_draws, n_seen)), axis=1)[:, :n]
    score = kinds[:, draws].sum(axis=2)  # (pairs, draws)
    mc = (score > 0).mean(axis=1)
    se = np.sqrt(exact * (1 - exact) / n_draws) + 1e-9
    z = (mc - exact) / se
    assert np.abs(z).max() < 4.5  # 400 pairs: a 4.5-sigma miss has prob ~3e-3
    assert np.abs(mc - exact).max() < 0.04


def test_analytic_mdad_decreases_with_n():
    rng = np.random.default_rng(0)
    x = (rng.random((30, 200)) < rng.uniform(0.2, 0.6, 30)[:, None]).astype(float)
    i, j, oa, ob = pair_counts(x)
    acc = x.mean(axis=1)
    rows = analytic_mdad(oa, ob, acc[i] - acc[j], 200, [10, 50, 150], random_seed=0)
    values = [r["mdad"] for r in rows]
    assert all(r["reached"] for r in rows)
    assert values[0] > values[1] > values[2]
    for r in rows:
        assert r["mdad_lower"] <= r["mdad"] <= r["mdad_upper"]

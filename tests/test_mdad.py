"""The study's MDAD rule on constructed pairs, its bootstrap, and the monotone variants."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from bayes_microbench.mdad import (
    bin_shares,
    gap_bins,
    isotonic_crossing,
    isotonic_increasing,
    mdad_from_pairs,
    mdad_from_table,
    monotone_mdad,
)


def _pairs(spec: dict[float, tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """{gap (fraction): (n_pairs, n_correct)} -> (diff, correct) arrays."""
    diff, correct = [], []
    for gap, (n, k) in spec.items():
        diff += [gap] * n
        correct += [1.0] * k + [0.0] * (n - k)
    return np.array(diff), np.array(correct)


def test_bins_match_the_study_arithmetic():
    d = np.array([0.0, 0.0049, 0.005, -0.0125, 0.25, 1 / 224, 7 / 224])
    expected = [int(np.floor(abs(x) * (1 / 0.5 * 100))) for x in d]  # study: floor(|d| * 200)
    assert gap_bins(d).tolist() == expected == [0, 0, 1, 2, 50, 0, 6]


def test_first_crossing_on_known_shares():
    # shares 0.5, 0.7, 0.85, 0.75, 0.95 at 0, 1, 2, 3, 4 points: the study takes the FIRST
    diff, correct = _pairs(
        {
            0.001: (400, 200),
            0.011: (400, 280),
            0.021: (400, 340),
            0.031: (400, 300),
            0.041: (400, 380),
        }
    )
    res = mdad_from_pairs(diff, correct, random_seed=0)
    assert res.reached and res.mdad == 2.0
    assert res.lower <= res.mdad <= res.upper
    assert res.bins["share"].round(3).tolist() == [0.5, 0.7, 0.85, 0.75, 0.95]
    for _, row in res.bins.iterrows():  # each bootstrap CI holds its point
        assert row["lower"] <= row["share"] <= row["upper"]
    # the isotonic fit pools the dip at 3 points and still crosses at 2
    iso = monotone_mdad(diff, correct, method="isotonic", random_seed=0)
    assert iso.reached and iso.mdad == 2.0


def test_symmetric_max_error_rule():
    # constructed bootstrap bounds: upper first reaches 0.8 at 1.0, lower at 4.0, point at 2.0
    table = pd.DataFrame(
        {
            "gap": [0.0, 1.0, 2.0, 3.0, 4.0],
            "n_pairs": [10] * 5,
            "share": [0.5, 0.7, 0.82, 0.85, 0.9],
            "lower": [0.4, 0.6, 0.7, 0.75, 0.81],
            "upper": [0.6, 0.8, 0.9, 0.95, 0.99],
        }
    )
    res = mdad_from_table(table, 0.8)
    # errors: 2 - 1 = 1 below, 4 - 2 = 2 above -> symmetric +-2
    assert (res.mdad, res.lower, res.upper) == (2.0, 0.0, 4.0)
    # lower bound never reaches: open upper end, one-sided lower
    open_table = table.assign(lower=0.5)
    res = mdad_from_table(open_table, 0.8)
    assert res.mdad == 2.0 and res.lower == 1.0 and math.isnan(res.upper)


def test_not_reached_is_explicit():
    diff, correct = _pairs({0.001: (100, 50), 0.02: (100, 60)})
    res = mdad_from_pairs(diff, correct, random_seed=0)
    assert not res.reached and math.isnan(res.mdad)
    row = res.as_row()
    assert row["reached"] is False and math.isnan(row["mdad_lower"])


def test_bootstrap_is_seeded_and_covers_binomial_truth():
    rng = np.random.default_rng(5)
    diff = np.repeat([0.002, 0.012, 0.022], 300)
    p_true = np.repeat([0.55, 0.75, 0.9], 300)
    hits = 0
    for _ in range(40):
        correct = (rng.random(diff.size) < p_true).astype(float)
        table, boot = bin_shares(diff, correct, random_seed=1)
        assert boot.shape == (1000, 3)
        hits += int(
            ((table["lower"] <= [0.55, 0.75, 0.9]) & ([0.55, 0.75, 0.9] <= table["upper"])).sum()
        )
    assert hits / 120 > 0.88  # nominal 95% coverage, allowing for 120 Bernoulli trials
    a, _ = bin_shares(diff, correct, random_seed=7)
    b, _ = bin_shares(diff, correct, random_seed=7)
    pd.testing.assert_frame_equal(a, b)


def test_isotonic_crossing_matches_pava():
    rng = np.random.default_rng(2)
    for _ in range(200):
        k = int(rng.integers(1, 12))
        y = rng.random(k)
        w = rng.integers(1, 20, k).astype(float)
        gaps = np.arange(k) * 0.5
        fit = isotonic_increasing(y, w)
        assert np.all(np.diff(fit) >= -1e-12)
        hit = np.nonzero(fit >= 0.6)[0]
        expected = gaps[hit[0]] if len(hit) else np.nan
        got = float(isotonic_crossing(y, w, gaps, 0.6))
        assert (math.isnan(expected) and math.isnan(got)) or got == expected


def test_logistic_variant_recovers_a_known_curve():
    rng = np.random.default_rng(0)
    d = rng.uniform(0, 0.2, 40_000)
    p = 1 / (1 + np.exp(-(0.0 + 40 * d)))  # crosses 0.8 at logit(0.8)/40 = 0.03466 -> 3.47 points
    correct = (rng.random(d.size) < p).astype(float)
    res = monotone_mdad(d, correct, method="logistic", random_seed=0)
    # the fit uses each bin's lower edge, so its crossing sits up to half a bin (0.25) low
    assert res.reached and 3.47 - 0.25 - 0.15 < res.mdad < 3.47 + 0.15
    assert res.lower <= res.mdad <= res.upper


def test_fractional_outcomes_use_the_parametric_bootstrap():
    diff = np.repeat([0.001, 0.011], 200)
    p = np.r_[np.full(200, 0.6), np.full(200, 0.9)]
    res = mdad_from_pairs(diff, p, random_seed=0)
    assert res.mdad == 1.0 and res.lower == res.upper == 1.0  # no spread within bins


def test_input_shapes_checked():
    with pytest.raises(ValueError, match="same number"):
        mdad_from_pairs(np.zeros(3), np.zeros(4))

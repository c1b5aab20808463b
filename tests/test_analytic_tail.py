"""The exact random-analytic probabilities with their tails left out: still exact to a double."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest
from scipy.special import gammaln

from bayes_microbench.analytic import TAIL_MASS, _windows, prob_ahead_behind


def _exact(a: int, b: int, n_seen: int, n: int) -> tuple[float, float]:
    """Both sums in integers (no rounding), over every term."""
    c = n_seen - a - b
    ahead = behind = 0
    for i in range(min(a, n) + 1):
        for j in range(min(b, n - i) + 1):
            if n - i - j > c:
                continue
            t = comb(a, i) * comb(b, j) * comb(c, n - i - j)
            if i > j:
                ahead += t
            elif j > i:
                behind += t
    total = comb(n_seen, n)
    return float(Fraction(ahead, total)), float(Fraction(behind, total))


@pytest.mark.parametrize(
    ("a", "b", "n_seen", "n"),
    [(150, 120, 400, 200), (60, 58, 400, 40), (3, 200, 400, 350), (90, 0, 300, 17), (7, 9, 30, 29)],
)
def test_window_sums_equal_the_full_integer_sums(a, b, n_seen, n):
    ahead, behind = prob_ahead_behind(np.array([a, b]), np.array([b, a]), n_seen, n)
    exact = _exact(a, b, n_seen, n)
    np.testing.assert_allclose([ahead[0], behind[0]], exact, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose([ahead[1], behind[1]], exact[::-1], rtol=1e-12, atol=1e-15)


def test_windows_leave_out_at_most_the_tail_mass_and_cut_the_terms():
    n_seen, n = 400, 200
    lf = gammaln(np.arange(n_seen + 1, dtype=np.float64) + 1)
    counts = np.array([0, 1, 60, 150, 399, 400])
    lo, hi = _windows(counts, n_seen, n, lf)
    for k, low, high in zip(counts, lo, hi, strict=True):
        pmf = [
            Fraction(comb(k, i) * comb(n_seen - k, n - i), comb(n_seen, n)) for i in range(n + 1)
        ]
        assert sum(pmf[:low]) <= TAIL_MASS and sum(pmf[high + 1 :]) <= TAIL_MASS
        # and the window is tight: one more item on either side would hold more than that
        assert low == 0 or sum(pmf[: low + 1]) > TAIL_MASS
        assert high == n or sum(pmf[high:]) > TAIL_MASS
    assert hi[3] - lo[3] + 1 < 100  # of the 151 values 150 items could take

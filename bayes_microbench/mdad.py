"""Minimum detectable ability difference (MDAD), as the study defines it, and a monotone variant.

From pairs of llms (gap on the reference set, ranked correctly or not): bins of
``resolution`` points floored as the study does (:func:`gap_bins`), each bin's share and
its seeded bootstrap interval at ``STUDY_CI_PROB`` (:func:`bin_shares`), the first bin
reaching the threshold with the study's symmetric max error (:func:`mdad_from_table`,
:func:`mdad_from_pairs`); an MDAD not reached is ``reached = False`` with NaN, an
unmeasurable upper bound NaN. :func:`monotone_mdad` reads it off a monotone curve
(isotonic or logistic) instead.

Why: docs/decisions/0018-mdad-as-the-study-defines-it.md (the study's steps, where and
why we differ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from ._defaults import STUDY_CI_PROB

DEFAULT_THRESHOLD = 0.8
DEFAULT_RESOLUTION = 0.5  # points
DEFAULT_N_BOOT = 1000


def check_threshold(value: object, name: str = "threshold") -> float:
    """The ranking-probability threshold of an MDAD, checked to lie strictly in (0.5, 1).

    Parameters
    ----------
    value
        The threshold as given (a number or its text).
    name
        The flag or argument to name in the error.

    Returns
    -------
    float

    Why: a coin flip ranks half the pairs correctly, so a threshold at or below
    0.5 is met at the smallest gap and every MDAD would read 0.
    """
    from ._validate import check_probability

    return check_probability(value, name, open_low=0.5)  # type: ignore[arg-type]


@dataclass(frozen=True)
class MdadResult:
    """MDAD of one set of pairs, in accuracy points (0-100).

    ``bins`` holds one row per non-empty gap bin: ``gap`` (the bin's lower
    edge, points), ``n_pairs``, ``share`` (ranked correctly), ``lower`` and
    ``upper`` (bootstrap interval of the share).
    """

    mdad: float
    lower: float
    upper: float
    reached: bool
    bins: pd.DataFrame
    threshold: float

    def as_row(self) -> dict[str, float | bool]:
        return {
            "mdad": self.mdad,
            "mdad_lower": self.lower,
            "mdad_upper": self.upper,
            "reached": self.reached,
        }


def gap_bins(diff: np.ndarray, resolution: float = DEFAULT_RESOLUTION) -> np.ndarray:
    """Integer bin index of each accuracy difference (a fraction in [-1, 1]).

    Bin ``k`` holds gaps in ``[k, k + 1) * resolution`` points; the arithmetic
    is the study's ``floor(|d| * (100 / resolution))``.
    """
    multiplier = 1.0 / resolution * 100.0
    d = np.abs(np.asarray(diff, dtype=np.float64))
    return np.floor(d * multiplier).astype(np.int64)


def bin_shares(
    diff: np.ndarray,
    correct: np.ndarray,
    *,
    resolution: float = DEFAULT_RESOLUTION,
    n_boot: int = DEFAULT_N_BOOT,
    ci_prob: float = STUDY_CI_PROB,
    random_seed: int | np.random.Generator | None = None,
) -> tuple[pd.DataFrame, np.ndarray]:
    """Per-bin share ranked correctly with its bootstrap interval.

    Parameters
    ----------
    diff
        Each pair's accuracy difference on the reference set (fraction).
    correct
        1/0 (ranked correctly or not) or a probability in [0, 1] per pair.
        For 0/1 outcomes the bootstrap is the study's (resampling the bin's
        pairs, drawn exactly as ``Binomial(k, share) / k``); for fractional
        outcomes it is parametric: normal with the bin mean's standard error.
    resolution, n_boot, ci_prob, random_seed
        Bin width in points, bootstrap resamples, interval probability, seed.

    Returns
    -------
    table, boot
        ``table`` with columns ``gap, n_pairs, share, lower, upper`` (one row
        per non-empty bin, increasing gap); ``boot`` the ``(n_boot, n_bins)``
        bootstrap shares.
    """
    d = np.asarray(diff, dtype=np.float64).ravel()
    y = np.asarray(correct, dtype=np.float64).ravel()
    if d.shape != y.shape:
        raise ValueError("diff and correct must have the same number of pairs")
    keep = ~(np.isnan(d) | np.isnan(y))
    d, y = d[keep], y[keep]
    rng = np.random.default_rng(random_seed)
    bins = gap_bins(d, resolution)
    uniq, inv = np.unique(bins, return_inverse=True)
    counts = np.bincount(inv, minlength=len(uniq))
    sums = np.bincount(inv, weights=y, minlength=len(uniq))
    share = sums / np.maximum(counts, 1)
    binary = bool(np.all((y == 0.0) | (y == 1.0)))
    if len(uniq) == 0:
        boot = np.zeros((n_boot, 0))
    elif binary:
        boot = rng.binomial(counts[None, :], share[None, :], size=(n_boot, len(uniq))) / counts
    else:
        # fractional outcomes (exact expected agreements): the bin mean's sampling
        # distribution over pairs, drawn as normal with the bin's standard error
        sq = np.bincount(inv, weights=(y - share[inv]) ** 2, minlength=len(uniq))
        se = np.sqrt(sq / np.maximum(counts - 1, 1) / counts)
        boot = share + se * rng.standard_normal((n_boot, len(uniq)))
    alpha = (1.0 - ci_prob) / 2.0
    if len(uniq):
        lower, upper = np.quantile(boot, [alpha, 1.0 - alpha], axis=0)
    else:
        lower = upper = np.zeros(0)
    table = pd.DataFrame(
        {
            "gap": uniq * resolution,
            "n_pairs": counts,
            "share": share,
            "lower": lower,
            "upper": upper,
        }
    )
    return table, boot


def _first_at_or_above(values: np.ndarray, gaps: np.ndarray, threshold: float) -> float:
    hit = np.nonzero(values >= threshold)[0]
    return float(gaps[hit[0]]) if len(hit) else math.nan


def mdad_from_table(table: pd.DataFrame, threshold: float = DEFAULT_THRESHOLD) -> MdadResult:
    """Apply the study's first-crossing rule to a :func:`bin_shares` table."""
    gaps = table["gap"].to_numpy()
    m = _first_at_or_above(table["share"].to_numpy(), gaps, threshold)
    u = _first_at_or_above(table["upper"].to_numpy(), gaps, threshold)
    low = _first_at_or_above(table["lower"].to_numpy(), gaps, threshold)
    if math.isnan(m):
        return MdadResult(math.nan, math.nan, math.nan, False, table, threshold)
    below = m - u if not math.isnan(u) else 0.0
    if math.isnan(low):
        return MdadResult(m, max(0.0, m - max(below, 0.0)), math.nan, True, table, threshold)
    err = max(below, low - m)
    return MdadResult(m, max(0.0, m - err), m + err, True, table, threshold)


def mdad_from_pairs(
    diff: np.ndarray,
    correct: np.ndarray,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    resolution: float = DEFAULT_RESOLUTION,
    n_boot: int = DEFAULT_N_BOOT,
    ci_prob: float = STUDY_CI_PROB,
    random_seed: int | np.random.Generator | None = None,
) -> MdadResult:
    """The study's MDAD (points) with its bootstrap interval, from pairs.

    Parameters
    ----------
    diff
        Each pair's accuracy difference on the reference set (a fraction;
        the sign does not matter, the gap is ``|diff|``).
    correct
        Whether the micro-benchmark ranked the pair correctly (1/0), or the
        probability that it does.
    threshold
        Share of correct rankings that defines "detectable" (default 0.8).
    resolution
        Bin width in points (default 0.5).
    n_boot, ci_prob
        Bootstrap resamples (default 1000) and interval probability
        (:data:`~bayes_microbench._defaults.STUDY_CI_PROB`, the study's 0.95).
    random_seed
        Seed of the bootstrap.

    Returns
    -------
    MdadResult
        See the module docstring for the exact rule and where it departs from
        the study's code.

    Examples
    --------
    >>> import numpy as np
    >>> diff = np.repeat([0.001, 0.011, 0.021], 100)
    >>> correct = np.r_[np.zeros(50), np.ones(50), np.zeros(30), np.ones(70), np.ones(100)]
    >>> round(mdad_from_pairs(diff, correct, random_seed=0).mdad, 2)
    2.0
    """
    table, _ = bin_shares(
        diff,
        correct,
        resolution=resolution,
        n_boot=n_boot,
        ci_prob=ci_prob,
        random_seed=random_seed,
    )
    return mdad_from_table(table, threshold)


def isotonic_increasing(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least-squares non-decreasing fit (pool adjacent violators).

    A loop over bins (a few hundred at most), not over pairs.
    """
    vals: list[float] = []
    wts: list[float] = []
    sizes: list[int] = []
    for yi, wi in zip(np.asarray(y, float), np.asarray(w, float), strict=True):
        vals.append(yi)
        wts.append(wi)
        sizes.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            wsum = wts[-2] + wts[-1]
            merged = (vals[-2] * wts[-2] + vals[-1] * wts[-1]) / wsum if wsum > 0 else vals[-1]
            vals[-2:] = [merged]
            wts[-2:] = [wsum]
            sizes[-2:] = [sizes[-2] + sizes[-1]]
    return np.repeat(np.asarray(vals), sizes)


def _logistic_fit(
    x: np.ndarray, k: np.ndarray, s: np.ndarray, iters: int = 30
) -> tuple[np.ndarray, np.ndarray]:
    """Binomial logistic regression ``logit p = b0 + b1 x`` by Newton's method.

    ``s`` has shape ``(..., n_bins)`` (successes per bin; a batch of
    bootstrap replicates), ``k`` the trials per bin and ``x`` the bin gaps.
    Returns ``(b0, b1)`` of shape ``(...)``.
    """
    s = np.asarray(s, dtype=np.float64)
    # start from the pooled share (intercept only): few Newton steps from there
    pooled = np.clip(s.sum(-1) / k.sum(), 1e-6, 1 - 1e-6)
    b0 = np.log(pooled / (1.0 - pooled))
    b1 = np.zeros(s.shape[:-1])
    for _ in range(iters):
        eta = b0[..., None] + b1[..., None] * x
        p = 1.0 / (1.0 + np.exp(-eta))
        w = k * p * (1.0 - p) + 1e-12
        r = s - k * p
        g0, g1 = r.sum(-1), (r * x).sum(-1)
        h00, h01, h11 = w.sum(-1), (w * x).sum(-1), (w * x * x).sum(-1)
        det = h00 * h11 - h01 * h01
        d0 = (h11 * g0 - h01 * g1) / det
        d1 = (h00 * g1 - h01 * g0) / det
        b0, b1 = b0 + d0, b1 + d1
        if np.all(np.abs(d0) + np.abs(d1) < 1e-10):
            break
    return b0, b1


def isotonic_crossing(
    shares: np.ndarray, weights: np.ndarray, gaps: np.ndarray, threshold: float
) -> np.ndarray:
    """First gap where the weighted isotonic (non-decreasing) fit reaches ``threshold``.

    Vectorized over leading axes of ``shares`` (e.g. bootstrap replicates),
    without fitting: by the min-max formula of isotonic regression, the fit
    at bin ``t`` is at least ``threshold`` exactly when
    ``min_{u >= t} G(u) >= min_{s < t} G(s)`` with ``G`` the cumulative sum of
    ``weights * (shares - threshold)`` (and ``G(-1) = 0``). NaN where the fit
    never reaches it.
    """
    g = np.cumsum(np.asarray(weights) * (np.asarray(shares) - threshold), axis=-1)
    prefix = np.minimum.accumulate(np.concatenate([np.zeros((*g.shape[:-1], 1)), g], -1), -1)
    prefix = prefix[..., :-1]  # min over G(-1..t-1)
    suffix = np.flip(np.minimum.accumulate(np.flip(g, -1), -1), -1)  # min over G(t..end)
    ok = suffix >= prefix - 1e-12 * np.abs(prefix).clip(1.0)
    first = np.argmax(ok, axis=-1)
    return np.where(ok.any(axis=-1), np.asarray(gaps, dtype=np.float64)[first], np.nan)


def monotone_from_table(
    table: pd.DataFrame,
    boot: np.ndarray,
    *,
    method: Literal["isotonic", "logistic"] = "logistic",
    threshold: float = DEFAULT_THRESHOLD,
    ci_prob: float = STUDY_CI_PROB,
) -> MdadResult:
    """:func:`monotone_mdad` from a :func:`bin_shares` table and its bootstrap draws."""
    gaps = table["gap"].to_numpy(dtype=np.float64)
    counts = table["n_pairs"].to_numpy().astype(np.float64)
    if len(gaps) == 0:
        return MdadResult(math.nan, math.nan, math.nan, False, table, threshold)
    alpha = (1.0 - ci_prob) / 2.0
    share = table["share"].to_numpy()
    if method == "isotonic":
        point = float(isotonic_crossing(share, counts, gaps, threshold))
        reps = isotonic_crossing(boot, counts, gaps, threshold)
        table = table.assign(fit=isotonic_increasing(share, counts))
    elif method == "logistic":
        max_gap = gaps[-1]
        logit_t = math.log(threshold / (1.0 - threshold))
        b0, b1 = _logistic_fit(gaps, counts, share * counts)
        point = float((logit_t - b0) / b1) if b1 > 0 else math.nan
        point = math.nan if point > max_gap else max(point, 0.0)
        rb0, rb1 = _logistic_fit(gaps, counts, boot * counts)
        with np.errstate(divide="ignore", invalid="ignore"):
            reps = np.where(rb1 > 0, (logit_t - rb0) / rb1, np.nan)
        reps = np.where(reps > max_gap, np.nan, np.maximum(reps, 0.0))
    else:
        raise ValueError(f"method must be 'isotonic' or 'logistic', got {method!r}")
    if math.isnan(point):
        return MdadResult(math.nan, math.nan, math.nan, False, table, threshold)
    # replicates that never reach the threshold lie beyond the observed gaps
    beyond = 1e6 + 10.0 * float(gaps[-1])
    reps = np.where(np.isnan(reps), beyond, reps)
    lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
    return MdadResult(
        point,
        float(lo) if lo <= gaps[-1] else math.nan,
        float(hi) if hi <= gaps[-1] else math.nan,
        True,
        table,
        threshold,
    )


def monotone_mdad(
    diff: np.ndarray,
    correct: np.ndarray,
    *,
    method: Literal["isotonic", "logistic"] = "logistic",
    threshold: float = DEFAULT_THRESHOLD,
    resolution: float = DEFAULT_RESOLUTION,
    n_boot: int = DEFAULT_N_BOOT,
    ci_prob: float = STUDY_CI_PROB,
    random_seed: int | np.random.Generator | None = None,
) -> MdadResult:
    """MDAD from a monotone fitted P(correct | gap) curve (points).

    ``method="isotonic"``: the weighted isotonic regression of the bin shares;
    MDAD is the first bin where it reaches the threshold. ``"logistic"``: a
    binomial logistic regression of correctness on the bin gap (the bin's
    lower edge, as the study's MDAD uses); MDAD is the gap where the fitted
    curve crosses the threshold, ``(logit(threshold) - b0) / b1``. Both give
    percentile intervals from the same bootstrap resamples as
    :func:`mdad_from_pairs` (refitting the curve on each; a replicate that
    never reaches the threshold counts as beyond every observed gap, and an
    interval bound there is NaN). ``reached`` is False when the fitted curve
    never reaches the threshold within the observed gaps (logistic: also when
    its slope is not positive).
    """
    table, boot = bin_shares(
        diff,
        correct,
        resolution=resolution,
        n_boot=n_boot,
        ci_prob=ci_prob,
        random_seed=random_seed,
    )
    return monotone_from_table(table, boot, method=method, threshold=threshold, ci_prob=ci_prob)

"""Exact ranking reliability of uniform random micro-benchmarks (no Monte Carlo).

Take two llms A and B and the ``N`` seen items. Each item is of one of three
kinds: only A is right (``a`` items), only B is right (``b`` items), or they
agree (``c = N - a - b`` items). Drawing ``n`` of the ``N`` items uniformly
without replacement, let ``X_A`` and ``X_B`` be the numbers of drawn items of
the first two kinds; ``(X_A, X_B, n - X_A - X_B)`` is multivariate
hypergeometric. The micro-benchmark's estimated difference is
``(X_A - X_B) / n``, so

``P(estimate says A > B) = sum_{i > j} C(a, i) C(b, j) C(c, n - i - j) / C(N, n)``.

A tie (``X_A == X_B``) counts as a wrong ranking, as in the study. This
module evaluates that sum exactly, vectorized over pairs and grouped over
repeated ``(a, b)`` counts, for any ``n``; :func:`expected_agreement` turns it
into the study's per-pair "ranked correctly" probability for the seen or
the unseen split, and :func:`analytic_mdad` into the expected share per gap
bin and the MDAD curve.

The formula needs complete data: with missing cells the estimate is a mean
over a varying number of observed items, and :func:`pair_counts` refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from scipy.special import gammaln

from ._defaults import STUDY_CI_PROB
from .exceptions import UserInputError

logger = logging.getLogger(__name__)

# at most this many (i, j) terms are materialized at once
_CHUNK_TERMS = 2_000_000
# each marginal tail left out of the double sum holds at most this much probability
TAIL_MASS = 1e-18


def pair_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Discordance counts of every llm pair on a complete 0/1 matrix.

    Parameters
    ----------
    values
        ``(..., n_llms, n_items)`` array of 0 / 1 (no missing cells), e.g. the
        target llms on the seen items, with optional leading batch axes (runs).

    Returns
    -------
    first, second, only_first, only_second
        ``first``/``second`` are the pair's llm positions (``first < second``,
        in ``numpy.triu_indices`` order); ``only_first``/``only_second`` have
        shape ``(..., n_pairs)`` and count the items only the first / only the
        second llm got right.
    """
    x = np.asarray(values, dtype=np.float64)
    if np.isnan(x).any():
        raise UserInputError(
            "the exact analytic baseline needs complete responses (no missing cells); "
            "use the Monte Carlo protocol for data with missing cells"
        )
    i, j = np.triu_indices(x.shape[-2], 1)
    both = x @ np.swapaxes(x, -1, -2)  # items both got right
    right = x.sum(axis=-1)
    only_i = right[..., i] - both[..., i, j]
    only_j = right[..., j] - both[..., i, j]
    return i, j, np.rint(only_i).astype(np.int64), np.rint(only_j).astype(np.int64)


def _log_comb(lf: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``log C(x, y)`` from a table of ``log k!`` (``-inf`` where ``y < 0`` or ``y > x``)."""
    ok = (y >= 0) & (y <= x)
    yy = np.where(ok, y, 0)
    return np.where(ok, lf[x] - lf[yy] - lf[np.where(ok, x - yy, 0)], -np.inf)


def _windows(
    counts: np.ndarray, n_seen: int, n: int, lf: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per count ``k``, the range ``[lo, hi]`` of ``X ~ Hypergeometric(n_seen, k, n)`` outside
    which each tail holds at most :data:`TAIL_MASS` (tails summed from their far end)."""
    lo = np.empty(len(counts), dtype=np.int64)
    hi = np.empty(len(counts), dtype=np.int64)
    x = np.arange(n + 1)[None, :]
    step = max(1, _CHUNK_TERMS // (n + 1))
    for start in range(0, len(counts), step):
        k = counts[start : start + step, None]
        logp = (
            _log_comb(lf, k, x) + _log_comb(lf, n_seen - k, n - x) - _log_comb_total(lf, n_seen, n)
        )
        p = np.exp(logp)
        lo[start : start + step] = (np.cumsum(p, axis=1) <= TAIL_MASS).sum(axis=1)
        upper = np.cumsum(p[:, ::-1], axis=1)  # P(X >= n - col)
        hi[start : start + step] = n - (upper <= TAIL_MASS).sum(axis=1)
    return lo, hi


def _log_comb_total(lf: np.ndarray, n_seen: int, n: int) -> float:
    return float(lf[n_seen] - lf[n] - lf[n_seen - n])


def prob_first_ahead(
    only_first: np.ndarray, only_second: np.ndarray, n_seen: int, n: int
) -> np.ndarray:
    """Exact ``P(X_first > X_second)`` for a uniform sample of ``n`` of ``n_seen`` items.

    Parameters
    ----------
    only_first, only_second
        Integer arrays (same shape) of items only the first / only the second
        llm got right, among the ``n_seen`` items.
    n_seen
        Number of items sampled from (the seen set).
    n
        Sample size, ``1 <= n <= n_seen``.

    Returns
    -------
    numpy.ndarray
        The probability, same shape as the inputs. Ties (equal counts in the
        sample) are not "ahead".
    """
    return prob_ahead_behind(only_first, only_second, n_seen, n)[0]


def prob_ahead_behind(
    only_first: np.ndarray, only_second: np.ndarray, n_seen: int, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """``P(X_first > X_second)`` and ``P(X_second > X_first)`` in one pass over the terms.

    The double sum over ``(i, j) = (X_first, X_second)`` runs only where both
    marginals (hypergeometric) hold more than :data:`TAIL_MASS` in the tail
    beyond, so at most ``4 * TAIL_MASS`` (``4e-18``) of probability is left
    out, far below a double's rounding of the result; the terms are computed
    in logs, grouped over repeated ``(only_first, only_second)`` counts.

    Parameters
    ----------
    only_first, only_second, n_seen, n
        As :func:`prob_first_ahead`.

    Returns
    -------
    ahead, behind
        Same shape as the inputs; ties are neither.

    Why: the full sum costs ``a * b`` terms per pair and dominated the grid's
    exact rows; the window costs a few standard deviations squared.
    """
    a_all = np.asarray(only_first, dtype=np.int64)
    b_all = np.asarray(only_second, dtype=np.int64)
    if a_all.shape != b_all.shape:
        raise ValueError("only_first and only_second must have the same shape")
    n_seen = int(n_seen)
    n = int(n)
    if not 1 <= n <= n_seen:
        raise UserInputError(f"sample size {n} must lie in [1, {n_seen}] (the seen items)")
    if (a_all < 0).any() or (b_all < 0).any() or (a_all + b_all > n_seen).any():
        raise ValueError("counts must be non-negative with only_first + only_second <= n_seen")
    keys, inverse = np.unique(a_all.ravel() * (n_seen + 1) + b_all.ravel(), return_inverse=True)
    ua, ub = keys // (n_seen + 1), keys % (n_seen + 1)
    uc = n_seen - ua - ub
    lf = gammaln(np.arange(n_seen + 1, dtype=np.float64) + 1)
    values, where = np.unique(np.r_[ua, ub], return_inverse=True)
    lo, hi = _windows(values, n_seen, n, lf)
    lo_a, hi_a = lo[where[: len(ua)]], hi[where[: len(ua)]]
    lo_b, hi_b = lo[where[len(ua) :]], hi[where[len(ua) :]]
    wa, wb = hi_a - lo_a + 1, hi_b - lo_b + 1
    ahead = np.zeros(len(ua))
    behind = np.zeros(len(ua))
    log_total = _log_comb_total(lf, n_seen, n)
    order = np.lexsort((wb, wa))  # similar windows together: little padding per chunk
    start = 0
    while start < len(order):
        # as many pairs as fit in one chunk of padded (pair, i, j) terms (at least one)
        w_max = np.maximum.accumulate(wa[order[start:]]) * np.maximum.accumulate(wb[order[start:]])
        size = np.arange(1, len(w_max) + 1) * w_max
        stop = start + max(1, int(np.searchsorted(size, _CHUNK_TERMS, side="right")))
        idx = order[start:stop]
        ahead[idx], behind[idx] = _window_sums(
            ua[idx], ub[idx], uc[idx], lo_a[idx], wa[idx], lo_b[idx], wb[idx], n, lf, log_total
        )
        start = stop
    shape = a_all.shape
    inv = inverse.ravel()
    return ahead[inv].reshape(shape), behind[inv].reshape(shape)


def _window_sums(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    lo_a: np.ndarray,
    wa: np.ndarray,
    lo_b: np.ndarray,
    wb: np.ndarray,
    n: int,
    lf: np.ndarray,
    log_total: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Sums of ``C(a,i) C(b,j) C(c, n-i-j) / C(N, n)`` over ``j < i`` and ``j > i`` in the
    windows, for a batch of unique pairs (padded to the batch's widest window)."""
    da = np.arange(int(wa.max()))
    db = np.arange(int(wb.max()))
    log_i = np.where(da < wa[:, None], _log_comb(lf, a[:, None], lo_a[:, None] + da), -np.inf)
    log_j = np.where(db < wb[:, None], _log_comb(lf, b[:, None], lo_b[:, None] + db), -np.inf)
    # the third factor depends on i + j only: one row per pair, gathered by da + db
    ds = np.arange(len(da) + len(db) - 1)
    log_s = _log_comb(lf, c[:, None], n - (lo_a + lo_b)[:, None] - ds) - log_total
    logt = log_i[:, :, None] + log_j[:, None, :] + log_s[:, da[:, None] + db[None, :]]
    terms = np.exp(logt)
    # i - j = (lo_a - lo_b) + (da - db)
    gap = (lo_a - lo_b)[:, None, None] + (da[:, None] - db[None, :])[None]
    return (
        np.where(gap > 0, terms, 0.0).sum(axis=(1, 2)),
        np.where(gap < 0, terms, 0.0).sum(axis=(1, 2)),
    )


def expected_agreement(
    only_first: np.ndarray,
    only_second: np.ndarray,
    true_diff: np.ndarray,
    n_seen: int,
    n: int,
) -> np.ndarray:
    """Probability that a uniform ``n``-item sample ranks each pair as ``true_diff`` does.

    ``true_diff`` is the first llm's accuracy minus the second's on the set the
    ranking is judged against (the full seen set, or the unseen set). As in the
    study, the sign of a difference of exactly 0 is taken as positive
    (``math.copysign(1, 0.0) == 1``), and a tied estimate is wrong.
    """
    diff = np.asarray(true_diff, dtype=np.float64)
    p_first, p_second = prob_ahead_behind(only_first, only_second, n_seen, n)
    return np.where(np.copysign(1.0, diff) > 0, p_first, p_second)


def analytic_mdad(
    only_first: np.ndarray,
    only_second: np.ndarray,
    true_diff: np.ndarray,
    n_seen: int,
    sizes: Sequence[int],
    *,
    threshold: float = 0.8,
    resolution: float = 0.5,
    n_boot: int = 1000,
    ci_prob: float = STUDY_CI_PROB,
    random_seed: int | np.random.Generator | None = None,
) -> list[dict[str, float | int | bool]]:
    """The MDAD of uniform random selection from the exact per-pair probabilities.

    For each size ``n`` the per-pair probability of a correct ranking replaces
    the Monte Carlo 0/1 outcome; the expected share per gap bin is the mean of
    those probabilities, and MDAD follows the study's first-crossing rule
    (:func:`bayes_microbench.mdad.mdad_from_pairs`). The interval reflects only
    which pairs were drawn (a parametric bootstrap of each bin's mean: normal
    with its standard error, pairs treated as independent, so it is narrow),
    not the item sampling, which is integrated out exactly. ``ci_prob`` defaults to
    the study's 95% (:data:`~bayes_microbench._defaults.STUDY_CI_PROB`), as the
    protocol's exact random rows (:func:`bayes_microbench.protocol.analytic_rows`).

    Returns
    -------
    list of dict
        One row per size: ``n_items, mdad, mdad_lower, mdad_upper, reached``
        (points, 0-100).
    """
    from .mdad import mdad_from_pairs

    rng = np.random.default_rng(random_seed)
    rows: list[dict[str, float | int | bool]] = []
    for n in sizes:
        p = expected_agreement(only_first, only_second, true_diff, n_seen, int(n))
        res = mdad_from_pairs(
            np.asarray(true_diff).ravel(),
            p.ravel(),
            threshold=threshold,
            resolution=resolution,
            n_boot=n_boot,
            ci_prob=ci_prob,
            random_seed=rng,
        )
        rows.append(
            {
                "n_items": int(n),
                "mdad": res.mdad,
                "mdad_lower": res.lower,
                "mdad_upper": res.upper,
                "reached": res.reached,
            }
        )
    return rows

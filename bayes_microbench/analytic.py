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

from .exceptions import UserInputError

logger = logging.getLogger(__name__)

# at most this many (i, j) terms are materialized at once
_CHUNK_TERMS = 4_000_000


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


def _log_comb_table(n_max: int) -> np.ndarray:
    """``log C(x, y)`` for ``0 <= x, y <= n_max`` (``-inf`` where ``y > x``)."""
    lf = gammaln(np.arange(n_max + 1, dtype=np.float64) + 1)
    x = np.arange(n_max + 1)[:, None]
    y = np.arange(n_max + 1)[None, :]
    table = lf[x] - lf[y] - lf[np.clip(x - y, 0, None)]
    return np.where(y <= x, table, -np.inf)


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
    flat_a, flat_b = a_all.ravel(), b_all.ravel()
    keys, inverse = np.unique(flat_a * (n_seen + 1) + flat_b, return_inverse=True)
    ua, ub = keys // (n_seen + 1), keys % (n_seen + 1)
    uc = n_seen - ua - ub
    lc = _log_comb_table(n_seen)
    log_total = lc[n_seen, n]
    # terms: i in [1, min(a, n)], j in [0, min(b, n, i - 1)]
    ia = np.minimum(ua, n)
    jb = np.minimum(ub, n)
    # number of (i, j) with 0 <= j < i <= ia and j <= jb
    # terms per unique pair: sum_{i=1}^{ia} min(i, jb + 1)
    k = np.minimum(ia, jb + 1)  # rows i <= k hold i terms, later rows jb + 1
    n_terms = k * (k + 1) // 2 + (ia - k) * (jb + 1)
    out = np.zeros(len(ua), dtype=np.float64)
    order = np.arange(len(ua))
    start = 0
    while start < len(ua):
        # take as many unique pairs as fit in one chunk (at least one)
        csum = np.cumsum(n_terms[start:])
        stop = start + max(1, int(np.searchsorted(csum, _CHUNK_TERMS, side="right")))
        idx = order[start:stop]
        out[idx] = _sum_terms(ua[idx], ub[idx], uc[idx], ia[idx], jb[idx], n, lc, log_total)
        start = stop
    return out[inverse.ravel()].reshape(a_all.shape)


def _sum_terms(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    ia: np.ndarray,
    jb: np.ndarray,
    n: int,
    lc: np.ndarray,
    log_total: float,
) -> np.ndarray:
    """``sum_{i>j} C(a,i) C(b,j) C(c, n-i-j) / C(N, n)`` for a batch of unique pairs."""
    # rows: (pair, i) for i = 1..ia; each row holds j = 0..min(i - 1, jb)
    rows_per = ia  # i from 1 to ia
    pair_of_row = np.repeat(np.arange(len(a)), rows_per)
    row_start = np.cumsum(rows_per) - rows_per
    i_of_row = np.arange(len(pair_of_row)) - np.repeat(row_start, rows_per) + 1
    width = np.minimum(i_of_row, jb[pair_of_row] + 1)
    row_of_term = np.repeat(np.arange(len(pair_of_row)), width)
    term_start = np.cumsum(width) - width
    j = np.arange(len(row_of_term)) - np.repeat(term_start, width)
    i = i_of_row[row_of_term]
    p = pair_of_row[row_of_term]
    rest = n - i - j
    cp = c[p]
    ok = (rest >= 0) & (rest <= cp)
    logt = lc[a[p], i] + lc[b[p], j] + lc[cp, np.clip(rest, 0, None)] - log_total
    terms = np.where(ok, np.exp(np.where(ok, logt, -np.inf)), 0.0)
    return np.bincount(p, weights=terms, minlength=len(a))


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
    p_first = prob_first_ahead(only_first, only_second, n_seen, n)
    p_second = prob_first_ahead(only_second, only_first, n_seen, n)
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
    ci_prob: float = 0.95,
    random_seed: int | np.random.Generator | None = None,
) -> list[dict[str, float | int | bool]]:
    """The MDAD of uniform random selection from the exact per-pair probabilities.

    For each size ``n`` the per-pair probability of a correct ranking replaces
    the Monte Carlo 0/1 outcome; the expected share per gap bin is the mean of
    those probabilities, and MDAD follows the study's first-crossing rule
    (:func:`bayes_microbench.mdad.mdad_from_pairs`). The interval reflects only
    which pairs were drawn (a parametric bootstrap of each bin's mean: normal
    with its standard error, pairs treated as independent, so it is narrow),
    not the item sampling, which is integrated out exactly.

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

"""Small seeded numeric kernels shared by the selectors (numpy; k-medoids from ``kmedoids``).

* :func:`nan_correlation`: item x item Pearson correlation over the llms
  observed on both items (pairwise-complete), with a documented value for
  degenerate (constant) items.
* :func:`kmeans`: Lloyd's algorithm with k-means++ seeding; every cluster ends
  non-empty.
* :func:`kmeans_1d`: exact (globally optimal) weighted k-means on a line by
  dynamic programming; deterministic.
* :func:`kmedoids`: FasterPAM on a precomputed distance matrix (the ``kmedoids``
  package, one thread) from seeded random starting medoids;
  :func:`column_major_float32` lays its matrix out the way FasterPAM reads it.
* :func:`sample_projection_dpp`: exact sampling from a projection DPP
  ``K = V V^T`` (the chain rule, as a sequential Cholesky of ``K``).

Everything random takes a :class:`numpy.random.Generator`; the same generator
state gives the same result.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

_CONTROLLER: Any = None


@contextlib.contextmanager
def single_blas_thread() -> Iterator[None]:
    """Run the enclosed small matrix products on one BLAS thread.

    The selectors' loops multiply small matrices (e.g. 300 x 10 x 224) many
    times. Uses ``threadpoolctl`` (installed with PyMC) when available, else does
    nothing. Why: on a loaded machine BLAS's thread hand-offs cost far more than such
    a product (measured: docs/decisions/0008-evaluate-tasks-and-where-they-run.md).
    """
    global _CONTROLLER
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - optional
        yield
        return
    if _CONTROLLER is None:
        # load SciPy's own BLAS (used inside L-BFGS-B) first, so it is limited too
        import scipy.linalg  # noqa: F401

        _CONTROLLER = ThreadpoolController()
    with _CONTROLLER.limit(limits=1, user_api="blas"):
        yield


def on_one_blas_thread[F: Callable[..., Any]](func: F) -> F:
    """Decorator form of :func:`single_blas_thread`."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with single_blas_thread():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


# ----------------------------------------------------------------- correlation
def nan_correlation(x: np.ndarray) -> np.ndarray:
    """Item x item correlation of the columns of ``x`` (llm x item), NaN = missing.

    Each pair uses the rows observed on both items (pairwise-complete; equal
    to :func:`numpy.corrcoef` when nothing is missing). Where the correlation
    is undefined (fewer than two common rows, or an item constant over them,
    e.g. answered correctly by every source llm) it is set to 0 (distance 1),
    except that two items with identical observed values get 1 and every item
    has correlation 1 with itself.
    """
    if not np.isnan(x).any():
        return _full_correlation(x)
    return _pairwise_correlation(x)


def _pairwise_correlation(x: np.ndarray) -> np.ndarray:
    """:func:`nan_correlation` in general: per-pair counts and sums as matrix products."""
    obs = ~np.isnan(x)
    m = obs.astype(np.float64)
    x0 = np.where(obs, x, 0.0)
    n = m.T @ m  # common rows
    s = x0.T @ m  # s[i, j] = sum of item i over rows observed on i and j
    ss = (x0 * x0).T @ m
    sxy = x0.T @ x0
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = sxy - s * s.T / n
        var_i = ss - s * s / n
        var_j = var_i.T
        corr = cov / np.sqrt(var_i * var_j)
        # identical observed values on the common rows: sum of squared differences is 0
        sq_diff = ss + ss.T - 2.0 * sxy
    scale = np.maximum(1.0, np.abs(ss) + np.abs(ss.T))
    tiny = 1e-12 * scale
    defined = (n >= 2) & (var_i > tiny) & (var_j > tiny) & np.isfinite(corr)
    identical = (n >= 1) & (np.abs(sq_diff) <= tiny)
    out = np.where(defined, np.clip(corr, -1.0, 1.0), np.where(identical, 1.0, 0.0))
    np.fill_diagonal(out, 1.0)
    return out


def _full_correlation(x: np.ndarray, *, block: int = 256) -> np.ndarray:
    """:func:`nan_correlation` of a matrix without missing cells, with fewer n x n passes.

    The common-row counts and the per-pair sums of the general case are then
    per-item vectors, so only the cross products are an item x item matrix; the
    same operations in the same order give the same numbers (exactly, for 0/1
    values). The element-wise steps run over ``block`` rows at a time in one
    reused buffer (no item x item temporary); the cross products of small
    integers are taken block by block in float32, where they are exact
    (:func:`_exact_in_float32`), else at once in float64. The
    undefined-correlation rule is applied only to the rows and columns of the
    items whose variance may be below the threshold.

    Why: at 6000 seen items the general case made some twenty 288 MB temporaries and
    took most of anchor-points' time (docs/decisions/0021-kmedoids-from-the-library.md);
    the blocks and float32 products halve what was left
    (docs/decisions/0035-anchor-points-cost-at-mmlu-pro-size.md).
    """
    x = np.asarray(x, dtype=np.float64)
    rows, n_items = x.shape
    s = x.sum(0)
    ss = (x * x).sum(0)
    x32 = _exact_in_float32(x)
    out = x.T @ x if x32 is None else np.empty((n_items, n_items))
    with np.errstate(invalid="ignore", divide="ignore"):
        var = ss - s * s / rows
        buf = np.empty((min(block, n_items), n_items))
        sxy32 = None if x32 is None else np.empty((min(block, n_items), n_items), np.float32)
        for i0 in range(0, n_items, block):
            i1 = min(i0 + block, n_items)
            rows_out, tmp = out[i0:i1], buf[: i1 - i0]
            if x32 is None:
                sxy: np.ndarray = rows_out
            else:
                assert sxy32 is not None
                sxy = np.matmul(x32[:, i0:i1].T, x32, out=sxy32[: i1 - i0])
            # (sxy - s_i s_j / rows) / sqrt(var_i var_j), as one n x n pass each before
            np.multiply.outer(s[i0:i1], s, out=tmp)
            tmp /= rows
            np.subtract(sxy, tmp, out=rows_out)
            np.multiply.outer(var[i0:i1], var, out=tmp)
            np.sqrt(tmp, out=tmp)
            rows_out /= tmp
            np.clip(rows_out, -1.0, 1.0, out=rows_out)
    del buf, sxy32
    # the general rule's threshold is 1e-12 * max(1, |ss_i| + |ss_j|): items above it
    # for every j are defined against every item with a defined variance
    absss = np.abs(ss)
    low = np.flatnonzero(~(var > 1e-12 * np.maximum(1.0, absss.max(initial=0.0) + absss)))
    if rows < 2:
        low = np.arange(n_items)
    if low.size:
        xl = x[:, low]
        sxy_low = xl.T @ x  # rows of the low-variance items
        scale = np.maximum(1.0, absss[low][:, None] + absss[None, :])
        tiny = 1e-12 * scale
        with np.errstate(invalid="ignore"):
            sq_diff = ss[low][:, None] + ss[None, :] - 2.0 * sxy_low
        rows_low = out[low]
        defined = (
            (rows >= 2) & (var[low][:, None] > tiny) & (var[None, :] > tiny) & np.isfinite(rows_low)
        )
        identical = (rows >= 1) & (np.abs(sq_diff) <= tiny)
        rows_low = np.where(defined, rows_low, np.where(identical, 1.0, 0.0))
        out[low] = rows_low
        out[:, low] = rows_low.T
    np.fill_diagonal(out, 1.0)
    return out


_FLOAT32_EXACT = 2.0**24  # integers up to this magnitude are exact in float32


def _exact_in_float32(x: np.ndarray) -> np.ndarray | None:
    """``x`` as float32 when its cross products are exact there, else ``None``.

    For integer-valued ``x`` (0/1 correctness) with ``rows * max(x^2) <= 2^24``,
    every partial sum of every dot product of two columns is an integer below
    ``2^24``, so a float32 product is exact whatever the order of summation and
    equals the float64 one bit for bit, at about 60% of its time.
    """
    if x.size and np.array_equal(x, np.rint(x)):
        top = float(np.abs(x).max())
        if x.shape[0] * top * top <= _FLOAT32_EXACT:
            return x.astype(np.float32)
    return None


def column_major_float32(a: np.ndarray, *, block: int = 512) -> np.ndarray:
    """``a`` as float32 in column-major (Fortran) order, copied tile by tile.

    Parameters
    ----------
    a
        A 2-D array (anchor-points: the float64 item distances).
    block
        Side of the square tiles copied at a time (they keep the transposing copy
        in cache).

    Returns
    -------
    numpy.ndarray
        The values of ``a.astype(np.float32)``, Fortran-contiguous.

    Why: FasterPAM (the ``kmedoids`` package) reads the distance matrix a column
    at a time (``d(o, j)`` over all ``o`` for each candidate ``j``), contiguous
    only in column-major order: the same swaps 3-4x faster at 6000 items
    (docs/decisions/0035-anchor-points-cost-at-mmlu-pro-size.md).
    """
    rows, cols = a.shape
    out = np.empty((rows, cols), dtype=np.float32, order="F")
    out_t = out.T  # C-ordered view: out_t[j, i] is out[i, j]
    for i0 in range(0, rows, block):
        for j0 in range(0, cols, block):
            out_t[j0 : j0 + block, i0 : i0 + block] = a[i0 : i0 + block, j0 : j0 + block].T
    return out


# --------------------------------------------------------------------- k-means
def _sq_dist(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    d = (x * x).sum(1)[:, None] - 2.0 * x @ c.T + (c * c).sum(1)[None, :]
    return np.maximum(d, 0.0)


def _kmeans_pp(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding: indices of ``k`` distinct rows of ``x``."""
    n = x.shape[0]
    chosen = np.empty(k, dtype=np.int64)
    chosen[0] = rng.integers(n)
    d2 = _sq_dist(x, x[chosen[:1]])[:, 0]
    taken = np.zeros(n, dtype=bool)
    taken[chosen[0]] = True
    for t in range(1, k):
        p = np.where(taken, 0.0, d2)
        total = p.sum()
        if total <= 0.0:  # all remaining rows coincide with a centre: pick uniformly
            p = (~taken).astype(np.float64)
            total = p.sum()
        j = int(rng.choice(n, p=p / total))
        chosen[t] = j
        taken[j] = True
        d2 = np.minimum(d2, _sq_dist(x, x[j : j + 1])[:, 0])
    return chosen


@on_one_blas_thread
def kmeans(
    x: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    max_iter: int = 300,
) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd's k-means with k-means++ seeding on the rows of ``x`` (n x d).

    Returns ``(labels, centres)``. Every one of the ``k <= n`` clusters is
    non-empty: a cluster left empty takes the row farthest from its own
    centre among clusters with at least two members (so ``k = n`` gives
    singletons even when rows coincide).
    """
    n = x.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"kmeans: k={k} must lie in [1, {n}]")
    centres = x[_kmeans_pp(x, k, rng)].copy()
    labels = np.full(n, -1, dtype=np.int64)
    for _ in range(max_iter):
        d = _sq_dist(x, centres)
        new = d.argmin(1)
        new = _fill_empty(new, d, k)
        if np.array_equal(new, labels):
            break
        labels = new
        counts = np.bincount(labels, minlength=k).astype(np.float64)
        sums = np.zeros_like(centres)
        np.add.at(sums, labels, x)
        centres = sums / counts[:, None]
    return labels, centres


def _fill_empty(labels: np.ndarray, d: np.ndarray, k: int) -> np.ndarray:
    counts = np.bincount(labels, minlength=k)
    empty = np.flatnonzero(counts == 0)
    if empty.size == 0:
        return labels
    labels = labels.copy()
    own = d[np.arange(labels.size), labels]
    for c in empty:
        movable = counts[labels] >= 2
        cand = np.flatnonzero(movable)
        j = cand[np.argmax(own[cand])]
        counts[labels[j]] -= 1
        labels[j] = c
        counts[c] = 1
        own[j] = 0.0
    return labels


# ------------------------------------------------------------ exact 1-D k-means
def kmeans_1d(values: np.ndarray, k: int, *, dense_limit: int = 1500) -> np.ndarray:
    """Globally optimal k-means of 1-D ``values``; returns labels ``0..k'-1``.

    Equal values always share a cluster; ``k' = min(k, number of distinct
    values)``. Labels increase with the value. Dynamic programming over the
    sorted distinct values: one vectorised O(m^2) step per cluster for up to
    ``dense_limit`` distinct values, else divide-and-conquer optimisation (the
    optimal split point is monotone), O(k m log m).
    """
    v = np.asarray(values, dtype=np.float64)
    uniq, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    m = uniq.size
    k = min(int(k), m)
    w = counts.astype(np.float64)
    cw = np.concatenate([[0.0], np.cumsum(w)])
    c1 = np.concatenate([[0.0], np.cumsum(w * uniq)])
    c2 = np.concatenate([[0.0], np.cumsum(w * uniq * uniq)])

    def cost(j: np.ndarray | int, i: np.ndarray | int) -> np.ndarray:
        """Within-cluster SS of distinct values j..i-1 (half-open, j < i)."""
        ww = cw[i] - cw[j]
        s1 = c1[i] - c1[j]
        return np.maximum(c2[i] - c2[j] - s1 * s1 / ww, 0.0)

    inf = np.inf
    prev = np.full(m + 1, inf)  # prev[i]: best cost of the first i values in `layer` clusters
    prev[1:] = cost(0, np.arange(1, m + 1))
    splits = np.zeros((k + 1, m + 1), dtype=np.int64)
    dense = m <= dense_limit
    seg_cost = np.empty((0, 0))
    if dense:  # seg_cost[j, i]: cost of one cluster holding values j..i-1
        jj, ii = np.meshgrid(np.arange(m + 1), np.arange(m + 1), indexing="ij")
        with np.errstate(invalid="ignore", divide="ignore"):
            seg_cost = np.where(jj < ii, cost(jj, ii), inf)
    for layer in range(2, k + 1):
        if dense:
            table = prev[:, None] + seg_cost  # first j values in layer-1 clusters, then j..i-1
            arg = table.argmin(0)
            cur = table[arg, np.arange(m + 1)]
            cur[:layer] = inf
            splits[layer] = arg
            prev = cur
            continue
        cur = np.full(m + 1, inf)
        arg = np.zeros(m + 1, dtype=np.int64)
        # compute cur[i] for i in [layer, m], optimal j in [layer-1, i-1], monotone in i
        stack = [(layer, m, layer - 1, m - 1)]
        while stack:
            lo, hi, jlo, jhi = stack.pop()
            if lo > hi:
                continue
            mid = (lo + hi) // 2
            js = np.arange(jlo, min(jhi, mid - 1) + 1)
            cand = prev[js] + cost(js, mid)
            best = int(np.argmin(cand))
            cur[mid] = cand[best]
            arg[mid] = js[best]
            stack.append((lo, mid - 1, jlo, int(js[best])))
            stack.append((mid + 1, hi, int(js[best]), jhi))
        splits[layer] = arg
        prev = cur
    # backtrack the boundaries
    bounds = [m]
    i = m
    for layer in range(k, 1, -1):
        i = int(splits[layer][i])
        bounds.append(i)
    bounds.append(0)
    bounds = bounds[::-1]
    seg = np.zeros(m, dtype=np.int64)
    for c in range(k):
        seg[bounds[c] : bounds[c + 1]] = c
    return seg[inverse]


# ------------------------------------------------------------------- k-medoids
def kmedoids(
    dist: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    max_iter: int = 100,
) -> np.ndarray:
    """k-medoids by FasterPAM (Schubert & Rousseeuw), from the ``kmedoids`` package.

    Parameters
    ----------
    dist
        Symmetric n x n distances; float32 is passed as is (either layout; column-major
        is the fast one, :func:`column_major_float32`), anything else as float64.
    k
        Number of medoids, ``1 <= k <= n``.
    rng
        Draws the ``k`` distinct starting items uniformly (the study's
        ``kmedoids.fasterpam(..., init="random")``, from our seeded stream).
    max_iter
        Passes over the items at most (a warning is logged when all are used).

    Returns
    -------
    numpy.ndarray
        The medoid indices (distinct, int64): a local optimum of the PAM objective.

    Why: the library is FasterPAM's author's Rust implementation, on one thread
    (workers are the parallelism); docs/decisions/0021 compares it with ours.
    """
    from kmedoids import fasterpam

    n = dist.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"kmedoids: k={k} must lie in [1, {n}]")
    medoids = rng.choice(n, size=k, replace=False)
    if k == n:
        return medoids
    d = dist if dist.dtype == np.float32 else np.asarray(dist, dtype=np.float64)
    result = fasterpam(d, medoids, max_iter=max_iter, n_cpu=1)
    if result.n_iter >= max_iter:
        logger.warning("kmedoids: stopped after %d passes, perhaps before converging", max_iter)
    return np.asarray(result.medoids, dtype=np.int64)


# ------------------------------------------------------------- projection DPP
@on_one_blas_thread
def sample_projection_dpp(v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draw exactly ``r`` items from the projection DPP with kernel ``V V^T``.

    ``v`` is n x r with orthonormal columns. Items are drawn one at a time
    with probability proportional to the remaining diagonal of the kernel
    conditioned on the items already drawn (the chain rule), computed as a
    sequential Cholesky factorisation: O(n r^2).
    """
    n, r = v.shape
    diag = (v * v).sum(1)
    chol = np.zeros((r, n))
    out = np.empty(r, dtype=np.int64)
    avail = np.ones(n, dtype=bool)
    for t in range(r):
        p = np.where(avail, np.maximum(diag, 0.0), 0.0)
        total = p.sum()
        if total <= 1e-12:  # numerically exhausted: fall back to uniform over the rest
            p = avail.astype(np.float64)
            total = p.sum()
        j = int(rng.choice(n, p=p / total))
        out[t] = j
        avail[j] = False
        kj = v @ v[j] - chol[:t].T @ chol[:t, j]
        piv = np.sqrt(max(diag[j], 1e-300))
        chol[t] = kj / piv
        diag = diag - chol[t] ** 2
        diag[j] = 0.0
    return out

"""``tinybenchmarks``: IRT embeddings, k-means anchors, and the p-IRT / gp-IRT estimators.

tinyBenchmarks (Polo et al., 2024) as the study ran it: a 10-D multidimensional 2PL
fitted to the source llms (here a regularized MAP by L-BFGS, once per ``prepare``, reused
across the three variants), items embedded as ``(a_i, b_i)``, k-means with ``k = n``, each
cluster's member nearest its centroid as a distinct anchor weighted by the cluster's
share. Estimators: ``tinybenchmarks`` (weighted anchor mean, the study's row),
``tinybenchmarks-pirt`` (p-IRT, the target's MAP ability under ``N(0, I)``) and
``tinybenchmarks-gpirt`` (gp-IRT, its ``b`` measured on the source llms).

Why: docs/decisions/0019-tinybenchmarks-as-the-study-ran-it.md (the study's steps, our
choices and what they fix).
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..exceptions import ConfigurationError
from ..response_model import prob, softplus
from ._cluster import kmeans, on_one_blas_thread
from ._features import check_inputs
from .base import Seed, Selection, check_size, weighted_mean_estimate

logger = logging.getLogger(__name__)

Estimator = Literal["weighted", "pirt", "gpirt"]
IRT_DIMS = 10
B_PRIOR_SD = 3.0
_CACHE: OrderedDict[tuple[Any, ...], IRTFit] = OrderedDict()
_CACHE_SIZE = 4


# ---------------------------------------------------------------------- IRT fit
@dataclass(frozen=True)
class IRTFit:
    """A multidimensional 2PL point fit: ``P = sigmoid(theta @ a.T - b)``."""

    discrimination: np.ndarray  # item x dim
    difficulty: np.ndarray  # item
    ability: np.ndarray  # llm x dim
    converged: bool
    n_iter: int

    @property
    def embedding(self) -> np.ndarray:
        """Item embedding ``(a_i, b_i)`` used for clustering, item x (dim + 1)."""
        return np.column_stack([self.discrimination, self.difficulty])


@on_one_blas_thread
def fit_irt(
    responses: np.ndarray,
    dims: int = IRT_DIMS,
    random_seed: Seed = None,
    *,
    max_iter: int = 30,
    a_prior_sd: float | None = None,
) -> IRTFit:
    """MAP fit of a ``dims``-dimensional 2PL to an llm x item matrix of 1 / 0 / NaN.

    Priors: ``theta_j ~ N(0, I)``, ``a_i ~ N(0, I / dims)`` (``a_prior_sd``
    overrides the sd; scaled so the prior spread of the logit does not grow
    with the dimension), ``b_i ~ N(0, 3^2)``.
    Optimised jointly by L-BFGS-B with the analytic gradient, started from
    small random values (the all-zero point is a saddle). Missing cells are
    left out of the likelihood.

    This is an *approximate* fit by design: ``max_iter`` (default 30) bounds
    the L-BFGS iterations. On GPQA (300 source llms x 224 seen items, 6
    splits, n = 10..100) the mean absolute estimation error was the same at
    20, 30, 40, 60 iterations and at convergence (139-207 iterations):
    weighted 5.9-6.3 points (SE 0.3), p-IRT 3.0 points (SE 0.1), at a fifth
    of the time. ``IRTFit.converged`` and ``n_iter`` record what happened.
    """
    from scipy.optimize import minimize

    y = np.asarray(responses, dtype=np.float64)
    obs = ~np.isnan(y)
    mask = obs.astype(np.float64)
    y0 = np.where(obs, y, 0.0)
    n_llm, n_item = y.shape
    rng = np.random.default_rng(random_seed)
    p_item = (y0.sum(0) + 0.5) / (mask.sum(0) + 1.0)
    theta0 = 0.1 * rng.standard_normal((n_llm, dims))
    a0 = 0.1 * rng.standard_normal((n_item, dims))
    b0 = -np.log(p_item / (1.0 - p_item))
    x0 = np.concatenate([theta0.ravel(), a0.ravel(), b0])
    n_t, n_a = n_llm * dims, n_item * dims
    inv_b_var = 1.0 / B_PRIOR_SD**2
    inv_a_var = float(dims) if a_prior_sd is None else 1.0 / a_prior_sd**2

    # The element-wise work (the bulk of the cost) runs in float32: about 5x
    # faster here, and ample for an approximate fit; L-BFGS itself runs in float64.
    y32 = y0.astype(np.float32)
    m32 = mask.astype(np.float32)

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        theta = x[:n_t].reshape(n_llm, dims)
        a = x[n_t : n_t + n_a].reshape(n_item, dims)
        b = x[n_t + n_a :]
        t32, a32 = theta.astype(np.float32), a.astype(np.float32)
        z = t32 @ a32.T - b.astype(np.float32)[None, :]
        # one exp serves both log(1 + e^z) and sigmoid(z): a fused value and gradient in
        # float32, kept inline rather than two passes of response_model.softplus / prob
        e = np.exp(-np.abs(z))
        softplus_z = np.maximum(z, 0.0) + np.log1p(e)
        nll = float((m32 * (softplus_z - y32 * z)).sum(dtype=np.float64))
        prior = 0.5 * (
            float((theta * theta).sum())
            + inv_a_var * float((a * a).sum())
            + inv_b_var * float(b @ b)
        )
        inv = 1.0 / (1.0 + e)
        r = m32 * (np.where(z >= 0.0, inv, e * inv) - y32)
        g_theta = (r @ a32).astype(np.float64) + theta
        g_a = (r.T @ t32).astype(np.float64) + inv_a_var * a
        g_b = -r.sum(0, dtype=np.float64) + inv_b_var * b
        return nll + prior, np.concatenate([g_theta.ravel(), g_a.ravel(), g_b])

    res = minimize(
        objective,
        x0,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": max_iter, "maxcor": 10, "ftol": 1e-9, "gtol": 1e-4},
    )
    if not res.success:
        logger.debug(
            "tinybenchmarks IRT fit: L-BFGS stopped after %d iterations (%s)", res.nit, res.message
        )
    x = res.x
    return IRTFit(
        discrimination=x[n_t : n_t + n_a].reshape(n_item, dims).copy(),
        difficulty=x[n_t + n_a :].copy(),
        ability=x[:n_t].reshape(n_llm, dims).copy(),
        converged=bool(res.success),
        n_iter=int(res.nit),
    )


@on_one_blas_thread
def fit_ability(
    responses: np.ndarray,
    discrimination: np.ndarray,
    difficulty: np.ndarray,
    *,
    max_iter: int = 50,
    tol: float = 1e-8,
) -> np.ndarray:
    """MAP abilities (prior ``N(0, I)``) of several llms on fixed items, by damped Newton.

    ``responses`` is llm x item (1 / 0 / NaN) on the items whose parameters
    are given; returns llm x dim. The objective is strictly convex, so each
    llm's Newton iteration (with step halving) converges to its unique optimum.
    """
    y = np.atleast_2d(np.asarray(responses, dtype=np.float64))
    obs = ~np.isnan(y)
    mask = obs.astype(np.float64)
    y0 = np.where(obs, y, 0.0)
    a, b = discrimination, difficulty
    n, d = y.shape[0], a.shape[1]
    theta = np.zeros((n, d))
    eye = np.eye(d)

    def loss(th: np.ndarray) -> np.ndarray:
        z = th @ a.T - b[None, :]
        return (mask * (softplus(z) - y0 * z)).sum(1) + 0.5 * (th * th).sum(1)

    current = loss(theta)
    for _ in range(max_iter):
        z = theta @ a.T - b[None, :]
        p = prob(z)
        grad = (mask * (p - y0)) @ a + theta
        w = mask * p * (1.0 - p)
        hess = np.einsum("ti,id,ie->tde", w, a, a) + eye
        step = np.linalg.solve(hess, grad[:, :, None])[:, :, 0]
        t = np.ones(n)
        new = theta - step
        new_loss = loss(new)
        for _ in range(30):
            worse = new_loss > current + 1e-12
            if not worse.any():
                break
            t = np.where(worse, t * 0.5, t)
            new = np.where(worse[:, None], theta - t[:, None] * step, new)
            new_loss = np.where(worse, loss(new), new_loss)
        done = np.abs(current - new_loss) <= tol * np.maximum(1.0, np.abs(current))
        theta, current = new, new_loss
        if done.all():
            break
    return theta


def _cached_fit(source: np.ndarray, dims: int, random_seed: Seed) -> IRTFit:
    if not isinstance(random_seed, (int, np.integer)) or isinstance(random_seed, bool):
        return fit_irt(source, dims, random_seed)
    digest = hashlib.blake2b(np.ascontiguousarray(source).tobytes(), digest_size=16).hexdigest()
    key = (digest, source.shape, dims, int(random_seed))
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    fit = fit_irt(source, dims, random_seed)
    _CACHE[key] = fit
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return fit


# -------------------------------------------------------------------- selector
@dataclass(frozen=True)
class TinyBenchmarksSelector:
    """tinyBenchmarks with one of its estimators (see the module docstring)."""

    name: str = "tinybenchmarks"
    estimator: Estimator = "weighted"
    dims: int = IRT_DIMS

    @on_one_blas_thread
    def prepare(
        self,
        source: np.ndarray,
        subtask_codes: np.ndarray,
        confidence: np.ndarray | None = None,
        random_seed: Seed = None,
    ) -> PreparedTinyBenchmarks:
        if self.estimator not in ("weighted", "pirt", "gpirt"):
            raise ConfigurationError(
                f"{self.name}: unknown estimator {self.estimator!r}; choose weighted, pirt or gpirt"
            )
        src, _, _ = check_inputs(source, subtask_codes, None, self.name)
        fit = _cached_fit(src, self.dims, random_seed)
        return PreparedTinyBenchmarks(
            name=self.name,
            n_seen=int(src.shape[1]),
            estimator=self.estimator,
            fit=fit,
            source=src,
        )


@dataclass(frozen=True)
class TinyBenchmarksPIRTSelector(TinyBenchmarksSelector):
    """``tinybenchmarks-pirt``: the same anchors, p-IRT estimate."""

    name: str = "tinybenchmarks-pirt"
    estimator: Estimator = "pirt"


@dataclass(frozen=True)
class TinyBenchmarksGPIRTSelector(TinyBenchmarksSelector):
    """``tinybenchmarks-gpirt``: the same anchors, gp-IRT estimate."""

    name: str = "tinybenchmarks-gpirt"
    estimator: Estimator = "gpirt"


@dataclass(frozen=True)
class PreparedTinyBenchmarks:
    name: str
    n_seen: int
    estimator: Estimator
    fit: IRTFit = field(repr=False)
    source: np.ndarray = field(repr=False)

    @on_one_blas_thread
    def select(self, n: int, random_seed: Seed = None) -> Selection:
        check_size(n, self.n_seen, self.name)
        rng = np.random.default_rng(random_seed)
        emb = self.fit.embedding
        labels, centres = kmeans(emb, int(n), rng)
        d2 = ((emb - centres[labels]) ** 2).sum(1)
        order = np.lexsort((d2, labels))  # by cluster, then distance to its centre
        first = np.r_[True, labels[order][1:] != labels[order][:-1]]
        reps = order[first]  # one per cluster, in cluster order 0..n-1
        sizes = np.bincount(labels, minlength=int(n))
        return Selection(
            items=reps.astype(np.int64),
            weights=sizes / sizes.sum(),
            info={
                "estimator": self.estimator,
                "irt_dims": self.fit.discrimination.shape[1],
                "irt_fit": "approximate MAP (L-BFGS, iterations capped)",
                "irt_iterations": self.fit.n_iter,
            },
        )

    # ------------------------------------------------------------ estimators
    def _pirt(self, selection: Selection, target: np.ndarray) -> np.ndarray:
        items = selection.items
        a, b = self.fit.discrimination, self.fit.difficulty
        theta = fit_ability(target, a[items], b[items])
        rest = np.setdiff1d(np.arange(self.n_seen), items)
        lam = items.size / self.n_seen
        observed = ~np.isnan(target)
        with np.errstate(invalid="ignore", divide="ignore"):
            data = np.where(observed, target, 0.0).sum(1) / observed.sum(1)
        if rest.size == 0:
            return data
        irt = prob(theta @ a[rest].T - b[rest][None, :]).mean(1)
        return lam * data + (1.0 - lam) * irt

    def gpirt_weight(self, selection: Selection) -> float:
        """gp-IRT's ``g = b^2 / (v + b^2)``, both measured on the source llms."""
        items = selection.items
        rest = np.setdiff1d(np.arange(self.n_seen), items)
        if rest.size == 0:
            return 0.0
        a, b = self.fit.discrimination, self.fit.difficulty
        src = self.source
        theta = fit_ability(src[:, items], a[items], b[items])
        irt = prob(theta @ a[rest].T - b[rest][None, :]).mean(1)
        observed = ~np.isnan(src[:, rest])
        has = observed.any(1)
        actual = np.where(observed, src[:, rest], 0.0).sum(1) / np.maximum(observed.sum(1), 1)
        bias = float(np.abs(irt - actual)[has].mean()) if has.any() else 0.0
        obs_all = ~np.isnan(src)
        cnt = obs_all.sum(1)
        mean = np.where(obs_all, src, 0.0).sum(1) / np.maximum(cnt, 1)
        var_llm = np.where(obs_all, (src - mean[:, None]) ** 2, 0.0).sum(1) / np.maximum(cnt, 1)
        var = float(var_llm[cnt > 0].mean())
        return bias**2 / (var + bias**2) if var + bias**2 > 0 else 0.0

    @on_one_blas_thread
    def estimate(self, selection: Selection, target: np.ndarray) -> np.ndarray:
        target = np.atleast_2d(np.asarray(target, dtype=np.float64))
        if self.estimator == "weighted":
            return weighted_mean_estimate(selection, target)
        pirt = self._pirt(selection, target)
        if self.estimator == "pirt":
            return pirt
        g = self.gpirt_weight(selection)
        return g * weighted_mean_estimate(selection, target) + (1.0 - g) * pirt

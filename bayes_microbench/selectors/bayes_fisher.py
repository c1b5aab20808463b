"""``bayes-fisher``: items that pin down the full-benchmark accuracy over the population.

``prepare`` needs an item posterior for the *seen* items, learned from the
source llms only. By default it fits one in a second (:func:`quick_item_posterior`:
the joint posterior mode of a 2PL/3PL with ``ability ~ Normal(0, 1)``, then a
Gaussian (Laplace) approximation of each item's parameters given the
abilities, sampled). A precomputed posterior whose items are exactly the seen
items can be passed instead (``BayesFisherSelector(item_draws=...)``; the
design tools do this with the posterior they are given).

Selection: greedy, over the population ``θ ~ Normal(0, I_D)`` (Gauss-Hermite
nodes; :func:`population_nodes`) with the item information ``I_i(θ)`` averaged
over the posterior draws. The default criterion, ``accuracy`` (Bayesian
c-optimal; :func:`criterion_order_fn`), minimizes the linearized posterior
variance of the full-benchmark accuracy: the ability's share (through the
unchosen items' gradient) plus the unchosen items' own Bernoulli noise, so it
starts with the informative items and turns to the noisy ones as the subset
grows, since the accuracy to be estimated is made of both. ``criterion=
"d-optimal"`` maximizes ``E_θ[ log det(I_D + sum_{i in S} I_i(θ)) ]`` (one dim:
``log(1 + sum I_i)``, concave, so the choice spreads over the ability range).
Why the default: docs/decisions/0040-bayesian-selectors-aim-at-the-accuracy.md.
``subtask_balance=True`` gives each subtask a quota proportional to its size
(largest remainder) and fills it greedily.

Estimator (shared with ``bayes-ranking``): the target's observed correct on
the chosen items plus its expected correct on the unchosen seen items, over
the seen set. The expectation starts from the IRT prediction ``m`` (the
posterior mean of the unchosen items' accuracy given the chosen responses,
averaged over the ability posterior and the item draws) and, when the source
llms' full responses are at hand (``calibrate=True``, the default), is
recalibrated on them for this very subset: the least-squares line
``t ~ alpha + beta m + gamma s`` of a source llm's accuracy ``t`` on the
unchosen items on its ``m`` and its subset mean ``s``
(:func:`source_calibration`). The sources' ``m`` is cross-fitted (each fold's
llms predicted by a quick item posterior fitted without them) when the
selector fitted its own posterior, and in-sample with a given one. Why: on
real benchmarks the IRT extrapolation to unobserved items is overconfident
(``beta`` well below 1 on GPQA), and the subset mean carries what the model
misses; the line tends to the subset mean's own weight as the unchosen items
shrink, and costs nothing where the model is right (``beta`` near 1, ``gamma``
near 0). ``Selection.weights`` are those of this estimator linearized at the
population centre (:func:`linearized_weights`): close to the discriminations
for small subsets (under a 2PL the discrimination-weighted score is sufficient
for ability), uniform as the subset approaches the full set. The design tools
evaluate designs through these weights.

Random fallback (``random_fallback=True``, the default, with a calibration): at
each size the noise the calibrated estimator adds to close pairs' accuracy
differences (:func:`pair_noise` over :func:`close_pairs`: pairs within
:data:`CLOSE_GAP`, the kind MDAD is made of), from its leave-one-out estimates
of the sources, is compared on the informative items and on a uniformly random
subset calibrated the same way; where the random subset's is no larger the
selection is that subset, with its own calibration and weights, and
``Selection.info["note"]`` says so. Why:
on a benchmark that one ability does not carry (BBH: 24 subtasks with
llm-by-subtask effects) the informative items stop representing the rest as
the subset grows, while a random subset's mean keeps carrying them and the
model still removes part of its item-sampling noise; the sources say where the
two cross (docs/decisions/0041-bayesian-selectors-fall-back-to-random.md,
0042-the-random-fallback-is-calibrated-too.md).

A ``2pl-md`` posterior (``with_item_draws(draws)``, ``draws.n_dims > 1``) is
selected in ``D`` dims with the same criteria; the weights and the estimator
in ``D`` dims too. The quick item posterior stays 1-D
(docs/decisions/0031-bayesian-selectors-in-d-dimensions.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import xarray as xr
from numpy.polynomial.hermite_e import hermegauss
from scipy.optimize import minimize
from scipy.special import ndtri

from .. import response_model
from .._validate import param
from ..ability import (
    CHUNK_CELLS,
    MAX_GRID_DIMS,
    ability_grid,
    ability_posterior_samples,
    scoring_grid,
)
from ..exceptions import UserInputError
from ..posterior import ItemDraws, item_draws
from ._cluster import single_blas_thread
from .base import Seed, Selection, check_size
from .random import PreparedRandom

logger = logging.getLogger(__name__)

N_POSTERIOR_DRAWS = 100
N_POPULATION_NODES = 20
#: Fewest source llms the estimator is calibrated on: a three-coefficient line fitted
#: to fewer is noise, and the raw IRT prediction is kept.
MIN_CALIBRATION_SOURCES = 20
#: Folds of the cross-fitted calibration (each fold's sources predicted by an item
#: posterior fitted on the others).
N_CALIBRATION_FOLDS = 2
#: Pairs of source llms whose seen accuracies differ by at most this are the close ones
#: on which :meth:`PreparedBayes.select` weighs a random subset against the selection
#: (the study's MDADs of 10 to 1000 items lie near 1 to 10 points).
CLOSE_GAP = 0.05
#: Below this many close pairs, every pair counts.
MIN_CLOSE_PAIRS = 20
#: Sources whose pairs are compared, at most (evenly spaced rows): the pairs' cost is
#: quadratic in them.
MAX_PAIR_SOURCES = 400
#: ``Selection.info["estimator"]`` of a size given a random subset (:meth:`PreparedBayes.select`).
RANDOM_FALLBACK = (
    "posterior mean of a random subset, calibrated on the source llms "
    "(it ranks the source llms' pairs better)"
)
#: Population nodes above :data:`~bayes_microbench.ability.MAX_GRID_DIMS` ability dims:
#: a scrambled Sobol set (seed 0, so the selection is deterministic) mapped to Normal(0, I_D).
N_QMC_NODES = 256


# ------------------------------------------------------------ quick item posterior
def quick_item_posterior(
    source: np.ndarray,
    *,
    model: str = "2pl",
    n_options: int | None = None,
    n_draws: int = N_POSTERIOR_DRAWS,
    subtask: np.ndarray | None = None,
    random_seed: Seed = None,
) -> xr.Dataset:
    """A fast approximate item posterior from a response matrix (1 / 0 / NaN).

    The joint posterior mode of ``logit P* = a * θ + d`` (``θ ~ Normal(0, 1)``,
    ``log a ~ Normal(0, 1)``, ``d ~ Normal(0, 3)``; 3PL: ``P = c + (1 - c) P*``
    with ``c = 1 / n_options``) by L-BFGS, rescaled so that the source llms'
    modal abilities have mean 0 and sd 1 (the joint mode shrinks abilities and
    inflates slopes; this restores the population ``Normal(0, 1)`` the design
    and scoring tools assume), then for each item a Gaussian
    approximation of ``(d, log a)`` given the modal abilities (its expected
    information plus the prior), sampled ``n_draws`` times. Abilities are
    treated as known in that step, so item uncertainty is slightly
    understated; for selection this is immaterial.

    The joint mode is deterministic and memoized by the content of ``source``
    and the floor ``c`` (a few recent fits, :data:`_MODE_CACHE_SIZE`): the two
    Bayesian selectors prepared on the same source llms fit it once. Under a
    2PL the objective uses the logistic form ``y eta - softplus(eta)`` (the
    same function, fewer array passes).

    Returns a posterior Dataset in the layout of :mod:`bayes_microbench.irt`
    (``difficulty``, ``discrimination``, ``guessing``: chain, draw, item).
    """
    y = np.asarray(source, dtype=np.float64)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 1:
        raise UserInputError(
            f"bayes selectors: need a source matrix of at least 2 llms x 1 item, got {y.shape}"
        )
    if model not in ("2pl", "3pl"):
        raise UserInputError(f"bayes selectors: model must be '2pl' or '3pl', got {model!r}")
    c = 0.0
    if model == "3pl":
        if n_options is None or n_options < 2:
            raise UserInputError("bayes selectors: a 3PL needs n_options >= 2 (e.g. 4 for GPQA)")
        c = 1.0 / n_options
    mask = ~np.isnan(y)
    n_i = y.shape[1]
    sd_log_a, sd_d = _SD_LOG_A, _SD_D
    theta, d, log_a, converged = _joint_mode(y, mask, c)
    # The joint mode shrinks abilities and inflates slopes (the ability prior is cheap to
    # satisfy that way); restore the identification "source llms ~ Normal(0, 1)" exactly:
    # a*theta + d = (a*sd)*theta' + (d + a*mean) with theta' standardized.
    t_mean, t_sd = theta.mean(), theta.std() + 1e-12
    a = np.exp(log_a) * t_sd
    d = d + np.exp(log_a) * t_mean
    theta = (theta - t_mean) / t_sd
    log_a = np.log(a)
    eta = response_model.logit_md(theta[:, None], a[:, None], d)
    s = response_model.prob(eta)
    p = np.clip(response_model.prob(eta, c), 1e-12, 1 - 1e-12)
    w = np.where(mask, ((1 - c) * s * (1 - s)) ** 2 / (p * (1 - p)), 0.0)
    # expected information of (d, log a) given theta, plus the prior precision
    j_dd = w.sum(axis=0) + 1 / sd_d**2
    j_da = (w * theta[:, None]).sum(axis=0) * a
    j_aa = (w * theta[:, None] ** 2).sum(axis=0) * a**2 + 1 / sd_log_a**2
    det = j_dd * j_aa - j_da**2
    cov = (
        np.stack([np.stack([j_aa, -j_da], -1), np.stack([-j_da, j_dd], -1)], -2)
        / det[:, None, None]
    )
    chol = np.linalg.cholesky(cov)  # (I, 2, 2)
    rng = np.random.default_rng(random_seed)
    z = rng.standard_normal((n_draws, n_i, 2))
    eps = np.einsum("ijk,sik->sij", chol, z)
    d_s = d[None, :] + eps[..., 0]
    a_s = np.exp(log_a[None, :] + eps[..., 1])
    items = np.asarray([f"item{i}" for i in range(n_i)], dtype=object)
    sub = (
        np.asarray([str(v) for v in subtask], dtype=object)
        if subtask is not None
        else np.full(n_i, "benchmark", dtype=object)
    )
    dims = ("chain", "draw", "item")
    return xr.Dataset(
        {
            "difficulty": (dims, (-d_s / a_s)[None]),
            "discrimination": (dims, a_s[None]),
            "guessing": (dims, np.full((1, n_draws, n_i), c)),
        },
        coords={"chain": [0], "draw": np.arange(n_draws), "item": items, "subtask": ("item", sub)},
        attrs={
            "ability_population": "normal(0,1)",
            "method": "quick joint MAP + per-item Laplace",
            "converged": converged,
        },
    )


#: Joint modes kept in memory, keyed by the response matrix and the floor ``c``.
#: ``bayes-fisher`` and ``bayes-ranking`` prepared on the same run's source llms
#: fit the same mode; the second one reuses it (the fit is deterministic). The
#: protocol prepares one selector over all runs before the next, so the cache
#: holds up to 64 runs' modes (each ``n_llms + 2 n_items`` floats: about 6 MB
#: in all for 12,000 items).
_MODE_CACHE: OrderedDict[
    tuple[str, tuple[int, ...], float], tuple[np.ndarray, np.ndarray, np.ndarray, bool]
] = OrderedDict()
_MODE_CACHE_SIZE = 64
_SD_LOG_A, _SD_D = 1.0, 3.0


def _joint_mode(
    y: np.ndarray, mask: np.ndarray, c: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """Joint posterior mode ``(theta, d, log_a, converged)`` of the quick model, memoized.

    For ``c = 0`` (2PL) the objective uses the logistic log-likelihood
    ``y eta - softplus(eta)`` with gradient ``y - sigmoid(eta)``: the same function
    as the general ``c`` form, with fewer array passes per evaluation.
    """
    key = (hashlib.sha1(np.ascontiguousarray(y).tobytes()).hexdigest(), y.shape, float(c))
    hit = _MODE_CACHE.get(key)
    if hit is not None:
        _MODE_CACHE.move_to_end(key)
        theta, d, log_a, converged = hit
        return theta.copy(), d.copy(), log_a.copy(), converged
    complete = bool(mask.all())
    yy = np.where(mask, y, 0.0)
    n_l, n_i = y.shape
    sd_log_a, sd_d = _SD_LOG_A, _SD_D
    # start: abilities from standardized accuracies, intercepts from item logits
    acc = np.nanmean(y, axis=1)
    theta0 = (acc - acc.mean()) / (acc.std() + 1e-9)
    p_item = np.clip((np.nanmean(y, axis=0) - c) / (1 - c), 0.02, 0.98)
    x0 = np.concatenate([theta0, np.log(p_item / (1 - p_item)), np.zeros(n_i)])

    def cells(eta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-cell log-likelihood and its derivative in ``eta``.

        A fused value and gradient, so partly inline: for ``c = 0`` one ``exp`` serves
        both; for ``c > 0`` the sigmoid is :func:`response_model.prob`'s and the floor is
        applied to it here, since the gradient needs the sigmoid as well.
        """
        if c == 0.0:
            e = np.exp(-np.abs(eta))
            s = np.where(eta >= 0, 1.0, e) / (1.0 + e)
            return yy * eta - (np.maximum(eta, 0.0) + np.log1p(e)), yy - s
        s = response_model.prob(eta)
        p = np.clip(c + (1 - c) * s, 1e-12, 1 - 1e-12)
        ll = yy * np.log(p) + (1 - yy) * np.log1p(-p)
        return ll, (yy - p) / (p * (1 - p)) * (1 - c) * s * (1 - s)

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        theta, d, log_a = x[:n_l], x[n_l : n_l + n_i], x[n_l + n_i :]
        a = np.exp(log_a)
        eta = theta[:, None] * a[None, :] + d[None, :]
        ll_cells, g = cells(eta)
        if not complete:
            ll_cells *= mask
            g *= mask
        ll = ll_cells.sum()
        lp = (
            ll
            - 0.5 * (theta @ theta)
            - 0.5 * (d @ d) / sd_d**2
            - 0.5 * (log_a @ log_a) / sd_log_a**2
        )
        grad = np.concatenate(
            [
                g @ a - theta,
                g.sum(axis=0) - d / sd_d**2,
                a * (theta @ g) - log_a / sd_log_a**2,
            ]
        )
        return -lp, -grad

    # one BLAS thread: threaded BLAS slows L-BFGS-B's own vector work on a loaded
    # machine (measured: docs/decisions/0008-evaluate-tasks-and-where-they-run.md)
    with single_blas_thread():
        res = minimize(
            fun, x0, jac=True, method="L-BFGS-B", options={"maxiter": 1500, "ftol": 1e-8}
        )
    out = (res.x[:n_l].copy(), res.x[n_l : n_l + n_i].copy(), res.x[n_l + n_i :].copy())
    _MODE_CACHE[key] = (*out, bool(res.success))
    while len(_MODE_CACHE) > _MODE_CACHE_SIZE:
        _MODE_CACHE.popitem(last=False)
    return out[0].copy(), out[1].copy(), out[2].copy(), bool(res.success)


# ------------------------------------------------------------------ shared base
def information(draws: ItemDraws, theta: np.ndarray) -> np.ndarray:
    """Fisher information of each item at each ability, averaged over draws: (T, I)."""
    p = draws.prob(np.broadcast_to(theta, (draws.n_draws, len(theta))))  # (S, T, I)
    c = draws.guessing[:, None, :]
    a = draws.discrimination[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        info = a**2 * (p - c) ** 2 * (1 - p) / ((1 - c) ** 2 * p)
    return np.nan_to_num(info).mean(axis=0)


def population_nodes(
    n_dims: int, n_nodes: int = N_POPULATION_NODES
) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``(T, D)`` and weights ``(T,)`` (summing to 1) of the population ``Normal(0, I_D)``.

    Up to :data:`~bayes_microbench.ability.MAX_GRID_DIMS` dims the product of
    ``n_nodes`` Gauss-Hermite nodes per dim (one dim: the 1-D selector's nodes);
    above, :data:`N_QMC_NODES` scrambled Sobol points (seed 0) with equal weights.
    Why: docs/decisions/0031-bayesian-selectors-in-d-dimensions.md.
    """
    x, w = hermegauss(n_nodes)
    w = w / w.sum()
    if n_dims <= MAX_GRID_DIMS:
        mesh = np.meshgrid(*([x] * n_dims), indexing="ij")
        wmesh = np.meshgrid(*([w] * n_dims), indexing="ij")
        nodes = np.stack([m.ravel() for m in mesh], axis=1)
        return nodes, np.prod(np.stack([m.ravel() for m in wmesh]), axis=0)
    from scipy.stats import qmc

    m = int(np.log2(N_QMC_NODES))
    q = qmc.Sobol(d=n_dims, scramble=True, rng=np.random.default_rng(0)).random_base2(m)
    return ndtri(np.clip(q, 1e-12, 1 - 1e-12)), np.full(len(q), 1.0 / len(q))


def information_md(
    draws: ItemDraws, nodes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The D-dim item information, accuracy gradient and Bernoulli variance at each node.

    Parameters
    ----------
    draws
        A ``2pl-md`` item posterior (``loadings`` set).
    nodes
        ``(T, D)`` abilities.

    Returns
    -------
    info : ndarray, (T, I, D, D)
        ``E_draws[ w a aᵀ ]`` with ``w = (dp/dη)² / (p (1 - p))`` (``p (1 - p)``
        without a floor): the Fisher information of each item about the ability.
    grad : ndarray, (T, I, D)
        ``E_draws[ dp_i/dθ ]``: each item's share of the gradient of the number correct.
    bern : ndarray, (T, I)
        ``E_draws[ p (1 - p) ]``: each item's Bernoulli variance.
    """
    assert draws.loadings is not None
    n_t, (n_s, n_i, n_d) = len(nodes), draws.loadings.shape
    info = np.zeros((n_i, n_t, n_d * n_d))
    grad = np.zeros((n_i, n_t, n_d))
    bern = np.zeros((n_t, n_i))
    chunk = max(1, CHUNK_CELLS // max(1, n_t * n_i))
    for start in range(0, n_s, chunk):  # chunks bound memory; each is a batched product
        sl = slice(start, min(n_s, start + chunk))
        sub = draws.select_draws(sl)
        p = sub.prob(nodes[None])  # (s, T, I)
        c = sub.guessing[:, None, :]
        dp = (p - c) * (1 - p) / (1 - c)  # dp / d logit
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.nan_to_num(dp**2 / (p * (1 - p)))
        lam = sub.loadings  # (s, I, D)
        assert lam is not None
        outer = (lam[..., :, None] * lam[..., None, :]).reshape(len(lam), n_i, -1)
        # per item: (T, s) @ (s, D*D) and (T, s) @ (s, D), batched over the items
        info += np.matmul(w.transpose(2, 1, 0), outer.transpose(1, 0, 2))
        grad += np.matmul(dp.transpose(2, 1, 0), lam.transpose(1, 0, 2))
        bern += (p * (1 - p)).sum(axis=0)
    info = info.transpose(1, 0, 2).reshape(n_t, n_i, n_d, n_d) / n_s
    return info, grad.transpose(1, 0, 2) / n_s, bern / n_s


#: The criteria of ``bayes-fisher``: ``accuracy`` (Bayesian c-optimal: the expected
#: linearized posterior variance of the full-benchmark accuracy) and ``d-optimal``
#: (``E log det``).
CRITERIA = ("accuracy", "d-optimal")
#: The criterion ``bayes-fisher`` uses unless told otherwise (measured:
#: docs/decisions/0040-bayesian-selectors-aim-at-the-accuracy.md).
DEFAULT_CRITERION = "accuracy"


def with_loadings(draws: ItemDraws) -> ItemDraws:
    """``draws`` in the ``D``-dim layout: a 1-D posterior gets one loading per item.

    ``logit = a θ + intercept`` is ``a_i . θ + intercept`` with ``a_i = (a)``, so the
    D-dim criteria serve a 1-D posterior unchanged.
    """
    if draws.loadings is not None:
        return draws
    return dataclasses.replace(draws, loadings=draws.discrimination[..., None])


def criterion_order_fn(
    draws: ItemDraws, codes: np.ndarray, criterion: str = DEFAULT_CRITERION
) -> Any:
    """The greedy order of ``bayes-fisher`` in ``D`` ability dims (a 1-D posterior: ``D = 1``).

    Per population node ``t`` (:func:`population_nodes`) the state is the
    inverse of the ability precision ``M_t = I_D + sum_S I_i(θ_t)`` (the prior
    precision plus the chosen items' information, :func:`information_md`).
    ``criterion="accuracy"`` minimizes
    ``E_θ[ g_Sᶜᵀ M⁻¹ g_Sᶜ + sum_{Sᶜ} p (1 - p) ] / N²``: the linearized posterior
    variance of the full-benchmark accuracy of the posterior-mean estimator
    (``g_Sᶜ = sum_{i not in S} dp_i/dθ``; the unchosen items' Bernoulli noise);
    ``"d-optimal"`` maximizes ``E_θ[ log det M ]`` (with one live dim: the 1-D
    criterion exactly). Each step scores every candidate at once: with
    ``A = M⁻¹ I_i``, ``det(M + I_i) = det M det(I + A)`` and
    ``(M + I_i)⁻¹ = (I + A)⁻¹ M⁻¹`` (the matrix determinant lemma and the
    Woodbury form of Sherman-Morrison for the rank-``D`` update), ``T x I`` small
    ``D x D`` systems. Why: docs/decisions/0031-bayesian-selectors-in-d-dimensions.md
    and docs/decisions/0040-bayesian-selectors-aim-at-the-accuracy.md.
    """
    if criterion not in CRITERIA:
        raise UserInputError(
            f"{param('criterion', criterion)}: not a criterion of bayes-fisher; "
            f"use one of {', '.join(CRITERIA)}"
        )
    draws = with_loadings(draws)
    nodes, w = population_nodes(draws.n_dims)
    info, grad, bern = information_md(draws, nodes)
    n_t, n_d = len(nodes), draws.n_dims
    eye = np.eye(n_d)

    def order(n: int, quota: np.ndarray | None) -> np.ndarray:
        def gain(state: tuple[np.ndarray, ...] | None) -> tuple[np.ndarray, Any]:
            if state is None:
                state = (
                    np.broadcast_to(eye, (n_t, n_d, n_d)).copy(),
                    grad.sum(axis=1),
                    bern.sum(axis=1),
                )
            minv, g, b = state
            lhs = eye + np.einsum("tde,tief->tidf", minv, info)  # I + M⁻¹ I_i: (T, I, D, D)
            if criterion == "d-optimal":
                score = w @ np.linalg.slogdet(lhs)[1]
            else:
                g_new = g[:, None, :] - grad  # the gradient of the rest after adding i
                rhs = np.einsum("tde,tie->tid", minv, g_new)
                x = np.linalg.solve(lhs, rhs[..., None])[..., 0]  # (M + I_i)⁻¹ g_new
                var = (g_new * x).sum(axis=2) + (b[:, None] - bern)
                score = -(w @ var)

            def update(best: int) -> tuple[np.ndarray, ...]:
                new = np.linalg.solve(lhs[:, best], minv)
                return 0.5 * (new + np.swapaxes(new, 1, 2)), g - grad[:, best], b - bern[:, best]

            return score, update

        return greedy(gain, draws.n_items, n, codes, quota)

    return order


def quotas(codes: np.ndarray, n: int) -> np.ndarray:
    """Items per subtask for ``n`` items, proportional to subtask size (largest remainder)."""
    sizes = np.bincount(codes)
    exact = n * sizes / sizes.sum()
    base = np.minimum(np.floor(exact).astype(int), sizes)
    left = n - base.sum()
    order = np.argsort(-(exact - base), kind="stable")
    for k in order:  # at most n_subtasks steps
        if left == 0:
            break
        if base[k] < sizes[k]:
            base[k] += 1
            left -= 1
    return base


def linearized_weights(
    draws: ItemDraws, chosen: np.ndarray, calibration: np.ndarray | None = None
) -> np.ndarray:
    """Item weights of the linearized posterior-mean accuracy estimator.

    The estimate is ``(sum_S y_i + sum_{not S} p_j(θ̂)) / N``. Linearizing at the
    population centre ``θ = 0`` (posterior-mean item parameters): ``θ̂`` moves by
    ``h_i / (1 + sum_S I_i)`` per correct answer on item ``i`` (``h_i = p_i' / (p_i (1 - p_i))``,
    ``I_i`` the item information), and the unchosen items' expected score by
    ``sum_{not S} p_j'`` per unit of ``θ``. So the weights are ``1 + κ h_i`` with
    ``κ = sum_{not S} p_j' / (1 + sum_S I_i)``, normalized: proportional to the
    discrimination-like ``h_i`` for small subsets, uniform when ``S`` is everything.

    With a ``calibration`` ``(alpha, beta, gamma)`` (:func:`source_calibration`) the
    unchosen items' expected accuracy is ``alpha + beta m + gamma s``, so the weights
    are ``1 + beta κ h_i + gamma U / n`` (``U`` unchosen, ``n`` chosen items).

    For a ``2pl-md`` posterior the same linearization in ``D`` dims:
    ``θ̂`` moves by ``(I_D + sum_S I_i)⁻¹ h_i`` per correct answer (``h_i``, the
    slopes ``dp_i/dθ`` and ``I_i = dp_i/dθ h_iᵀ`` now ``D``-vectors and a ``D x D``
    matrix), so the weights are ``1 + h_iᵀ κ`` with
    ``κ = (I_D + sum_S I_i)⁻¹ sum_{not S} dp_j/dθ`` (one live dim: the 1-D weights).
    """
    beta, flat = 1.0, 0.0
    if calibration is not None:
        n = len(chosen)
        beta, flat = float(calibration[1]), float(calibration[2]) * (draws.n_items - n) / n
    mean = with_loadings(draws).mean()  # a 1-D posterior: one loading per item
    assert mean.loadings is not None
    lam = mean.loadings[0]  # (I, D)
    p = mean.prob(np.zeros((1, 1, lam.shape[1])))[0, 0]
    dp, hp = logit_factors(p, mean.guessing[0])
    slope, h = dp[:, None] * lam, hp[:, None] * lam  # dp/dθ and dp/dθ / (p (1 - p)): (I, D)
    unchosen = np.ones(draws.n_items, dtype=bool)
    unchosen[chosen] = False
    precision = np.eye(lam.shape[1]) + slope[chosen].T @ h[chosen]
    kappa = np.linalg.solve(precision, slope[unchosen].sum(axis=0))
    w = 1.0 + flat + beta * (h[chosen] @ kappa)
    w = np.maximum(w, 1e-12)
    return w / w.sum()


def logit_factors(p: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``dp/dη`` and ``dp/dη / (p (1 - p))`` of ``p = c + (1 - c) sigmoid(η)``.

    Times an item's loadings they are its slope ``dp/dθ`` and its ``h`` (what one
    correct answer moves the ability's score by); the second without 0/0 at ``p = 0``.
    Why one function: the estimator's weights and ``bayes-ranking``'s pairs linearize alike.
    """
    return (p - c) * (1 - p) / (1 - c), (p - c) / ((1 - c) * np.maximum(p, 1e-300))


def predict_unchosen(
    draws: ItemDraws, correct: np.ndarray, chosen: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The IRT prediction of each llm's accuracy on the items it was not asked.

    Parameters
    ----------
    draws
        Item draws for every seen item.
    correct
        ``(n_llms, n)`` responses (1 / 0 / NaN) on the ``chosen`` items, in their order.
    chosen
        Positions of the chosen items among the seen ones.

    Returns
    -------
    m : ndarray, shape (n_llms,)
        Posterior mean accuracy on the unchosen seen items (NaN when none is unchosen).
    fill : ndarray, shape (n_llms,)
        Expected correct on the chosen cells without a response.

    Why: the one prediction the estimator and its calibration on the sources share.
    """
    y = np.asarray(correct, dtype=np.float64)
    sub = draws.subset(chosen)
    # a 2pl-md posterior: the D-dim ability posterior scoring uses
    grid = ability_grid() if sub.n_dims == 1 else scoring_grid(None, sub.n_dims)
    ability, _ = ability_posterior_samples(sub, y, grid=grid, random_seed=0)
    unchosen = np.ones(draws.n_items, dtype=bool)
    unchosen[chosen] = False
    missing = np.isnan(y)
    m = np.full(y.shape[0], np.nan)
    fill = np.zeros(y.shape[0])
    step = max(1, CHUNK_CELLS // max(1, draws.n_draws * draws.n_items))
    for lo in range(0, y.shape[0], step):
        rows = slice(lo, lo + step)
        p = draws.prob(ability[:, rows])  # (S, L, N)
        if unchosen.any():
            m[rows] = p[:, :, unchosen].mean(axis=(0, 2))
        fill[rows] = (p[:, :, chosen] * missing[None, rows]).sum(axis=2).mean(axis=0)
    return m, fill


def source_calibration(
    folds: list[tuple[np.ndarray, ItemDraws]], source: np.ndarray, chosen: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """The estimator's recalibration for one subset, learned on the source llms.

    Parameters
    ----------
    folds
        ``(rows, draws)`` pairs: the source llms at ``rows`` are predicted with
        ``draws`` (an item posterior fitted without them when cross-fitted).
    source
        ``(n_sources, n_seen)`` responses of the source llms on every seen item.
    chosen
        Positions of the chosen items.

    Returns
    -------
    ``(coef, residuals)`` or None
        ``coef`` ``(alpha, beta, gamma)``: the least-squares line ``t = alpha +
        beta m + gamma s`` of a source's accuracy ``t`` on the unchosen items on
        its IRT prediction ``m`` (:func:`predict_unchosen`) and its mean ``s`` on
        the chosen items; ``residuals``: each source's leave-one-out residual of
        that line (in accuracy on the unchosen items), by source row, NaN for a
        source without all three. None when no item is
        unchosen or fewer than :data:`MIN_CALIBRATION_SOURCES` sources have all three.

    Why: the IRT extrapolation to unobserved items is overconfident on real
    benchmarks; the sources, whose full responses are known, say by how much.
    """
    unchosen = np.ones(source.shape[1], dtype=bool)
    unchosen[chosen] = False
    if not unchosen.any():
        return None
    m_all, t_all, s_all = [], [], []
    order = np.concatenate([rows for rows, _ in folds])
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an llm with no response: NaN
        for rows, draws in folds:
            y = source[rows]
            m_all.append(predict_unchosen(draws, y[:, chosen], chosen)[0])
            t_all.append(np.nanmean(y[:, unchosen], axis=1))
            s_all.append(np.nanmean(y[:, chosen], axis=1))
    m, t, s = (np.concatenate(v) for v in (m_all, t_all, s_all))
    ok = np.isfinite(m) & np.isfinite(t) & np.isfinite(s)
    if ok.sum() < MIN_CALIBRATION_SOURCES:
        return None
    x = np.column_stack([np.ones(ok.sum()), m[ok], s[ok]])
    coef, *_ = np.linalg.lstsq(x, t[ok], rcond=None)
    # leave-one-out residuals of a least-squares fit: e_i / (1 - h_ii)
    leverage = np.einsum("ij,jk,ik->i", x, np.linalg.pinv(x.T @ x), x)
    residuals = np.full(source.shape[0], np.nan)
    residuals[order[ok]] = (t[ok] - x @ coef) / np.maximum(1.0 - leverage, 1e-12)
    return coef, residuals


def close_pairs(source: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Close pairs of source llms and the item variance of their answers' difference.

    Parameters
    ----------
    source
        ``(n_sources, n_seen)`` responses (a missing cell counts as its llm's mean).

    Returns
    -------
    ``(a, b, item_var)``
        Row indices of the pairs whose accuracies on the seen items differ by at
        most :data:`CLOSE_GAP` (every pair when fewer than :data:`MIN_CLOSE_PAIRS`
        are), among at most :data:`MAX_PAIR_SOURCES` sources (evenly spaced rows),
        and for each pair the variance over the items of ``y_a - y_b`` (``N - 1``
        in the denominator). A uniformly random ``n``-subset's mean misses the
        pair's accuracy difference with variance ``(1 - n/N) / n * item_var``.

    Why: the random subset's error on a close pair, the kind MDAD is made of, is
    known exactly from the sources; it is what a Bayesian selection must beat
    (:meth:`PreparedBayes.select`).
    """
    y = np.asarray(source, dtype=np.float64)
    rows = np.arange(y.shape[0])
    if rows.size > MAX_PAIR_SOURCES:
        rows = np.unique(np.linspace(0, rows.size - 1, MAX_PAIR_SOURCES).round().astype(np.int64))
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an llm with no response: NaN
        mean = np.nanmean(y[rows], axis=1)
    rows = rows[np.isfinite(mean)]
    mean = mean[np.isfinite(mean)]
    n_seen = y.shape[1]
    z = np.nan_to_num(y[rows] - mean[:, None])  # a missing cell: its llm's mean
    a, b = np.triu_indices(rows.size, 1)
    close = np.abs(mean[a] - mean[b]) <= CLOSE_GAP
    if close.sum() >= MIN_CLOSE_PAIRS:
        a, b = a[close], b[close]
    v = (z**2).sum(axis=1)
    item_var = (v[a] + v[b] - 2.0 * np.einsum("ij,ij->i", z[a], z[b])) / max(n_seen - 1, 1)
    return rows[a], rows[b], item_var


def pair_noise(truth: np.ndarray, estimate: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """How much noise an estimator adds to close pairs' accuracy differences, in accuracy units.

    Parameters
    ----------
    truth, estimate
        Each llm's accuracy and its estimate (NaN: left out).
    a, b
        Rows of the pairs (:func:`close_pairs`).

    Returns
    -------
    ``mean((e_a - e_b)**2) / c**2`` over the pairs, where ``estimate = mu + c * truth
    + e`` is the least-squares line over the llms; ``inf`` where ``c`` is not positive
    or nothing is left.

    Why: a pair is ranked right when its estimated difference ``c * d + (e_a - e_b)``
    has the sign of the true one ``d``, so the odds depend on the noise relative to
    the slope. The plain mean square error of the difference would favour an
    estimator that shrinks every llm toward the mean (``c`` near 0: a small error on a
    close pair, and a coin toss for its order), which a calibrated line on a few
    random items does.
    """
    ok = np.isfinite(truth) & np.isfinite(estimate)
    if ok.sum() < 3:
        return np.inf
    x = np.column_stack([np.ones(ok.sum()), truth[ok]])
    coef, *_ = np.linalg.lstsq(x, estimate[ok], rcond=None)
    if coef[1] <= 1e-9:  # no slope, or a backward one (rounding leaves a constant ~1e-17)
        return np.inf
    e = np.full(truth.shape, np.nan)
    e[ok] = estimate[ok] - x @ coef
    d = e[a] - e[b]
    d = d[np.isfinite(d)]
    return float(np.mean(d**2) / coef[1] ** 2) if d.size else np.inf


@dataclass
class PreparedBayes:
    """Shared prepared state of the Bayesian selectors (order, weights, estimator).

    ``source`` and ``folds`` are set when the estimator is calibrated on the
    source llms (:func:`source_calibration`); without them it is the raw IRT one.
    With ``random_fallback`` a size at which, on the sources, the calibrated
    estimator ranks pairs worse than a random subset's mean would, gets a random
    subset and its mean instead (:meth:`select`).
    """

    name: str
    n_seen: int
    draws: ItemDraws
    codes: np.ndarray
    order_fn: Any
    balance: bool
    source: np.ndarray | None = None
    folds: list[tuple[np.ndarray, ItemDraws]] | None = None
    random_fallback: bool = False
    _cache: dict[int, np.ndarray] = field(default_factory=dict)

    def order(self, n: int) -> np.ndarray:
        """The first ``n`` items of the greedy order.

        Without subtask balance the greedy order does not depend on ``n`` (step
        ``k`` sees only the first ``k - 1`` choices), so only a prefix is
        computed: the cached one if long enough, else a new one of at least
        twice its length (capped at ``n_seen``). With balance the quota depends
        on ``n``, so each size has its own order.
        """
        if self.balance:
            if n not in self._cache:
                self._cache[n] = self.order_fn(n, quotas(self.codes, n))
            return self._cache[n]
        prefix = self._cache.get(-1)
        if prefix is None or len(prefix) < n:
            length = min(self.n_seen, max(n, 2 * (0 if prefix is None else len(prefix))))
            self._cache[-1] = prefix = self.order_fn(length, None)
        return prefix[:n]

    def select(self, n: int, random_seed: Seed = None) -> Selection:
        """The first ``n`` items of the greedy order, or a random subset where that is better.

        With a calibration (``source`` and ``folds``) and ``random_fallback``, the
        noise the calibrated estimator adds to close source pairs' accuracy
        differences (:func:`pair_noise` of its leave-one-out estimates,
        :func:`source_calibration`; pairs from :func:`close_pairs`) is compared on
        these items and on a uniformly random ``n``-subset (``random_seed``)
        calibrated the same way; where the random subset's is no larger, the
        selection is the random subset, and ``info`` says so and why. Why: where
        one ability does not carry the benchmark (many subtasks with llm-by-subtask
        effects), the informative items stop representing the rest as ``n`` grows,
        and past a size a random subset, whose mean carries every subtask, ranks
        pairs better.
        """
        check_size(n, self.n_seen, self.name)
        chosen = np.asarray(self.order(n), dtype=np.int64)
        fitted = None
        if self.source is not None and self.folds is not None:
            fitted = source_calibration(self.folds, self.source, chosen)
        info: dict[str, Any] = {"estimator": "posterior mean"}
        if fitted is None:
            return Selection(
                items=chosen, weights=linearized_weights(self.draws, chosen), info=info
            )
        cal, residuals = fitted
        if self.random_fallback:
            instead = self._random_if_better(n, residuals, random_seed)
            if instead is not None:
                return instead
        info["estimator"] = "posterior mean, calibrated on the source llms"
        info["calibration"] = [float(v) for v in cal]
        return Selection(
            items=chosen, weights=linearized_weights(self.draws, chosen, cal), info=info
        )

    @cached_property
    def _close_pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`close_pairs` of the sources, once per prepared selector."""
        assert self.source is not None
        return close_pairs(self.source)

    def _random_if_better(
        self, n: int, residuals: np.ndarray, random_seed: Seed
    ) -> Selection | None:
        """The random subset :meth:`select` returns where it ranks close pairs better, else None.

        ``residuals``: the calibration line's leave-one-out residuals by source row
        (:func:`source_calibration`) on the informative subset. The random subset is
        the ``random`` selector's draw, calibrated the same way; the two are compared
        by :func:`pair_noise` of their leave-one-out estimates on the sources.
        """
        drawn = PreparedRandom(name=self.name, n_seen=self.n_seen).select(n, random_seed)
        items = np.sort(drawn.items)
        assert self.source is not None and self.folds is not None
        fitted = source_calibration(self.folds, self.source, items)
        if fitted is None:
            return None
        cal, theirs_res = fitted
        a, b, item_var = self._close_pairs
        share = (self.n_seen - n) / self.n_seen  # the unchosen items' part of the accuracy
        acc = self._source_accuracy
        ours, theirs = (pair_noise(acc, acc - share * res, a, b) for res in (residuals, theirs_res))
        if theirs > ours:
            return None
        plain = (1.0 - n / self.n_seen) / n * float(item_var.mean())
        note = (
            f"{self.name} returned a random subset of {n}: on the source llms its calibrated "
            f"estimate blurs a close pair's accuracy difference by {100 * theirs**0.5:.1f} "
            f"points (rms, in accuracy once its shrinkage is undone; its plain mean by "
            f"{100 * plain**0.5:.1f}), the informative items' by {100 * ours**0.5:.1f}"
        )
        return Selection(
            items=items,
            weights=linearized_weights(self.draws, items, cal),
            info={
                "estimator": RANDOM_FALLBACK,
                "calibration": [float(v) for v in cal],
                "note": note,
            },
        )

    @cached_property
    def _source_accuracy(self) -> np.ndarray:
        """Each source llm's accuracy on the seen items (NaN without a response)."""
        assert self.source is not None
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(self.source, axis=1)

    def estimate(self, selection: Selection, target: np.ndarray) -> np.ndarray:
        """Accuracy on the full seen set given the chosen items' responses.

        Observed correct, plus the expected correct of the chosen cells without a
        response, plus the unchosen items' predicted accuracy (recalibrated when the
        selection carries a ``calibration``) times their number.
        """
        y = np.asarray(target, dtype=np.float64)
        m, fill = predict_unchosen(self.draws, y, selection.items)
        n_unchosen = self.n_seen - selection.n
        cal = selection.info.get("calibration")
        if cal is not None and n_unchosen:
            with np.errstate(invalid="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                s = np.nanmean(y, axis=1)
            recal = np.clip(cal[0] + cal[1] * m + cal[2] * s, 0.0, 1.0)
            m = np.where(np.isfinite(s), recal, m)
        expected = fill + (n_unchosen * m if n_unchosen else 0.0)
        return (np.nansum(y, axis=1) + expected) / self.n_seen


class _BayesSelectorBase:
    name: str = ""
    #: The greedy criteria a subclass offers, and the one it uses unless told otherwise.
    criteria: tuple[str, ...] = ()
    default_criterion: str = ""

    def __init__(
        self,
        *,
        item_draws: ItemDraws | None = None,
        model: str = "2pl",
        n_options: int | None = None,
        subtask_balance: bool = False,
        n_draws: int = N_POSTERIOR_DRAWS,
        calibrate: bool = True,
        criterion: str | None = None,
        random_fallback: bool = True,
    ) -> None:
        self.item_draws = item_draws
        self.model = model
        self.n_options = n_options
        self.subtask_balance = subtask_balance
        self.n_draws = n_draws
        self.calibrate = calibrate
        self.random_fallback = random_fallback
        self.criterion = self.default_criterion if criterion is None else criterion
        if self.criterion not in self.criteria:
            raise UserInputError(
                f"{param('criterion', self.criterion)}: not a criterion of {self.name}; "
                f"use one of {', '.join(self.criteria)}"
            )

    def _options(self) -> dict[str, Any]:
        """The constructor arguments besides ``item_draws`` (what :meth:`with_item_draws` keeps)."""
        return {
            "model": self.model,
            "n_options": self.n_options,
            "subtask_balance": self.subtask_balance,
            "n_draws": self.n_draws,
            "calibrate": self.calibrate,
            "random_fallback": self.random_fallback,
            "criterion": self.criterion,
        }

    def with_item_draws(self, draws: ItemDraws) -> _BayesSelectorBase:
        """The same selector using a precomputed posterior over exactly the seen items.

        ``draws`` may be a ``2pl-md`` posterior (``draws.n_dims > 1``): the
        selector then works in ``D`` dims (docs/decisions/0031).
        """
        return type(self)(item_draws=draws, **self._options())

    def _draws(self, source: np.ndarray, codes: np.ndarray, random_seed: Seed) -> ItemDraws:
        if self.item_draws is not None:
            if self.item_draws.n_items != source.shape[1]:
                raise UserInputError(
                    f"{self.name}: the given posterior has {self.item_draws.n_items} items but "
                    f"the source has {source.shape[1]} seen items; they must be the same items"
                )
            return self.item_draws
        return self._quick_draws(source, codes, random_seed)

    def _quick_draws(self, source: np.ndarray, codes: np.ndarray, random_seed: Seed) -> ItemDraws:
        post = quick_item_posterior(
            source,
            model=self.model,
            n_options=self.n_options,
            n_draws=self.n_draws,
            subtask=codes,
            random_seed=random_seed,
        )
        return item_draws(post, max_draws=None)

    def _order_fn(self, draws: ItemDraws, codes: np.ndarray) -> Any:
        raise NotImplementedError

    def prepare(
        self,
        source: np.ndarray,
        subtask_codes: np.ndarray,
        confidence: np.ndarray | None = None,
        random_seed: Seed = None,
    ) -> PreparedBayes:
        codes = np.asarray(subtask_codes, dtype=np.int64)
        y = np.asarray(source, dtype=np.float64)
        rng = np.random.default_rng(random_seed)
        draws = self._draws(y, codes, rng)
        folds = self._folds(y, codes, draws, rng) if self.calibrate else None
        return PreparedBayes(
            name=self.name,
            n_seen=draws.n_items,
            draws=draws,
            codes=codes,
            order_fn=self._order_fn(draws, codes),
            balance=self.subtask_balance,
            random_fallback=self.random_fallback,
            source=y if folds is not None else None,
            folds=folds,
        )

    def _folds(
        self, source: np.ndarray, codes: np.ndarray, draws: ItemDraws, rng: np.random.Generator
    ) -> list[tuple[np.ndarray, ItemDraws]] | None:
        """Who predicts whom in the estimator's calibration (:func:`source_calibration`).

        With a posterior of its own: :data:`N_CALIBRATION_FOLDS` folds, each
        predicted by a quick posterior fitted on the other sources. With a given
        posterior: every source predicted by it (in-sample; refitting it is not
        ours to do). None below :data:`MIN_CALIBRATION_SOURCES` sources.
        """
        n_src = source.shape[0]
        if n_src < MIN_CALIBRATION_SOURCES:
            return None
        if self.item_draws is not None:
            return [(np.arange(n_src), draws)]
        parts = np.array_split(rng.permutation(n_src), N_CALIBRATION_FOLDS)
        out = []
        for rows in parts:
            rest = np.setdiff1d(np.arange(n_src), rows)
            out.append((np.sort(rows), self._quick_draws(source[rest], codes, rng)))
        return out


def greedy(
    gain: Any, n_items: int, n: int, codes: np.ndarray, quota: np.ndarray | None
) -> np.ndarray:
    """Greedy order of ``n`` items; ``gain(state, chosen_mask)`` scores every candidate."""
    chosen = np.zeros(n_items, dtype=bool)
    taken = np.zeros(int(codes.max()) + 1 if len(codes) else 1, dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    state = None
    for k in range(n):  # one step per chosen item; each step scores all candidates at once
        score, update = gain(state)
        allowed = ~chosen
        if quota is not None:
            allowed &= taken[codes] < quota[codes]
        score = np.where(allowed, score, -np.inf)
        best = int(np.argmax(score))
        order[k] = best
        chosen[best] = True
        taken[codes[best]] += 1
        state = update(best)
    return order


class BayesFisherSelector(_BayesSelectorBase):
    """Greedy Bayesian design for the full-benchmark accuracy (see the module docstring).

    ``criterion``: :data:`CRITERIA`, default :data:`DEFAULT_CRITERION`
    (:func:`criterion_order_fn`). A 1-D posterior under ``d-optimal`` takes the
    scalar form of the module docstring (the same order, fewer array passes).
    """

    name = "bayes-fisher"
    criteria = CRITERIA
    default_criterion = DEFAULT_CRITERION

    def _order_fn(self, draws: ItemDraws, codes: np.ndarray) -> Any:
        if draws.n_dims > 1 or self.criterion != "d-optimal":
            return criterion_order_fn(draws, codes, self.criterion)
        x, w = hermegauss(N_POPULATION_NODES)
        w = w / w.sum()
        info = information(draws, x)  # (T, I)

        def order(n: int, quota: np.ndarray | None) -> np.ndarray:
            def gain(state: np.ndarray | None) -> tuple[np.ndarray, Any]:
                total = np.ones(len(x)) if state is None else state
                score = w @ np.log1p(info / total[:, None])

                def update(best: int) -> np.ndarray:
                    return total + info[:, best]

                return score, update

            return greedy(gain, draws.n_items, n, codes, quota)

        return order

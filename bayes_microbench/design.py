"""Posterior-driven micro-benchmark design: P(correct ranking), Bayesian MDAD, planning.

The question a design answers before any evaluation: two llms drawn from the
fitted population whose **full-benchmark accuracies differ by a gap** ``δ``;
how likely does the micro-benchmark rank them the same way?

Definitions (the study's, made explicit)
----------------------------------------
* The full benchmark is the item set ``B`` (by default every item of the
  posterior). A pair's *gap* is the absolute difference of the two llms'
  **realized** accuracies on ``B``, in points (0-100), as the study bins its pairs.
* A design picks ``n`` items of ``B`` with weights ``w``; its estimate of an llm
  is ``sum_i w_i y_i``. It ranks a pair correctly when the estimated difference
  has the sign of the full-benchmark difference (an estimated 0 is wrong).
* ``P(correct | δ, design)`` averages over pairs of realized gap ``δ`` and their
  responses, under one posterior draw of the item parameters; across draws its
  mean is the posterior-predictive curve, its quantiles the credible band. The
  pairs come from the fitted population with its misfit where the posterior
  carries one (docs/decisions/0034-design-pairs-share-their-misfit.md), else
  from ``Normal(0, 1)``.
* **MDAD** = the smallest gap on the grid (0-30 points in steps of 0.5 by
  default) at which the curve, monotone by construction, reaches the threshold
  (0.8): the point from the posterior-mean curve, the interval from the
  per-draw MDADs (``inf`` where a draw never reaches it).

Designs: ``random`` (sizes ``n``), a fixed ``subset`` of item ids, or any
registered selector run on source responses, evaluated as the selection's
weighted mean. How the curves are computed (a bivariate normal approximation
integrated by quadrature, vectorized over draws, nodes, gaps and designs;
:func:`_reference_curves_loop` is the plain per-draw loop) and the designs in
full: docs/engine.md, "Design: P(correct ranking) from the posterior".
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from numpy.polynomial.hermite_e import hermegauss
from scipy.special import ndtr

from . import response_model
from ._defaults import DEFAULT_CI_PROB, seed_or_fresh
from ._validate import check_positive_int, check_probability, preview
from .exceptions import UserInputError
from .population import Population
from .posterior import DEFAULT_MAX_DRAWS, ItemDraws, item_draws, open_posterior

logger = logging.getLogger(__name__)

#: Default gap grid (points): 0 to 30 in steps of 0.5.
DEFAULT_GAPS = np.arange(0.0, 30.0 + 1e-9, 0.5)
DEFAULT_THRESHOLD = 0.8
DEFAULT_SIZES = (10, 25, 50, 100, 200)
#: Quadrature: uniform ability grid for the inverse map, Gauss-Hermite nodes for
#: the better llm's ability and for the expected-gap offset of the other.
THETA_LIMIT = 6.0
N_THETA = 121
N_ABILITY_NODES = 16
N_GAP_NODES = 7
#: The study's gap bins (points): a bin is labelled by its lower edge.
BIN_WIDTH = 0.5
#: Equal-weight ability nodes (population quantiles) for the better llm with a fitted population.
N_POPULATION_NODES = 24
_CHUNK = 25  # draws per vectorized chunk


# ------------------------------------------------------------------ designs
@dataclass(frozen=True)
class Design:
    """A family of designs over the benchmark items, one per size.

    ``weights(rows)`` returns the design weights for the posterior draws
    ``rows``: shape ``(len(rows), N, n_sizes)``, or ``(N, n_sizes)`` when the
    design does not vary across draws. Each column is non-negative and sums
    to 1 over its chosen items.
    """

    label: str
    sizes: tuple[int, ...]
    weights: Callable[[np.ndarray], np.ndarray]
    varies: bool
    info: dict[str, Any]


def random_design(sizes: Sequence[int], n_bench: int, n_draws: int, random_seed: Any = 0) -> Design:
    """Uniform random subsets: each posterior draw gets its own random order of the
    items, and size ``n`` takes its first ``n`` (subsets nested across sizes)."""
    sizes_t = _check_sizes(sizes, n_bench)
    rng = np.random.default_rng(_entropy(random_seed))
    order = np.argsort(rng.random((n_draws, n_bench)), axis=1)
    pos = np.empty((n_draws, n_bench), dtype=np.int32)  # each item's place in its draw's order
    np.put_along_axis(pos, order, np.arange(n_bench, dtype=np.int32)[None, :], axis=1)
    n_arr = np.asarray(sizes_t)

    def weights(rows: np.ndarray) -> np.ndarray:
        return (pos[rows][:, :, None] < n_arr[None, None, :]) / n_arr[None, None, :]

    return Design("random", sizes_t, weights, True, {"kind": "random"})


def fixed_design(
    positions_by_size: Sequence[np.ndarray],
    n_bench: int,
    label: str,
    weights_by_size: Sequence[np.ndarray] | None = None,
) -> Design:
    """Fixed item subsets (positions into the benchmark), one per size."""
    sizes = tuple(len(p) for p in positions_by_size)
    mat = np.zeros((n_bench, len(sizes)))
    for d, pos in enumerate(positions_by_size):
        w = (
            np.full(len(pos), 1.0 / len(pos))
            if weights_by_size is None
            else np.asarray(weights_by_size[d], dtype=np.float64)
        )
        mat[np.asarray(pos, dtype=np.int64), d] = w / w.sum()

    return Design(label, sizes, lambda rows: mat, False, {"kind": "fixed"})


def replicated_design(
    label: str, sizes: Sequence[int], mats: np.ndarray, info: dict[str, Any]
) -> Design:
    """Designs re-drawn ``R`` times: ``mats`` is ``(R, N, n_sizes)``; draw ``s`` uses ``s mod R``."""
    n_rep = mats.shape[0]
    if n_rep == 1:
        return Design(label, tuple(sizes), lambda rows: mats[0], False, info)
    return Design(label, tuple(sizes), lambda rows: mats[np.asarray(rows) % n_rep], True, info)


def _entropy(seed: Any) -> int:
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(2**63))
    return int(seed_or_fresh(seed, "design"))


def _check_sizes(sizes: Sequence[int], n_bench: int) -> tuple[int, ...]:
    out = []
    for n in sizes:
        v = check_positive_int(n, "sizes")
        if v > n_bench:
            raise UserInputError(
                f"sizes: {v} items is larger than the benchmark ({n_bench} items); "
                f"choose sizes up to {n_bench}"
            )
        out.append(v)
    if len(set(out)) != len(out):
        raise UserInputError(f"sizes: duplicate values in {preview(out)}")
    return tuple(out)


# ------------------------------------------------------------ core numerics
def _quadrature() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    theta = np.linspace(-THETA_LIMIT, THETA_LIMIT, N_THETA)
    xa, wa = hermegauss(N_ABILITY_NODES)
    wa = wa / wa.sum()
    keep = wa > 1e-6  # outer nodes carry no mass: dropping them changes nothing measurable
    xk, wk = hermegauss(N_GAP_NODES)
    return theta, xa[keep], wa[keep] / wa[keep].sum(), xk, wk / wk.sum()


def _draw_rows(draws: ItemDraws, rows: np.ndarray) -> ItemDraws:
    """The posterior draws ``rows`` of the items (with a ``2pl-md`` posterior's loadings)."""
    return ItemDraws(
        draws.items,
        draws.subtask,
        draws.discrimination[rows],
        draws.difficulty[rows],
        draws.guessing[rows],
        draws.chain[rows],
        draws.draw[rows],
        None if draws.loadings is None else draws.loadings[rows],
    )


def _moments(
    draws: ItemDraws, rows: np.ndarray, thetas: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Per-llm sums at each ability in ``thetas`` for the draws ``rows``.

    ``thetas``: (T,), or (T, D) for a ``2pl-md`` posterior. Returns PN (s, T):
    expected full accuracy; QN (s, T): its variance; PS, QS, CS (s, T, Z):
    expected design estimate, its variance and its covariance with the full
    accuracy, per design size.
    """
    sub = _draw_rows(draws, rows)
    n_s, n_b = len(rows), draws.n_items
    p = sub.prob(np.broadcast_to(thetas, (n_s, *np.shape(thetas))))  # (s, T, N)
    q = p * (1.0 - p)
    pn = p.mean(axis=2)
    qn = q.sum(axis=2) / n_b**2
    if weights.ndim == 2:  # one design for every draw: plain 2-D products
        flat_p, flat_q = p.reshape(-1, n_b), q.reshape(-1, n_b)
        shape = (n_s, len(thetas), weights.shape[1])
        ps = (flat_p @ weights).reshape(shape)
        qs = (flat_q @ (weights * weights)).reshape(shape)
        cs = (flat_q @ weights).reshape(shape) / n_b
    else:
        ps = np.matmul(p, weights)
        qs = np.matmul(q, weights * weights)
        cs = np.matmul(q, weights) / n_b
    return pn, qn, ps, qs, cs


def _curves_chunk(
    draws: ItemDraws,
    rows: np.ndarray,
    weights: np.ndarray,
    gaps: np.ndarray,
    half_step: np.ndarray,
    population: Population | None = None,
    excess: np.ndarray | None = None,
    spread: _Spread | None = None,
) -> np.ndarray:
    """P(correct | gap) for the draws ``rows``: (s, D, G). Vectorized over all axes.

    ``population``: the fitted llms' abilities replace the prior's ``Normal(0, 1)``;
    ``excess`` ((D, C, B) or (s, D, C, B), :meth:`Population.pair_excess`): a pair's
    estimate-error variance beyond the model's, per cell of the population's pair
    tables, read at each pair's mean accuracy and realized gap; ``spread``: the
    chunk's rows of the per-draw population weights and misfit draws.
    """
    theta, xa, wa, xk, wk = _quadrature()
    n_s = len(rows)
    if population is not None:
        xa, wa = population.nodes(N_POPULATION_NODES)
    if population is not None and spread is not None:  # each draw its own weighting
        wa_s = population.node_weights(N_POPULATION_NODES, spread.weights)
    else:
        wa_s = np.broadcast_to(wa, (n_s, len(wa)))
    n_t = len(theta)
    pn, qn, ps, qs, cs = _moments(draws, rows, np.concatenate([theta, xa]), weights)
    pn_g, pn_a = pn[:, :n_t], pn[:, n_t:]  # (s, T), (s, A)
    qn_g, qn_a = qn[:, :n_t], qn[:, n_t:]
    delta = gaps / 100.0

    # expected-gap nodes around each realized gap, and the other llm's expected accuracy
    sig0 = np.sqrt(2.0 * qn_a)  # (s, A): sd of the full difference for an equal pair
    e = delta[None, None, :, None] + sig0[:, :, None, None] * xk[None, None, None, :]
    target = pn_a[:, :, None, None] - e  # (s, A, G, K)

    # invert each draw's monotone expected-accuracy curve in one searchsorted call
    offset = 2.0 * np.arange(n_s)[:, None]
    z = (pn_g + offset).ravel()
    t_off = target + offset[:, :, None, None]
    flat = np.searchsorted(z, t_off, side="right") - 1
    seg = np.arange(n_s)[:, None, None, None]
    local = flat - seg * n_t
    valid = (local >= 0) & (local < n_t - 1) & (target >= pn_g[:, :1, None, None])
    local = np.clip(local, 0, n_t - 2)
    flat = seg * n_t + local
    lo, hi = z[flat], z[flat + 1]
    d_pn = np.maximum(hi - lo, 1e-300)
    frac = np.clip((t_off - lo) / d_pn, 0.0, 1.0)
    step = theta[1] - theta[0]
    theta_b = theta[local] + frac * step
    jac = step / d_pn  # d theta_b / d e
    if population is None:
        dens_b = np.exp(-0.5 * theta_b**2)
    else:
        dens_g = np.broadcast_to(
            population.density(theta, None if spread is None else spread.weights), (n_s, n_t)
        )
        dens_b = dens_g[seg, local] * (1.0 - frac) + dens_g[seg, local + 1] * frac

    qn_flat = qn_g.ravel()
    qn_b = qn_flat[flat] * (1.0 - frac) + qn_flat[flat + 1] * frac
    sig_m2 = qn_a[:, :, None, None] + qn_b
    ratio2 = sig0[:, :, None, None] ** 2 / sig_m2
    weight = (
        wa_s[:, :, None, None]
        * wk[None, None, None, :]
        * dens_b
        * jac
        * np.sqrt(ratio2)
        * np.exp(-0.5 * xk[None, None, None, :] ** 2 * (ratio2 - 1.0))
        * valid
    )  # (s, A, G, K)

    # the design sums at the other llm's ability: one gather for all three, in float32
    n_d = ps.shape[2]
    stacked = np.concatenate([ps[:, :n_t], qs[:, :n_t], cs[:, :n_t]], axis=2)
    stacked = stacked.reshape(n_s * n_t, 3 * n_d).astype(np.float32)
    f32 = frac.astype(np.float32)[..., None]
    at_b = stacked[flat] * (1.0 - f32) + stacked[flat + 1] * f32  # (s, A, G, K, 3D)
    ps_b, qs_b, cs_b = at_b[..., :n_d], at_b[..., n_d : 2 * n_d], at_b[..., 2 * n_d :]
    own = np.concatenate([ps[:, n_t:], qs[:, n_t:], cs[:, n_t:]], axis=2).astype(np.float32)
    own = own[:, :, None, None, :]  # (s, A, 1, 1, 3D)
    mu_k = own[..., :n_d] - ps_b
    var_k = own[..., n_d : 2 * n_d] + qs_b
    cov = own[..., 2 * n_d :] + cs_b
    inv_m2 = (1.0 / sig_m2).astype(np.float32)[..., None]
    resid = (delta[None, None, :, None] - e).astype(np.float32)[..., None]
    half = np.broadcast_to(np.asarray(half_step, dtype=np.float32), (n_s, n_d))
    margin = mu_k + cov * inv_m2 * resid - half[:, None, None, None, :]
    cond_var = var_k - cov * cov * inv_m2
    np.maximum(cond_var, np.float32(0.0), out=cond_var)
    if excess is not None:  # the pair's misfit, independent of the full gap
        # the pair's mean expected accuracy: the better llm's minus half the expected gap
        mid = pn_a[:, :, None, None] - 0.5 * e
        assert population is not None  # excess is population.pair_excess(...)
        extra, rel = _excess_at(excess, population, delta, mid)  # (s, A, G, K, D), (..., 1)
        cond_var = cond_var + extra
        if spread is not None:  # the misfit estimate's sampling error, one draw per row
            cond_var = cond_var * _misfit_factor(rel, spread.misfit[:, None, None, None, None])
    np.maximum(cond_var, np.float32(1e-30), out=cond_var)
    pc = ndtr(margin / np.sqrt(cond_var))  # a zero variance gives +-inf: P = 1 or 0
    num = np.einsum("sagk,sagkd->sdg", weight.astype(np.float32), pc)
    den = weight.sum(axis=(1, 3))[:, None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


# ------------------------------------------------- pairs (a 2pl-md posterior)
#: Abilities the pair path draws its pairs from: every ordered pair of this many points
#: (a low-discrepancy sample of Normal(0, I_D), or a fixed seeded subsample of a saved
#: population). Why 64: docs/decisions/0030-design-in-d-dimensions.md.
PAIR_ABILITIES = 64
#: Seed of the subsample of a saved population (fixed: the curves do not move with a
#: design's seed, as the quadrature's nodes do not).
PAIR_SEED = 20300
#: A pair whose realized full difference lies more than this many sds from every gap of the
#: grid is left out of a block (its weight there is below exp(-24.5) of a central pair's).
PAIR_Z_CUT = 7.0
#: A gap whose realized-gap density, averaged over the pairs, is below this (per unit of
#: accuracy) is not produced by the population (NaN, as the quadrature's unreachable gaps).
PAIR_MIN_DENSITY = 1e-6
_PAIR_CELLS = 1 << 21  # draws x pairs x sizes x gaps per vectorized block


def pair_abilities(
    population: Population | None, n_dims: int, count: int | None = None
) -> np.ndarray:
    """The abilities the pair path integrates over: (M,) for ``n_dims`` 0, else (M, D).

    ``population`` None: ``count`` points of the ``R_D`` low-discrepancy
    sequence (Roberts' generalized golden ratio; deterministic) mapped to
    ``Normal(0, I_D)``; a saved population: all its abilities when it holds at
    most ``count``, else a fixed seeded subsample of them. ``n_dims`` 0 asks for
    1-D abilities (the pair path on a 1-D posterior, kept for tests); ``count``
    defaults to :data:`PAIR_ABILITIES`.
    """
    from scipy.special import ndtri

    count = PAIR_ABILITIES if count is None else check_positive_int(count, "count", minimum=2)
    if population is None:
        d = max(n_dims, 1)
        phi = 2.0
        for _ in range(60):  # the root of x^(d+1) = x + 1
            phi = (1.0 + phi) ** (1.0 / (d + 1))
        alpha = phi ** -np.arange(1, d + 1)
        u = np.mod(0.5 + np.arange(1, count + 1)[:, None] * alpha[None, :], 1.0)
        theta = ndtri(u)
        # moment-matched: exactly mean 0 and covariance I (a few points stray in the tails)
        theta = theta - theta.mean(axis=0)
        theta = (
            theta @ np.linalg.inv(np.linalg.cholesky(np.cov(theta.T, bias=True).reshape(d, d))).T
        )
        return theta[:, 0] if n_dims == 0 else theta
    theta = np.asarray(population.ability, dtype=np.float64)
    if len(theta) > count:
        rng = np.random.default_rng(PAIR_SEED)
        theta = theta[np.sort(rng.choice(len(theta), count, replace=False))]
    return theta


def _pair_curves_chunk(
    draws: ItemDraws,
    rows: np.ndarray,
    weights: np.ndarray,
    gaps: np.ndarray,
    half_step: np.ndarray,
    abilities: np.ndarray,
    excess: np.ndarray | None = None,
    population: Population | None = None,
    pair_weights: np.ndarray | None = None,
    misfit: np.ndarray | None = None,
) -> np.ndarray:
    """P(correct | gap) for the draws ``rows`` over ordered pairs of ``abilities``: (s, Z, G).

    For the ordered pair (a, b) the realized full difference is
    ``D_B ~ N(PN_a - PN_b, QN_a + QN_b)``; ``P(correct | D_B = δ)`` is
    ``sum_pairs f_pair(δ) P_pair(D_S > margin | D_B = δ) / sum_pairs f_pair(δ)``,
    ``f_pair`` the normal density of ``D_B`` at ``δ`` and the conditional that of
    the bivariate normal ``(D_S, D_B)``, as in :func:`_curves_chunk` (the same
    ``excess`` and tie margins). Pairs farther than :data:`PAIR_Z_CUT` sds from
    every gap are skipped; the rest is vectorized over draws, pairs, sizes and
    gaps in blocks of at most ``_PAIR_CELLS`` cells. A gap no pair produces
    (mean density below :data:`PAIR_MIN_DENSITY`) is NaN.

    ``excess`` ((Z, C, B) or (s, Z, C, B)) and ``population``: the pair's misfit
    from the population's pair tables (:meth:`Population.pair_excess`), read at its
    mean expected accuracy and each gap; ``pair_weights`` (s, M): a per-draw
    weighting of the abilities (each pair weighted by ``M^2 w_a w_b``);
    ``misfit`` (s,): per-draw standard normals that move the misfit estimate
    within its sampling error (docs/decisions/0034).
    """
    pn, qn, ps, qs, cs = _moments(draws, rows, abilities, weights)
    n_s, n_z = len(rows), ps.shape[2]
    n_g = len(gaps)
    m = len(abilities)
    first, second = np.nonzero(~np.eye(m, dtype=bool))  # every ordered pair of two abilities
    n_pairs = len(first)
    delta = np.asarray(gaps, dtype=np.float64) / 100.0
    # skip the pairs that are far from every gap under every draw of the chunk
    mu_all = pn[:, first] - pn[:, second]
    sd_all = np.sqrt(qn[:, first] + qn[:, second])
    below, above = delta.min() - mu_all, mu_all - delta.max()
    far = np.maximum(np.maximum(below, above), 0.0) > PAIR_Z_CUT * sd_all
    near = ~far.all(axis=0)
    first, second = first[near], second[near]
    half = np.broadcast_to(np.asarray(half_step, dtype=np.float64), (n_s, n_z))
    num = np.zeros((n_s, n_z, n_g))
    den = np.zeros((n_s, n_g))
    block = max(1, _PAIR_CELLS // (n_s * n_g * n_z))
    for start in range(0, len(first), block):
        i, j = first[start : start + block], second[start : start + block]
        mu_b = pn[:, i] - pn[:, j]  # (s, P)
        inv_var = 1.0 / (qn[:, i] + qn[:, j])
        resid = delta[None, None, :] - mu_b[:, :, None]  # (s, P, G): δ - E[D_B]
        dens = np.sqrt(inv_var / (2.0 * np.pi))[:, :, None] * np.exp(
            -0.5 * resid * resid * inv_var[:, :, None]
        )
        if pair_weights is not None:
            dens = dens * (m * m * pair_weights[:, i] * pair_weights[:, j])[:, :, None]
        cov = cs[:, i] + cs[:, j]  # (s, P, Z)
        slope = cov * inv_var[:, :, None]
        cond_var = np.maximum(qs[:, i] + qs[:, j] - cov * slope, 0.0)[..., None]  # (s, P, Z, 1)
        if excess is not None:  # the pair's misfit at its mean accuracy and each gap
            mid = 0.5 * (pn[:, i] + pn[:, j])
            assert population is not None  # excess is population.pair_excess(...)
            extra, rel = _excess_at(excess, population, delta, mid)  # (s, P, Z, G), (s, P, 1, G)
            cond_var = cond_var + extra
            if misfit is not None:
                cond_var = cond_var * _misfit_factor(rel, misfit[:, None, None, None])
        inv_sd = 1.0 / np.sqrt(np.maximum(cond_var, 1e-30))  # (s, P, Z, 1 or G)
        base = ((ps[:, i] - ps[:, j] - half[:, None, :])[..., None] * inv_sd).astype(np.float32)
        scaled = (slope[..., None] * inv_sd).astype(np.float32)
        # (s, P, Z, G), the gap last: the broadcasts and ndtr run on its contiguous axis
        margin = scaled * resid.astype(np.float32)[:, :, None, :]
        margin += base
        pc = ndtr(margin)  # a zero variance gives +-inf: P = 1 or 0
        num += np.einsum("spg,spzg->szg", dens.astype(np.float32), pc)
        den += dens.sum(axis=1)
    produced = den / n_pairs >= PAIR_MIN_DENSITY
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.minimum(num / den[:, None, :], 1.0)  # float32 sums may pass 1 by 1e-7
        return np.where(produced[:, None, :], ratio, np.nan)


@dataclass(frozen=True)
class _Spread:
    """Per posterior draw: a Bayesian-bootstrap weighting of the population's abilities
    (``weights`` (S, L), the quadrature's; ``pair_weights`` (S, M), the pair path's)
    and a standard normal (``misfit`` (S,)) that moves the pair tables' misfit within
    its sampling error (docs/decisions/0034)."""

    weights: np.ndarray
    pair_weights: np.ndarray
    misfit: np.ndarray

    def rows(self, rows: np.ndarray) -> _Spread:
        """The draws ``rows`` of each."""
        return _Spread(self.weights[rows], self.pair_weights[rows], self.misfit[rows])


def _spread(population: Population | None, n_draws: int, random_seed: Any) -> _Spread | None:
    """The per-draw population and misfit draws of a design (None without a population)."""
    if population is None:
        return None
    rng = np.random.default_rng([_entropy(random_seed), 20034])
    weights = population.bootstrap_weights(rng, n_draws)
    pair_weights = population.bootstrap_weights(rng, n_draws, PAIR_ABILITIES)
    return _Spread(weights, pair_weights, rng.standard_normal(n_draws))


#: Least share of a pair's variance a draw of the misfit estimate's error leaves.
MISFIT_FLOOR = 0.05


def _misfit_factor(rel: np.ndarray, z: np.ndarray) -> np.ndarray:
    """One draw of the pair tables' estimate error, as a factor on the pair's variance.

    A cell's excess is the mean of ``(d . (r_a - r_b))^2`` less the Bernoulli part,
    so its sampling error is ``sqrt(2 / dof)`` (``rel``) times the pair's *whole*
    variance; ``z`` a standard normal per draw. Scaling the whole variance by
    ``1 + rel z`` (floored at :data:`MISFIT_FLOOR`) keeps its mean: adding the
    error to the excess and clipping at 0 lifted every curve's variance by about
    ``0.4 rel`` of it.
    """
    return np.maximum(1.0 + rel * z, MISFIT_FLOOR).astype(np.float32)


def _band_interp(values: np.ndarray, centres: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``values`` (..., C, B) read at ``x`` (X,) along each row's band ``centres`` (C, B):
    (..., C, X), linear, constant past the first and last centre."""
    n_c, n_b = centres.shape
    if n_b == 1:
        return np.broadcast_to(values[..., :1], (*values.shape[:-1], len(x)))
    out = []
    for c in range(n_c):
        hi = np.clip(np.searchsorted(centres[c], x), 1, n_b - 1)
        lo = hi - 1
        span = centres[c, hi] - centres[c, lo]
        f = np.clip((x - centres[c, lo]) / np.where(span > 0, span, 1.0), 0.0, 1.0)
        out.append(values[..., c, lo] * (1.0 - f) + values[..., c, hi] * f)
    return np.stack(out, axis=-2)


def _excess_at(
    table: np.ndarray, population: Population, delta: np.ndarray, mid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A pair's misfit variance from the pair tables, at its mean accuracy and realized gap.

    ``table`` ((Z, C, B) or (s, Z, C, B)): :meth:`Population.pair_excess` of the
    designs; ``delta`` (G,): the gaps (fractions); ``mid``: the pairs' mean
    expected accuracy, (s, A, G, K) for the quadrature (returns (s, A, G, K, Z))
    or (s, P) for the pair path (returns (s, P, Z, G)). Also returns the relative
    sd of the cell's variance estimate there, with a size axis of 1.
    """
    acc, gap_c, rel = population.pair_cells()
    n_s = mid.shape[0]
    table = np.broadcast_to(np.asarray(table, dtype=np.float32), (n_s, *table.shape[-3:]))
    by_gap = _band_interp(table, gap_c, delta)  # (s, Z, C, G)
    rel_gap = _band_interp(rel, gap_c, delta)  # (C, G)
    n_c = len(acc)
    if n_c == 1:
        hi = np.zeros(mid.shape, dtype=np.int64)
        lo, f = hi, np.zeros(mid.shape)
    else:
        hi = np.clip(np.searchsorted(acc, mid), 1, n_c - 1)
        lo = hi - 1
        f = np.clip((mid - acc[lo]) / np.maximum(acc[hi] - acc[lo], 1e-12), 0.0, 1.0)
    f = f.astype(np.float32)
    rel_gap = rel_gap.astype(np.float32)
    if mid.ndim == 4:  # quadrature: (s, A, G, K)
        vt = by_gap.transpose(0, 3, 2, 1)  # (s, G, C, Z)
        si = np.arange(n_s)[:, None, None, None]
        gi = np.arange(len(delta))[None, None, :, None]
        out = vt[si, gi, lo] * (1.0 - f[..., None]) + vt[si, gi, hi] * f[..., None]
        rt = rel_gap.T  # (G, C)
        r = rt[gi, lo] * (1.0 - f) + rt[gi, hi] * f
        return out, r[..., None]
    vt = by_gap.transpose(0, 2, 1, 3)  # (s, C, Z, G)
    si = np.arange(n_s)[:, None]
    fx = f[..., None, None]
    out = vt[si, lo] * (1.0 - fx) + vt[si, hi] * fx  # (s, P, Z, G)
    r = rel_gap[lo] * (1.0 - f[..., None]) + rel_gap[hi] * f[..., None]  # (s, P, G)
    return out, r[:, :, None, :]


def population_positions(population: Population, draws: ItemDraws) -> np.ndarray:
    """Positions of the benchmark items in the population's items (all must be there).

    A population of other ability dimensions than the posterior's is refused too.
    """
    if population.n_dims != draws.n_dims:
        raise UserInputError(
            f"the saved population has {population.n_dims}-D abilities but the posterior "
            f"{draws.n_dims}-D ones: give population=None, or recalibrate the posterior"
        )
    pos = population.positions(draws.items)
    if pos is None:
        items = np.asarray(draws.items).astype(str)
        missing = items[~np.isin(items, population.items)]
        raise UserInputError(
            f"the saved population does not cover {preview(missing.tolist())} of the benchmark "
            "items: give population=None, or recalibrate the posterior on these items"
        )
    return pos


def resolve_population(carried: Any, population: Any) -> Population | None:
    """The population a design integrates over: given, the saved one, or None.

    ``carried``: the calibration a posterior carries (a
    :class:`~bayes_microbench.misfit.Misfit`, or None), as
    :func:`~bayes_microbench.posterior.open_posterior` returns it. ``"saved"``:
    its population (None for a bare Dataset or a posterior saved without one:
    the prior's ``Normal(0, 1)`` and no misfit).
    """
    if isinstance(population, str):
        if population != "saved":
            raise UserInputError(
                f"population must be a Population, 'saved' or None, got {population!r}"
            )
        return getattr(carried, "population", None)
    if population is not None and not isinstance(population, Population):
        population = getattr(population, "population", None)  # a Misfit carrying one
    return population


def draws_and_population(
    posterior: Any, population: Any, draws: ItemDraws | None, max_draws: int | None
) -> tuple[ItemDraws, Population | None]:
    """The item draws a design reads and the population it integrates over.

    A file is read once (hash-checked), for its draws and its calibration's
    population alike; given ``draws`` are kept, and with them a file is read
    for its population only (``posterior`` None: no saved population). Why: a
    path, a loaded fit and the commands must give a design the same population.
    """
    saved = isinstance(population, str)
    if saved:
        resolve_population(None, population)  # a misspelt name fails before a file is read
    carried = None
    if draws is None:
        dataset, carried = open_posterior(posterior)
        draws = item_draws(dataset, max_draws=max_draws, multidim=True)
    elif saved and isinstance(posterior, (str, os.PathLike)):
        carried = open_posterior(posterior)[1]
    elif saved and not isinstance(posterior, (xr.Dataset, xr.DataTree)):
        carried = getattr(posterior, "calibration", None)  # a fit; None for None
    return draws, resolve_population(carried, population)


def _tie_margins(weights: np.ndarray) -> np.ndarray:
    """Half the lattice step of each design's estimate difference: (D,) or (s, D).

    Equal weights ``1/n`` put the estimated difference on steps of ``1/n``,
    where a tie (counted as wrong) has real mass: the continuity correction is
    ``1/(2n)``. Unequal weights (the Bayesian selectors' estimators) make an
    exact tie negligible, and the correction is 0; applying ``1/(2n)`` there
    overstated their MDAD by about ``50/n`` points.
    """
    w = np.asarray(weights, dtype=np.float64)
    chosen = w > 0
    top = np.where(chosen, w, -np.inf).max(axis=-2)
    low = np.where(chosen, w, np.inf).min(axis=-2)
    uniform = (top - low) <= 1e-9 * top
    return np.where(uniform, 0.5 * top, 0.0)


def _curves(
    draws: ItemDraws,
    design: Design,
    gaps: np.ndarray,
    progress: Callable[[int], None] | None,
    monotone: bool = True,
    population: Population | None = None,
    pair_path: bool | None = None,
    random_seed: Any = 0,
    spread: _Spread | None = None,
) -> np.ndarray:
    """P(correct | gap) for every draw and size: (S, D, G).

    A 1-D posterior integrates the pair of abilities by quadrature
    (:func:`_curves_chunk`), a ``2pl-md`` one over pairs of abilities
    (:func:`_pair_curves_chunk`; docs/decisions/0030); ``pair_path`` True runs
    the pair path on a 1-D posterior too (for tests).

    A gap that the population cannot produce under a draw (no pair of its llms
    is that far apart: the quadrature has no mass there) is NaN for that draw,
    never 0 and never the value of a smaller gap: the probability is undefined
    there. ``monotone`` takes the running maximum over the gap grid (on the
    defined gaps only), which makes "the smallest gap that reaches a threshold"
    well defined on a fine grid; :func:`plan` evaluates each gap on its own
    (``monotone=False``) so that a gap's answer does not depend on the other
    gaps asked.

    With a population, each draw also takes its own bootstrap weighting of the
    population's llms and its own value of the misfit within the pair tables'
    sampling error (``spread``, drawn from ``random_seed`` unless given), so
    that the band carries the population's and the misfit's uncertainty beside
    the items' (docs/decisions/0034).
    """
    out = np.empty((draws.n_draws, len(design.sizes), len(gaps)))
    positions = None if population is None else population_positions(population, draws)
    pairs = draws.loadings is not None if pair_path is None else pair_path
    if spread is None:
        spread = _spread(population, draws.n_draws, random_seed)
    abilities = None
    if pairs:  # D dims: no monotone curve to invert; pairs of abilities instead
        abilities = pair_abilities(population, 0 if draws.loadings is None else draws.n_dims)
    for start in range(0, draws.n_draws, _CHUNK):  # memory bound; each chunk is vectorized
        rows = np.arange(start, min(draws.n_draws, start + _CHUNK))
        weights = design.weights(rows)
        excess = None
        part = None if spread is None else spread.rows(rows)
        if population is not None:
            excess = population.pair_excess(weights, positions)
        half = _tie_margins(weights)
        if abilities is not None:
            pw = None
            if part is not None and len(abilities) == PAIR_ABILITIES:
                pw = part.pair_weights
            elif part is not None:  # a population smaller than the pair sample: its own weights
                pw = part.weights * len(abilities)
            out[rows] = _pair_curves_chunk(
                draws,
                rows,
                weights,
                gaps,
                half,
                abilities,
                excess,
                population,
                None if pw is None else pw / pw.sum(axis=1, keepdims=True),
                None if part is None else part.misfit,
            )
        else:
            out[rows] = _curves_chunk(draws, rows, weights, gaps, half, population, excess, part)
        if progress is not None:
            progress(len(rows))
    if not monotone:
        return out
    undefined = np.isnan(out)
    running = np.maximum.accumulate(np.where(undefined, -np.inf, out), axis=2)
    return np.where(undefined, np.nan, running)


def _reference_curves_loop(draws: ItemDraws, design: Design, gaps: np.ndarray) -> np.ndarray:
    """The same curves as :func:`_curves`, written as a plain loop over draws, sizes and gaps.

    Uses ``np.interp`` for the inverse map; kept as the reference for tests and
    for ``benchmarks/bench_design.py``.
    """
    from scipy.stats import norm

    theta, xa, wa, xk, wk = _quadrature()
    out = np.empty((draws.n_draws, len(design.sizes), len(gaps)))
    for s in range(draws.n_draws):
        w_all = design.weights(np.array([s]))
        w_all = w_all[0] if w_all.ndim == 3 else w_all
        a, b, c = draws.discrimination[s], draws.difficulty[s], draws.guessing[s]

        def prob(t: float, a: np.ndarray = a, b: np.ndarray = b, c: np.ndarray = c) -> np.ndarray:
            return response_model.prob(response_model.logit(t, a, b), c)

        p_grid = np.array([prob(t) for t in theta])
        q_grid = p_grid * (1 - p_grid)
        pn_grid = p_grid.mean(axis=1)
        n_b = len(a)
        qn_grid = q_grid.sum(axis=1) / n_b**2
        for d in range(len(design.sizes)):
            w = w_all[:, d]
            h = float(_tie_margins(w_all)[d])
            ps_grid, qs_grid, cs_grid = p_grid @ w, q_grid @ (w * w), q_grid @ w / n_b
            for g, gap in enumerate(gaps):
                delta = gap / 100.0
                num = den = 0.0
                for ia, ta in enumerate(xa):
                    pa = prob(ta)
                    qa = pa * (1 - pa)
                    pn_a, qn_a = pa.mean(), qa.sum() / n_b**2
                    sig0 = np.sqrt(2 * qn_a)
                    for ik, x in enumerate(xk):
                        e = delta + sig0 * x
                        tgt = pn_a - e
                        if tgt < pn_grid[0] or tgt >= pn_grid[-1]:
                            continue
                        tb = float(np.interp(tgt, pn_grid, theta))
                        j = min(
                            int(np.searchsorted(pn_grid, tgt, side="right") - 1), len(theta) - 2
                        )
                        jac = (theta[1] - theta[0]) / (pn_grid[j + 1] - pn_grid[j])
                        sig_m2 = qn_a + np.interp(tb, theta, qn_grid)
                        r2 = sig0**2 / sig_m2
                        wt = (
                            wa[ia]
                            * wk[ik]
                            * np.exp(-0.5 * tb**2)
                            * jac
                            * np.sqrt(r2)
                            * np.exp(-0.5 * x**2 * (r2 - 1))
                        )
                        mu = w @ pa - np.interp(tb, theta, ps_grid)
                        var = (w * w) @ qa + np.interp(tb, theta, qs_grid)
                        cov = (w @ qa) / n_b + np.interp(tb, theta, cs_grid)
                        m = mu + cov / sig_m2 * (delta - e) - h
                        v = max(var - cov**2 / sig_m2, 0.0)
                        pc = float(norm.cdf(m / np.sqrt(v))) if v > 1e-24 else float(m > 0)
                        num += wt * pc
                        den += wt
                out[s, d, g] = num / den if den > 0 else 0.0
    return np.maximum.accumulate(out, axis=2)


# ----------------------------------------------------------------- MDAD
def bin_midpoints(curves: np.ndarray, gaps: np.ndarray, width: float = BIN_WIDTH) -> np.ndarray:
    """Each curve at ``gap + width / 2`` (linear in the gap; NaN past the grid's end).

    The study bins pairs by their gap floored to ``width`` points and labels a
    bin by its lower edge; a bin's share correct is the curve near its
    midpoint. Reading the curve there makes the Bayesian MDAD the same
    quantity as the study's (at the lower edge the curve reads half a bin late).
    """
    g = np.asarray(gaps, dtype=np.float64)
    x = g + 0.5 * width
    hi = np.clip(np.searchsorted(g, x, side="left"), 1, len(g) - 1)
    lo = hi - 1
    span = g[hi] - g[lo] if len(g) > 1 else np.ones_like(g)
    frac = np.clip((x - g[lo]) / np.where(span > 0, span, 1.0), 0.0, 1.0)
    out = curves[..., lo] * (1.0 - frac) + curves[..., hi] * frac
    return np.where(x <= g[-1], out, np.nan)


def mdad_from_curves(curves: np.ndarray, gaps: np.ndarray, threshold: float) -> np.ndarray:
    """Smallest gap where each (monotone) curve reaches ``threshold``; ``inf`` if never.

    ``curves`` has the gap on its last axis.
    """
    hit = curves >= threshold
    first = np.argmax(hit, axis=-1)
    return np.where(hit.any(axis=-1), np.asarray(gaps)[first], np.inf)


def _quantiles(values: np.ndarray, ci: float, axis: int = 0) -> np.ndarray:
    """Equal-tailed interval; works with ``inf`` entries (method 'lower'/'higher')."""
    lo = np.quantile(values, (1 - ci) / 2, axis=axis, method="lower")
    hi = np.quantile(values, (1 + ci) / 2, axis=axis, method="higher")
    return np.stack([lo, hi], axis=-1)


def design_curves(
    posterior: Any,
    design: Design | None = None,
    *,
    sizes: Sequence[int] | None = None,
    subset: Sequence[str] | None = None,
    selector: str | None = None,
    items: Sequence[str] | None = None,
    gaps: Sequence[float] | np.ndarray | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    ci_prob: float | None = None,
    max_draws: int | None = DEFAULT_MAX_DRAWS,
    source: Any = None,
    n_source: int = 300,
    n_replicates: int = 20,
    random_seed: int | None = 0,
    draws: ItemDraws | None = None,
    progressbar: bool = False,
    min_draws: int | None = None,
    population: Population | Any = "saved",
    n_llms: int | None = None,
) -> xr.Dataset:
    """P(correct ranking | gap, design) curves with credible bands, and the Bayesian MDAD.

    Parameters
    ----------
    posterior
        An item posterior (see :func:`bayes_microbench.posterior.item_draws`).
    design
        A prebuilt :class:`Design`; otherwise give exactly one of ``subset``
        (item ids: one fixed design of that size), ``selector`` (a registered
        selector name, ``"random"`` included) with ``sizes``, or only ``sizes``
        (random).
    sizes
        Subset sizes (default 10, 25, 50, 100, 200).
    items
        The full benchmark (default: every item of the posterior).
    gaps
        Gap grid in points (default 0-30 by 0.5).
    threshold
        P(correct) that defines MDAD, in (0.5, 1).
    ci_prob
        Probability of the credible band and interval (default 0.9).
    max_draws
        Posterior draws used.
    source
        Real source responses for selectors (a :class:`~bayes_microbench.Responses`
        covering the benchmark items); default: a posterior-predictive population.
    n_source, n_replicates
        Size of the simulated source population and number of selector re-runs.
    random_seed
        Seed; the same seed gives identical outputs.
    draws
        Precomputed item draws (skips extraction; a file ``posterior`` is still
        read for its saved population).
    progressbar
        Show a progress bar over draws (off where stderr is not a terminal).
    min_draws
        Fewest posterior draws the bands and intervals may rest on (default:
        the posterior's requirement; see
        :meth:`~bayes_microbench.posterior.ItemDraws.check_interval_draws`).
    population
        The llms the pairs come from and the misfit of their responses
        (:class:`~bayes_microbench.population.Population`, or a ``Misfit``
        carrying one). ``"saved"`` (default): the one the posterior's
        calibration carries (saved by ``fit``); None, or a posterior without
        one: the prior's ``Normal(0, 1)`` with responses that follow the model
        exactly (the ``population`` attr says which).
    n_llms
        Also predict the MDAD that a study of ``n_llms`` new llms would
        measure by the study's rule (:func:`bayes_microbench.mdad.mdad_from_pairs`
        on all their pairs): ``mdad_study``, ``mdad_study_interval`` and the
        simulated studies ``mdad_study_draws`` (one per posterior draw). Its band
        adds to the curve's uncertainty which llms the study happens to hold and
        their own misfit.

    Returns
    -------
    xarray.Dataset
        ``p_correct`` (chain, draw, n_items, gap); ``p_correct_mean`` (n_items,
        gap); ``p_correct_band`` (n_items, gap, ci_bound); ``mdad`` (n_items;
        from the mean curve), ``mdad_interval`` (n_items, ci_bound), ``mdad_draws``
        (chain, draw, n_items), ``reached`` (n_items). Gaps and MDAD in points.
    """
    ci = DEFAULT_CI_PROB if ci_prob is None else check_probability(ci_prob, "ci_prob")
    random_seed = seed_or_fresh(random_seed, "design_curves")
    thr = check_probability(threshold, "threshold", open_low=0.5)
    gap_grid = DEFAULT_GAPS if gaps is None else np.asarray(gaps, dtype=np.float64)
    if gap_grid.ndim != 1 or len(gap_grid) == 0 or (np.diff(gap_grid) <= 0).any():
        raise UserInputError("gaps must be an increasing list of points")
    if (gap_grid < 0).any() or (gap_grid > 100).any():
        raise UserInputError("gaps must lie in [0, 100] points")
    draws, pop = draws_and_population(posterior, population, draws, max_draws)
    draws.check_interval_draws(min_draws)
    if items is not None:
        draws = draws.subset(draws.index_of(list(items), where="benchmark items"))
    if design is None:
        design = build_design(
            draws,
            sizes=sizes,
            subset=subset,
            selector=selector,
            source=source,
            n_source=n_source,
            n_replicates=n_replicates,
            random_seed=random_seed,
        )
    bar = None
    if progressbar:
        from tqdm.auto import tqdm

        # disable=None: tqdm turns itself off when stderr is not a terminal (a log, a pipe)
        bar = tqdm(total=draws.n_draws, desc=f"design {design.label}", unit="draw", disable=None)
    spread = _spread(pop, draws.n_draws, random_seed)
    try:
        curves = _curves(
            draws,
            design,
            gap_grid,
            bar.update if bar is not None else None,
            population=pop,
            spread=spread,
        )
    finally:
        if bar is not None:
            bar.close()
    res = _summarize(curves, draws, design, gap_grid, thr, ci)
    res.attrs["population"] = population_note(pop, draws.n_dims)
    if n_llms is not None:
        k = check_positive_int(n_llms, "n_llms")
        if k < 2:
            raise UserInputError(f"n_llms must be at least 2 (a pair), got {n_llms}")
        # spread is None when pop is
        weights = None if spread is None or pop is None or pop.n_dims != 1 else spread.weights
        study = study_mdads(curves, draws, gap_grid, thr, pop, k, random_seed, weights)  # (S, D)
        attrs = {"ci_kind": "eti", "ci_prob": ci, "n_llms": k}
        res["mdad_study"] = ("n_items", np.quantile(study, 0.5, axis=0, method="lower"), attrs)
        res["mdad_study_interval"] = (("n_items", "ci_bound"), _quantiles(study, ci), attrs)
        shape = res["mdad_draws"].shape
        res["mdad_study_draws"] = (("chain", "draw", "n_items"), study.reshape(shape), attrs)
    return res


def study_mdads(
    curves: np.ndarray,
    draws: ItemDraws,
    gaps: np.ndarray,
    thr: float,
    population: Population | None,
    n_llms: int,
    random_seed: Any,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """The MDAD a study of ``n_llms`` new llms would measure, once per posterior draw: (S, D).

    Per draw: ``n_llms`` abilities from the population (the fitted llms'
    abilities under a bootstrap weighting: ``weights`` (S, L), the curves' own,
    or drawn here, without replacement where the population holds enough of
    them; or the prior's ``Normal(0, 1)``), full-benchmark accuracies
    from the draw's item curves with their binomial noise, every pair ranked
    with the draw's P(correct | gap), and the study's first-crossing rule on
    0.5-point bins (``inf`` where no bin reaches ``thr``).

    A pair's ranking error is the difference of its two llms' estimate errors,
    so the pairs of one llm are not independent: each simulated llm gets one
    standard normal error ``u_j`` (variance 1/2), and a pair (better ``a``,
    worse ``b``) is ranked correctly when ``Phi^-1(P(correct | gap)) + u_a - u_b
    > 0``: each pair keeps the curve's probability, and an llm whose estimate
    strays drags all its pairs with it, as in a real study
    (docs/decisions/0034). Why without replacement: two study llms drawn from
    one fitted llm would be a tied pair no real study holds, ranked at a coin's
    chance in the first bins (docs/decisions/0048).
    """
    from scipy.special import ndtri

    rng = np.random.default_rng(_entropy(random_seed) + 7)
    n_s, n_d, _ = curves.shape
    i, j = np.triu_indices(n_llms, k=1)
    out = np.full((n_s, n_d), np.inf)
    for s in range(n_s):
        if population is None:
            theta = rng.standard_normal(
                (n_llms, draws.n_dims) if draws.loadings is not None else n_llms
            )
        else:  # rows: 1-D abilities, or D-dim ones of a 2pl-md posterior's population
            p = population.bootstrap_weights(rng, 1)[0] if weights is None else weights[s]
            distinct = np.count_nonzero(p) >= n_llms
            theta = population.ability[
                rng.choice(len(population.ability), n_llms, replace=not distinct, p=p)
            ]
        p = _draw_rows(draws, np.array([s])).prob(theta[None, :])[0]  # (K, N)
        acc = rng.binomial(draws.n_items, p.mean(axis=1)) / draws.n_items
        gap = np.abs(acc[i] - acc[j])
        keep = gap > 0
        first_better = acc[i][keep] > acc[j][keep]
        ik, jk = i[keep], j[keep]
        binned = np.floor(gap[keep] * 200.0) / 2.0  # points, as mdad.bin_shares
        labels, inverse = np.unique(binned, return_inverse=True)
        for d in range(n_d):
            curve = curves[s, d]
            defined = np.isfinite(curve)
            if not defined.any():
                continue
            last = float(curve[defined][-1])
            pc = np.interp(gap[keep] * 100.0, gaps[defined], curve[defined], right=last)
            u = rng.standard_normal(n_llms) * np.sqrt(0.5)
            lead = np.where(first_better, u[ik] - u[jk], u[jk] - u[ik])
            correct = ndtri(np.clip(pc, 1e-12, 1.0 - 1e-12)) + lead > 0
            share = np.bincount(inverse, weights=correct) / np.bincount(inverse)
            hit = np.flatnonzero(share >= thr)
            if hit.size:
                out[s, d] = labels[hit[0]]
    return out


def saved_population(misfit: Any, where: str) -> Population | None:
    """The population a loaded posterior's calibration carries (None: the results' attr says so)."""
    population = getattr(misfit, "population", None)
    if population is None:
        logger.debug("%s carries no fitted population", where)
    return population


def population_note(population: Population | None, n_dims: int = 1) -> str:
    """What a design's pairs were drawn from, in one line (the results' ``population`` attr).

    ``n_dims``: the posterior's ability dims (the prior is ``Normal(0, I_D)`` above 1).
    """
    if population is None:
        prior = "Normal(0, 1)" if n_dims == 1 else f"Normal(0, I_{n_dims})"
        return (
            f"prior {prior} abilities, responses as the model says (no saved population: "
            "the band carries item uncertainty only)"
        )
    return population.describe()


def _summarize(
    curves: np.ndarray,
    draws: ItemDraws,
    design: Design,
    gaps: np.ndarray,
    thr: float,
    ci: float,
) -> xr.Dataset:
    n_chain = len(np.unique(draws.chain))
    n_per = draws.n_draws // n_chain
    shape = (n_chain, n_per, len(design.sizes), len(gaps))
    # a gap some draws do not produce (NaN there) is averaged over the draws that do
    defined = np.isfinite(curves)
    count = defined.sum(axis=0)
    mean_curve = np.where(count > 0, np.where(defined, curves, 0.0).sum(axis=0), np.nan)
    mean_curve = mean_curve / np.maximum(count, 1)
    per_draw = mdad_from_curves(bin_midpoints(curves, gaps), gaps, thr)
    point = mdad_from_curves(bin_midpoints(mean_curve, gaps), gaps, thr)
    attrs = {"ci_kind": "eti", "ci_prob": ci}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN gaps stay NaN
        band = np.stack(
            [
                np.nanquantile(curves, (1 - ci) / 2, axis=0, method="lower"),
                np.nanquantile(curves, (1 + ci) / 2, axis=0, method="higher"),
            ],
            axis=-1,
        )
    return xr.Dataset(
        {
            "p_correct": (("chain", "draw", "n_items", "gap"), curves.reshape(shape)),
            "p_correct_mean": (("n_items", "gap"), mean_curve),
            "p_correct_band": (("n_items", "gap", "ci_bound"), band, attrs),
            "mdad": ("n_items", point),
            "mdad_interval": (("n_items", "ci_bound"), _quantiles(per_draw, ci), attrs),
            "mdad_draws": (("chain", "draw", "n_items"), per_draw.reshape(shape[:3])),
            "reached": ("n_items", np.isfinite(point)),
        },
        coords={
            "chain": draws.chain.reshape(n_chain, n_per)[:, 0],
            "draw": draws.draw.reshape(n_chain, n_per)[0],
            "n_items": list(design.sizes),
            "gap": gaps,
            "ci_bound": ["lower", "upper"],
            "selector": design.label,
        },
        attrs={
            "threshold": thr,
            "ci_prob": ci,
            "n_benchmark_items": draws.n_items,
            "design": design.label,
            "gap_units": "accuracy points (0-100)",
            **{f"design_{k}": str(v) for k, v in design.info.items()},
        },
    )


# ------------------------------------------------------------ building designs
def build_design(
    draws: ItemDraws,
    *,
    sizes: Sequence[int] | None = None,
    subset: Sequence[str] | None = None,
    selector: str | None = None,
    source: Any = None,
    n_source: int = 300,
    n_replicates: int = 20,
    random_seed: int | None = 0,
) -> Design:
    """The :class:`Design` for a random, fixed-subset or selector design (see :func:`design_curves`)."""
    if subset is not None and selector is not None:
        raise UserInputError("give either a subset or a selector, not both")
    n_b = draws.n_items
    if subset is not None:
        ids = [str(i) for i in subset]
        if not ids:
            raise UserInputError("subset: the subset names no items")
        if len(set(ids)) != len(ids):
            raise UserInputError("subset: duplicate item ids in the subset")
        pos = draws.index_of(ids, where="subset")
        return fixed_design([pos], n_b, "subset")
    size_list = _check_sizes(DEFAULT_SIZES if sizes is None else sizes, n_b)
    if selector is None or selector == "random":
        return random_design(size_list, n_b, draws.n_draws, random_seed)
    return selector_design(
        draws,
        selector,
        size_list,
        source=source,
        n_source=n_source,
        n_replicates=n_replicates,
        random_seed=random_seed,
    )


def simulate_source(
    draws: ItemDraws,
    n_llms: int,
    rng: np.random.Generator,
    population: Population | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior-predictive responses of ``n_llms`` population llms under one random draw.

    Abilities from the prior: ``Normal(0, 1)``, or ``Normal(0, I_D)`` for a
    ``2pl-md`` posterior (returned as (n_llms,) or (n_llms, D)). With a
    ``population`` (of the posterior's dims, covering its items): abilities drawn
    from its fitted llms' (with replacement), and the probabilities moved by their
    misfit (:meth:`Population.with_misfit`), so the llms miss the model as real
    ones do.
    """
    s = int(rng.integers(draws.n_draws))
    if population is None:
        shape = n_llms if draws.loadings is None else (n_llms, draws.n_dims)
        ability = rng.standard_normal(shape)
    else:
        positions = population_positions(population, draws)
        ability = np.asarray(population.ability, dtype=np.float64)
        ability = ability[rng.integers(len(ability), size=n_llms)]
    one = draws.select_draws([s])
    p = one.prob(ability[None, :])[0]
    if population is not None:
        p = population.with_misfit(p, rng, positions)
    return (rng.random(p.shape) < p).astype(np.float64), ability


def selector_design(
    draws: ItemDraws,
    name: str,
    sizes: Sequence[int],
    *,
    source: Any = None,
    n_source: int = 300,
    n_replicates: int = 20,
    random_seed: int | None = 0,
) -> Design:
    """Run a registered selector ``n_replicates`` times and collect its selections as designs."""
    import pandas as pd

    n_b = draws.n_items
    sizes_t = _check_sizes(sizes, n_b)
    check_positive_int(n_replicates, "n_replicates")
    codes, _ = pd.factorize(draws.subtask)
    real = None
    if source is not None:
        pos = pd.Index(source.items).get_indexer(pd.Index(draws.items))
        if (pos < 0).any():
            missing = draws.items[pos < 0].tolist()
            raise UserInputError(
                f"source responses lack {len(missing)} benchmark item(s) {preview(missing)}"
            )
        real = source.values[:, pos]
    # the estimator is calibrated on real llms only: simulated ones follow the model
    selector = _selector_instance(name, draws, calibrate=real is not None)
    seeds = np.random.SeedSequence(_entropy(random_seed)).spawn(n_replicates)
    mats = np.zeros((n_replicates, n_b, len(sizes_t)))
    notes: dict[str, Any] = {"kind": "selector", "selector": name}
    notes["source"] = "real responses" if real is not None else f"simulated population ({n_source})"
    for r, ss in enumerate(seeds):  # one selector run per replicate, not per draw
        rng = np.random.default_rng(ss)
        src = real if real is not None else simulate_source(draws, n_source, rng)[0]
        prepared = selector.prepare(src, codes, None, rng)
        for d, n in enumerate(sizes_t):
            # each size its own stream: a size's selection does not depend on the others asked
            size_rng = np.random.default_rng(
                np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, n))
            )
            sel = prepared.select(n, size_rng)
            w = np.asarray(sel.weights, dtype=np.float64)
            if not (np.isfinite(w).all() and (w >= 0).all() and w.sum() > 0):
                raise RuntimeError(f"selector {name!r} returned invalid weights for n={n}")
            mats[r, np.asarray(sel.items, dtype=np.int64), d] = w / w.sum()
    return replicated_design(name, sizes_t, mats, notes)


def _selector_instance(name: str, draws: ItemDraws, *, calibrate: bool) -> Any:
    """The selector ``name``; a Bayesian one on the design's posterior ``draws``.

    ``calibrate``: whether a Bayesian selector's estimator is calibrated on the
    source llms (real ones; llms simulated from the posterior have nothing to teach it).
    """
    from .selectors import get_selector

    sel = get_selector(name)
    with_posterior = getattr(sel, "with_item_draws", None)
    if callable(with_posterior):  # Bayesian selectors reuse the design's posterior
        sel = with_posterior(draws)
        sel.calibrate = calibrate
    return sel


# ----------------------------------------------------------------- planning
#: :func:`plan` evaluates every whole size from 2 to N when N - 1 is at most this many,
#: else this many sizes on a geometric grid (and N itself).
MAX_PLAN_SIZES = 500
_PLAN_BLOCK = 100  # sizes per design block (bounds the weights' memory: draws x N x block)


def plan_sizes(n_bench: int, max_sizes: int = MAX_PLAN_SIZES) -> np.ndarray:
    """The subset sizes :func:`plan` evaluates: every whole size 2..N, or a geometric grid.

    One grid for every gap, fixed by ``n_bench`` alone, so that a gap's answer
    never depends on which other gaps (or which ``delta``) were asked.
    """
    max_sizes = check_positive_int(max_sizes, "max_sizes", minimum=2)
    if n_bench - 1 <= max_sizes:
        return np.arange(min(2, n_bench), n_bench + 1)
    grid = np.unique(np.round(np.geomspace(2, n_bench, max_sizes)).astype(int))
    return np.unique(np.append(grid, n_bench))


def plan(
    posterior: Any,
    delta: float,
    *,
    prob: float = DEFAULT_THRESHOLD,
    selector: str = "random",
    table_gaps: Sequence[float] = (1.0, 2.0, 3.0, 5.0, 10.0),
    items: Sequence[str] | None = None,
    ci_prob: float | None = None,
    max_draws: int | None = DEFAULT_MAX_DRAWS,
    max_sizes: int = MAX_PLAN_SIZES,
    random_seed: int | None = 0,
    draws: ItemDraws | None = None,
    min_draws: int | None = None,
    population: Population | Any = "saved",
) -> xr.Dataset:
    """Smallest subset size that ranks a pair ``delta`` points apart correctly with ``prob``.

    For each gap (``delta`` and ``table_gaps``) and each posterior draw, the
    smallest size on one fixed grid of sizes (:func:`plan_sizes`: every whole
    size up to N for benchmarks of up to ``max_sizes`` + 1 items) whose
    P(correct ranking) reaches ``prob``; the point value uses the posterior-mean
    curve, the interval the per-draw sizes. Each gap is evaluated on its own
    (no running maximum across the gaps asked) and the grid depends only on N,
    so a gap's row is the same whatever ``delta`` (same seed).

    A gap that the population cannot produce under a posterior draw (no pair of
    its llms is that far apart; e.g. 60 points on GPQA) has no P(correct)
    there: such draws are left out of that gap's answer, and a gap no draw
    produces is reported as such (``producible`` 0, ``n_required`` NaN), never
    as 0 items or as a smaller gap's answer.

    Parameters
    ----------
    posterior
        An item posterior (see :func:`bayes_microbench.posterior.item_draws`).
    delta
        The gap in points, in (0, 100].
    prob
        Required P(correct ranking), in (0.5, 1).
    selector
        ``"random"`` or any registered selector (run once per size).
    table_gaps
        Further gaps reported beside ``delta``.
    items
        The full benchmark (default: every item of the posterior).
    ci_prob
        Interval probability (default :data:`DEFAULT_CI_PROB`).
    max_draws
        Posterior draws used.
    max_sizes
        Largest number of sizes evaluated (see :func:`plan_sizes`).
    random_seed
        Seed; the same seed gives identical outputs.
    draws
        Precomputed item draws (skips extraction; a file ``posterior`` is still
        read for its saved population).
    min_draws
        Fewest posterior draws the intervals may rest on (default: the
        posterior's requirement; see
        :meth:`~bayes_microbench.posterior.ItemDraws.check_interval_draws`).
    population
        The llms the pairs come from and their misfit, as in :func:`design_curves`
        (default ``"saved"``: the posterior's calibration's).

    Returns
    -------
    xarray.Dataset
        ``n_required`` (gap), ``n_required_interval`` (gap, ci_bound),
        ``p_correct_at_n`` (gap): the mean-curve probability at that size;
        ``reached`` (gap): False when even the full benchmark does not reach
        ``prob`` (values ``inf``) or the gap is not produced (values NaN);
        ``producible`` (gap): the share of posterior draws under which the
        population produces pairs that far apart.
    """
    ci = DEFAULT_CI_PROB if ci_prob is None else check_probability(ci_prob, "ci_prob")
    random_seed = seed_or_fresh(random_seed, "plan")
    p_thr = check_probability(prob, "prob", open_low=0.5)
    d = float(delta)
    if not 0 < d <= 100:
        raise UserInputError(f"delta must be a gap in points in (0, 100], got {delta}")
    draws, pop = draws_and_population(posterior, population, draws, max_draws)
    draws.check_interval_draws(min_draws)
    if items is not None:
        draws = draws.subset(draws.index_of(list(items), where="benchmark items"))
    n_b = draws.n_items
    gaps = np.unique(np.asarray([d, *[float(g) for g in table_gaps]], dtype=np.float64))
    if (gaps <= 0).any() or (gaps > 100).any():
        raise UserInputError(f"table_gaps must lie in (0, 100] points, got {preview(gaps)}")
    sizes = plan_sizes(n_b, max_sizes)
    blocks = [sizes[k : k + _PLAN_BLOCK] for k in range(0, len(sizes), _PLAN_BLOCK)]
    curves = np.concatenate(
        [
            _curves(
                draws,
                _plan_design(draws, selector, b, random_seed),
                gaps,
                None,
                False,
                pop,
                random_seed=random_seed,
            )
            for b in blocks
        ],
        axis=1,
    )  # (S, D, G); NaN where a draw does not produce the gap
    defined = np.isfinite(curves[:, 0, :])  # (S, G): the same for every size
    share = defined.mean(axis=0)
    with np.errstate(invalid="ignore"):
        count = defined.sum(axis=0)
        mean = np.where(count > 0, np.nansum(curves, axis=0) / np.maximum(count, 1), np.nan)
    n_point = _smallest_size(mean.T, sizes, p_thr)  # (G,)
    per_draw = _smallest_size(curves.transpose(0, 2, 1), sizes, p_thr)  # (S, G)
    interval = np.full((len(gaps), 2), np.nan)
    for g in range(len(gaps)):
        if count[g]:
            interval[g] = _quantiles(per_draw[defined[:, g], g], ci)
    n_point = np.where(count > 0, n_point, np.nan)
    pos = np.searchsorted(sizes, np.where(np.isfinite(n_point), n_point, sizes[-1]))
    at_n = mean[np.minimum(pos, len(sizes) - 1), np.arange(len(gaps))]
    attrs = {"ci_kind": "eti", "ci_prob": ci}
    return xr.Dataset(
        {
            "n_required": ("gap", n_point),
            "n_required_interval": (("gap", "ci_bound"), interval, attrs),
            "p_correct_at_n": ("gap", at_n),
            "reached": ("gap", np.isfinite(n_point)),
            "producible": ("gap", share),
        },
        coords={"gap": gaps, "ci_bound": ["lower", "upper"], "selector": selector},
        attrs={
            "prob": p_thr,
            "delta": d,
            "ci_prob": ci,
            "n_benchmark_items": n_b,
            "sizes_evaluated": len(sizes),
            "population": population_note(pop, draws.n_dims),
        },
    )


def _smallest_size(curves: np.ndarray, sizes: np.ndarray, thr: float) -> np.ndarray:
    """Smallest size (last axis of ``curves`` runs over ``sizes``) reaching ``thr``; inf if none."""
    hit = curves >= thr
    first = np.argmax(hit, axis=-1)
    return np.where(hit.any(axis=-1), sizes[first].astype(np.float64), np.inf)


def _plan_design(
    draws: ItemDraws, selector: str, sizes: np.ndarray, random_seed: int | None
) -> Design:
    sizes_t = tuple(int(n) for n in sizes)
    if selector == "random":
        return random_design(sizes_t, draws.n_items, draws.n_draws, random_seed)
    return selector_design(draws, selector, sizes_t, n_replicates=1, random_seed=random_seed)


# ------------------------------------------------------------- selection
def select_from_posterior(
    posterior: Any,
    selector: str,
    n: int,
    *,
    n_source: int = 300,
    random_seed: int | None = 0,
    max_draws: int | None = DEFAULT_MAX_DRAWS,
    population: Any = "saved",
) -> tuple[list[str], list[str], np.ndarray, dict[str, Any]]:
    """Choose ``n`` items of a posterior's benchmark with any registered selector.

    ``random`` needs nothing but the item ids; the Bayesian selectors
    (``bayes-fisher``, ``bayes-ranking``) work from the posterior's item draws
    directly; the study's frequentist selectors need source responses, so they
    run on ``n_source`` llms simulated from the posterior's population (one
    posterior draw), as in :func:`selector_design`. Where the posterior carries
    a calibration with its fitted llms' population (``population="saved"``, or
    one given), the simulated llms carry their misfit (:func:`simulate_source`),
    and a Bayesian selector's estimator is calibrated on them, with its random
    fallback: why, a posterior alone gives llms that follow the model, on which
    the informative items always look best
    (docs/decisions/0046-posterior-sources-carry-the-misfit.md).
    ``population=None`` simulates from the model alone.

    Returns
    -------
    (item ids, their subtasks, estimator weights, selection notes)
    """
    dataset, carried = open_posterior(posterior)  # once: a file is read and hash-checked
    draws = item_draws(dataset, max_draws=max_draws, multidim=True)
    n_b = draws.n_items
    _check_sizes([n], n_b)
    rng = np.random.default_rng(random_seed)
    codes = pd.factorize(draws.subtask)[0]
    info: dict[str, Any]
    if selector == "random":
        chosen = np.sort(rng.choice(n_b, size=n, replace=False))
        weights = np.full(n, 1.0 / n)
        info = {}
    else:
        population = _source_population(carried, draws, population)
        instance = _selector_instance(selector, draws, calibrate=population is not None)
        source = simulate_source(draws, n_source, rng, population)[0]
        prepared = instance.prepare(source, codes, None, rng)
        selection = prepared.select(n, rng)
        chosen = np.asarray(selection.items, dtype=np.int64)
        weights = np.asarray(selection.weights, dtype=np.float64)
        info = dict(selection.info)
        if population is not None:
            info["source"] = (
                f"{n_source} llms simulated from the posterior with its fitted llms' "
                "abilities and misfit"
            )
        elif getattr(instance, "with_item_draws", None) is None:
            info["source"] = f"{n_source} llms simulated from the posterior"
    ids = [str(i) for i in draws.items[chosen]]
    subtasks = [str(s) for s in draws.subtask[chosen]]
    return ids, subtasks, weights, info


def _source_population(carried: Any, draws: ItemDraws, population: Any) -> Population | None:
    """The population :func:`select_from_posterior` simulates its llms from: given, or
    (``"saved"``) the one the posterior's calibration ``carried`` holds; None where there
    is none or it does not serve the draws (logged)."""
    population = resolve_population(carried, population)
    if population is None:
        logger.debug("select: the posterior carries no fitted population")
        return None
    try:
        population_positions(population, draws)
    except UserInputError as err:
        logger.debug("select: the saved population is not used: %s", err)
        return None
    return population


def curves_tables(res: xr.Dataset, label: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tidy tables of a :func:`design_curves` result, as the ``mdad`` command writes them.

    Returns ``mdad`` (``selector, n_items, mdad, mdad_lower, mdad_upper, ci_prob``)
    and ``curves`` (``selector, n_items, gap, p_correct, p_correct_lower,
    p_correct_upper, ci_prob``); ``label`` names the design (default: its attrs).
    """
    name = str(res.attrs["design"]) if label is None else label
    ci = float(res.attrs["ci_prob"])
    interval = res["mdad_interval"].to_numpy()
    mdad = pd.DataFrame(
        {
            "selector": name,
            "n_items": res["n_items"].to_numpy(),
            "mdad": res["mdad"].to_numpy(),
            "mdad_lower": interval[:, 0],
            "mdad_upper": interval[:, 1],
            "ci_prob": ci,
        }
    )
    band = res["p_correct_band"].to_numpy()
    n_g = res.sizes["gap"]
    curves = pd.DataFrame(
        {
            "selector": name,
            "n_items": np.repeat(res["n_items"].to_numpy(), n_g),
            "gap": np.tile(res["gap"].to_numpy(), res.sizes["n_items"]),
            "p_correct": res["p_correct_mean"].to_numpy().ravel(),
            "p_correct_lower": band[..., 0].ravel(),
            "p_correct_upper": band[..., 1].ravel(),
            "ci_prob": ci,
        }
    )
    return mdad, curves

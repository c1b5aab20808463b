"""``bayes-ranking``: items chosen to rank close pairs of llms correctly.

The quantity MDAD measures, optimized directly. Pairs of hypothetical llms
come from the fitted population: the better llm's ability on Gauss-Hermite
nodes of ``Normal(0, 1)``, the other one set so that their expected accuracies
on the seen items differ by each of :data:`PAIR_GAPS` points ("close pairs",
from about the MDAD of large subsets to that of small ones). Items are added
greedily, each step taking the item that most increases the average over the
pairs of the probability that the pair is ranked correctly (item parameters:
posterior means; every candidate is scored at once per step). The order is
nested: the first ``n`` items form the size-``n`` subset.
``subtask_balance=True`` fills per-subtask quotas instead.

Ranked correctly against what, the ``criterion``:

- ``accuracy`` (the default): the pair's realized accuracies on every seen item,
  which MDAD compares. With ``d_i = y_Ai - y_Bi`` the estimate's difference is
  ``E = sum_S w_i d_i`` (``w_i = 1 + h_iᵀ κ_S``, the weights of the
  posterior-mean estimator linearized at the population centre, which change
  with ``S``: :func:`~bayes_microbench.selectors.bayes_fisher.linearized_weights`)
  and the truth's ``T = sum_all d_i``; both approximately normal, with the
  items' means ``p_Ai - p_Bi`` and variances ``p_Ai(1-p_Ai) + p_Bi(1-p_Bi)``
  and the covariance of the shared items, so
  ``P(sign E = sign T)`` is a bivariate normal orthant probability
  (:func:`same_sign_probability`). Why: the ability order is not what MDAD
  scores, and the unchosen items' answers are part of the truth
  (docs/decisions/0040-bayesian-selectors-aim-at-the-accuracy.md).
- ``ability``: the pair's ability order, for a subset scored with
  discrimination weights: ``Φ(μ_S / σ_S)`` with ``μ_S = sum a_i (p_Ai - p_Bi)``
  and ``σ_S² = sum a_i² (p_Ai(1-p_Ai) + p_Bi(1-p_Bi))``.

Item posterior and estimator: as in ``bayes-fisher`` (a quick fit on the
source llms, or a precomputed posterior; posterior mean accuracy on the seen
set, calibrated on the sources when they are at hand), and the same random
fallback: a size at which, on the sources, a random subset's mean ranks pairs
better gets a random subset.

A ``2pl-md`` posterior (``D`` ability dims, :func:`_pairs_md`): the better llm's
ability on the product of the same nodes in each dim (above
:data:`~bayes_microbench.ability.MAX_GRID_DIMS` dims, :data:`N_QMC_PAIRS`
scrambled Sobol points), the other moved from it along the direction in which
its expected accuracy falls fastest (the gradient of the expected accuracy at
the better one) to each gap. ``accuracy`` uses the D-dim estimator weights;
under ``ability`` the weights ``a_i`` become the items' loadings projected on
the accuracy gradient at the population centre (the small-subset limit of the
md estimator weights). With one live dim either is the 1-D selection
(docs/decisions/0031).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.polynomial.hermite_e import hermegauss
from scipy.special import ndtr, owens_t

from ..ability import MAX_GRID_DIMS
from ..posterior import ItemDraws
from .bayes_fisher import _BayesSelectorBase, greedy, logit_factors, with_loadings

#: Expected-accuracy gaps (points) of the close pairs the selection targets.
PAIR_GAPS = (1.0, 2.0, 4.0, 8.0, 16.0)
N_PAIR_NODES = 12
#: Better llms of the close pairs above ``MAX_GRID_DIMS`` ability dims (scrambled Sobol, seed 0).
N_QMC_PAIRS = 64
#: The abilities (along each pair's line) on which the expected accuracy is interpolated.
_LINE = np.linspace(-6.0, 6.0, 241)
#: What a pair is ranked correctly against: its realized accuracies, or its abilities.
CRITERIA = ("accuracy", "ability")
#: The criterion ``bayes-ranking`` uses unless told otherwise (measured:
#: docs/decisions/0040-bayesian-selectors-aim-at-the-accuracy.md).
DEFAULT_CRITERION = "accuracy"


def same_sign_probability(h: np.ndarray, k: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """``P(sign X = sign Y)`` for ``X ~ N(h, 1)``, ``Y ~ N(k, 1)`` with correlation ``rho``.

    ``Φ2(h, k; ρ) + Φ2(-h, -k; ρ) = 1 - Φ(h) - Φ(k) + 2 Φ2(h, k; ρ)``, with the
    bivariate normal CDF ``Φ2`` from Owen's T function (vectorized; ``h`` or ``k``
    at 0 moved to ``±1e-10``, where the formula divides by them). Why: the one
    closed form that scores every (pair, candidate) of a greedy step at once.
    """
    h = np.where(np.abs(h) < 1e-10, 1e-10, h)
    k = np.where(np.abs(k) < 1e-10, 1e-10, k)
    r = np.sqrt(np.maximum(1.0 - rho**2, 1e-12))
    beta = np.where(h * k > 0, 0.0, 0.5)
    phi2 = (
        0.5 * (ndtr(h) + ndtr(k))
        - owens_t(h, (k - rho * h) / (h * r))
        - owens_t(k, (h - rho * k) / (k * r))
        - beta
    )
    return np.clip(1.0 - ndtr(h) - ndtr(k) + 2.0 * phi2, 0.0, 1.0)


def _pairs(draws: ItemDraws) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """P(correct) of the two llms of every close pair on every item, (P, I) each, and
    each pair's population weight (its better llm's node weight), (P,)."""
    mean = draws.mean()
    x, w = hermegauss(N_PAIR_NODES)
    w = w / w.sum()
    keep = w > 1e-4
    theta_a = x[keep]
    grid = np.linspace(-6.0, 6.0, 241)
    p_grid = mean.prob(grid[None, :])[0]  # (T, I)
    acc_grid = p_grid.mean(axis=1)
    p_a = mean.prob(theta_a[None, :])[0]  # (A, I)
    acc_a = p_a.mean(axis=1)
    rows_a, rows_b, rows_w = [], [], []
    for gap in PAIR_GAPS:  # a handful of gaps
        target = acc_a - gap / 100.0
        ok = target > acc_grid[0]
        theta_b = np.interp(target[ok], acc_grid, grid)
        rows_a.append(p_a[ok])
        rows_b.append(mean.prob(theta_b[None, :])[0])
        rows_w.append(w[keep][ok])
    return np.concatenate(rows_a), np.concatenate(rows_b), np.concatenate(rows_w)


def _pairs_md(draws: ItemDraws) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_pairs` of a ``2pl-md`` posterior (the pair weights: the product of the
    nodes' weights, or equal for Sobol points), and the items' weights ``(I,)``.

    The better llm ``θ_A`` on the product of the 1-D nodes (or Sobol points
    above :data:`~bayes_microbench.ability.MAX_GRID_DIMS` dims); ``u`` the unit
    gradient of the expected accuracy at ``θ_A``; the other llm on the line
    ``θ_A + (t - θ_A·u) u`` at the ``t`` where the expected accuracy (the line's,
    made non-decreasing in ``t``) is the gap lower. Weights: the posterior-mean
    loadings projected on the unit accuracy gradient at ``θ = 0``.
    """
    mean = draws.mean()
    assert mean.loadings is not None
    lam, c, n_d = mean.loadings[0], mean.guessing[0], draws.n_dims
    x, w = hermegauss(N_PAIR_NODES)
    w = w / w.sum()
    axis, axis_w = x[w > 1e-4], w[w > 1e-4]
    if n_d <= MAX_GRID_DIMS:
        mesh = np.meshgrid(*([axis] * n_d), indexing="ij")
        theta_a = np.stack([m.ravel() for m in mesh], axis=1)
        wmesh = np.meshgrid(*([axis_w] * n_d), indexing="ij")
        node_w = np.prod(np.stack([m.ravel() for m in wmesh]), axis=0)
    else:
        from scipy.special import ndtri
        from scipy.stats import qmc

        q = qmc.Sobol(d=n_d, scramble=True, rng=np.random.default_rng(0)).random_base2(
            int(np.log2(N_QMC_PAIRS))
        )
        theta_a = ndtri(np.clip(q, 1e-12, 1 - 1e-12))
        node_w = np.full(len(theta_a), 1.0 / len(theta_a))

    def direction(theta: np.ndarray) -> np.ndarray:
        p = mean.prob(theta[None])[0]  # (K, I)
        g = ((p - c) * (1 - p) / (1 - c)) @ lam  # the gradient of the number correct
        return g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-300)

    p_a = mean.prob(theta_a[None])[0]  # (A, I)
    acc_a = p_a.mean(axis=1)
    u = direction(theta_a)  # (A, D)
    t_a = (theta_a * u).sum(axis=1)
    line = theta_a[:, None, :] + (_LINE[None, :, None] - t_a[:, None, None]) * u[:, None, :]
    acc_line = mean.prob(line.reshape(1, -1, n_d))[0].mean(axis=1).reshape(len(theta_a), -1)
    acc_line = np.maximum.accumulate(acc_line, axis=1)
    rows_a, rows_b, rows_w = [], [], []
    for gap in PAIR_GAPS:  # a handful of gaps
        target = acc_a - gap / 100.0
        ok = np.nonzero(target > acc_line[:, 0])[0]
        t_b = np.array([np.interp(target[k], acc_line[k], _LINE) for k in ok])
        theta_b = theta_a[ok] + (t_b - t_a[ok])[:, None] * u[ok]
        rows_a.append(p_a[ok])
        rows_b.append(mean.prob(theta_b[None])[0])
        rows_w.append(node_w[ok])
    weights = lam @ direction(np.zeros((1, n_d)))[0]
    return np.concatenate(rows_a), np.concatenate(rows_b), np.concatenate(rows_w), weights


def _ability_order(pa: np.ndarray, pb: np.ndarray, a: np.ndarray, codes: np.ndarray) -> Any:
    """The greedy order of the ``ability`` criterion (module docstring)."""
    mu_i = a[None, :] * (pa - pb)  # (P, I)
    var_i = a[None, :] ** 2 * (pa * (1 - pa) + pb * (1 - pb))

    def order(n: int, quota: np.ndarray | None) -> np.ndarray:
        def gain(state: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, Any]:
            mu, var = state if state is not None else (np.zeros(len(pa)), np.zeros(len(pa)))
            new_mu = mu[:, None] + mu_i
            new_var = var[:, None] + var_i
            score = ndtr(new_mu / np.sqrt(np.maximum(new_var, 1e-12))).mean(axis=0)

            def update(best: int) -> tuple[np.ndarray, np.ndarray]:
                return mu + mu_i[:, best], var + var_i[:, best]

            return score, update

        return greedy(gain, pa.shape[1], n, codes, quota)

    return order


def _solve_small(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a⁻¹ b`` for stacks of ``D x D`` matrices ``a`` and ``D``-vectors ``b`` (``D = 1``: a division)."""
    if a.shape[-1] == 1:
        return b / a[..., 0]
    return np.linalg.solve(a, b[..., None])[..., 0]


def _accuracy_order(
    draws: ItemDraws, pa: np.ndarray, pb: np.ndarray, pair_w: np.ndarray, codes: np.ndarray
) -> Any:
    """The greedy order of the ``accuracy`` criterion (module docstring), in ``D`` dims.

    Pairs count by their population weight ``pair_w`` (summing to 1): the MDAD
    of a design is read on llms drawn from the population, so a pair of llms three
    sds out should not weigh as much as one at the centre. Each pair's estimator is
    linearized at its own llms (``h`` and ``dp/dθ`` averaged over the two), not at
    the population centre: a pair of strong llms learns little from items they all
    answer right. The state holds, per pair,
    the sums over the chosen items of ``mu``, ``h mu``, ``v``, ``h v`` and
    ``h hᵀ v`` (``mu = p_A - p_B``, ``v`` the difference's variance, ``h`` the
    items' ``dp/dθ / (p (1 - p))``), its ability precision ``I_D + sum_S I_i``
    and its unchosen items' gradient ``sum_{not S} dp/dθ``, which give ``κ_S``;
    each (pair, candidate) ``κ`` is one ``D x D`` solve.
    """
    mean = with_loadings(draws).mean()
    assert mean.loadings is not None
    lam, c = mean.loadings[0], mean.guessing[0]
    n_d = lam.shape[1]
    (s_a, q_a), (s_b, q_b) = logit_factors(pa, c), logit_factors(pb, c)  # (P, I) each
    slope = (0.5 * (s_a + s_b))[..., None] * lam[None]  # dp/dθ: (P, I, D)
    h = (0.5 * (q_a + q_b))[..., None] * lam[None]
    info = slope[..., :, None] * h[..., None, :]  # (P, I, D, D)
    mu = pa - pb  # (P, I)
    v = pa * (1 - pa) + pb * (1 - pb)
    h_mu = mu[..., None] * h  # (P, I, D)
    h_v = v[..., None] * h
    hh_v = v[..., None, None] * (h[..., :, None] * h[..., None, :])  # (P, I, D, D)
    v_t = v.sum(axis=1)
    k_t = (mu.sum(axis=1) / np.sqrt(np.maximum(v_t, 1e-12)))[:, None]
    n_p = len(pa)

    def order(n: int, quota: np.ndarray | None) -> np.ndarray:
        def gain(state: tuple[np.ndarray, ...] | None) -> tuple[np.ndarray, Any]:
            if state is None:
                state = (
                    np.zeros(n_p),
                    np.zeros((n_p, n_d)),
                    np.zeros(n_p),
                    np.zeros((n_p, n_d)),
                    np.zeros((n_p, n_d, n_d)),
                    np.broadcast_to(np.eye(n_d), (n_p, n_d, n_d)).copy(),
                    slope.sum(axis=1),
                )
            s_mu, s_hmu, s_v, s_hv, s_hhv, prec, g_un = state
            # κ of S + i for every pair and candidate: (I_D + sum_S I + I_i)⁻¹ (g_un - dp_i/dθ)
            kappa = _solve_small(prec[:, None] + info, g_un[:, None] - slope)  # (P, I, D)
            m_e = s_mu[:, None] + mu + (kappa * (s_hmu[:, None] + h_mu)).sum(axis=2)
            sv = s_v[:, None] + v
            lin = (kappa * (s_hv[:, None] + h_v)).sum(axis=2)
            quad = np.einsum("pid,pide,pie->pi", kappa, s_hhv[:, None] + hh_v, kappa)
            v_e = np.maximum(sv + 2.0 * lin + quad, 1e-12)
            rho = np.clip((sv + lin) / np.sqrt(v_e * v_t[:, None]), -1.0, 1.0)
            score = pair_w @ same_sign_probability(m_e / np.sqrt(v_e), k_t, rho)

            def update(best: int) -> tuple[np.ndarray, ...]:
                return (
                    s_mu + mu[:, best],
                    s_hmu + h_mu[:, best],
                    s_v + v[:, best],
                    s_hv + h_v[:, best],
                    s_hhv + hh_v[:, best],
                    prec + info[:, best],
                    g_un - slope[:, best],
                )

            return score, update

        return greedy(gain, draws.n_items, n, codes, quota)

    return order


class BayesRankingSelector(_BayesSelectorBase):
    """Greedy maximization of the expected share of close pairs ranked correctly.

    ``criterion``: :data:`CRITERIA`, default :data:`DEFAULT_CRITERION` (module docstring).
    """

    name = "bayes-ranking"
    criteria = CRITERIA
    default_criterion = DEFAULT_CRITERION

    def _order_fn(self, draws: ItemDraws, codes: np.ndarray) -> Any:
        if draws.n_dims > 1:
            pa, pb, pair_w, a = _pairs_md(draws)
        else:
            pa, pb, pair_w = _pairs(draws)
            a = draws.discrimination.mean(axis=0)
        if self.criterion == "ability":
            return _ability_order(pa, pb, a, codes)
        return _accuracy_order(draws, pa, pb, pair_w / pair_w.sum(), codes)

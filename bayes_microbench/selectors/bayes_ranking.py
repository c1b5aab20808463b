"""``bayes-ranking``: items chosen to rank close pairs of llms correctly.

The quantity MDAD measures, optimized directly. Pairs of hypothetical llms
come from the fitted population: the better llm's ability on Gauss-Hermite
nodes of ``Normal(0, 1)``, the other one set so that their expected accuracies
on the seen items differ by each of :data:`PAIR_GAPS` points ("close pairs",
from about the MDAD of large subsets to that of small ones). For a subset
``S`` scored with discrimination weights (the ranking of the posterior-mean
estimator, see :mod:`bayes_microbench.selectors.bayes_fisher`), the
probability that the pair is ranked in its true order is approximately
``Φ(μ_S / σ_S)`` with ``μ_S = sum a_i (p_Ai - p_Bi)`` and
``σ_S² = sum a_i² (p_Ai(1-p_Ai) + p_Bi(1-p_Bi))``. Items are added greedily,
each step taking the item that most increases the average of ``Φ(μ_S / σ_S)``
over the pairs (item parameters: posterior means; every candidate is scored
at once per step). The order is nested: the first ``n`` items form the size-``n``
subset. ``subtask_balance=True`` fills per-subtask quotas instead.

Item posterior and estimator: as in ``bayes-fisher`` (a quick fit on the
source llms, or a precomputed posterior; posterior mean accuracy on the seen
set).

A ``2pl-md`` posterior (``D`` ability dims, :func:`_pairs_md`): the better llm's
ability on the product of the same nodes in each dim (above
:data:`~bayes_microbench.ability.MAX_GRID_DIMS` dims, :data:`N_QMC_PAIRS`
scrambled Sobol points), the other moved from it along the direction in which
its expected accuracy falls fastest (the gradient of the expected accuracy at
the better one) to each gap; the weights ``a_i`` become the items' loadings
projected on the accuracy gradient at the population centre (the small-subset
limit of the md estimator weights, :func:`~bayes_microbench.selectors.bayes_fisher.linearized_weights`).
With one live dim this is the 1-D selection (docs/decisions/0031).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.polynomial.hermite_e import hermegauss
from scipy.special import ndtr

from ..ability import MAX_GRID_DIMS
from ..posterior import ItemDraws
from .bayes_fisher import _BayesSelectorBase, greedy

#: Expected-accuracy gaps (points) of the close pairs the selection targets.
PAIR_GAPS = (1.0, 2.0, 4.0, 8.0, 16.0)
N_PAIR_NODES = 12
#: Better llms of the close pairs above ``MAX_GRID_DIMS`` ability dims (scrambled Sobol, seed 0).
N_QMC_PAIRS = 64
#: The abilities (along each pair's line) on which the expected accuracy is interpolated.
_LINE = np.linspace(-6.0, 6.0, 241)


def _pairs(draws: ItemDraws) -> tuple[np.ndarray, np.ndarray]:
    """P(correct) of the two llms of every close pair on every item: (P, I) each."""
    mean = draws.mean()
    x, w = hermegauss(N_PAIR_NODES)
    keep = w / w.sum() > 1e-4
    theta_a = x[keep]
    grid = np.linspace(-6.0, 6.0, 241)
    p_grid = mean.prob(grid[None, :])[0]  # (T, I)
    acc_grid = p_grid.mean(axis=1)
    p_a = mean.prob(theta_a[None, :])[0]  # (A, I)
    acc_a = p_a.mean(axis=1)
    rows_a, rows_b = [], []
    for gap in PAIR_GAPS:  # a handful of gaps
        target = acc_a - gap / 100.0
        ok = target > acc_grid[0]
        theta_b = np.interp(target[ok], acc_grid, grid)
        rows_a.append(p_a[ok])
        rows_b.append(mean.prob(theta_b[None, :])[0])
    return np.concatenate(rows_a), np.concatenate(rows_b)


def _pairs_md(draws: ItemDraws) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_pairs` of a ``2pl-md`` posterior, and the items' weights ``(I,)``.

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
    axis = x[w / w.sum() > 1e-4]
    if n_d <= MAX_GRID_DIMS:
        mesh = np.meshgrid(*([axis] * n_d), indexing="ij")
        theta_a = np.stack([m.ravel() for m in mesh], axis=1)
    else:
        from scipy.special import ndtri
        from scipy.stats import qmc

        q = qmc.Sobol(d=n_d, scramble=True, rng=np.random.default_rng(0)).random_base2(
            int(np.log2(N_QMC_PAIRS))
        )
        theta_a = ndtri(np.clip(q, 1e-12, 1 - 1e-12))

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
    rows_a, rows_b = [], []
    for gap in PAIR_GAPS:  # a handful of gaps
        target = acc_a - gap / 100.0
        ok = np.nonzero(target > acc_line[:, 0])[0]
        t_b = np.array([np.interp(target[k], acc_line[k], _LINE) for k in ok])
        theta_b = theta_a[ok] + (t_b - t_a[ok])[:, None] * u[ok]
        rows_a.append(p_a[ok])
        rows_b.append(mean.prob(theta_b[None])[0])
    weights = lam @ direction(np.zeros((1, n_d)))[0]
    return np.concatenate(rows_a), np.concatenate(rows_b), weights


class BayesRankingSelector(_BayesSelectorBase):
    """Greedy maximization of the expected share of close pairs ranked correctly."""

    name = "bayes-ranking"

    def _order_fn(self, draws: ItemDraws, codes: np.ndarray) -> Any:
        if draws.n_dims > 1:
            pa, pb, a = _pairs_md(draws)
        else:
            pa, pb = _pairs(draws)
            a = draws.discrimination.mean(axis=0)
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

            return greedy(gain, draws.n_items, n, codes, quota)

        return order

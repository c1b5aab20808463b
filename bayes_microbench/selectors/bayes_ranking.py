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
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.polynomial.hermite_e import hermegauss
from scipy.special import ndtr

from ..posterior import ItemDraws
from .bayes_fisher import _BayesSelectorBase, greedy

#: Expected-accuracy gaps (points) of the close pairs the selection targets.
PAIR_GAPS = (1.0, 2.0, 4.0, 8.0, 16.0)
N_PAIR_NODES = 12


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


class BayesRankingSelector(_BayesSelectorBase):
    """Greedy maximization of the expected share of close pairs ranked correctly."""

    name = "bayes-ranking"

    def _order_fn(self, draws: ItemDraws, codes: np.ndarray) -> Any:
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

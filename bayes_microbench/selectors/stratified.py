"""``stratified-confidence``: strata from the source llms' mean confidence, HT estimate.

Follows the study's ``stratified_random_sampling``: each seen item's proxy is
the source llms' mean confidence in its correct answer (mean correctness when
the benchmark has no confidences; every selection then says so in
``info["signal"]``); the items are cut into 10 strata by k-means on that
proxy; the sample is allocated proportionally to stratum size and drawn
uniformly within each stratum; the estimate is Horvitz-Thompson,
``(1/N) sum_i y_i / pi_i`` with ``pi_i = m_h / N_h`` for an item of stratum h.

Where we differ from the study, and why:

* The strata come from the exact (globally optimal) 1-D k-means
  (:func:`~._cluster.kmeans_1d`), not from one seeded Lloyd run; equal proxies
  always share a stratum, so with few distinct proxy values (e.g. mean
  correctness over 10 source llms) there may be fewer than 10 strata
  (``info["n_strata"]``).
* Allocation: the study rounds ``n N_h / N`` with ``np.round`` and tops up
  uniformly from the whole seen set, so its sample size and inclusion
  probabilities can be off by a few items and its HT weights need not sum
  to 1. Here every stratum gets at least one item and the rounded quotas are
  repaired by largest remainder so that they sum to exactly ``n``
  (Hamilton's method, capped at the stratum size). The HT weights
  ``N_h / (N m_h)`` then sum to 1 and the estimator is exactly unbiased for
  the seen-set accuracy. It needs ``n >= number of strata``.
* Items no source llm answered get the mean proxy of the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..exceptions import UserInputError
from ._cluster import kmeans_1d, on_one_blas_thread
from ._features import check_inputs, item_means, signal
from .base import Seed, Selection, check_size, weighted_mean_estimate

N_STRATA = 10


def proportional_allocation(n: int, sizes: np.ndarray) -> np.ndarray:
    """Split ``n`` over strata of ``sizes``: at least 1 each, at most the size, sum ``n``.

    Quotas ``n * N_h / N`` are floored (minimum 1), then items are added to
    the strata with the largest remaining fraction (or removed from those with
    the smallest) until the total is ``n``. Ties go to the lower index.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    if not sizes.size <= n <= sizes.sum():
        raise ValueError(f"allocation of {n} over {sizes.size} strata of {int(sizes.sum())} items")
    quota = n * sizes / sizes.sum()
    alloc = np.minimum(np.maximum(np.floor(quota).astype(np.int64), 1), sizes)
    while alloc.sum() < n:
        room = alloc < sizes
        frac = np.where(room, quota - alloc, -np.inf)
        alloc[int(np.argmax(frac))] += 1
    while alloc.sum() > n:
        room = alloc > 1
        frac = np.where(room, quota - alloc, np.inf)
        alloc[int(np.argmin(frac))] -= 1
    return alloc


@dataclass(frozen=True)
class StratifiedConfidenceSelector:
    """``stratified-confidence`` (see the module docstring)."""

    name: str = "stratified-confidence"
    n_strata: int = N_STRATA

    @on_one_blas_thread
    def prepare(
        self,
        source: np.ndarray,
        subtask_codes: np.ndarray,
        confidence: np.ndarray | None = None,
        random_seed: Seed = None,
    ) -> PreparedStratified:
        src, _, conf = check_inputs(source, subtask_codes, confidence, self.name)
        x, note = signal(src, conf)
        proxy = item_means(x)
        strata = kmeans_1d(proxy, self.n_strata)
        members = tuple(np.flatnonzero(strata == h) for h in range(int(strata.max()) + 1))
        return PreparedStratified(
            name=self.name,
            n_seen=int(src.shape[1]),
            members=members,
            info={"signal": note, "n_strata": len(members)},
        )


@dataclass(frozen=True)
class PreparedStratified:
    name: str
    n_seen: int
    members: tuple[np.ndarray, ...]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def sizes(self) -> np.ndarray:
        return np.array([m.size for m in self.members], dtype=np.int64)

    @on_one_blas_thread
    def select(self, n: int, random_seed: Seed = None) -> Selection:
        check_size(n, self.n_seen, self.name)
        h = len(self.members)
        if n < h:
            raise UserInputError(
                f"{self.name}: size {n} is smaller than the {h} confidence strata; "
                f"choose a size of at least {h} (one item per stratum keeps the estimate unbiased)"
            )
        rng = np.random.default_rng(random_seed)
        sizes = self.sizes
        alloc = proportional_allocation(int(n), sizes)
        items = np.concatenate(
            [
                rng.choice(m, size=int(a), replace=False)
                for m, a in zip(self.members, alloc, strict=True)
            ]
        )
        weights = np.concatenate(
            [np.full(int(a), s / (self.n_seen * a)) for s, a in zip(sizes, alloc, strict=True)]
        )
        return Selection(
            items=items.astype(np.int64),
            weights=weights,
            info={**self.info, "allocation": alloc.tolist()},
        )

    @on_one_blas_thread
    def estimate(self, selection: Selection, target: np.ndarray) -> np.ndarray:
        """Horvitz-Thompson estimate (weights ``N_h / (N m_h)``; missing cells renormalised)."""
        return weighted_mean_estimate(selection, target)

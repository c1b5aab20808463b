"""``anchor-points``: k-medoids on the items' correlation distance (Vivek et al., 2024).

As in the study's ``anchor_points_weighted``: the distance between two seen
items is ``1 - corr`` of the source llms' confidences in the correct answer
(their 1/0 correctness when the benchmark has no confidences: every selection
says so in ``info["signal"]``); the ``n`` medoids of a k-medoids clustering are
the chosen items; each seen item belongs to its nearest medoid (highest
correlation) and a medoid's weight is its cluster's share of the seen items;
the estimate is the weighted mean of the target's responses on the medoids.

Our choices, written down:

* k-medoids: the study's ``kmedoids.fasterpam`` (FasterPAM), from ``n``
  distinct items drawn with our seed rather than the package's own
  ``init="random"``: a local optimum of the same objective.
* FasterPAM searches a float32 copy of the distances: it rounds away the
  last-bit differences the matrix products leave between items with identical
  source responses, which FasterPAM on float64 takes as improving swaps; the
  clusters (weights) are read from the float64 distances, as before
  (docs/decisions/0021). The float32 copy is column-major, the order in which
  FasterPAM reads it: the same values, the same medoids, 3-4x faster at 6000
  seen items (docs/decisions/0035-anchor-points-cost-at-mmlu-pro-size.md).
* Correlations are pairwise-complete over the source llms observed on both
  items. Where a correlation is undefined (an item every source llm got right,
  or wrong, or fewer than two common llms) it is 0, i.e. distance 1: such
  items sit apart from the rest, except that items with identical source
  responses have distance 0. (The study's ``np.corrcoef`` gave NaN there.)
* A medoid always belongs to its own cluster (ties at distance 0 are broken
  that way), so ``n = N`` gives uniform weights and the seen accuracy exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._cluster import column_major_float32, kmedoids, nan_correlation, on_one_blas_thread
from ._features import check_inputs, signal
from .base import Seed, Selection, check_size, weighted_mean_estimate


@dataclass(frozen=True)
class AnchorPointsSelector:
    """``anchor-points`` (see the module docstring)."""

    name: str = "anchor-points"

    @on_one_blas_thread
    def prepare(
        self,
        source: np.ndarray,
        subtask_codes: np.ndarray,
        confidence: np.ndarray | None = None,
        random_seed: Seed = None,
    ) -> PreparedAnchorPoints:
        src, _, conf = check_inputs(source, subtask_codes, confidence, self.name)
        x, note = signal(src, conf)
        dist = nan_correlation(x)
        np.subtract(1.0, dist, out=dist)
        return PreparedAnchorPoints(
            name=self.name,
            n_seen=int(src.shape[1]),
            distance=dist,
            search_distance=column_major_float32(dist),
            info={"signal": note},
        )


@dataclass(frozen=True)
class PreparedAnchorPoints:
    name: str
    n_seen: int
    distance: np.ndarray = field(repr=False)
    search_distance: np.ndarray = field(repr=False)  # float32, column-major, for FasterPAM
    info: dict[str, Any] = field(default_factory=dict)

    @on_one_blas_thread
    def select(self, n: int, random_seed: Seed = None) -> Selection:
        check_size(n, self.n_seen, self.name)
        rng = np.random.default_rng(random_seed)
        medoids = kmedoids(self.search_distance, int(n), rng)
        members = self.distance[:, medoids].argmin(1)
        members[medoids] = np.arange(medoids.size)
        sizes = np.bincount(members, minlength=medoids.size)
        return Selection(
            items=medoids.astype(np.int64),
            weights=sizes / sizes.sum(),
            info=dict(self.info),
        )

    @on_one_blas_thread
    def estimate(self, selection: Selection, target: np.ndarray) -> np.ndarray:
        return weighted_mean_estimate(selection, target)

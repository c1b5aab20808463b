"""Random sampling stratified by subtask: equal allocation and 1/size weighting.

Both follow the study (``random_selection_subtask_stratified_equal`` /
``..._proportional`` in its ``microbenchmarks.py``) and estimate with the
plain mean of the chosen items. When subtasks differ in size that mean
targets a subtask-balanced accuracy rather than the seen-set accuracy; this is
the study's choice and is kept so that the figures are comparable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validate import preview
from ..exceptions import UserInputError
from ._features import check_inputs
from .base import Seed, Selection, check_size, weighted_mean_estimate


@dataclass(frozen=True)
class SubtaskEqualSelector:
    """``random-subtask-equal``: n split evenly over the subtasks.

    Every subtask gets ``n // S`` items; the ``n % S`` left over go to
    distinct subtasks drawn uniformly (so ``n < S`` picks ``n`` subtasks with
    one item each, as in the study). Within a subtask the items are drawn
    uniformly without replacement. A subtask with fewer seen items than its
    allocation is an error (no silent redistribution).
    """

    name: str = "random-subtask-equal"

    def prepare(
        self,
        source: np.ndarray,
        subtask_codes: np.ndarray,
        confidence: np.ndarray | None = None,
        random_seed: Seed = None,
    ) -> PreparedSubtaskEqual:
        src, codes, _ = check_inputs(source, subtask_codes, confidence, self.name)
        labels, inverse = np.unique(codes, return_inverse=True)
        members = tuple(np.flatnonzero(inverse == s) for s in range(labels.size))
        return PreparedSubtaskEqual(
            name=self.name, n_seen=int(src.shape[1]), subtasks=labels, members=members
        )


@dataclass(frozen=True)
class PreparedSubtaskEqual:
    name: str
    n_seen: int
    subtasks: np.ndarray
    members: tuple[np.ndarray, ...]

    def allocation(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Items per subtask: ``n // S`` each, one more for ``n % S`` random subtasks."""
        s = len(self.members)
        alloc = np.full(s, n // s, dtype=np.int64)
        extra = rng.choice(s, size=n % s, replace=False)
        alloc[extra] += 1
        return alloc

    def select(self, n: int, random_seed: Seed = None) -> Selection:
        check_size(n, self.n_seen, self.name)
        rng = np.random.default_rng(random_seed)
        alloc = self.allocation(int(n), rng)
        sizes = np.array([m.size for m in self.members])
        short = np.flatnonzero(alloc > sizes)
        if short.size:
            detail = [
                f"subtask {int(self.subtasks[s])}: {int(sizes[s])} seen < {int(alloc[s])}"
                for s in short
            ]
            largest = len(self.members) * int(sizes.min())
            remedy = (
                f"choose a size up to {largest} or use random-subtask-proportional"
                if largest >= 1
                else "a subtask has no seen item, so no size works: use random-subtask-proportional"
            )
            raise UserInputError(
                f"{self.name}: size {n} split over {len(self.members)} subtasks needs up to "
                f"{int(alloc.max())} items per subtask, but {preview(detail)}; {remedy}"
            )
        items = np.concatenate(
            [
                rng.choice(m, size=int(a), replace=False)
                for m, a in zip(self.members, alloc, strict=True)
            ]
        )
        return Selection(
            items=items.astype(np.int64),
            weights=np.full(items.size, 1.0 / items.size),
            info={"per_subtask": dict(zip(self.subtasks.tolist(), alloc.tolist(), strict=True))},
        )

    def estimate(self, selection: Selection, target: np.ndarray) -> np.ndarray:
        return weighted_mean_estimate(selection, target)


@dataclass(frozen=True)
class SubtaskProportionalSelector:
    """``random-subtask-proportional``: item sampling weight 1 / (its subtask's size).

    Items are drawn without replacement with probabilities proportional to
    those weights (successive draws, numpy's ``Generator.choice``), so each
    subtask is about equally represented in expectation; estimate = mean.
    """

    name: str = "random-subtask-proportional"

    def prepare(
        self,
        source: np.ndarray,
        subtask_codes: np.ndarray,
        confidence: np.ndarray | None = None,
        random_seed: Seed = None,
    ) -> PreparedSubtaskProportional:
        src, codes, _ = check_inputs(source, subtask_codes, confidence, self.name)
        _, inverse, counts = np.unique(codes, return_inverse=True, return_counts=True)
        p = 1.0 / counts[inverse]
        return PreparedSubtaskProportional(
            name=self.name, n_seen=int(src.shape[1]), probabilities=p / p.sum()
        )


@dataclass(frozen=True)
class PreparedSubtaskProportional:
    name: str
    n_seen: int
    probabilities: np.ndarray

    def select(self, n: int, random_seed: Seed = None) -> Selection:
        check_size(n, self.n_seen, self.name)
        rng = np.random.default_rng(random_seed)
        items = rng.choice(self.n_seen, size=int(n), replace=False, p=self.probabilities)
        return Selection(items=items.astype(np.int64), weights=np.full(int(n), 1.0 / n))

    def estimate(self, selection: Selection, target: np.ndarray) -> np.ndarray:
        return weighted_mean_estimate(selection, target)

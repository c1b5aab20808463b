"""Uniform random sampling of items without replacement; estimate = mean."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import Seed, Selection, check_size, weighted_mean_estimate


@dataclass(frozen=True)
class RandomSelector:
    name: str = "random"

    def prepare(
        self,
        source: np.ndarray,
        subtask_codes: np.ndarray,
        confidence: np.ndarray | None = None,
        random_seed: Seed = None,
    ) -> PreparedRandom:
        return PreparedRandom(name=self.name, n_seen=int(source.shape[1]))


@dataclass(frozen=True)
class PreparedRandom:
    name: str
    n_seen: int

    def select(self, n: int, random_seed: Seed = None) -> Selection:
        check_size(n, self.n_seen, self.name)
        rng = np.random.default_rng(random_seed)
        items = rng.choice(self.n_seen, size=n, replace=False)
        return Selection(items=items, weights=np.full(n, 1.0 / n))

    def estimate(self, selection: Selection, target: np.ndarray) -> np.ndarray:
        return weighted_mean_estimate(selection, target)

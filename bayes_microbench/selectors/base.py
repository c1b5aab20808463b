"""The selector interface shared by every subset-selection method.

A selector works in two steps, so that expensive preparation (an IRT fit,
a clustering of the items) is done once per evaluation run and reused for
every subset size:

1. ``prepared = selector.prepare(source, subtask_codes, confidence, random_seed)``
   sees only the *source* llms' responses on the *seen* items:
   ``source`` is an (n_source_llms, n_seen_items) float array of 1 / 0 / NaN.
2. ``selection = prepared.select(n, random_seed)`` picks ``n`` of the seen
   items; ``prepared.estimate(selection, target)`` turns the target llms'
   responses on the selected items, an (n_targets, n) array in the order of
   ``selection.items``, into each target's estimated accuracy on the full
   seen set, shape (n_targets,).

All randomness comes from the ``random_seed`` arguments (an int or a
``numpy.random.Generator``); the same seeds give the same selections.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._validate import plural, span
from ..exceptions import UserInputError

Seed = int | np.random.Generator | None


@dataclass(frozen=True)
class Selection:
    """A chosen subset of the seen items.

    ``items`` are integer positions on the seen-item axis (distinct);
    ``weights`` are non-negative, sum to 1, and give the weighted-mean
    estimate ``target @ weights`` (uniform for plain sampling).
    ``info`` carries method-specific notes (e.g. that confidences were
    unavailable and correctness was used instead).
    """

    items: np.ndarray
    weights: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.items.ndim != 1 or self.weights.shape != self.items.shape:
            raise ValueError("Selection: items and weights must be 1-D arrays of the same length")

    @property
    def n(self) -> int:
        return int(self.items.shape[0])


def weighted_mean_estimate(selection: Selection, target: np.ndarray) -> np.ndarray:
    """``sum_k w_k y_k`` over the selected items, renormalized over observed cells."""
    observed = ~np.isnan(target)
    w = np.where(observed, selection.weights[None, :], 0.0)
    total = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (np.nan_to_num(target) * w).sum(axis=1) / total, np.nan)


@runtime_checkable
class PreparedSelector(Protocol):
    """A selector after :meth:`Selector.prepare` on one run's source data."""

    name: str
    n_seen: int

    def select(self, n: int, random_seed: Seed = None) -> Selection: ...

    def estimate(self, selection: Selection, target: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class Selector(Protocol):
    """A subset-selection method (see the module docstring)."""

    name: str

    def prepare(
        self,
        source: np.ndarray,
        subtask_codes: np.ndarray,
        confidence: np.ndarray | None = None,
        random_seed: Seed = None,
    ) -> PreparedSelector: ...


def check_size(n: int, n_seen: int, name: str) -> None:
    """A subset size must be a whole number in [1, n_seen]."""
    if int(n) != n or n < 1:
        raise UserInputError(f"{name}: subset size must be a positive whole number, got {n}")
    if n > n_seen:
        raise UserInputError(
            f"{name}: subset size {n} is larger than the {plural(n_seen, 'seen item')}; "
            f"choose {span(1, n_seen, 'item')}"
        )

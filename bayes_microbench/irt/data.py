"""The response matrix as the IRT model sees it (numpy arrays, no PyMC)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from .._validate import preview
from ..exceptions import ConfigurationError, ResponsesError
from ..responses import Responses
from .config import IRTConfig

logger = logging.getLogger(__name__)

#: Below this fraction of observed cells the likelihood gathers observed cells
#: instead of evaluating the dense llm x item matrix with a mask.
DENSE_MIN_OBSERVED = 0.5


@dataclass(frozen=True)
class IRTData:
    """Arrays the likelihood needs, plus the names of degenerate llms and items."""

    values: np.ndarray  # (llm, item) 1.0 / 0.0 / NaN
    llms: np.ndarray
    items: np.ndarray
    item_subtask: np.ndarray  # (item,) label
    subtasks: np.ndarray  # distinct labels
    subtask_codes: np.ndarray  # (item,) int index into subtasks
    guessing_fixed: np.ndarray  # (item,) 1/K, or NaN where learned (3PL only; zeros otherwise)
    notes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def observed(self) -> np.ndarray:
        return ~np.isnan(self.values)

    @property
    def n_llms(self) -> int:
        return int(self.values.shape[0])

    @property
    def n_items(self) -> int:
        return int(self.values.shape[1])

    @property
    def complete(self) -> bool:
        return bool(self.observed.all())

    @property
    def dense(self) -> bool:
        return bool(self.observed.mean() >= DENSE_MIN_OBSERVED)

    @classmethod
    def from_responses(cls, responses: Responses, config: IRTConfig) -> IRTData:
        if not isinstance(responses, Responses):
            raise ResponsesError(
                f"expected a Responses object (see bayes_microbench.load_responses), got "
                f"{type(responses).__name__}"
            )
        values = np.asarray(responses.values, dtype=np.float64)
        if values.shape[0] < 2 or values.shape[1] < 2:
            raise ResponsesError(
                f"an IRT fit needs at least 2 llms and 2 items, got {values.shape[0]} x {values.shape[1]}"
            )
        n_items = values.shape[1]
        if config.model == "3pl":
            if config.n_options is not None:
                k = np.full(n_items, config.n_options)
            elif responses.n_options is not None:
                k = np.asarray(responses.n_options, dtype=np.int64)
            else:
                k = np.zeros(n_items, dtype=np.int64)
            bad = responses.items[(k == 1) | (k < 0)]
            if len(bad):
                raise ConfigurationError(
                    f"a 3PL guessing floor 1/K needs K >= 2 answer options; items {preview(bad)} "
                    "have K < 2 (use 0 / empty for unknown)"
                )
            guessing = np.where(k >= 2, 1.0 / np.maximum(k, 1), np.nan)
        else:
            guessing = np.zeros(n_items)
        notes = _degenerate(values, responses.llms, responses.items)
        below, far_below = _below_floor(values, responses.items, guessing)
        if below:
            notes["items_below_floor"] = below
        if far_below:
            notes["items_far_below_floor"] = far_below
        return cls(
            values=values,
            llms=np.asarray(responses.llms, dtype=str),
            items=np.asarray(responses.items, dtype=str),
            item_subtask=np.asarray(responses.item_subtask, dtype=str),
            subtasks=np.asarray(responses.subtasks, dtype=str),
            subtask_codes=np.asarray(responses.subtask_codes, dtype=np.int64),
            guessing_fixed=guessing,
            notes=notes,
        )


def _degenerate(values: np.ndarray, llms: np.ndarray, items: np.ndarray) -> dict[str, list[str]]:
    """Name llms and items whose observed responses are all correct or all wrong.

    They need no special treatment: the llm population prior (and the item
    hierarchy) keeps their posteriors proper and finite, but their estimates
    rest on the prior and are wide, so they are named in the log and in the
    saved file.
    """
    with np.errstate(invalid="ignore"):
        llm_mean = np.nanmean(values, axis=1)
        item_mean = np.nanmean(values, axis=0)
    notes = {
        "llms_all_correct": [str(x) for x in llms[llm_mean == 1.0]],
        "llms_all_wrong": [str(x) for x in llms[llm_mean == 0.0]],
        "items_all_correct": [str(x) for x in items[item_mean == 1.0]],
        "items_all_wrong": [str(x) for x in items[item_mean == 0.0]],
    }
    for key, names in notes.items():
        if names:
            logger.warning(
                "%s: %s; their parameters are identified by the priors only (finite but wide)",
                key.replace("_", " "),
                preview(names),
            )
    return {k: v for k, v in notes.items() if v}


#: An item is "below its floor" when this few correct answers would have
#: probability < BELOW_FLOOR_P under P(correct) >= floor for every llm.
BELOW_FLOOR_P = 0.01


def _below_floor(
    values: np.ndarray, items: np.ndarray, floors: np.ndarray
) -> tuple[list[str], list[str]]:
    """Items answered correctly far less often than their fixed guessing floor allows.

    A 3PL with a fixed floor ``c = 1/K`` says every llm answers an item
    correctly with probability at least ``c``, so an item's correct count is
    at least Binomial(n observed, c) in distribution. Returns the items whose
    count is in that distribution's lower ``BELOW_FLOOR_P`` tail, and those in
    its lower ``BELOW_FLOOR_P / m`` tail (``m`` items checked: Bonferroni, so a
    3PL that fits names one there with probability under ``BELOW_FLOOR_P``).
    The first list holds about 1% of the items by chance alone (0-2 of the 448
    items of the simulator's GPQA preset, seeds 0-5); the second says the
    floor is contradicted (llms systematically pick a wrong option): such
    items' intercepts are pushed into the prior's lower tail, and NUTS mixes
    slowly there. On GPQA (K = 4, 420 llms) 158 of the 448 items are in the
    first list and 118 in the second. Both are named in the log and the
    saved file; the 2PL has no floor to contradict.
    """
    fixed = np.isfinite(floors) & (floors > 0)
    if not fixed.any():  # no fixed floor (1PL, 2PL, learned floors): nothing to check
        return [], []
    from scipy import special

    observed = ~np.isnan(values)
    n = observed.sum(axis=0)
    k = np.where(observed, values, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore"):
        tail = special.bdtr(k, n, np.where(fixed, floors, 0.0))  # P(X <= k)
    checked = fixed & (n > 0)
    n_checked = int(checked.sum())
    below = items[checked & (tail < BELOW_FLOOR_P)]
    far = items[checked & (tail < BELOW_FLOOR_P / max(n_checked, 1))]
    if len(below):
        verdict = (
            f"{len(far)} of them beyond chance (p < {BELOW_FLOOR_P:g} / {n_checked}): "
            "a 3PL with fixed floors misfits them (fit the 2PL)"
            if len(far)
            else "none beyond chance (about 1% of a well-fitting 3PL's items are this low)"
        )
        logger.warning(
            "items below their guessing floor: %d of %d items are answered correctly "
            "less often than their fixed floor 1/K allows (binomial p < %g), e.g. %s; %s",
            len(below),
            int(fixed.sum()),
            BELOW_FLOOR_P,
            preview(list(below)),
            verdict,
        )
    return [str(x) for x in below], [str(x) for x in far]

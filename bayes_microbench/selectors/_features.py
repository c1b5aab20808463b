"""Input checks and the per-item signals the study's selectors cluster on."""

from __future__ import annotations

import numpy as np

from ..exceptions import UserInputError

CORRECTNESS_NOTE = "correctness (no confidences available)"
CONFIDENCE_NOTE = "confidence in the correct answer"


def check_inputs(
    source: np.ndarray,
    subtask_codes: np.ndarray,
    confidence: np.ndarray | None,
    name: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Validate ``prepare``'s arguments; return float / int copies."""
    src = np.asarray(source, dtype=np.float64)
    if src.ndim != 2 or src.shape[0] < 1 or src.shape[1] < 1:
        raise UserInputError(
            f"{name}: source responses must be a non-empty 2-D (llm x item) array, "
            f"got shape {src.shape}"
        )
    codes = np.asarray(subtask_codes)
    if codes.shape != (src.shape[1],):
        raise UserInputError(
            f"{name}: {codes.size} subtask codes for {src.shape[1]} seen items; "
            "pass one code per seen item"
        )
    conf = None
    if confidence is not None:
        conf = np.asarray(confidence, dtype=np.float64)
        if conf.shape != src.shape:
            raise UserInputError(
                f"{name}: confidence shape {conf.shape} differs from the source responses "
                f"{src.shape}; pass the source llms' confidences on the seen items"
            )
        if np.isnan(conf).all():
            conf = None
    return src, codes.astype(np.int64), conf


def signal(source: np.ndarray, confidence: np.ndarray | None) -> tuple[np.ndarray, str]:
    """The llm x item matrix to cluster on, and a note saying which one it is.

    The study uses each source llm's probability of the correct answer; when a
    benchmark has no confidences (GPQA here) the 1/0 correctness is used
    instead, and the note says so.
    """
    if confidence is None:
        return source, CORRECTNESS_NOTE
    return confidence, CONFIDENCE_NOTE


def item_means(x: np.ndarray) -> np.ndarray:
    """Per-item mean over observed llms; an item nobody observed gets the grand mean."""
    obs = ~np.isnan(x)
    n = obs.sum(0)
    total = np.where(obs, x, 0.0).sum(0)
    grand = float(np.nanmean(x)) if obs.any() else 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.maximum(n, 1), grand)


def fill_missing(x: np.ndarray) -> np.ndarray:
    """Replace missing cells by their item's mean over the observed llms."""
    if not np.isnan(x).any():
        return x
    return np.where(np.isnan(x), item_means(x)[None, :], x)

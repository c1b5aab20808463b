"""Validation helpers shared by every module: check at the door, say what to do."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .exceptions import UserInputError


def preview(values: Iterable[Any], limit: int = 5) -> str:
    """Render at most ``limit`` values as ``['a', 'b', ...] (N in all)``."""
    vals = list(values)
    shown = ", ".join(repr(v) for v in vals[:limit])
    more = f", ... ({len(vals)} in all)" if len(vals) > limit else ""
    return f"[{shown}{more}]"


def duplicates(values: Sequence[Any]) -> list[Any]:
    """Values that occur more than once, in first-seen order."""
    seen: set[Any] = set()
    dup: dict[Any, None] = {}
    for v in values:
        if v in seen:
            dup[v] = None
        seen.add(v)
    return list(dup)


def check_unique(
    values: Sequence[Any], what: str, where: str, error: type[UserInputError] = UserInputError
) -> None:
    dup = duplicates(values)
    if dup:
        raise error(f"{where}: duplicate {what} {preview(dup)}; each must appear only once")


def show_value(value: Any) -> str:
    """A cell value as a user wrote it: numbers plainly (``2``, ``0.5``), text quoted."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return f"{float(value):g}"
    return repr(value)


def check_probability(
    value: float, name: str, *, open_low: float = 0.0, open_high: float = 1.0
) -> float:
    """A probability strictly inside ``(open_low, open_high)``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UserInputError(f"{name} must be a number, got {value!r}") from None
    if not (open_low < v < open_high):
        raise UserInputError(f"{name} must lie in ({open_low:g}, {open_high:g}), got {v:g}")
    return v


def check_positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise UserInputError(f"{name} must be a whole number, got {value!r}") from None
    if v != value and not isinstance(value, str):
        raise UserInputError(f"{name} must be a whole number, got {value!r}")
    if v < minimum:
        raise UserInputError(f"{name} must be at least {minimum}, got {v}")
    return v


def parse_int_list(text: str, name: str, *, minimum: int = 1) -> list[int]:
    """Parse ``"10,25,50"`` into ``[10, 25, 50]`` with a clear error."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise UserInputError(
            f"{name}: expected a comma-separated list of whole numbers, got {text!r}"
        )
    out = []
    for p in parts:
        try:
            out.append(int(p))
        except ValueError:
            raise UserInputError(
                f"{name}: {p!r} is not a whole number (expected e.g. '10,25,50')"
            ) from None
    bad = [v for v in out if v < minimum]
    if bad:
        raise UserInputError(f"{name}: values must be at least {minimum}, got {preview(bad)}")
    check_unique(out, "values", name)
    return out

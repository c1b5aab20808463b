"""Validation helpers shared by every module: check at the door, say what to do."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
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


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``count`` and ``noun`` in agreement: ``1 item``, ``0 items``, ``2 target llms``.

    Messages built from a count read wrong as "1 items" or "0 item"; this is the
    one place that spells the number.
    """
    word = noun if count == 1 else (plural_form or f"{noun}s")
    return f"{count} {word}"


def span(low: int, high: int, noun: str) -> str:
    """The whole numbers ``low``..``high`` of ``noun``: ``2 to 59 llms``, ``exactly 2 llms``."""
    if high == low:
        return f"exactly {plural(low, noun)}"
    return f"{low} to {plural(high, noun)}"


def check_int_range(
    value: int,
    name: str,
    low: int,
    high: int,
    *,
    noun: str,
    context: str,
    remedy: str = "use a larger input",
) -> int:
    """A whole number in ``[low, high]``, where ``high`` comes from the data (``context``).

    Parameters
    ----------
    value, name
        The value given and the flag or argument that gave it (``--n``).
    low, high
        The allowed bounds; ``high`` may fall below ``low`` when the data are too small.
    noun
        What is counted, singular (``item``, ``target llm``).
    context
        Why ``high`` is what it is (``the responses have 40 items``).
    remedy
        What to do when no value can work (``high < low``).

    Returns
    -------
    ``value`` as an int.

    Why: a bound read off the data can be empty ("choose 2 to 0 llms"); then the
    message must say that no value works and what to change instead.
    """
    v = int(value)
    if high < low:
        raise UserInputError(
            f"{name}: got {v}, but no value works: at least {plural(low, noun)} "
            f"{'is' if low == 1 else 'are'} needed and {context}; {remedy}"
        )
    if not low <= v <= high:
        raise UserInputError(f"{name}: got {v}; choose {span(low, high, noun)} ({context})")
    return v


#: What an ``errno`` means for a user's path, and what to do about it.
_OS_REASONS: dict[int, tuple[str, str]] = {
    errno.ENOENT: ("no such file or folder", "check the path"),
    errno.EACCES: ("permission denied", "choose a path you may read or write"),
    errno.EPERM: ("operation not permitted", "choose a path you may read or write"),
    errno.EISDIR: ("is a folder, not a file", "name a file"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "check the path"),
    errno.EEXIST: ("already exists and is in the way", "choose another path"),
    errno.EROFS: ("read-only file system", "choose a writable location"),
    errno.ENOSPC: ("no space left on the device", "free some space or choose another location"),
    errno.ENAMETOOLONG: ("file name too long", "choose a shorter path"),
    errno.ELOOP: ("too many levels of symbolic links", "check the path"),
}


def describe_os_error(err: OSError) -> tuple[str, str]:
    """``(problem, what to do)`` for an ``OSError`` on a user's path, in plain words.

    Why: ``[Errno 21] Is a directory`` names neither the user's mistake nor its remedy.
    """
    if err.errno in _OS_REASONS:
        return _OS_REASONS[err.errno]
    reason = (err.strerror or type(err).__name__).lower()
    return reason, "check the path and its permissions"


def os_error_message(err: OSError) -> str:
    """One line for an ``OSError`` that names a path: the path(s), the problem, what to do."""
    problem, remedy = describe_os_error(err)
    where = str(err.filename)
    if err.filename2 is not None:
        where = f"{where} -> {err.filename2}"
    return f"{where}: {problem} ({remedy})"


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (a file or a folder)."""
    base = path
    while not base.exists() and base != base.parent:
        base = base.parent
    return base


def check_output_path(
    path: str | os.PathLike[str], name: str, *, folder: bool = False, suggest: str | None = None
) -> Path:
    """Check that an output ``path`` can be written, before any work is done.

    Parameters
    ----------
    path
        The output file (``folder=False``) or folder (``folder=True``); missing
        parent folders are fine (the writers create them).
    name
        The flag that named it, for the message (``--output``).
    folder
        Whether the output is a folder.
    suggest
        For a file output given as a folder: a file name to suggest inside it.

    Returns
    -------
    ``path`` as a :class:`~pathlib.Path`.

    Why: a command that computes for minutes must not learn at the end that
    its output is a folder, sits under a regular file, or cannot be written.
    """
    target = Path(path)
    try:
        if not folder and target.is_dir():
            hint = f" (e.g. {target / suggest})" if suggest else ""
            raise UserInputError(f"{name} {target}: is a folder; name a file{hint}")
        if folder and target.exists() and not target.is_dir():
            raise UserInputError(f"{name} {target}: is a file; name a folder (new or existing)")
        base = _nearest_existing(target if folder else target.parent)
    except OSError as err:
        problem, remedy = describe_os_error(err)
        raise UserInputError(f"{name} {target}: {problem} ({remedy})") from None
    if not base.is_dir():
        raise UserInputError(
            f"{name} {target}: {base} is a file, not a folder; choose a path in a folder"
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=".bayes-microbench-check.", dir=base)
    except OSError as err:
        problem, _ = describe_os_error(err)
        raise UserInputError(
            f"{name} {target}: cannot write in {base}: {problem} (choose a writable {name})"
        ) from None
    os.close(fd)
    os.unlink(probe)
    return target

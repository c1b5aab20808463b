"""Validation helpers shared by every module: check at the door, say what to do.

A message names a parameter through :func:`param` (``threshold`` for a caller of the
Python API, ``--threshold`` inside the command line, which maps its parameters to
flags with :func:`flag_names`) and the step it advises through :func:`step`
(docs/decisions/0026-messages-name-parameters.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .exceptions import UserInputError

#: The flags of the command that is running, by parameter name (None outside the CLI).
_FLAGS: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "bayes_microbench_flags", default=None
)
_NO_VALUE = object()


def param(name: str, value: Any = _NO_VALUE, *, placeholder: bool = False) -> str:
    """How a message names the parameter ``name`` (and the ``value`` given to it).

    Parameters
    ----------
    name
        The parameter (or config field) as the Python API spells it: ``threshold``.
    value
        The value given, when the message shows it.
    placeholder
        ``value`` is a placeholder (``T``, ``PATH``): shown as written, never quoted.

    Returns
    -------
    str
        ``threshold`` / ``threshold=0.1`` (``repr`` of the value) for a caller of the
        Python API; inside :func:`flag_names` (the command line), the flag the running
        command has for ``name``: ``--threshold`` / ``--threshold 0.1`` (numbers as
        :func:`show_value` writes them, text unquoted). A name that
        command has no flag for is spelled as the API spells it, and a ``name`` that is
        already a flag (``--output``, as the commands pass their own) is kept as given.

    Why: the message is written once and rendered when it is raised, so a message
    wrapped in another (``f"{path}: {err}"``) or issued as a warning keeps its spelling.
    """
    if not name.isidentifier():
        return name if value is _NO_VALUE else f"{name} {value}"
    flag = (_FLAGS.get() or {}).get(name)
    if value is _NO_VALUE:
        return flag or name
    if isinstance(value, np.generic):
        value = value.item()
    if placeholder:
        return f"{flag} {value}" if flag else f"{name}={value}"
    if not flag:
        return f"{name}={value!r}"
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return f"{flag} {show_value(value) if number else value}"


@contextlib.contextmanager
def flag_names(flags: Mapping[str, str]) -> Iterator[None]:
    """Spell the parameters in ``flags`` (name -> flag) as flags in messages raised meanwhile.

    The command line wraps each command in it with the command's own flags
    (``{"max_draws": "--max-draws", ...}``); library code never calls it.
    """
    token = _FLAGS.set({**(_FLAGS.get() or {}), **flags})
    try:
        yield
    finally:
        _FLAGS.reset(token)


def step(command: str, api: str) -> str:
    """The next step a message advises, in its reader's terms.

    Parameters
    ----------
    command
        The step as a command line (``bayes-microbench fit --output PATH``).
    api
        The same step in the Python API (``IRTModel(config).fit(responses).save(PATH)``).

    Returns
    -------
    str
        ``command`` quoted, inside the command line (:func:`flag_names`); else ``api``.

    Why: "fit one with 'bayes-microbench fit --output PATH'" sends a Python caller to a
    shell for what one call does; the message keeps one wording, only the step differs.
    """
    return f"'{command}'" if _FLAGS.get() is not None else api


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
    """A probability strictly inside ``(open_low, open_high)``; ``name`` as :func:`param`."""
    name = param(name)
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UserInputError(f"{name} must be a number, got {value!r}") from None
    if not (open_low < v < open_high):
        raise UserInputError(f"{name} must lie in ({open_low:g}, {open_high:g}), got {v:g}")
    return v


def check_positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """A whole number of at least ``minimum``; ``name`` goes through :func:`param`."""
    name = param(name)
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
    """Parse ``"10,25,50"`` into ``[10, 25, 50]``; an error names ``name`` as :func:`param`."""
    name = param(name)
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
        The value given and the parameter that gave it (``n``; see :func:`param`).
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
    name = param(name)
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
        The parameter that named it, for the message (``output``; see :func:`param`).
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
    where = param(name, str(target))
    try:
        if not folder and target.is_dir():
            hint = f" (e.g. {target / suggest})" if suggest else ""
            raise UserInputError(f"{where}: is a folder; name a file{hint}")
        if folder and target.exists() and not target.is_dir():
            raise UserInputError(f"{where}: is a file; name a folder (new or existing)")
        base = _nearest_existing(target if folder else target.parent)
    except OSError as err:
        problem, remedy = describe_os_error(err)
        raise UserInputError(f"{where}: {problem} ({remedy})") from None
    if not base.is_dir():
        raise UserInputError(f"{where}: {base} is a file, not a folder; choose a path in a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".bayes-microbench-check.", dir=base)
    except OSError as err:
        problem, _ = describe_os_error(err)
        raise UserInputError(
            f"{where}: cannot write in {base}: {problem} (choose a writable {param(name)})"
        ) from None
    os.close(fd)
    os.unlink(probe)
    return target

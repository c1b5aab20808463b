"""Reading and writing response files.

Formats
-------
Wide CSV
    ``NAME.csv``: first column ``llm``, one column per item id, values 1 / 0 /
    empty. ``NAME.items.csv`` (``item,subtask[,n_options]``) beside it is picked
    up automatically; ``items=`` overrides it. ``NAME.confidence.csv`` (the same
    wide layout, values in [0, 1]) beside it is picked up too.
Long table
    CSV or Parquet with columns ``llm, item, correct[, subtask, confidence,
    n_options]``; one row per observed cell.

Writers are atomic: a file is written to a temporary name in the same folder
and renamed into place, so an interrupted or failed write leaves nothing
half-written.
"""

from __future__ import annotations

import contextlib
import csv
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd

from ._validate import check_unique
from .exceptions import ResponsesError
from .responses import EmptyPolicy, Responses

LONG_COLUMNS = ("llm", "item", "correct")


def companion(path: Path, kind: str) -> Path:
    """``NAME.csv`` -> ``NAME.<kind>.csv``."""
    return path.with_name(f"{path.stem}.{kind}.csv")


def _read_csv(path: Path, **kwargs: object) -> pd.DataFrame:
    try:
        return pd.read_csv(path, **kwargs)
    except FileNotFoundError:
        raise ResponsesError(f"{path}: no such file") from None
    except pd.errors.EmptyDataError:
        raise ResponsesError(f"{path}: the file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        reason = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise ResponsesError(f"{path}: not a readable CSV file ({reason})") from None


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except FileNotFoundError:
        raise ResponsesError(f"{path}: no such file") from None
    except (OSError, ValueError) as err:
        raise ResponsesError(f"{path}: not a readable Parquet file ({err})") from None


def _header(path: Path, sep: str) -> list[str]:
    """The header row as written (pandas would silently rename duplicate columns)."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            row = next(csv.reader(fh, delimiter=sep), None)
    except UnicodeDecodeError:
        raise ResponsesError(f"{path}: not a readable CSV file (not UTF-8 text)") from None
    if not row:
        raise ResponsesError(f"{path}: the file is empty")
    check_unique(row, "item ids (column names)", str(path), ResponsesError)
    return row


def load_responses(
    path: str | os.PathLike[str],
    items: str | os.PathLike[str] | None = None,
    *,
    on_empty: EmptyPolicy = "drop",
) -> Responses:
    """Read a response file in any supported format (see the module docstring).

    Parameters
    ----------
    path
        A wide CSV, or a long table as CSV or Parquet.
    items
        An items file (``item,subtask[,n_options]``) for a wide CSV; by default
        ``NAME.items.csv`` beside ``NAME.csv`` when it exists.
    on_empty
        ``"drop"`` (default) removes llms and items with no observed cell with a
        warning naming them; ``"raise"`` refuses the file.
    """
    p = Path(path)
    if p.is_dir():
        raise ResponsesError(
            f"{p}: is a folder; pass a responses file, or convert harness logs with "
            "'bayes-microbench import'"
        )
    if not p.exists():
        raise ResponsesError(f"{p}: no such file")
    benchmark = p.stem
    suffix = p.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return Responses.from_long(
            _read_parquet(p), benchmark=benchmark, on_empty=on_empty, where=str(p)
        )
    if suffix not in (".csv", ".tsv", ".txt"):
        raise ResponsesError(
            f"{p}: unknown file type {p.suffix!r}; expected a wide or long .csv, or a long .parquet"
        )
    sep = "\t" if suffix == ".tsv" else ","
    cols = _header(p, sep)
    if set(LONG_COLUMNS) <= set(cols):
        if items is not None:
            raise ResponsesError(
                f"{p}: --items applies to a wide matrix; a long table carries its subtask column"
            )
        frame = _read_csv(p, sep=sep)
        return Responses.from_long(frame, benchmark=benchmark, on_empty=on_empty, where=str(p))
    frame = _read_csv(p, sep=sep, dtype={"llm": str}, keep_default_na=False, na_values=[""])
    items_path = Path(items) if items is not None else companion(p, "items")
    items_frame = None
    if items is not None or items_path.exists():
        items_frame = _read_csv(items_path, dtype=str, keep_default_na=False, na_values=[""])
    conf_path = companion(p, "confidence")
    conf_frame = None
    if conf_path.exists():
        conf_frame = _read_csv(conf_path, dtype={"llm": str}, keep_default_na=False, na_values=[""])
        if (
            list(conf_frame.columns[1:]) != list(frame.columns[1:])
            or conf_frame.columns[0] != "llm"
        ):
            raise ResponsesError(
                f"{conf_path}: columns differ from {p.name}; it must have the same layout"
            )
    return Responses.from_wide(
        frame,
        items=items_frame,
        confidence=conf_frame,
        benchmark=benchmark,
        on_empty=on_empty,
        where=str(p),
    )


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place on success."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    # mkstemp creates 0600; give the file the permissions a plain open() would
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_atomic(path: str | os.PathLike[str], writer: Callable[[Path], object]) -> Path:
    """Call ``writer(tmp_path)`` and move the result to ``path`` atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)
    return Path(path)


def save_responses(responses: Responses, path: str | os.PathLike[str]) -> list[Path]:
    """Write ``responses`` as a wide CSV plus ``NAME.items.csv`` (and ``NAME.confidence.csv``).

    A ``.parquet`` path writes the long table instead. All files are written
    to temporary names first and renamed only when every one succeeded.
    """
    target = Path(path)
    if target.suffix.lower() in (".parquet", ".pq"):
        long = responses.to_long(dropna=False)
        return [write_atomic(target, lambda t: long.to_parquet(t, index=False))]
    if target.suffix.lower() != ".csv":
        raise ResponsesError(f"{target}: output must end in .csv (wide) or .parquet (long)")
    jobs: list[tuple[Path, pd.DataFrame]] = [
        (target, responses.to_wide()),
        (companion(target, "items"), responses.items_frame()),
    ]
    if responses.confidence is not None:
        conf = pd.DataFrame(responses.confidence, columns=responses.items)
        conf.insert(0, "llm", responses.llms)
        jobs.append((companion(target, "confidence"), conf))
    with contextlib.ExitStack() as stack:
        tmps = [(stack.enter_context(atomic_path(dest)), frame) for dest, frame in jobs]
        for tmp, frame in tmps:
            frame.to_csv(tmp, index=False)
    return [dest for dest, _ in jobs]

"""Reading and writing response files.

Formats
-------
Wide CSV
    ``NAME.csv``: first column ``llm``, one column per item id, one row per llm.
    ``NAME.items.csv`` (``item,subtask[,n_options]``) beside it is picked up
    automatically; ``items=`` overrides it. ``NAME.confidence.csv`` (the same
    columns as the matrix, values in [0, 1], rows for some or all of its llms)
    beside it is picked up too.
Long table
    CSV or Parquet with columns ``llm, item, correct[, subtask, confidence,
    n_options]``; one row per observed cell.
Subset file (:func:`read_subset`)
    The JSON ``bayes-microbench select`` writes (its ``item_ids`` list), a CSV
    with an ``item`` column, or one item id per line (an ``item`` first line is
    a header).

Cells (the same in every layout and companion; see
:mod:`bayes_microbench.responses`): correct is a number equal to 1 or 0 or
``true`` / ``false`` (any case); missing is an empty cell or ``NA``, ``N/A``,
``NaN``, ``null``, ``None`` (any case); anything else is an error naming the
file, the llm, the item and the value.

CSV files are UTF-8 (a byte-order mark is allowed; CRLF or LF line ends; blank
lines skipped). Every row has exactly one cell per header column: a short or
long row is an error naming the file and line, as is a blank or repeated column
name (naming its position), a blank or repeated llm, or a broken quote. Being
strict here keeps a shifted or padded row from becoming wrong numbers.

Writers are atomic: a file is written to a temporary name in the same folder
and renamed into place, so an interrupted or failed write leaves nothing
half-written.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import overload

import pandas as pd

from ._validate import duplicates, param, preview, step
from .exceptions import ResponsesError, UserInputError
from .responses import EmptyPolicy, Responses, cell_number, is_missing

LONG_COLUMNS = ("llm", "item", "correct")


def companion(path: Path, kind: str) -> Path:
    """``NAME.csv`` -> ``NAME.<kind>.csv``."""
    return path.with_name(f"{path.stem}.{kind}.csv")


def _read_text(path: Path, error: type[UserInputError] = ResponsesError) -> str:
    """A file's text as UTF-8 (BOM dropped), refusing binary or undecodable files in one line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder; pass a file") from None
    except OSError as err:
        raise error(f"{path}: cannot be read ({err.strerror or type(err).__name__})") from None
    if b"\x00" in data:
        raise error(f"{path}: holds binary data (NUL bytes), not text; pass a UTF-8 CSV file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise error(
            f"{path}: line {line}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
            f"{err.start}); save the file as UTF-8"
        ) from None


@dataclass(frozen=True)
class _Table:
    """A CSV file as text cells: the header, the data rows and each row's line number."""

    path: Path
    header: list[str]
    header_line: int
    rows: list[list[str]]
    lines: list[int]

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=pd.Index(self.header, dtype=object), dtype=object)


class _LineNames(Sequence[str]):
    """``line N`` for each data row, built only when a message needs one."""

    def __init__(self, lines: list[int]) -> None:
        self._lines = lines

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if isinstance(i, slice):
            return [f"line {n}" for n in self._lines[i]]
        return f"line {self._lines[i]}"

    def __len__(self) -> int:
        return len(self._lines)


def _read_table(path: Path, sep: str = ",", error: type[UserInputError] = ResponsesError) -> _Table:
    """Parse a CSV strictly: every row as long as the header, quotes closed, blank lines skipped.

    Parameters
    ----------
    path
        The CSV file.
    sep
        The delimiter.
    error
        The exception class of the messages.

    Returns
    -------
    The header, the data rows and their line numbers. pandas would pad a short
    row with missing cells and turn a long one into an index; this refuses both.
    """
    text = _read_text(path, error)
    reader = csv.reader(StringIO(text, newline=""), delimiter=sep, strict=True)
    header: list[str] | None = None
    header_line = 0
    rows: list[list[str]] = []
    lines: list[int] = []
    start = 1
    try:
        for row in reader:
            line, start = start, reader.line_num + 1
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if header is None:
                header, header_line = row, line
            elif len(row) != len(header):
                raise error(
                    f"{path}: line {line}: {len(row)} cells, but the header (line "
                    f"{header_line}) has {len(header)}; every row needs one cell per column "
                    "(leave a cell empty for a missing value)"
                )
            else:
                rows.append(row)
                lines.append(line)
    except csv.Error as err:
        raise error(
            f"{path}: line {start}: not readable as CSV ({err}); check the quotes from that "
            "line on (a quote opened and not closed?)"
        ) from None
    if header is None:
        raise error(f"{path}: the file is empty")
    return _Table(path, header, header_line, rows, lines)


def _check_header(table: _Table, what: str, error: type[UserInputError] = ResponsesError) -> None:
    """Refuse a blank or repeated column name, naming its position (counting from 1)."""
    where = f"{table.path}: line {table.header_line}"
    for k, name in enumerate(table.header, start=1):
        if is_missing(name):
            reads = f" ({name!r} reads as missing)" if name.strip() else ""
            raise error(
                f"{where}: column {k} of the header is blank{reads}; every column needs a name"
            )
    dup = duplicates(table.header)
    if dup:
        cols = [k for k, name in enumerate(table.header, start=1) if name == dup[0]]
        raise error(
            f"{where}: duplicate {what} {preview(dup)} ({dup[0]!r} heads columns "
            f"{', '.join(map(str, cols))}); each must appear only once"
        )


def _check_labels(
    table: _Table, col: int, what: str, error: type[UserInputError] = ResponsesError
) -> None:
    """Refuse a blank or repeated label in column ``col`` (llm names, item ids), naming lines."""
    first: dict[str, int] = {}
    for row, line in zip(table.rows, table.lines, strict=True):
        label = row[col]
        if is_missing(label):
            reads = f" ({label!r} reads as missing)" if label.strip() else ""
            raise error(
                f"{table.path}: line {line}: blank {what}{reads} in column {col + 1}; "
                f"fill in the {what} on every row"
            )
        if label in first:
            raise error(
                f"{table.path}: duplicate {what}s [{label!r}] (lines {first[label]} and {line}); "
                "each must appear only once"
            )
        first[label] = line


def _check_items_table(table: _Table) -> None:
    """An items file's ids, subtasks and ``n_options``, each bad cell named by its line."""
    header = table.header
    if "item" not in header or "subtask" not in header:
        raise ResponsesError(
            f"{table.path}: an items file needs columns item,subtask[,n_options], got {header!r}"
        )
    _check_labels(table, header.index("item"), "item id")
    sub = header.index("subtask")
    opts = header.index("n_options") if "n_options" in header else None
    for row, line in zip(table.rows, table.lines, strict=True):
        if is_missing(row[sub]):
            raise ResponsesError(
                f"{table.path}: line {line}: item {row[header.index('item')]!r} has no subtask "
                f"({row[sub]!r}); give every item one"
            )
        if opts is not None:
            n = cell_number(row[opts])
            if n is None or not (
                math.isnan(n) or (math.isfinite(n) and n.is_integer() and n != 1 and n >= 0)
            ):
                raise ResponsesError(
                    f"{table.path}: line {line}: n_options is {row[opts]!r}; expected a whole "
                    "number >= 2, or empty when unknown"
                )


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        import pyarrow.lib

        arrow_error: type[Exception] = pyarrow.lib.ArrowException
    except ImportError:  # pragma: no cover - pandas needs pyarrow or fastparquet for Parquet
        arrow_error = OSError
    try:
        return pd.read_parquet(path)
    except FileNotFoundError:
        raise ResponsesError(f"{path}: no such file") from None
    except (OSError, ValueError, TypeError, NotImplementedError, arrow_error) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ResponsesError(f"{path}: not a readable Parquet file ({reason})") from None


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
        warning naming them; ``"subset"`` does the same but says nothing of the
        items (the responses of llms evaluated on a subset leave most items
        unasked); ``"raise"`` refuses the file.

    Returns
    -------
    The :class:`Responses`. Cells follow one set of spellings in every layout:
    correct is ``1`` / ``0`` (any number equal to them) or ``true`` / ``false``
    (any case); missing is empty, ``NA``, ``N/A``, ``NaN``, ``null`` or ``None``
    (any case); anything else is a :class:`ResponsesError` naming the file, llm,
    item and value, as is a short or long row, a blank or repeated column name,
    llm or item id. One strict reading keeps malformed files from becoming wrong
    numbers.
    """
    p = Path(path)
    if p.is_dir():
        raise ResponsesError(
            f"{p}: is a folder; pass a responses file, or convert harness logs with "
            f"{step('bayes-microbench import', 'bayes_microbench.importers.import_responses')}"
        )
    if not p.exists():
        raise ResponsesError(f"{p}: no such file")
    benchmark = p.stem
    suffix = p.suffix.lower()
    if suffix in (".parquet", ".pq"):
        if items is not None:
            raise ResponsesError(
                f"{p}: {param('items')} applies to a wide matrix; a long table carries its "
                "subtask column"
            )
        return Responses.from_long(
            _read_parquet(p), benchmark=benchmark, on_empty=on_empty, where=str(p)
        )
    if suffix not in (".csv", ".tsv", ".txt"):
        raise ResponsesError(
            f"{p}: unknown file type {p.suffix!r}; expected a wide or long .csv, or a long .parquet"
        )
    sep = "\t" if suffix == ".tsv" else ","
    table = _read_table(p, sep)
    if set(LONG_COLUMNS) <= set(table.header):
        if items is not None:
            raise ResponsesError(
                f"{p}: {param('items')} applies to a wide matrix; a long table carries its "
                "subtask column"
            )
        _check_header(table, "column names")
        return Responses.from_long(
            table.frame(),
            benchmark=benchmark,
            on_empty=on_empty,
            where=str(p),
            row_names=_LineNames(table.lines),
        )
    _check_header(table, "item ids")
    _check_labels(table, 0, "llm")
    items_path = Path(items) if items is not None else companion(p, "items")
    items_frame = None
    if items is not None or items_path.exists():
        items_table = _read_table(items_path, ",")
        _check_header(items_table, "column names")
        _check_items_table(items_table)
        items_frame = items_table.frame()
    conf_path = companion(p, "confidence")
    conf_frame = None
    if conf_path.exists():
        conf_table = _read_table(conf_path, sep)
        if conf_table.header != table.header:
            raise ResponsesError(
                f"{conf_path}: columns differ from {p.name}; it must have the same layout"
            )
        _check_labels(conf_table, 0, "llm")
        conf_frame = conf_table.frame()
    return Responses.from_wide(
        table.frame(),
        items=items_frame,
        confidence=conf_frame,
        benchmark=benchmark,
        on_empty=on_empty,
        where=str(p),
    )


def read_subset(path: str | os.PathLike[str]) -> list[str]:
    """Item ids from a subset file, in file order.

    Parameters
    ----------
    path
        The JSON ``bayes-microbench select`` writes (its ``item_ids`` list of
        strings), a CSV with an ``item`` column, or one item id per line (an
        ``item`` first line is a header; CSV quoting applies).

    Returns
    -------
    The item ids. A missing, binary, non-UTF-8 or empty file, bad JSON or a JSON
    of another shape, a broken quote, a short or long row, a blank or repeated id
    is a :class:`UserInputError` in one line, so a bad ``--subset`` never reaches
    the design as an internal error.
    """
    f = Path(path)
    if f.is_dir():
        raise UserInputError(f"{f}: is a folder; pass a subset file (e.g. what 'select' writes)")
    if not f.exists():
        raise UserInputError(f"{f}: no such subset file")
    text = _read_text(f, UserInputError)
    if not text.strip():
        raise UserInputError(f"{f}: the subset file names no items")
    if f.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        ids = _subset_json(f, text)
    else:
        ids = _subset_csv(f)
    if not ids:
        raise UserInputError(f"{f}: the subset file names no items")
    dup = duplicates(ids)
    if dup:
        raise UserInputError(
            f"{f}: duplicate item ids {preview(dup)}; each item may appear only once"
        )
    return ids


def _subset_json(f: Path, text: str) -> list[str]:
    """The ``item_ids`` of a ``select`` document, each a non-blank string (or a whole number)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserInputError(
            f"{f}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})"
        ) from None
    ids = doc.get("item_ids") if isinstance(doc, dict) else None
    if not isinstance(ids, list):
        raise UserInputError(
            f"{f}: expected the JSON 'bayes-microbench select' writes, with an 'item_ids' list"
        )
    out = []
    for k, v in enumerate(ids):
        if isinstance(v, bool) or not isinstance(v, (str, int)) or is_missing(v):
            raise UserInputError(
                f"{f}: item_ids[{k}] is {json.dumps(v)[:40]}; each item id must be a "
                "non-blank string"
            )
        out.append(str(v))
    return out


def _subset_csv(f: Path) -> list[str]:
    """The ids of a CSV with an ``item`` column, or of a one-id-per-line file."""
    table = _read_table(f, ",", UserInputError)
    if len(table.header) > 1 or table.header == ["item"]:
        _check_header(table, "column names", UserInputError)
        if "item" not in table.header:
            raise UserInputError(
                f"{f}: a CSV subset file needs an 'item' column (got {table.header!r})"
            )
        col = table.header.index("item")
        rows, lines = table.rows, table.lines
    else:
        col = 0
        rows, lines = [table.header, *table.rows], [table.header_line, *table.lines]
    ids = []
    for row, line in zip(rows, lines, strict=True):
        if is_missing(row[col]):
            raise UserInputError(f"{f}: line {line}: blank item id; every row needs one")
        ids.append(row[col].strip())
    return ids


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


def _quoting(frame: pd.DataFrame) -> int:
    """Quote every field when some text holds a carriage return, else only where needed.

    The csv writer leaves a lone ``\\r`` unquoted while every CSV reader ends the row
    there, so such a label would not read back.
    """
    texts = [*map(str, frame.columns)]
    for col in frame.columns:
        if frame[col].dtype == object or pd.api.types.is_string_dtype(frame[col].dtype):
            texts.extend(str(v) for v in frame[col].dropna())
    return csv.QUOTE_ALL if any("\r" in t for t in texts) else csv.QUOTE_MINIMAL


def save_responses(responses: Responses, path: str | os.PathLike[str]) -> list[Path]:
    """Write ``responses`` as a wide CSV plus ``NAME.items.csv`` (and ``NAME.confidence.csv``).

    A ``.parquet`` path writes the long table instead. All files are written
    to temporary names first and renamed only when every one succeeded. Item ids
    that the wide header cannot hold unambiguously (``llm``; ``item`` with
    ``correct``) are refused for a CSV, so that what is saved reads back equal.
    """
    target = Path(path)
    if target.suffix.lower() in (".parquet", ".pq"):
        long = responses.to_long(dropna=False)
        return [write_atomic(target, lambda t: long.to_parquet(t, index=False))]
    if target.suffix.lower() != ".csv":
        raise ResponsesError(f"{target}: output must end in .csv (wide) or .parquet (long)")
    ids = set(responses.items.tolist())
    if "llm" in ids or set(LONG_COLUMNS[1:]) <= ids:
        raise ResponsesError(
            f"{target}: item ids 'llm', or 'item' and 'correct' together, cannot head wide CSV "
            "columns (the file would read back as another layout); write a .parquet instead"
        )
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
            frame.to_csv(tmp, index=False, quoting=_quoting(frame))
    return [dest for dest, _ in jobs]

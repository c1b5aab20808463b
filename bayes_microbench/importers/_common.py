"""Shared pieces of the harness importers: options, file discovery, value checks, merging.

Every importer turns its files into rows of one long table::

    llm, item, subtask, correct, confidence, n_options, source, line[, doc_hash]

``correct`` is 1.0 / 0.0 / NaN, ``confidence`` NaN where the log holds none,
``n_options`` 0 where unknown, ``source``/``line`` say where the row came from
(used in error messages) and ``doc_hash`` (lm-eval formats only) lets
:func:`merge_rows` check that an item id means the same document in every run.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._validate import preview, show_value
from ..exceptions import ResponsesError

logger = logging.getLogger(__name__)

ROW_COLUMNS = ("llm", "item", "subtask", "correct", "confidence", "n_options", "source", "line")
ITEM_KEYS = ("doc_id", "doc_hash")


class HarnessLogError(ResponsesError):
    """A harness log that cannot be imported as it is (the message names the file)."""


@dataclass(frozen=True)
class ImportOptions:
    """How to read harness logs (see :func:`bayes_microbench.importers.import_responses`).

    Attributes
    ----------
    metric
        The per-item metric (lm-eval, Open LLM Leaderboard) or scorer
        (inspect; ``SCORER.KEY`` for a scorer whose value is a dict) that
        becomes ``correct``. ``None`` picks the format's default.
    threshold
        Count a non-binary metric value ``>= threshold`` as correct. Without
        it, a value other than 0 / 1 is an error.
    filter
        lm-eval filter (``"strict-match"``, ...) for tasks logged under
        several filters.
    item_key
        ``"doc_id"`` (item id ``task:doc_id``) or ``"doc_hash"``
        (``task:doc_hash``) for the lm-eval formats.
    epoch
        inspect epoch to import when samples were run for several epochs.
    """

    metric: str | None = None
    threshold: float | None = None
    filter: str | None = None
    item_key: str = "doc_id"
    epoch: int | None = None

    def __post_init__(self) -> None:
        if self.metric is not None and not str(self.metric).strip():
            raise ResponsesError("--metric: give a metric name, got an empty string")
        if self.threshold is not None:
            try:
                value = float(self.threshold)
            except (TypeError, ValueError):
                raise ResponsesError(
                    f"--threshold must be a number, got {self.threshold!r}"
                ) from None
            if not math.isfinite(value):
                raise ResponsesError(f"--threshold must be a finite number, got {value:g}")
            object.__setattr__(self, "threshold", value)
        if self.item_key not in ITEM_KEYS:
            raise ResponsesError(
                f"--item-key must be one of {list(ITEM_KEYS)}, got {self.item_key!r}"
            )
        if self.epoch is not None and (
            isinstance(self.epoch, bool) or not isinstance(self.epoch, int) or self.epoch < 1
        ):
            raise ResponsesError(f"--epoch must be a whole number >= 1, got {self.epoch!r}")


def refuse_options(opts: ImportOptions, fmt: str, names: Sequence[str]) -> None:
    """Raise when an option that ``fmt`` does not use was set (it would be silently ignored)."""
    flags = {"filter": "--filter", "item_key": "--item-key", "epoch": "--epoch"}
    for name in names:
        value = getattr(opts, name)
        default = "doc_id" if name == "item_key" else None
        if value != default:
            raise ResponsesError(
                f"{flags[name]} does not apply to {fmt} logs; leave it out (got {value!r})"
            )


# ------------------------------------------------------------------ files
def find_files(
    paths: Sequence[str | Path],
    wanted: Callable[[Path], bool],
    fmt: str,
    expect: str,
) -> list[Path]:
    """The files under ``paths`` (files or folders, searched recursively) that ``wanted`` accepts.

    A file named directly must be ``wanted``; a folder must hold at least one.
    Hidden files and folders (names starting with ``.``) inside a folder are skipped.
    The result is sorted within each path and free of repeats.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise ResponsesError(f"{fmt}: no PATH given; pass the files or folders to import")
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise ResponsesError(f"{path}: no such file or folder")
        if path.is_file():
            if not wanted(path):
                raise ResponsesError(f"{path}: not {expect}")
            found[path] = None
            continue
        inside = sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and wanted(p) and not _hidden(p.relative_to(path))
        )
        if not inside:
            raise ResponsesError(f"{path}: holds no {expect} (searched the folder recursively)")
        for p in inside:
            found[p] = None
    return list(found)


def _hidden(relative: Path) -> bool:
    """Inside a hidden folder or hidden itself (``.ipynb_checkpoints``, temporary files)."""
    return any(part.startswith(".") for part in relative.parts)


def read_json(path: Path) -> Any:
    """Parse a JSON file, naming the file (and line) when it is not valid JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise HarnessLogError(f"{path}: not UTF-8 text") from None
    return parse_json(text, str(path))


def parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise HarnessLogError(
            f"{where}, line {err.lineno}: not valid JSON ({err.msg} at column {err.colno})"
        ) from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for each non-blank line of a JSON-lines file."""
    try:
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise HarnessLogError(
                        f"{path}, line {number}: not valid JSON ({err.msg} at column {err.colno})"
                    ) from None
                if not isinstance(record, dict):
                    raise HarnessLogError(
                        f"{path}, line {number}: expected a JSON object (one sample per line), "
                        f"got {type(record).__name__}"
                    )
                yield number, record
    except UnicodeDecodeError:
        raise HarnessLogError(f"{path}: not UTF-8 text") from None


def llm_from_folder(name: str) -> str:
    """A folder name as an llm name: the first ``__`` read as ``/``.

    lm-evaluation-harness and the Open LLM Leaderboard write ``org/model`` as
    ``org__model`` in file and folder names.
    """
    return name.replace("__", "/", 1)


# ------------------------------------------------------------------ values
_BINARY = {0.0, 1.0}


def binary_value(
    value: Any, *, metric: str, threshold: float | None, where: str, llm: str, item: str
) -> float:
    """A metric value as 1.0 / 0.0, or NaN when missing.

    Booleans and the numbers 0 and 1 pass; other numbers need ``threshold``
    (``value >= threshold`` counts as correct). Numeric strings are numbers.
    Anything else (a list, a dict, text) is an error naming the place.
    """
    if value is None:
        return math.nan
    if isinstance(value, (bool, np.bool_)):
        return 1.0 if value else 0.0
    number: float | None = None
    if isinstance(value, (int, float, np.integer, np.floating)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if number is None:
        kind = (
            "a list"
            if isinstance(value, (list, tuple, np.ndarray))
            else "a dict"
            if isinstance(value, dict)
            else "text"
        )
        raise HarnessLogError(
            f"{where}: metric {metric!r} for llm {llm!r}, item {item!r} is {kind} "
            f"({_short(value)}), not a per-item score; choose another with --metric"
        )
    if math.isnan(number):
        return math.nan
    if threshold is not None:
        return 1.0 if number >= threshold else 0.0
    if number in _BINARY:
        return number
    raise HarnessLogError(
        f"{where}: metric {metric!r} for llm {llm!r}, item {item!r} is {show_value(number)}, "
        "not 0 or 1; pass --threshold T to count values >= T as correct, or choose a binary "
        "metric with --metric"
    )


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value.tolist() if isinstance(value, np.ndarray) else value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ------------------------------------------------------------------ merging
def rows_frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """A list of row dicts as a frame with the standard columns (and ``doc_hash`` if any)."""
    frame = pd.DataFrame(list(rows))
    if frame.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in ROW_COLUMNS})
    for col, fill in (("confidence", math.nan), ("n_options", 0)):
        if col not in frame.columns:
            frame[col] = fill
    frame["confidence"] = frame["confidence"].astype(np.float64)
    frame["n_options"] = frame["n_options"].fillna(0).astype(np.int64)
    frame["correct"] = frame["correct"].astype(np.float64)
    return frame


def _place(row: pd.Series) -> str:
    line = row.get("line")
    if line is None or (isinstance(line, float) and math.isnan(line)) or int(line) <= 0:
        return str(row["source"])
    return f"{row['source']}, line {int(line)}"


def merge_rows(frame: pd.DataFrame, fmt: str) -> pd.DataFrame:
    """Check and merge imported rows into one long table ``llm, item, subtask, correct[, ...]``.

    - the same (llm, item) twice with the same ``correct`` is kept once (their
      confidences are averaged); with different values it is an error naming
      the llm, the item, the values and the files;
    - one item id must mean one document (``doc_hash``), one subtask and one
      number of options in every file;
    - a cell logged without a result (``correct`` NaN, e.g. an errored sample)
      stays missing.
    """
    if frame.empty:
        raise ResponsesError(f"{fmt}: the logs hold no results")
    df = frame.reset_index(drop=True)

    observed = df[~df["correct"].isna()]
    grouped = observed.groupby(["llm", "item"], sort=False)["correct"].nunique()
    clash = grouped[grouped > 1]
    if not clash.empty:
        llm, item = clash.index[0]
        rows = observed[(observed["llm"] == llm) & (observed["item"] == item)]
        shown = "; ".join(f"{show_value(r['correct'])} in {_place(r)}" for _, r in rows.iterrows())
        more = f" ({len(clash)} such cells in all)" if len(clash) > 1 else ""
        raise HarnessLogError(
            f"conflicting duplicate results for llm {llm!r}, item {item!r}: {shown}{more}; "
            "keep one run per llm (remove or move the other file)"
        )

    checks = [("subtask", "subtask"), ("n_options", "number of options")]
    if "doc_hash" in df.columns:
        checks.insert(0, ("doc_hash", "document hash"))
    for col, what in checks:
        values = df[["item", col, "source", "line"]]
        if col == "doc_hash":
            values = values[values["doc_hash"].notna() & (values["doc_hash"] != "")]
        if col == "n_options":
            values = values[values["n_options"] > 0]
        per_item = values.groupby("item", sort=False)[col].nunique()
        bad = per_item[per_item > 1]
        if bad.empty:
            continue
        item = bad.index[0]
        rows = values[values["item"] == item].drop_duplicates(col)
        shown = "; ".join(f"{r[col]!r} in {_place(r)}" for _, r in rows.iterrows())
        hint = (
            ": the runs used different versions or orders of the dataset; import them "
            "separately, or key items by document with --item-key doc_hash"
            if col == "doc_hash"
            else ""
        )
        raise HarnessLogError(
            f"item {item!r} has a different {what} in different files: {shown}{hint}"
        )

    if df["correct"].isna().all():
        raise ResponsesError(f"{fmt}: the logs hold no scored results (every value is missing)")
    # A cell with a result anywhere takes it; a cell logged only without a
    # result (an errored sample) stays as a missing row, so that an item no
    # llm has a result for is dropped by name when the matrix is built.
    missing = df["correct"].isna()
    df = df.assign(_missing=missing, confidence=df["confidence"].mask(missing))
    df = df.sort_values("_missing", kind="stable")
    conf = df.groupby(["llm", "item"], sort=False)["confidence"].transform("mean")
    df = df.assign(confidence=conf).drop_duplicates(["llm", "item"]).sort_index()
    df = df.reset_index(drop=True)
    n_opts = df.groupby("item", sort=False)["n_options"].transform("max")
    out = pd.DataFrame(
        {
            "llm": df["llm"].astype(str),
            "item": df["item"].astype(str),
            "subtask": df["subtask"].astype(str),
            "correct": df["correct"].astype(np.float64),
        }
    )
    if df["confidence"].notna().any():
        out["confidence"] = df["confidence"].to_numpy(dtype=np.float64)
    if (n_opts > 0).any():
        out["n_options"] = pd.array(np.where(n_opts > 0, n_opts, pd.NA), dtype="Int64")
    out["source"] = df["source"].astype(str).to_numpy()
    n_dup = len(observed) - int(df["correct"].notna().sum())
    if n_dup:
        logger.info("%s: %d duplicate results (same value) were merged", fmt, n_dup)
    return out


def item_id(task: str, key: Any, *, where: str, field: str) -> str:
    """``task:key`` with a check that the key is present and printable."""
    if key is None or (isinstance(key, float) and math.isnan(key)) or str(key).strip() == "":
        raise HarnessLogError(
            f"{where}: no {field!r} value; every sample needs one to key its item"
        )
    if isinstance(key, float) and key.is_integer():
        key = int(key)
    return f"{task}:{key}"


def describe_keys(keys: Iterable[str]) -> str:
    return preview(sorted(keys), 8)

"""Shared pieces of the harness importers: options, file discovery, value checks, merging.

Every importer turns its files into rows of one long table::

    llm, item, subtask, correct, confidence, n_options, source, line, metric[, shown, doc_hash]

``correct`` is the metric's value as logged (a number, NaN where missing) until
:func:`resolve_correct` makes it 1.0 / 0.0 / NaN (``--threshold`` applies to continuous
metrics only); ``metric`` names it, ``shown`` optionally says how the log spelled it (an
inspect ``'P'``); ``confidence`` is NaN where the log holds none, ``n_options`` 0 where
unknown, ``source``/``line`` say where the row came from (used in error messages) and
``doc_hash`` (lm-eval formats only) lets :func:`merge_rows` check that an item id means the
same document in every run.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import math
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._validate import param, preview, show_value
from ..exceptions import ResponsesError

logger = logging.getLogger(__name__)

ROW_COLUMNS = ("llm", "item", "subtask", "correct", "confidence", "n_options", "source", "line")
ITEM_KEYS = ("doc_id", "doc_hash")


class HarnessLogError(ResponsesError):
    """A harness log that cannot be imported as it is (the message names the file)."""


class EmptyLogError(HarnessLogError):
    """A log with nothing to import (errored, unscored, header only): skipped beside others."""


class HarnessLogWarning(UserWarning):
    """Something an import guessed or skipped: an llm named after a folder, a skipped file."""


_HELD: contextvars.ContextVar[list[tuple[int | None, str]] | None] = contextvars.ContextVar(
    "held", default=None
)


def warn(message: str) -> None:
    """Warn (:class:`HarnessLogWarning`), or hold the warning while :func:`held_warnings` runs."""
    _say(None, message)


def note(message: str, level: int = logging.INFO) -> None:
    """Log ``message`` (at ``level``), or hold it while :func:`held_warnings` runs."""
    _say(level, message)


def _say(level: int | None, message: str) -> None:
    held = _HELD.get()
    if held is None:
        _emit(level, message)
    elif (level, message) not in held:
        held.append((level, message))


def _emit(level: int | None, message: str) -> None:
    if level is None:
        warnings.warn(message, HarnessLogWarning, stacklevel=5)
    else:
        logger.log(level, "%s", message)


@contextlib.contextmanager
def held_warnings() -> Iterator[None]:
    """Hold the importers' warnings and notes; issue them, once each, if the block succeeds.

    Why: an import that fails says one line (its error), not the warnings of the files
    read before the failure.
    """
    held: list[tuple[int | None, str]] = []
    token = _HELD.set(held)
    try:
        yield
    finally:
        _HELD.reset(token)
    for level, message in held:
        _emit(level, message)


def skip_empty_logs(errors: Sequence[EmptyLogError], n_usable: int) -> None:
    """Skip logs with nothing to import with one warning each, or raise when none is usable.

    Parameters
    ----------
    errors
        One :class:`EmptyLogError` per log that held nothing to import.
    n_usable
        How many logs did hold results.

    Why: one unscored or header-only log in a folder must not stop the import of the others,
    yet a folder of nothing but such logs is an error, not an empty matrix.
    """
    if not errors:
        return
    if n_usable == 0:
        if len(errors) == 1:
            raise errors[0]
        raise EmptyLogError(
            f"none of the {len(errors)} logs holds results to import; the first: {errors[0]}"
        )
    for err in errors:
        warn(f"{err}; skipped")


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
        Count a continuous metric's value ``>= threshold`` as correct (see
        :func:`resolve_correct`). Without it, a value other than 0 / 1 is an error.
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
            raise ResponsesError(f"{param('metric')}: give a metric name, got an empty string")
        if self.threshold is not None:
            try:
                value = float(self.threshold)
            except (TypeError, ValueError):
                raise ResponsesError(
                    f"{param('threshold')} must be a number, got {self.threshold!r}"
                ) from None
            if not math.isfinite(value):
                raise ResponsesError(f"{param('threshold')} must be a finite number, got {value:g}")
            object.__setattr__(self, "threshold", value)
        if self.item_key not in ITEM_KEYS:
            raise ResponsesError(
                f"{param('item_key')} must be one of {list(ITEM_KEYS)}, got {self.item_key!r}"
            )
        if self.epoch is not None and (
            isinstance(self.epoch, bool) or not isinstance(self.epoch, int) or self.epoch < 1
        ):
            raise ResponsesError(
                f"{param('epoch')} must be a whole number >= 1, got {self.epoch!r}"
            )


#: The parameter of :func:`~bayes_microbench.importers.read_harness` that sets each option.
OPTION_PARAMS = {"filter": "lm_filter", "item_key": "item_key", "epoch": "epoch"}


def refuse_options(opts: ImportOptions, fmt: str, names: Sequence[str]) -> None:
    """Raise when an option that ``fmt`` does not use was set (it would be silently ignored)."""
    for name in names:
        value = getattr(opts, name)
        default = "doc_id" if name == "item_key" else None
        if value != default:
            raise ResponsesError(
                f"{param(OPTION_PARAMS[name])} does not apply to {fmt} logs; leave it out "
                f"(got {value!r})"
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
            noun = re.sub(r"^an? ", "", expect)
            raise ResponsesError(f"{path}: holds no {noun} (searched the folder recursively)")
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
    """``json.loads`` with an error naming ``where``, the line and the column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise HarnessLogError(f"{where}, line {err.lineno}: not valid JSON ({_why(err)})") from None


def _why(err: json.JSONDecodeError) -> str:
    # "Unterminated string starting at" already ends in "at"
    return f"{err.msg.removesuffix(' at')} at column {err.colno}"


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
                        f"{path}, line {number}: not valid JSON ({_why(err)})"
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


def several_targets(record: dict[str, Any]) -> bool:
    """Whether a logged sample's ``target`` lists more than one answer (lm-eval and
    inspect alike). Why: 1 / options is no guessing floor where several are correct."""
    target = record.get("target")
    if isinstance(target, np.ndarray):
        target = target.tolist()
    return isinstance(target, (list, tuple)) and len(target) > 1


def metric_value(value: Any, *, metric: str, where: str, llm: str, item: str) -> float:
    """A logged metric value as a number (NaN when missing), before any threshold.

    Booleans are 1 / 0 and numeric strings are numbers. A ``[gold, pred]`` pair of
    scalars (lm-eval logs ``mcc`` and ``f1`` so, for a corpus-level aggregate) is 1.0
    where ``pred == gold``, else 0.0. Anything else (a list, a dict, text) is an error
    naming the place.
    """
    if value is None:
        return math.nan
    if isinstance(value, (bool, np.bool_)):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    pair = gold_pred(value)
    if pair is not None:
        return 1.0 if pair[0] == pair[1] else 0.0
    kind = (
        "a list"
        if isinstance(value, (list, tuple, np.ndarray))
        else "a dict"
        if isinstance(value, dict)
        else "text"
    )
    raise HarnessLogError(
        f"{where}: metric {metric!r} for llm {llm!r}, item {item!r} is {kind} "
        f"({_short(value)}), not a per-item score; choose another with {param('metric')}"
    )


def gold_pred(value: Any) -> tuple[Any, Any] | None:
    """``(gold, pred)`` when ``value`` is a pair of scalars (``[1, 0]``), else None."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    scalar = (bool, int, float, str, np.integer, np.floating, np.bool_)
    if not all(isinstance(v, scalar) for v in value):
        return None
    return value[0], value[1]


def resolve_correct(frame: pd.DataFrame, threshold: float | None) -> pd.DataFrame:
    """Make each (task, metric)'s logged values 1.0 / 0.0 / NaN, applying ``threshold``.

    A metric whose values in a task are all 0 / 1 is kept as it is: ``threshold`` is
    ignored for it with a one-line note (it would only flip answers). Any other metric
    needs ``threshold``, which must lie within the values observed (else every value
    would fall on one side of it); values ``>= threshold`` count as correct. A continuous
    metric's task also loses its confidences and numbers of options: its score is not
    "the one right option chosen" (``truthfulqa_mc2``'s probability mass on several
    true options), so the softmax at the target is not P(correct), nor 1/n a chance floor.

    Parameters
    ----------
    frame
        Importer rows (:data:`ROW_COLUMNS` plus ``metric`` and optionally ``shown``).
    threshold
        ``--threshold``, or None.

    Returns
    -------
    pandas.DataFrame
        ``frame`` with ``correct`` in {1, 0, NaN}.

    Why: one place decides what a threshold means, so no importer can turn every correct
    0/1 answer wrong (``--threshold 1.5``) or every wrong one correct (``--threshold -1``).
    """
    if frame.empty or "metric" not in frame.columns:
        return frame
    df = frame.copy()
    ignored: list[str] = []
    for (task, metric), rows in df.groupby(["subtask", "metric"], sort=False):
        values = rows["correct"].astype(np.float64)
        seen = values.dropna()
        if seen.isin(list(_BINARY)).all():
            if threshold is not None and len(seen):
                ignored.append(f"{metric!r} ({task})")
            continue
        label = f"metric {metric!r} of task {task!r}"
        if (rows["n_options"] > 0).any() or rows["confidence"].notna().any():
            note(
                f"{label} is not 0/1 (a score, not one right option chosen): its items get "
                "no confidence and no number of options"
            )
            df.loc[rows.index, "confidence"] = math.nan
            df.loc[rows.index, "n_options"] = 0
        if threshold is None:
            first = rows.loc[~values.isin(list(_BINARY)) & values.notna()].iloc[0]
            shown = first.get("shown") if "shown" in rows.columns else None
            value = shown if isinstance(shown, str) else show_value(float(first["correct"]))
            pass_t = param("threshold", "T", placeholder=True)
            raise HarnessLogError(
                f"{_place(first)}: metric {metric!r} for llm {first['llm']!r}, item "
                f"{first['item']!r} is {value}, not 0 or 1; pass {pass_t} to count values "
                f">= T as correct, or choose a binary metric with {param('metric')}"
            )
        low, high = float(seen.min()), float(seen.max())
        if not low <= threshold <= high:
            side = "correct" if threshold < low else "incorrect"
            raise HarnessLogError(
                f"{param('threshold', threshold)} is outside the values of {label} "
                f"({show_value(low)} to {show_value(high)}): every result would count as "
                f"{side}; choose T within that range"
            )
        df.loc[rows.index, "correct"] = np.where(
            values.isna(), math.nan, (values >= threshold).astype(np.float64)
        )
    if ignored:
        note(
            f"{param('threshold', threshold)} ignored for the 0/1 metric(s) "
            f"{', '.join(ignored)}: it applies to continuous metrics"
        )
    return df


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value.tolist() if isinstance(value, np.ndarray) else value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ------------------------------------------------------------------ merging
def rows_frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """A list of row dicts as a frame with the standard columns (and ``doc_hash`` if any)."""
    frame = pd.DataFrame(list(rows))
    if frame.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in ROW_COLUMNS})
    for col, fill in (("confidence", math.nan), ("n_options", 0), ("metric", "")):
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


def merge_rows(frame: pd.DataFrame, fmt: str, threshold: float | None = None) -> pd.DataFrame:
    """Check and merge imported rows into one long table ``llm, item, subtask, correct[, ...]``.

    - logged metric values become 1 / 0 / NaN (:func:`resolve_correct`, with ``threshold``);
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
    df = resolve_correct(frame.reset_index(drop=True), threshold)

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
            f"separately, or key items by document with {param('item_key', 'doc_hash')}"
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

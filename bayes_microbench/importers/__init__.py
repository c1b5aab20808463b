"""Importers for what evaluation harnesses write.

Formats (the names ``bayes-microbench import FORMAT`` takes):

``lm-eval``
    lm-evaluation-harness ``--log_samples`` output: ``samples_<task>_<timestamp>.jsonl``
    files (and the ``results_<timestamp>.json`` beside them for the llm name).
    See :mod:`bayes_microbench.importers.lm_eval`.
``oll-details``
    Open LLM Leaderboard v2 "details" Parquet files, one per llm and task.
    See :mod:`bayes_microbench.importers.oll_details`.
``inspect``
    inspect-ai evaluation logs, ``.json`` or ``.eval``.
    See :mod:`bayes_microbench.importers.inspect_ai`.
``auto``
    Whichever of the above the PATHs hold, when that is unambiguous.

Items are keyed by stable ids, never by file order: ``task:doc_id`` (or
``task:doc_hash``) for the lm-eval formats, ``task:sample_id`` for inspect;
the task is the item's subtask. Several PATHs (folders or files, several llms)
merge into one matrix; the same result for an (llm, item) twice is kept once,
different results are an error naming the llm, the item, the values and the
files.

Example
-------
>>> from bayes_microbench.importers import import_responses
>>> resp = import_responses("lm-eval", ["runs/"])  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .._validate import preview
from ..exceptions import ResponsesError
from ..responses import EmptyPolicy, Responses
from ._common import (
    EmptyLogError,
    HarnessLogError,
    HarnessLogWarning,
    ImportOptions,
    _hidden,
    held_warnings,
    merge_rows,
)
from .inspect_ai import is_log_file, read_inspect
from .lm_eval import RESULTS_NAME, is_samples_file, read_lm_eval
from .oll_details import is_details_file, is_parquet, read_oll_details

logger = logging.getLogger(__name__)

Reader = Callable[[Sequence[str | Path], ImportOptions], pd.DataFrame]


@dataclass(frozen=True)
class Importer:
    """A harness log format: its name, what it reads, and how to spot its files."""

    name: str
    description: str
    read: Reader
    claims: Callable[[Path], bool]


IMPORTERS: dict[str, Importer] = {
    "lm-eval": Importer(
        "lm-eval",
        "lm-evaluation-harness --log_samples output (samples_<task>_<timestamp>.jsonl)",
        read_lm_eval,
        is_samples_file,
    ),
    "oll-details": Importer(
        "oll-details",
        "Open LLM Leaderboard v2 details (Parquet files, or the downloaded "
        "<org>__<model>/samples_leaderboard_<task>_<timestamp>.jsonl / .json)",
        read_oll_details,
        lambda p: is_parquet(p) or (is_details_file(p) and not _beside_results(p)),
    ),
    "inspect": Importer(
        "inspect",
        "inspect-ai evaluation logs (.json or .eval)",
        read_inspect,
        is_log_file,
    ),
}
FORMATS: tuple[str, ...] = ("auto", *IMPORTERS)
# auto: the first importer that claims a file takes it (a leaderboard download's
# samples_leaderboard_* files, with no results JSON beside them, are oll-details)
DETECT_ORDER = ("oll-details", "lm-eval", "inspect")


def _beside_results(path: Path) -> bool:
    """An lm-eval results JSON (``*_<timestamp>.json``) lies beside ``path``."""
    return any(
        RESULTS_NAME.match(p.name) and not is_samples_file(p) for p in path.parent.glob("*.json")
    )


def detect_format(paths: Sequence[str | Path]) -> str:
    """The one format whose files the PATHs hold; an error when none or several do."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise ResponsesError("auto: no PATH given; pass the files or folders to import")
    seen: dict[str, list[str]] = {}
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise ResponsesError(f"{path}: no such file or folder")
        files = (
            [path]
            if path.is_file()
            else sorted(
                p for p in path.rglob("*") if p.is_file() and not _hidden(p.relative_to(path))
            )
        )
        for f in files:
            for name in DETECT_ORDER:
                if IMPORTERS[name].claims(f):
                    seen.setdefault(name, []).append(str(f))
                    break
    if not seen:
        raise ResponsesError(
            f"auto: found no harness logs under {preview([str(p) for p in paths])}; expected "
            "samples_*.jsonl (lm-eval), .parquet or samples_leaderboard_*.json[l] (oll-details) "
            "or .json/.eval (inspect) files"
        )
    if len(seen) > 1:
        parts = ", ".join(f"{name} ({preview(files, 2)})" for name, files in seen.items())
        raise ResponsesError(
            f"auto: the PATHs hold files of several formats: {parts}; name the FORMAT "
            f"(one of {list(IMPORTERS)}) and import each format separately"
        )
    return next(iter(seen))


def _importer(fmt: str) -> str:
    if fmt == "auto":
        return fmt
    if fmt not in IMPORTERS:
        raise ResponsesError(f"unknown format {fmt!r}; choose one of {list(FORMATS)}")
    return fmt


def read_harness(
    fmt: str,
    paths: Sequence[str | Path] | str | Path,
    *,
    metric: str | None = None,
    threshold: float | None = None,
    lm_filter: str | None = None,
    item_key: str = "doc_id",
    epoch: int | None = None,
) -> pd.DataFrame:
    """Read harness logs into one checked long table.

    Parameters
    ----------
    fmt
        ``"lm-eval"``, ``"oll-details"``, ``"inspect"`` or ``"auto"``.
    paths
        Files or folders (searched recursively).
    metric
        The per-item metric (lm-eval formats) or scorer (inspect) that becomes
        ``correct``; default: the format's (see the format's module).
    threshold
        Count a continuous metric's values ``>= threshold`` as correct; without
        it such values are an error. It must lie within the metric's observed
        values, and is ignored (with a note) for 0/1 metrics.
    lm_filter
        lm-eval filter for tasks logged under several filters.
    item_key
        ``"doc_id"`` or ``"doc_hash"`` (lm-eval formats): the item id is
        ``task:<key>``.
    epoch
        inspect epoch, for logs run over several epochs.

    Returns
    -------
    pandas.DataFrame
        ``llm, item, subtask, correct[, confidence, n_options], source``: one
        row per llm and item with a result (``source`` is the file it came
        from). ``frame.attrs["format"]`` is the format read.
    """
    paths_list = [paths] if isinstance(paths, (str, Path)) else list(paths)
    name = _importer(fmt)
    if name == "auto":
        name = detect_format(paths_list)
        logger.info("auto: reading the PATHs as %s", name)
    opts = ImportOptions(
        metric=metric, threshold=threshold, filter=lm_filter, item_key=item_key, epoch=epoch
    )
    with held_warnings():
        rows = IMPORTERS[name].read(paths_list, opts)
        frame = merge_rows(rows, name, threshold=opts.threshold)
    frame.attrs["format"] = name
    frame.attrs["n_files"] = int(rows["source"].nunique()) if len(rows) else 0
    return frame


def import_responses(
    fmt: str,
    paths: Sequence[str | Path] | str | Path,
    *,
    metric: str | None = None,
    threshold: float | None = None,
    lm_filter: str | None = None,
    item_key: str = "doc_id",
    epoch: int | None = None,
    benchmark: str | None = None,
    on_empty: EmptyPolicy = "drop",
) -> Responses:
    """Import harness logs as a :class:`~bayes_microbench.responses.Responses`.

    Parameters are those of :func:`read_harness`, plus:

    benchmark
        The benchmark name (default: the task's name when there is one task,
        else ``"benchmark"``).
    on_empty
        As for :meth:`Responses.from_long`: llms or items without any result
        are dropped with a warning (``"drop"``) or refused (``"raise"``).

    Examples
    --------
    >>> resp = import_responses("lm-eval", ["out/"], metric="acc")  # doctest: +SKIP
    >>> resp.confidence  # softmax mass on the right option, multiple-choice tasks  # doctest: +SKIP
    """
    frame = read_harness(
        fmt,
        paths,
        metric=metric,
        threshold=threshold,
        lm_filter=lm_filter,
        item_key=item_key,
        epoch=epoch,
    )
    if benchmark is None:
        tasks = pd.unique(frame["subtask"])
        benchmark = str(tasks[0]) if len(tasks) == 1 else "benchmark"
    where = f"{frame.attrs['format']} import"
    return Responses.from_long(
        frame.drop(columns="source"), benchmark=benchmark, on_empty=on_empty, where=where
    )


__all__ = [
    "FORMATS",
    "IMPORTERS",
    "EmptyLogError",
    "HarnessLogError",
    "HarnessLogWarning",
    "ImportOptions",
    "Importer",
    "detect_format",
    "import_responses",
    "read_harness",
]

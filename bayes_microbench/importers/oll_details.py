"""Open LLM Leaderboard (v2) "details" Parquet files.

The leaderboard publishes, per llm, a dataset ``open-llm-leaderboard/<org>__<model>-details``
with one configuration per task, ``<org>__<model>__leaderboard_<task>``; its
Parquet files (``<config>/latest/0000.parquet`` or similar) hold the
lm-evaluation-harness sample records of that llm on that task, one row per
document: ``doc_id``, ``doc_hash``, ``target``, ``filtered_resps``,
``arguments`` and the correctness column (``acc_norm`` for BBH, GPQA and
MuSR, ``acc`` for MMLU-Pro, ``exact_match`` for MATH,
``prompt_level_strict_acc`` for IFEval).

What is read
------------
llm, task
    From the nearest file or folder name of the form
    ``<org>__<model>__leaderboard_<task>`` (llm ``org/model``, subtask
    ``leaderboard_<task>``), or a file ``samples_leaderboard_<task>_<timestamp>.parquet``
    inside a folder ``<org>__<model>``. The details repositories as people download them
    hold ``<org>__<model>/samples_leaderboard_<task>_<timestamp>.jsonl`` (``.json`` for the
    runs of mid-2024): those are read too, the llm from an lm-eval results JSON beside
    them when one names it, else from the folder, with one warning that lists the
    llms so named (a renamed folder renames its llm).
item, correct, confidence, n_options
    As for lm-evaluation-harness logs (:mod:`.lm_eval`): item ``task:doc_id``
    (``--item-key doc_hash`` for ``task:doc_hash``), the first of ``acc``,
    ``acc_norm``, ``exact_match``, ``prompt_level_strict_acc`` present
    (``--metric`` overrides), and the softmax confidence for multiple-choice
    tasks.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from .._validate import param
from ._common import (
    HarnessLogError,
    ImportOptions,
    find_files,
    llm_from_folder,
    refuse_options,
    rows_frame,
    warn,
)
from .lm_eval import ResultsNames, iter_samples, sample_rows

logger = logging.getLogger(__name__)

FORMAT = "oll-details"
_TIMESTAMP = r"\d{4}-\d{2}-\d{2}T\d{2}[-:]\d{2}[-:]\d{2}(?:\.\d+)?"
CONFIG_NAME = re.compile(rf"^(?P<llm>.+?)__(?P<task>leaderboard_\w+?)(?:_{_TIMESTAMP})?$")
SAMPLES_NAME = re.compile(rf"^samples_(?P<task>leaderboard_\w+?)(?:_{_TIMESTAMP})?$")
SAMPLES_SUFFIXES = (".jsonl", ".json")
# Columns never needed (large, or hashes of the prompt).
SKIP_COLUMNS = frozenset({"doc", "resps", "prompt_hash", "target_hash"})


def is_parquet(path: Path) -> bool:
    return path.suffix.lower() in (".parquet", ".pq")


def is_details_file(path: Path) -> bool:
    """A details Parquet file, or a downloaded ``samples_leaderboard_<task>_<ts>.json[l]``."""
    if is_parquet(path):
        return True
    return path.suffix in SAMPLES_SUFFIXES and SAMPLES_NAME.match(path.stem) is not None


def llm_and_task(path: Path, names: ResultsNames) -> tuple[str, str, bool]:
    """The llm and task a details file belongs to, and whether the llm is only its folder's name.

    A configuration name (``<org>__<model>__leaderboard_<task>``) names both; a samples
    file inside ``<org>__<model>`` takes its llm from an lm-eval results JSON beside it
    (``names``, one per import), else from the folder (the third value True).
    """
    for part in [path.stem, *(p.name for p in path.parents)]:
        match = CONFIG_NAME.match(part)
        if match:
            return llm_from_folder(match.group("llm")), match.group("task"), False
    match = SAMPLES_NAME.match(path.stem)
    if match and path.parent.name:
        named = names.models_in(path.parent)
        if len(named) > 1:
            raise HarnessLogError(
                f"{path.parent}: the results files in it name several models "
                f"({', '.join(sorted(named))}); keep one model per folder"
            )
        if named:
            return named.pop(), match.group("task"), False
        return llm_from_folder(path.parent.name), match.group("task"), True
    raise HarnessLogError(
        f"{path}: cannot tell the llm and task from the path; keep the leaderboard's names "
        "(a file or folder '<org>__<model>__leaderboard_<task>', as in the details dataset's "
        "configurations)"
    )


def read_oll_details(
    paths: Sequence[str | Path], options: ImportOptions | None = None
) -> pd.DataFrame:
    """Read Open LLM Leaderboard details Parquet files into importer rows.

    Parameters
    ----------
    paths
        Parquet or ``samples_leaderboard_*.json[l]`` files, or folders searched
        recursively for them.
    options
        Metric, threshold, filter and item-key choices (:class:`ImportOptions`).

    Returns
    -------
    pandas.DataFrame
        ``llm, item, subtask, correct, confidence, n_options, source, line, doc_hash``.
    """
    import pyarrow.parquet as pq

    opts = options or ImportOptions()
    refuse_options(opts, FORMAT, ["epoch"])
    files = find_files(
        paths,
        is_details_file,
        FORMAT,
        "a details file (.parquet, or samples_leaderboard_<task>_<timestamp>.jsonl / .json)",
    )
    rows: list[dict[str, Any]] = []
    from_folders: set[str] = set()
    names = ResultsNames()
    for path in files:
        llm, task, guessed = llm_and_task(path, names)
        if guessed:
            from_folders.add(llm)
        lines: list[int] | None = None
        if not is_parquet(path):
            numbered_in = iter_samples(path)
            lines = [line for line, _ in numbered_in]
            records = [
                {k: v for k, v in rec.items() if k not in SKIP_COLUMNS} for _, rec in numbered_in
            ]
        else:
            try:
                schema = pq.read_schema(path)
                columns = [c for c in schema.names if c not in SKIP_COLUMNS]
                records = pq.read_table(path, columns=columns).to_pylist()
            except (OSError, ValueError) as err:
                raise HarnessLogError(f"{path}: not a readable Parquet file ({err})") from None
        if not records:
            logger.warning("%s: no rows, skipped", path)
            continue
        if opts.item_key not in records[0]:
            other = "doc_hash" if opts.item_key == "doc_id" else "doc_id"
            hint = f"; key items with {param('item_key', other)}" if other in records[0] else ""
            raise HarnessLogError(
                f"{path}: no {opts.item_key!r} column (columns: {sorted(records[0])}); "
                f"not a leaderboard details file{hint}"
            )
        numbered = list(zip(lines or [0] * len(records), records, strict=True))
        rows.extend(sample_rows(numbered, llm=llm, task=task, source=path, opts=opts))
    if from_folders:
        shown = sorted(from_folders)
        more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
        warn(
            f"{len(shown)} llm(s) named after their folders ({', '.join(map(repr, shown[:3]))}"
            f"{more}): no lm-eval results JSON beside their samples files names the model, "
            "as in the details downloads; a folder's name is its llm's"
        )
    frame = rows_frame(rows)
    logger.debug("%s: read %d results from %d files", FORMAT, len(frame), len(files))
    return frame

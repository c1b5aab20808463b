"""inspect-ai evaluation logs (``.json``, and the zipped ``.eval`` format).

Layout
------
A JSON log is one ``EvalLog`` object: ``eval`` (``model``, ``task``, ...),
``status``, ``results`` and ``samples``, each sample with its ``id``,
``epoch``, ``choices`` (multiple-choice tasks) and ``scores``: a mapping
``scorer -> {"value": ...}`` whose value is ``"C"`` / ``"I"`` (correct /
incorrect), ``"P"`` (partial), ``"N"`` (no answer), a number, a boolean, or a
dict of those. A ``.eval`` log is a zip archive of the same objects:
``header.json`` (or ``_journal/start.json``) holding ``eval``, and one
``samples/<id>_epoch_<epoch>.json`` per sample.

What is read
------------
llm
    ``eval.model`` (e.g. ``openai/gpt-4o``).
item, subtask
    ``<task>:<sample id>`` and the task, ``eval.task``.
correct
    The value of the only scorer, or of the first scorer of
    ``--metric SCORER[,SCORER...]`` the log has (``SCORER.KEY`` for a scorer
    whose value is a dict). ``C`` / ``yes`` / ``true`` / 1 is
    correct, ``I`` / ``N`` / ``no`` / ``false`` / 0 is not; ``P`` (0.5) and
    other numbers need ``--threshold``. A sample without scores (one that
    errored) is missing.
epoch
    Logs run for several epochs need ``--epoch N``.
n_options
    The number of ``choices`` of a multiple-choice sample.
confidence
    inspect logs hold none.
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._common import (
    HarnessLogError,
    ImportOptions,
    binary_value,
    find_files,
    item_id,
    parse_json,
    read_json,
    refuse_options,
    rows_frame,
)
from .lm_eval import metric_candidates

logger = logging.getLogger(__name__)

FORMAT = "inspect"
LETTERS = {"C": 1.0, "I": 0.0, "N": 0.0, "P": 0.5}
WORDS = {"yes": 1.0, "true": 1.0, "correct": 1.0, "no": 0.0, "false": 0.0, "incorrect": 0.0}
# JSON files an inspect log folder holds that are not logs.
NOT_LOGS = frozenset({"logs.json", "listing.json", "eval-set.json"})


def is_log_file(path: Path) -> bool:
    if path.suffix == ".eval":
        return True
    return path.suffix == ".json" and path.name not in NOT_LOGS


def read_inspect(paths: Sequence[str | Path], options: ImportOptions | None = None) -> pd.DataFrame:
    """Read inspect-ai evaluation logs into importer rows.

    Parameters
    ----------
    paths
        ``.json`` or ``.eval`` log files, or folders searched recursively for
        them (JSON files in a folder that are not inspect logs are skipped).
    options
        Scorer (``metric``), ``threshold`` and ``epoch`` choices.

    Returns
    -------
    pandas.DataFrame
        ``llm, item, subtask, correct, confidence, n_options, source, line``.
    """
    opts = options or ImportOptions()
    refuse_options(opts, FORMAT, ["filter", "item_key"])
    named = {Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)}
    files = find_files(paths, is_log_file, FORMAT, "an inspect log (.json or .eval)")
    rows: list[dict[str, Any]] = []
    n_logs = 0
    for path in files:
        log = _read_log(path, explicit=path in named)
        if log is None:
            continue
        n_logs += 1
        spec, samples = log
        rows.extend(_log_rows(path, spec, samples, opts))
    if n_logs == 0:
        raise HarnessLogError(
            f"{FORMAT}: none of the JSON files under {sorted(str(p) for p in named)} is an "
            "inspect evaluation log (an object with 'eval' and 'samples')"
        )
    frame = rows_frame(rows)
    logger.debug("%s: read %d results from %d logs", FORMAT, len(frame), n_logs)
    return frame


# ------------------------------------------------------------------ reading
def _read_log(path: Path, *, explicit: bool) -> tuple[dict[str, Any], list[Any]] | None:
    if path.suffix == ".eval":
        return _read_eval_zip(path)
    data = read_json(path)
    if not (isinstance(data, dict) and isinstance(data.get("eval"), dict)):
        if explicit:
            raise HarnessLogError(
                f"{path}: not an inspect evaluation log (no 'eval' object at the top level)"
            )
        logger.info("%s: not an inspect log, skipped", path)
        return None
    samples = data.get("samples")
    if not samples:
        raise HarnessLogError(
            f"{path}: the log holds no samples (was the eval run with --no-log-samples?)"
        )
    if not isinstance(samples, list):
        raise HarnessLogError(f"{path}: 'samples' must be a list")
    _note_status(path, data.get("status"))
    return data["eval"], samples


def _read_eval_zip(path: Path) -> tuple[dict[str, Any], list[Any]]:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            header = None
            for name in ("header.json", "_journal/start.json", "start.json"):
                if name in names:
                    header = _zip_json(archive, path, name)
                    break
            if not isinstance(header, dict) or not isinstance(header.get("eval"), dict):
                raise HarnessLogError(
                    f"{path}: no eval header (header.json or _journal/start.json) in the archive; "
                    "not an inspect .eval log, or written by an unsupported inspect version "
                    "(convert it with 'inspect log convert --to json')"
                )
            sample_names = sorted(
                n for n in names if n.startswith("samples/") and n.endswith(".json")
            )
            if not sample_names:
                raise HarnessLogError(
                    f"{path}: the log holds no samples (was the eval run with --no-log-samples?)"
                )
            samples = [_zip_json(archive, path, n) for n in sample_names]
            status = header.get("status")
            if status is None and "results.json" in names:
                status = _zip_json(archive, path, "results.json").get("status")
            _note_status(path, status)
            return header["eval"], samples
    except zipfile.BadZipFile:
        raise HarnessLogError(
            f"{path}: not a readable .eval log (not a zip archive); is the file complete?"
        ) from None


def _zip_json(archive: zipfile.ZipFile, path: Path, name: str) -> Any:
    try:
        raw = archive.read(name)
    except NotImplementedError as err:
        raise HarnessLogError(
            f"{path}: member {name!r} uses a compression this Python cannot read ({err}); "
            "convert the log with 'inspect log convert --to json' and import the JSON"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HarnessLogError(f"{path}: member {name!r} is not UTF-8 text") from None
    return parse_json(text, f"{path} (member {name})")


def _note_status(path: Path, status: Any) -> None:
    if status not in (None, "success"):
        logger.warning("%s: the eval's status is %r; importing the samples it logged", path, status)


# ------------------------------------------------------------------ samples
def _log_rows(
    path: Path, spec: dict[str, Any], samples: list[Any], opts: ImportOptions
) -> Iterator[dict[str, Any]]:
    llm = spec.get("model")
    task = spec.get("task")
    if not isinstance(llm, str) or not llm.strip():
        raise HarnessLogError(f"{path}: the log names no model (eval.model)")
    if not isinstance(task, str) or not task.strip():
        raise HarnessLogError(f"{path}: the log names no task (eval.task)")
    for i, sample in enumerate(samples):
        if not isinstance(sample, dict):
            raise HarnessLogError(f"{path}: sample {i + 1} is not a JSON object")
    epochs = sorted({_epoch(s, path) for s in samples})
    if opts.epoch is not None:
        if opts.epoch not in epochs:
            raise HarnessLogError(
                f"{path}: no samples for epoch {opts.epoch}; its epochs are {epochs}"
            )
        epoch = opts.epoch
    elif len(epochs) > 1:
        raise HarnessLogError(
            f"{path}: samples were run for {len(epochs)} epochs {epochs}; choose one with --epoch N"
        )
    else:
        epoch = epochs[0]
    chosen: tuple[str, str | None] | None = None
    for sample in samples:
        if _epoch(sample, path) != epoch:
            continue
        where = f"{path}, sample {sample.get('id')!r}"
        item = item_id(task, sample.get("id"), where=where, field="id")
        scores = _scores(sample)
        correct = np.nan
        if scores:
            if chosen is None:
                chosen = _choose_scorer(scores, path, opts.metric)
            correct = _score_value(scores, chosen, where=where, llm=llm, item=item, opts=opts)
        choices = sample.get("choices")
        n_options = len(choices) if isinstance(choices, list) and len(choices) >= 2 else 0
        yield {
            "llm": llm.strip(),
            "item": item,
            "subtask": task.strip(),
            "correct": correct,
            "confidence": np.nan,
            "n_options": n_options,
            "source": str(path),
            "line": 0,
        }


def _epoch(sample: dict[str, Any], path: Path) -> int:
    value = sample.get("epoch", 1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise HarnessLogError(
            f"{path}, sample {sample.get('id')!r}: epoch must be a whole number, got {value!r}"
        )
    return value


def _scores(sample: dict[str, Any]) -> dict[str, Any] | None:
    scores = sample.get("scores")
    if scores is None and isinstance(sample.get("score"), dict):
        scores = {"score": sample["score"]}  # logs from before per-scorer scores
    if not isinstance(scores, dict) or not scores:
        return None
    return scores


def _choose_scorer(
    scores: dict[str, Any], path: Path, wanted: str | None
) -> tuple[str, str | None]:
    names = list(scores)
    if wanted is None:
        if len(names) > 1:
            raise HarnessLogError(
                f"{path}: samples have several scorers {names}; choose one with --metric"
            )
        return names[0], None
    candidates = metric_candidates(wanted)
    for name in candidates:
        if name in scores:
            return name, None
        scorer, _, key = name.rpartition(".")
        if scorer in scores and key:
            return scorer, key
    shown = candidates[0] if len(candidates) == 1 else candidates
    raise HarnessLogError(
        f"{path}: no scorer {shown!r}; its scorers are {names} (use SCORER.KEY for a key "
        "of a scorer whose value is a dict)"
    )


def _score_value(
    scores: dict[str, Any],
    chosen: tuple[str, str | None],
    *,
    where: str,
    llm: str,
    item: str,
    opts: ImportOptions,
) -> float:
    scorer, key = chosen
    name = scorer if key is None else f"{scorer}.{key}"
    if scorer not in scores:
        raise HarnessLogError(f"{where}: no score from scorer {scorer!r}")
    score = scores[scorer]
    value = score.get("value") if isinstance(score, dict) else score
    if key is not None:
        if not isinstance(value, dict) or key not in value:
            raise HarnessLogError(f"{where}: scorer {scorer!r} gives no value {key!r}")
        value = value[key]
    elif isinstance(value, dict):
        raise HarnessLogError(
            f"{where}: scorer {scorer!r} gives several values {sorted(value)}; choose one with "
            f"--metric {scorer}.KEY"
        )
    if isinstance(value, str):
        text = value.strip()
        if text in LETTERS:
            value = LETTERS[text]
        elif text.lower() in WORDS:
            value = WORDS[text.lower()]
    return binary_value(
        value, metric=name, threshold=opts.threshold, where=where, llm=llm, item=item
    )

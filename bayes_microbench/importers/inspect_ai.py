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
``samples/<id>_epoch_<epoch>.json`` per sample; since inspect-ai 0.3.206 its
members are zstd-compressed (read with the ``zstandard`` package).

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
    correct, ``I`` / ``N`` / ``no`` / ``false`` / 0 is not; ``P`` (partial
    credit, 0.5) and other numbers need ``--threshold``. A sample without scores
    (one that errored) is missing; a log none of whose samples is scored, or with
    no samples (errored, ``--no-log-samples``, header only), is skipped with a
    warning beside other logs and is an error alone.
epoch
    Logs run for several epochs need ``--epoch N``.
n_options
    The number of ``choices`` of a multiple-choice sample.
confidence
    inspect logs hold none.
"""

from __future__ import annotations

import io
import logging
import struct
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._validate import param
from ._common import (
    EmptyLogError,
    HarnessLogError,
    ImportOptions,
    find_files,
    item_id,
    metric_value,
    note,
    parse_json,
    read_json,
    refuse_options,
    rows_frame,
    several_targets,
    skip_empty_logs,
    warn,
)
from .lm_eval import is_samples_file, metric_candidates

logger = logging.getLogger(__name__)

FORMAT = "inspect"
LETTERS = {"C": 1.0, "I": 0.0, "N": 0.0, "P": 0.5}
WORDS = {"yes": 1.0, "true": 1.0, "correct": 1.0, "no": 0.0, "false": 0.0, "incorrect": 0.0}
# JSON files an inspect log folder holds that are not logs.
NOT_LOGS = frozenset({"logs.json", "listing.json", "eval-set.json"})


def is_log_file(path: Path) -> bool:
    """A ``.eval`` file, or a ``.json`` file that is not one of the other harnesses' files.

    JSON files named like lm-eval's (``samples_*``, ``results_*``) or lying beside lm-eval
    samples files (its results JSON, whatever its name) are not inspect logs.
    """
    if path.suffix == ".eval":
        return True
    if path.suffix != ".json" or path.name in NOT_LOGS:
        return False
    if path.name.startswith(("results_", "samples_")):
        return False
    return not _beside_lm_eval_samples(path.parent)


def _beside_lm_eval_samples(folder: Path) -> bool:
    return any(is_samples_file(p) for p in folder.glob("samples_*.json*"))


def read_inspect(paths: Sequence[str | Path], options: ImportOptions | None = None) -> pd.DataFrame:
    """Read inspect-ai evaluation logs into importer rows.

    Parameters
    ----------
    paths
        ``.json`` or ``.eval`` log files, or folders searched recursively for
        them (JSON files in a folder that are not inspect logs are skipped with a
        warning).
    options
        Scorer (``metric``), ``threshold`` and ``epoch`` choices.

    Returns
    -------
    pandas.DataFrame
        ``llm, item, subtask, correct, confidence, n_options, source, line, metric[, shown]``.

    Logs with nothing to import (an eval that errored before logging samples, one run with
    ``--no-log-samples`` or without scoring, a header-only ``.eval``) are skipped with a
    warning when other logs hold results, and are an error otherwise.
    """
    opts = options or ImportOptions()
    refuse_options(opts, FORMAT, ["filter", "item_key"])
    named = {Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)}
    files = find_files(paths, is_log_file, FORMAT, "an inspect log (.json or .eval)")
    rows: list[dict[str, Any]] = []
    empty: list[EmptyLogError] = []
    n_logs = n_other = 0
    for path in files:
        try:
            log = _read_log(path, explicit=path in named)
            if log is None:
                n_other += 1
                continue
            log_rows = list(_log_rows(path, log, opts))
        except EmptyLogError as err:
            empty.append(err)
            continue
        n_logs += 1
        rows.extend(log_rows)
    if n_logs == 0 and not empty:
        raise HarnessLogError(
            f"{FORMAT}: none of the JSON files under {sorted(str(p) for p in named)} is an "
            "inspect evaluation log (an object with 'eval' and 'samples')"
        )
    skip_empty_logs(empty, n_logs)
    frame = rows_frame(rows)
    logger.debug("%s: read %d results from %d logs", FORMAT, len(frame), n_logs)
    return frame


# ------------------------------------------------------------------ reading
@dataclass(frozen=True)
class _Log:
    """What is read of one log: its ``eval`` spec, samples, status and error message."""

    spec: dict[str, Any]
    samples: list[Any]
    status: Any
    error: str | None


def _read_log(path: Path, *, explicit: bool) -> _Log | None:
    if path.suffix == ".eval":
        log = _read_eval_zip(path)
    else:
        data = read_json(path)
        if not (isinstance(data, dict) and isinstance(data.get("eval"), dict)):
            if explicit:
                raise HarnessLogError(
                    f"{path}: not an inspect evaluation log (no 'eval' object at the top level)"
                )
            warn(f"{path}: not an inspect evaluation log (no 'eval' object); skipped")
            return None
        samples = data.get("samples") or []
        if not isinstance(samples, list):
            raise HarnessLogError(f"{path}: 'samples' must be a list")
        log = _Log(data["eval"], samples, data.get("status"), _error_message(data.get("error")))
    if not log.samples:
        raise EmptyLogError(f"{path}: {_why_empty(log)}")
    return log


def _why_empty(log: _Log) -> str:
    if log.status == "error":
        return f"the eval failed before logging any sample ({_error_text(log)}); fix it and rerun"
    if log.status in ("started", "cancelled"):
        return f"the eval is {log.status} and has logged no sample yet"
    return (
        "the log holds no samples (run with 'inspect eval --no-log-samples', or only its "
        "header was written); rerun the eval with samples logged"
    )


def _error_text(log: _Log) -> str:
    return f"status 'error': {log.error}" if log.error else "status 'error'"


def _error_message(error: Any) -> str | None:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        text = " ".join(error["message"].split())
        return text if len(text) <= 160 else text[:157] + "..."
    return None


def _read_eval_zip(path: Path) -> _Log:
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
            samples = [_zip_json(archive, path, n) for n in sample_names]
            status = header.get("status")
            if status is None and "results.json" in names:
                status = _zip_json(archive, path, "results.json").get("status")
            return _Log(header["eval"], samples, status, _error_message(header.get("error")))
    except zipfile.BadZipFile:
        raise HarnessLogError(
            f"{path}: not a readable .eval log (not a zip archive); is the file complete?"
        ) from None


ZIP_ZSTANDARD = 93  # the zip compression method of zstd (what inspect-ai >= 0.3.206 writes)
# A zip local file header (APPNOTE 4.3.7): signature ... name length, extra field length.
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_LOCAL_SIGNATURE = b"PK\x03\x04"


def _zip_json(archive: zipfile.ZipFile, path: Path, name: str) -> Any:
    info = archive.getinfo(name)
    if info.compress_type == ZIP_ZSTANDARD:
        raw = _read_zstd_member(path, info)
    else:
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


def _read_zstd_member(path: Path, info: zipfile.ZipInfo) -> bytes:
    """The bytes of a zstd-compressed zip member (Python < 3.14's ``zipfile`` cannot read it).

    Reads the member's raw data after its local header and decompresses it with
    ``zstandard`` (across frames: inspect writes multi-frame members), checking the
    size and CRC the archive records.
    """
    try:
        import zstandard
    except ImportError:
        raise HarnessLogError(
            f"{path}: member {info.filename!r} is zstd-compressed and the 'zstandard' package "
            "is not installed; pip install zstandard (a dependency of bayes-microbench), or "
            "convert the log with 'inspect log convert --to json'"
        ) from None
    with path.open("rb") as fh:
        fh.seek(info.header_offset)
        header = fh.read(_LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != _LOCAL_SIGNATURE:
            raise HarnessLogError(f"{path}: member {info.filename!r} has a corrupt zip header")
        fields = _LOCAL_HEADER.unpack(header)
        fh.seek(fields[10] + fields[11], 1)  # past the file name and the extra field
        compressed = fh.read(info.compress_size)
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(compressed), read_across_frames=True
        )
        data = reader.read()
    except zstandard.ZstdError as err:
        raise HarnessLogError(
            f"{path}: member {info.filename!r} is not valid zstd data ({err}); is the file "
            "complete?"
        ) from None
    if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
        raise HarnessLogError(
            f"{path}: member {info.filename!r} fails its size or CRC check; is the file complete?"
        )
    return data


def _note_status(path: Path, status: Any) -> None:
    if status not in (None, "success"):
        note(
            f"{path}: the eval's status is {status!r}; importing the samples it logged",
            logging.WARNING,
        )


# ------------------------------------------------------------------ samples
def _log_rows(path: Path, log: _Log, opts: ImportOptions) -> Iterator[dict[str, Any]]:
    spec, samples = log.spec, log.samples
    llm = spec.get("model")
    task = spec.get("task")
    if not isinstance(llm, str) or not llm.strip():
        raise HarnessLogError(f"{path}: the log names no model (eval.model)")
    if not isinstance(task, str) or not task.strip():
        raise HarnessLogError(f"{path}: the log names no task (eval.task)")
    for i, sample in enumerate(samples):
        if not isinstance(sample, dict):
            raise HarnessLogError(f"{path}: sample {i + 1} is not a JSON object")
    if not any(_scores(s) for s in samples):
        failed = f"the eval failed ({_error_text(log)}) and " if log.status == "error" else ""
        raise EmptyLogError(
            f"{path}: {failed}none of its {len(samples)} samples is scored (run with "
            f"'inspect eval --no-score', or every sample errored); score it with "
            f"'inspect score {path}'"
            if not failed
            else f"{path}: {failed}none of its {len(samples)} samples is scored; fix it and rerun"
        )
    _note_status(path, log.status)
    epochs = sorted({_epoch(s, path) for s in samples})
    if opts.epoch is not None:
        if opts.epoch not in epochs:
            raise HarnessLogError(
                f"{path}: no samples for epoch {opts.epoch}; its epochs are {epochs}"
            )
        epoch = opts.epoch
    elif len(epochs) > 1:
        raise HarnessLogError(
            f"{path}: samples were run for {len(epochs)} epochs {epochs}; choose one with "
            f"{param('epoch', 'N', placeholder=True)}"
        )
    else:
        epoch = epochs[0]
    chosen: tuple[str, str | None] | None = None
    multi = 0
    for sample in samples:
        if _epoch(sample, path) != epoch:
            continue
        where = f"{path}, sample {sample.get('id')!r}"
        item = item_id(task, sample.get("id"), where=where, field="id")
        scores = _scores(sample)
        correct, shown = np.nan, None
        if scores:
            if chosen is None:
                chosen = _choose_scorer(scores, path, opts.metric)
            correct, shown = _score_value(scores, chosen, where=where, llm=llm, item=item)
        choices = sample.get("choices")
        n_options = len(choices) if isinstance(choices, list) and len(choices) >= 2 else 0
        if n_options and several_targets(sample):
            # several correct options: 1 / n is no chance floor, so no n_options
            n_options = 0
            multi += 1
        yield {
            "llm": llm.strip(),
            "item": item,
            "subtask": task.strip(),
            "correct": correct,
            "confidence": np.nan,
            "n_options": n_options,
            "source": str(path),
            "line": 0,
            "metric": _scorer_name(chosen),
            "shown": shown,
        }
    if multi:
        note(
            f"{path}: {multi} sample(s) have several correct options; they get no "
            "n_options (1 / options is no guessing floor there)"
        )


def _scorer_name(chosen: tuple[str, str | None] | None) -> str:
    if chosen is None:
        return ""
    scorer, key = chosen
    return scorer if key is None else f"{scorer}.{key}"


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
                f"{path}: samples have several scorers {names}; choose one with {param('metric')}"
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
) -> tuple[float, str | None]:
    """The chosen score as a number, and how the log spelled it when that was a letter."""
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
            f"{param('metric', f'{scorer}.KEY', placeholder=True)}"
        )
    shown = None
    if isinstance(value, str):
        text = value.strip()
        if text in LETTERS:
            value = LETTERS[text]
            if text == "P":
                shown = "'P' (partial credit, read as 0.5)"
        elif text.lower() in WORDS:
            value = WORDS[text.lower()]
    return metric_value(value, metric=name, where=where, llm=llm, item=item), shown

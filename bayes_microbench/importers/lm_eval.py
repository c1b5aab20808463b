"""lm-evaluation-harness ``--log_samples`` output.

``lm_eval --output_path OUT --log_samples`` writes, per model, ``results_<timestamp>.json``
and one ``samples_<task>_<timestamp>.jsonl`` per task: one JSON object per sample and
filter, with ``doc_id``, ``doc_hash``, ``target``, ``filter``, ``filtered_resps``,
``arguments``, the task's metric names in ``metrics`` and each metric's value under its
own key. The layouts read (model folders, ``--output_path FILE.json``, the Open LLM
Leaderboard's ``.json`` downloads) and every rule in full: docs/harness-logs.md.

What is read
------------
llm
    ``model_name`` of the results JSON with the samples file's timestamp, else the
    model in its ``config.model_args``; else the folder name (its first ``__`` read
    as ``/``), with a :class:`HarnessLogWarning`.
item
    ``<task>:<doc_id>`` (``--item-key doc_hash``: ``<task>:<doc_hash>``), never the
    line order; runs giving one ``task:doc_id`` different document hashes stop the import.
subtask
    The task name from the file name (``samples_<task>_<timestamp>.jsonl``).
correct
    The first metric of ``--metric NAME[,NAME...]`` the task logs (default: the first
    of ``acc``, ``acc_norm``, ``exact_match``, ``prompt_level_strict_acc``); 0 / 1 /
    true / false unless ``--threshold T`` (continuous metrics only); ``[gold, pred]``
    pairs (``mcc``, ``f1``) are correct where ``pred == gold``.
filter
    ``--filter NAME`` where a task is logged under several filters, unless one is ``none``.
confidence, n_options
    Multiple-choice tasks: the softmax of the options' raw log-likelihoods at the
    ``target`` option, and the number of options; neither for several correct options.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._validate import param
from ._common import (
    HarnessLogError,
    ImportOptions,
    describe_keys,
    find_files,
    gold_pred,
    item_id,
    iter_jsonl,
    llm_from_folder,
    metric_value,
    note,
    parse_json,
    read_json,
    refuse_options,
    rows_frame,
    several_targets,
    warn,
)

logger = logging.getLogger(__name__)

FORMAT = "lm-eval"
DEFAULT_METRICS = ("acc", "acc_norm", "exact_match", "prompt_level_strict_acc")

# Keys of a logged sample that are bookkeeping, not metrics.
BOOKKEEPING = frozenset(
    {
        "doc_id",
        "doc",
        "target",
        "arguments",
        "resps",
        "filtered_resps",
        "filter",
        "metrics",
        "doc_hash",
        "prompt_hash",
        "target_hash",
        "task",
        "task_name",
    }
)

_UNUSED = frozenset({"doc", "resps", "prompt_hash", "target_hash"})
_TIMESTAMP = r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?"
SAMPLES_NAME = re.compile(rf"^samples_(?P<task>.+?)(?:_(?P<stamp>{_TIMESTAMP}))?\.jsonl?$")
# lm-eval's results JSON: results_<ts>.json, or FILE_<ts>.json for --output_path FILE.json
RESULTS_NAME = re.compile(rf"^(?P<prefix>.*?)_?(?P<stamp>{_TIMESTAMP})\.json$")
MODEL_ARG_KEYS = ("peft", "delta", "pretrained", "model", "path", "engine")


def is_samples_file(path: Path) -> bool:
    """A ``samples_<task>[_<timestamp>].jsonl`` (or ``.json``) file."""
    return SAMPLES_NAME.match(path.name) is not None


def iter_samples(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line, record)`` pairs of a samples file: JSON lines, or (``.json``) a JSON list."""
    if path.suffix == ".jsonl":
        return list(iter_jsonl(path))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise HarnessLogError(f"{path}: not UTF-8 text") from None
    stripped = text.lstrip()
    if not stripped.startswith("["):
        return list(iter_jsonl(path))  # one sample per line, as the leaderboard wrote them
    data = parse_json(text, str(path))
    if not all(isinstance(rec, dict) for rec in data):
        raise HarnessLogError(f"{path}: expected a JSON list of sample objects")
    return [(0, rec) for rec in data]


def read_lm_eval(paths: Sequence[str | Path], options: ImportOptions | None = None) -> pd.DataFrame:
    """Read lm-evaluation-harness ``samples_*.jsonl`` files into importer rows.

    Parameters
    ----------
    paths
        ``samples_<task>_<timestamp>.jsonl`` files, or folders searched
        recursively for them (a model's folder, or the whole ``--output_path``).
    options
        Metric, threshold, filter and item-key choices (:class:`ImportOptions`).

    Returns
    -------
    pandas.DataFrame
        One row per llm and logged sample: ``llm, item, subtask, correct,
        confidence, n_options, source, line, doc_hash``.
    """
    opts = options or ImportOptions()
    refuse_options(opts, FORMAT, ["epoch"])
    files = find_files(
        paths, is_samples_file, FORMAT, "an lm-eval samples file (samples_<task>_<timestamp>.jsonl)"
    )
    names = ResultsNames()
    rows: list[dict[str, Any]] = []
    for path in files:
        match = SAMPLES_NAME.match(path.name)
        assert match is not None
        llm = names.llm(path, match.group("task"), match.group("stamp"))
        # keep what is read below; the documents and raw responses can be large
        records = [
            (line, {k: v for k, v in rec.items() if k not in _UNUSED})
            for line, rec in iter_samples(path)
        ]
        if not records:
            logger.warning("%s: empty samples file, skipped", path)
            continue
        rows.extend(sample_rows(records, llm=llm, task=match.group("task"), source=path, opts=opts))
    frame = rows_frame(rows)
    logger.debug("%s: read %d results from %d files", FORMAT, len(frame), len(files))
    return frame


# ------------------------------------------------------------------ llm name
class ResultsNames:
    """The llm of each samples file, from the results JSON beside it (see the module doc).

    Each folder's results files are found and parsed once per import (the Open LLM
    Leaderboard importer asks too: :meth:`models_in`). Why: a folder name is only a
    guess (``--output_path FILE.json`` writes several models into one folder), so it is
    used with a warning and never to merge two runs of a task.
    """

    def __init__(self) -> None:
        self._results: dict[Path, dict[str, Path]] = {}  # folder -> stamp -> results file
        self._parsed: dict[Path, tuple[str | None, str | None]] = {}
        # (folder, task) -> stamps of samples files named after the folder
        self._guessed: dict[tuple[Path, str], list[Path]] = {}
        self._warned: set[Path] = set()

    def llm(self, samples: Path, task: str, stamp: str | None) -> str:
        folder = samples.parent
        by_stamp = self._results_files(folder)
        results: Path | None = None
        if stamp is not None:
            results = by_stamp.get(stamp)
        elif len(by_stamp) == 1:
            results = next(iter(by_stamp.values()))
        elif by_stamp:
            named = self.models_in(folder)
            if len(named) > 1:
                raise HarnessLogError(
                    f"{samples}: cannot tell which model wrote it (no timestamp in its name): "
                    f"the results files beside it name several models {describe_keys(named)}; "
                    "keep one model per folder"
                )
            results = next(iter(by_stamp.values()))
        if results is not None:
            name, sanitized = self._parse(results)
            if name is not None:
                self._check_folder(samples, results, name, sanitized)
                return name
        name = llm_from_folder(folder.name)
        runs = self._guessed.setdefault((folder, task), [])
        runs.append(samples)
        if len(runs) > 1:
            raise HarnessLogError(
                f"{runs[0]} and {samples}: two runs of task {task!r} in one folder and no "
                "results JSON names their models, so they may be two models; keep each "
                "run's results JSON beside its samples, or put each model in its own folder"
            )
        if folder not in self._warned:
            self._warned.add(folder)
            warn(
                f"{folder}: no lm-eval results JSON with the timestamp of its samples files "
                f"names their model; the llm is named {name!r} after the folder"
            )
        return name

    def models_in(self, folder: Path) -> set[str]:
        """The model names the lm-eval results JSONs in ``folder`` give."""
        return {
            n for p in self._results_files(folder).values() if (n := self._parse(p)[0]) is not None
        }

    def _results_files(self, folder: Path) -> dict[str, Path]:
        if folder not in self._results:
            found: dict[str, Path] = {}
            for path in sorted(folder.glob("*.json")):
                match = RESULTS_NAME.match(path.name)
                if match is None or is_samples_file(path):
                    continue
                if self._parse(path) != (None, None) or _is_results(path):
                    found.setdefault(match.group("stamp"), path)
            self._results[folder] = found
        return self._results[folder]

    def _parse(self, path: Path) -> tuple[str | None, str | None]:
        if path not in self._parsed:
            self._parsed[path] = _name_from_results(path)
        return self._parsed[path]

    @staticmethod
    def _check_folder(samples: Path, results: Path, name: str, sanitized: str | None) -> None:
        folder = samples.parent.name
        expected = sanitized or name.replace("/", "__")
        if "__" in folder and folder != expected:
            warn(
                f"{results} names the model {name!r}, but its folder is {folder!r} "
                f"(lm-eval would write {expected!r}); the llm is {name!r}, from the results file"
            )


def _is_results(path: Path) -> bool:
    try:
        data = read_json(path)
    except HarnessLogError:
        return False
    return isinstance(data, dict) and isinstance(data.get("results"), dict)


def _name_from_results(path: Path) -> tuple[str | None, str | None]:
    """``(model name, sanitized name)`` of an lm-eval results JSON; Nones for other JSON."""
    try:
        data = read_json(path)
    except HarnessLogError:
        return None, None
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        return None, None
    sanitized = data.get("model_name_sanitized")
    sanitized = sanitized.strip() if isinstance(sanitized, str) and sanitized.strip() else None
    name = data.get("model_name")
    if isinstance(name, str) and name.strip():
        return name.strip(), sanitized
    config = data.get("config")
    if isinstance(config, dict):
        return model_from_args(config.get("model_args")), sanitized
    return None, sanitized


def model_from_args(model_args: Any) -> str | None:
    """The model named in lm-eval ``model_args`` (``"pretrained=org/m,dtype=..."`` or a dict)."""
    if isinstance(model_args, dict):
        for key in MODEL_ARG_KEYS:
            value = model_args.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
        return None
    if not isinstance(model_args, str):
        return None
    parts = dict(
        part.split("=", 1) for part in model_args.split(",") if "=" in part and part.strip()
    )
    parts = {k.strip(): v.strip() for k, v in parts.items()}
    for key in MODEL_ARG_KEYS:
        if parts.get(key):
            return parts[key]
    return None


# ------------------------------------------------------------------ records
def sample_rows(
    records: Sequence[tuple[int, dict[str, Any]]],
    *,
    llm: str,
    task: str,
    source: Path | str,
    opts: ImportOptions,
) -> Iterable[dict[str, Any]]:
    """Importer rows from one task's logged samples of one llm (lm-eval record layout).

    ``records`` are ``(line, record)`` pairs; ``line`` is 0 where the source
    has no lines (a Parquet file).
    """
    records = _one_filter(records, task, source, opts.filter)
    metric = _choose_metric(records, task, source, opts.metric)
    key_field = opts.item_key
    if any(gold_pred(rec.get(metric)) is not None for _, rec in records):
        note(
            f"{source}: metric {metric!r} is logged as [gold, pred] pairs (for a corpus-level "
            "score); an item counts as correct where pred == gold"
        )
    for line, rec in records:
        where = f"{source}, line {line}" if line else f"{source}, row {_row_label(rec)}"
        item = item_id(task, rec.get(key_field), where=where, field=key_field)
        if metric not in rec:
            raise HarnessLogError(f"{where}: no value for metric {metric!r}")
        correct = metric_value(rec[metric], metric=metric, where=where, llm=llm, item=item)
        confidence, n_options = choice_confidence(rec)
        doc_hash = rec.get("doc_hash")
        yield {
            "llm": llm,
            "item": item,
            "subtask": task,
            "correct": correct,
            "confidence": confidence,
            "n_options": n_options,
            "source": str(source),
            "line": line,
            "metric": metric,
            "doc_hash": str(doc_hash) if doc_hash is not None else None,
        }


def _row_label(rec: dict[str, Any]) -> str:
    return f"doc_id {rec['doc_id']}" if "doc_id" in rec else "?"


def _one_filter(
    records: Sequence[tuple[int, dict[str, Any]]],
    task: str,
    source: Path | str,
    wanted: str | None,
) -> Sequence[tuple[int, dict[str, Any]]]:
    filters = list(dict.fromkeys(rec.get("filter") for _, rec in records))
    if len(filters) <= 1:
        return records
    if wanted is not None:
        if wanted not in filters:
            raise HarnessLogError(
                f"{source}: task {task!r} has no filter {wanted!r}; its filters are {filters}"
            )
        chosen = wanted
    elif "none" in filters:
        chosen = "none"
    else:
        raise HarnessLogError(
            f"{source}: task {task!r} is logged under several filters {filters}; "
            f"choose one with {param('lm_filter')}"
        )
    return [(line, rec) for line, rec in records if rec.get("filter") == chosen]


def metric_candidates(wanted: str) -> list[str]:
    """``"acc_norm,exact_match"`` -> ``["acc_norm", "exact_match"]`` (first present wins)."""
    return [part.strip() for part in wanted.split(",") if part.strip()]


def _metric_names(rec: dict[str, Any]) -> list[str]:
    listed = rec.get("metrics")
    if isinstance(listed, (list, tuple, np.ndarray)) and len(listed):
        return [str(m) for m in listed]
    return [k for k, v in rec.items() if k not in BOOKKEEPING and _scalar_like(v)]


def _scalar_like(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.integer, np.floating, np.bool_)) or (
        isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float)) for v in value)
    )


def _choose_metric(
    records: Sequence[tuple[int, dict[str, Any]]], task: str, source: Path | str, wanted: str | None
) -> str:
    first = records[0][1]
    names = _metric_names(first)
    if wanted is not None:
        candidates = metric_candidates(wanted)
        for name in candidates:
            if any(name in rec for _, rec in records):
                return name
        shown = candidates[0] if len(candidates) == 1 else candidates
        raise HarnessLogError(
            f"{source}: task {task!r} has no metric {shown!r}; its metrics are {names} "
            f"({param('metric')} takes a comma-separated list: the first one a task logs is "
            "used)"
        )
    for name in DEFAULT_METRICS:
        if name in first:
            return name
    if not names:
        raise HarnessLogError(
            f"{source}: task {task!r} logs no per-item metric; is this an lm-eval samples file?"
        )
    raise HarnessLogError(
        f"{source}: task {task!r} has none of the default metrics {list(DEFAULT_METRICS)}; "
        f"choose one of {names} with {param('metric')}"
    )


# ------------------------------------------------------------------ confidence
_GREEDY = frozenset({"True", "False", "true", "false", "0", "1"})


def _loglikelihood(resp: Any) -> float | None:
    """The log-likelihood of a ``[loglik, is_greedy]`` response (logged as strings), else None."""
    if isinstance(resp, np.ndarray):
        resp = resp.tolist()
    if isinstance(resp, (list, tuple)) and len(resp) == 1:
        resp = resp[0]  # an unfiltered ``resps`` entry: a list holding the pair
        if isinstance(resp, np.ndarray):
            resp = resp.tolist()
    if not isinstance(resp, (list, tuple)) or len(resp) != 2:
        return None
    value, greedy = resp
    if str(greedy) not in _GREEDY:
        return None
    try:
        ll = float(value)
    except (TypeError, ValueError):
        return None
    return ll if not math.isnan(ll) else None


def _continuations(rec: dict[str, Any]) -> list[str] | None:
    args = rec.get("arguments")
    conts: list[str] = []
    if isinstance(args, dict):
        for key in sorted(args, key=lambda k: int(re.sub(r"\D", "", k) or 0)):
            entry = args[key]
            if entry is None:
                continue  # Parquet unifies the struct over rows: absent options are null
            if not isinstance(entry, dict) or "arg_1" not in entry:
                return None
            conts.append(str(entry["arg_1"]))
    elif isinstance(args, (list, tuple, np.ndarray)):
        for entry in args:
            if not isinstance(entry, (list, tuple, np.ndarray)) or len(entry) < 2:
                return None
            conts.append(str(entry[1]))
    else:
        return None
    return conts


def _target_index(rec: dict[str, Any], n: int) -> int | None:
    target = rec.get("target")
    if isinstance(target, np.ndarray):
        target = target.tolist()
    if isinstance(target, (list, tuple)) and len(target) == 1:
        target = target[0]
    if isinstance(target, (bool, np.bool_)):
        return None
    if isinstance(target, (int, np.integer)):
        index = int(target)
        return index if 0 <= index < n else None
    if isinstance(target, str):
        text = target.strip()
        if re.fullmatch(r"\d+", text):
            index = int(text)
            return index if 0 <= index < n else None
        conts = _continuations(rec)
        if conts is not None and len(conts) == n:
            hits = [i for i, c in enumerate(conts) if c.strip() == text]
            if len(hits) == 1:
                return hits[0]
    return None


def choice_confidence(rec: dict[str, Any]) -> tuple[float, int]:
    """``(confidence, n_options)`` of a logged multiple-choice sample, ``(nan, 0)`` otherwise.

    A sample is multiple choice when it has at least two requests and every
    ``filtered_resps`` entry is a ``[loglik, is_greedy]`` pair. The confidence
    is ``softmax(logliks)[target]``; it is NaN when the target option cannot
    be identified (text matching no option). Tasks scored by ``acc_mutual_info``
    log twice as many requests as options, and a sample with several correct
    options (a list ``target``) has no single right option and no 1/n chance
    floor: they get neither.
    """
    metrics = rec.get("metrics")
    if isinstance(metrics, (list, tuple, np.ndarray)) and "acc_mutual_info" in list(metrics):
        return math.nan, 0
    if several_targets(rec):
        return math.nan, 0
    resps = rec.get("filtered_resps")
    if isinstance(resps, np.ndarray):
        resps = resps.tolist()
    if not isinstance(resps, (list, tuple)) or len(resps) < 2:
        return math.nan, 0
    lls: list[float] = []
    for resp in resps:
        # the usual case, a ["-1.23", "False"] pair, without the general parser
        if type(resp) is list and len(resp) == 2 and isinstance(resp[1], str):
            if resp[1] not in _GREEDY:
                return math.nan, 0
            try:
                lls.append(float(resp[0]))
            except (TypeError, ValueError):
                return math.nan, 0
            continue
        ll = _loglikelihood(resp)
        if ll is None:
            return math.nan, 0
        lls.append(ll)
    n = len(lls)
    index = _target_index(rec, n)
    if index is None or not all(math.isfinite(v) for v in lls):
        return math.nan, n
    top = max(lls)
    weights = [math.exp(v - top) for v in lls]
    return min(1.0, max(0.0, weights[index] / math.fsum(weights))), n

"""The study's meta-evaluation protocol, vectorized, paired and resumable.

For each run (the study's "How Reliable is Language Model Micro-Benchmarking?",
``evaluate-microbenchmarks.py``, with two documented departures below):

1. sample ``n_targets`` target llms uniformly (or take a fixed target group);
2. order the remaining llms at random; the first ``k`` are the source llms of
   a cell with ``k`` sources (capped at what remains);
3. split the items 50/50 *within each subtask* into seen and unseen
   (``floor(size / 2)`` seen per subtask, as the study);
4. each selector sees only the source llms on the seen items, picks ``n``
   seen items and estimates each target's accuracy on the full seen set;
5. for every target pair, the estimated difference's sign is compared with
   the sign of the accuracy difference on the full seen set and on the
   unseen set. An estimated difference of exactly 0 is wrong; a true
   difference of exactly 0 counts as positive (the study's
   ``math.copysign(1, 0.0)``), so such a pair is "right" when the first llm's
   estimate is the larger; a NaN estimate (a target with no observed
   response on the chosen items) is wrong.

Per cell (selector, size, source count) over all runs: the share of pairs
ranked correctly, Kendall's tau-b between estimates and seen (and unseen)
accuracies, the mean absolute estimation error, and MDAD
(:mod:`bayes_microbench.mdad`).

Two departures from the study's script, for paired, reproducible grids: each
run's targets, item split and source order are fixed across source counts, and
every random stream is keyed by what it serves, so a cell's numbers do not depend
on the rest of the grid. Why: docs/decisions/0004-evaluate-cells-record-their-settings.md.

Vectorized with numpy over runs, targets and pairs; the only Python loops are over
cells and runs (one selector call each). Where the random selector is in the grid and
the data are complete, the grid adds ``random-analytic`` rows: the same runs' pairs
with the item sampling integrated out exactly (:mod:`bayes_microbench.analytic`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._validate import check_int_range, param, plural, preview, span
from .exceptions import ConfigurationError, UserInputError
from .io import write_atomic
from .mdad import (
    DEFAULT_THRESHOLD,
    bin_shares,
    check_threshold,
    mdad_from_pairs,
    mdad_from_table,
    monotone_from_table,
)
from .responses import Responses

logger = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
ANALYTIC_NAME = "random-analytic"
SPLITS = ("seen", "unseen")
MDAD_COLUMNS = [
    "selector",
    "n_items",
    "n_source_llms",
    "split",
    "mdad",
    "mdad_lower",
    "mdad_upper",
    "reached",
]

# SeedSequence spawn-key tags, one per kind of random stream
_TAG_RUN, _TAG_PREPARE, _TAG_SELECT, _TAG_BOOT = 0, 1, 2, 3


def _name_key(name: str) -> int:
    return zlib.crc32(name.encode("utf-8"))


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=tuple(key)))


# --------------------------------------------------------------------------- design
@dataclass(frozen=True)
class RunDesign:
    """One run: target llms, the order sources are drawn in, the item split."""

    targets: np.ndarray
    source_order: np.ndarray
    seen: np.ndarray
    unseen: np.ndarray

    def sources(self, n_sources: int) -> np.ndarray:
        return self.source_order[: min(int(n_sources), len(self.source_order))]


def split_items(
    subtask_codes: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Seen/unseen item positions: ``floor(size / 2)`` of each subtask are seen."""
    codes = np.asarray(subtask_codes)
    keys = rng.random(len(codes))
    order = np.lexsort((keys, codes))  # by subtask, random within
    sorted_codes = codes[order]
    starts = np.r_[0, np.nonzero(np.diff(sorted_codes))[0] + 1]
    sizes = np.diff(np.r_[starts, len(codes)])
    rank = np.arange(len(codes)) - np.repeat(starts, sizes)
    is_seen = rank < np.repeat(sizes // 2, sizes)
    return np.sort(order[is_seen]), np.sort(order[~is_seen])


def design_runs(
    n_llms: int,
    subtask_codes: np.ndarray,
    *,
    n_runs: int,
    n_targets: int,
    random_seed: int,
    fixed_targets: np.ndarray | None = None,
) -> list[RunDesign]:
    """Targets, source order and item split of every run (run ``r`` uses its own stream)."""
    runs = []
    for r in range(n_runs):
        rng = _rng(random_seed, _TAG_RUN, r)
        if fixed_targets is None:
            targets = np.sort(rng.choice(n_llms, size=n_targets, replace=False))
        else:
            targets = np.asarray(fixed_targets, dtype=np.int64)
        rest = np.setdiff1d(np.arange(n_llms), targets)
        source_order = rng.permutation(rest)
        seen, unseen = split_items(subtask_codes, rng)
        runs.append(RunDesign(targets, source_order, seen, unseen))
    return runs


# --------------------------------------------------------------------------- pairs
def _nanmean_rows(x: np.ndarray) -> np.ndarray:
    obs = ~np.isnan(x)
    n = obs.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.nansum(x, axis=-1) / n, np.nan)


def pair_outcomes(estimates: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairwise differences and correctness, vectorized over leading axes.

    Parameters
    ----------
    estimates, truth
        ``(..., n_targets)`` estimated and reference accuracies.

    Returns
    -------
    true_diff, correct
        ``(..., n_pairs)`` (pairs in ``numpy.triu_indices`` order): the
        reference difference first minus second, and whether the estimated
        difference has the same sign (0 and NaN estimates are wrong; a zero
        reference difference counts as positive, as in the study).
    """
    i, j = np.triu_indices(estimates.shape[-1], 1)
    est = estimates[..., i] - estimates[..., j]
    true = truth[..., i] - truth[..., j]
    with np.errstate(invalid="ignore"):
        correct = (est != 0) & (np.sign(est) == np.copysign(1.0, true))
    return true, correct


def kendall_tau_b(estimates: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Kendall's tau-b along the last axis (as ``scipy.stats.kendalltau``), vectorized."""
    i, j = np.triu_indices(estimates.shape[-1], 1)
    se = np.sign(estimates[..., i] - estimates[..., j])
    st = np.sign(truth[..., i] - truth[..., j])
    n_pairs = len(i)
    with np.errstate(invalid="ignore", divide="ignore"):
        num = (se * st).sum(axis=-1)
        den = np.sqrt((n_pairs - (se == 0).sum(axis=-1)) * (n_pairs - (st == 0).sum(axis=-1)))
        return np.where(den > 0, num / den, np.nan)


# --------------------------------------------------------------------------- cells
@dataclass
class CellResult:
    """One (selector, size, source count) cell over all runs."""

    selector: str
    n_items: int
    n_source_llms: int
    metrics: dict[str, Any]
    mdad: list[dict[str, Any]]
    pairs: pd.DataFrame | None = None
    #: the pairs table as the bytes of its Parquet file (what a grid task returns)
    pairs_parquet: bytes | None = None


@dataclass
class _RunTruth:
    target_seen: np.ndarray  # (T, n_seen) responses of the targets on the seen items
    seen_acc: np.ndarray  # (T,)
    unseen_acc: np.ndarray  # (T,)


def _truth(values: np.ndarray, design: RunDesign) -> _RunTruth:
    tv = values[design.targets]
    seen = tv[:, design.seen]
    return _RunTruth(seen, _nanmean_rows(seen), _nanmean_rows(tv[:, design.unseen]))


def summarize_cell(
    selector: str,
    n_items: int,
    n_source_llms: int,
    estimates: np.ndarray,
    seen_acc: np.ndarray,
    unseen_acc: np.ndarray,
    targets: np.ndarray,
    llm_names: np.ndarray,
    *,
    threshold: float,
    boot_seed: np.random.Generator | int,
    extra: dict[str, Any] | None = None,
) -> CellResult:
    """Metrics, MDAD rows and the per-pair table of one cell from ``(runs, targets)`` arrays."""
    n_runs, n_targets = estimates.shape
    seen_diff, seen_ok = pair_outcomes(estimates, seen_acc)
    unseen_diff, unseen_ok = pair_outcomes(estimates, unseen_acc)
    i, j = np.triu_indices(n_targets, 1)
    est_diff = estimates[:, i] - estimates[:, j]
    metrics: dict[str, Any] = {
        "selector": selector,
        "n_items": int(n_items),
        "n_source_llms": int(n_source_llms),
        "n_runs": int(n_runs),
        "n_targets": int(n_targets),
        "n_pairs": int(seen_ok.size),
    }
    rng = np.random.default_rng(boot_seed)
    mdad_rows = []
    for split, diff, ok, acc in (
        ("seen", seen_diff, seen_ok, seen_acc),
        ("unseen", unseen_diff, unseen_ok, unseen_acc),
    ):
        metrics[f"agreement_{split}"] = float(ok.mean())
        tau = kendall_tau_b(estimates, acc)
        metrics[f"kendall_tau_{split}"] = _nanmean(tau)
        metrics[f"error_{split}"] = _nanmean(_nanmean_rows(np.abs(estimates - acc)))
        table, boot = bin_shares(diff, ok, random_seed=rng)
        res = mdad_from_table(table, threshold)
        mdad_rows.append(
            {
                "selector": selector,
                "n_items": int(n_items),
                "n_source_llms": int(n_source_llms),
                "split": split,
                **res.as_row(),
            }
        )
        for method in ("isotonic", "logistic"):
            mono = monotone_from_table(table, boot, method=method, threshold=threshold)
            metrics[f"mdad_{method}_{split}"] = mono.mdad
            metrics[f"mdad_{method}_{split}_lower"] = mono.lower
            metrics[f"mdad_{method}_{split}_upper"] = mono.upper
    metrics.update(extra or {})
    names = pd.Categorical.from_codes(np.arange(len(llm_names)), categories=list(llm_names))
    ta, tb = targets[:, i], targets[:, j]
    pairs = pd.DataFrame(
        {
            "selector": pd.Categorical.from_codes(
                np.zeros(seen_ok.size, dtype=np.int8), categories=[selector]
            ),
            "n_items": np.full(seen_ok.size, n_items, dtype=np.int32),
            "n_source_llms": np.full(seen_ok.size, n_source_llms, dtype=np.int32),
            "run": np.repeat(np.arange(n_runs, dtype=np.int32), len(i)),
            "llm_a": names[ta.ravel()],
            "llm_b": names[tb.ravel()],
            "estimated_diff": est_diff.ravel(),
            "seen_diff": seen_diff.ravel(),
            "unseen_diff": unseen_diff.ravel(),
            "seen_correct": seen_ok.ravel(),
            "unseen_correct": unseen_ok.ravel(),
        }
    )
    return CellResult(selector, n_items, n_source_llms, metrics, mdad_rows, pairs)


def _nanmean(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(np.nanmean(x)) if np.isfinite(x).any() else math.nan


@dataclass(frozen=True)
class GridData:
    """What every task of a grid reads: the response matrix's arrays and the runs.

    Picklable and sent once per worker (:mod:`bayes_microbench._parallel`); the
    tasks (:class:`BlockTask`, :class:`AnalyticTask`) are small descriptions.
    """

    values: np.ndarray
    subtask_codes: np.ndarray
    confidence: np.ndarray | None
    llms: np.ndarray
    designs: tuple[RunDesign, ...]

    @classmethod
    def from_responses(cls, responses: Responses, designs: Sequence[RunDesign]) -> GridData:
        return cls(
            values=responses.values,
            subtask_codes=responses.subtask_codes,
            confidence=responses.confidence,
            llms=responses.llms,
            designs=tuple(designs),
        )


@dataclass(frozen=True)
class BlockTask:
    """All ``sizes`` of one (selector, source count) over every run."""

    selector: str
    n_sources: int
    sizes: tuple[int, ...]
    seed: int
    threshold: float


@dataclass(frozen=True)
class AnalyticTask:
    """The ``random-analytic`` rows of one size."""

    n_items: int
    seed: int
    threshold: float


def run_task(data: GridData, task: BlockTask | AnalyticTask) -> Any:
    """One grid task: ``(cells, seconds)`` for a block, ``[seen row, unseen row]`` for a size.

    Why: the unit of work the grid sends to a worker (a pure function of its arguments).
    """
    if isinstance(task, BlockTask):
        t0 = time.perf_counter()
        cells = _block_cells(
            data,
            task.selector,
            task.n_sources,
            task.sizes,
            random_seed=task.seed,
            threshold=task.threshold,
        )
        # the worker encodes the Parquet file: a few MB to send back instead of ten times
        # that pickled, and the writing process only writes bytes
        for cell in cells:
            cell.pairs_parquet = _parquet_bytes(cell.pairs)
            cell.pairs = None
        return cells, time.perf_counter() - t0
    return _analytic_size(data, task.n_items, random_seed=task.seed, threshold=task.threshold)


def _parquet_bytes(frame: pd.DataFrame | None) -> bytes:
    import io

    assert frame is not None
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def run_selector_block(
    responses: Responses,
    designs: Sequence[RunDesign],
    selector_name: str,
    n_sources: int,
    sizes: Sequence[int],
    *,
    random_seed: int,
    threshold: float = DEFAULT_THRESHOLD,
    on_run: Callable[[], None] | None = None,
) -> list[CellResult]:
    """All ``sizes`` of one (selector, source count): one ``prepare`` per run, reused.

    Parameters
    ----------
    responses
        The full response matrix.
    designs
        The runs (:func:`design_runs`).
    selector_name
        A name registered in :data:`bayes_microbench.selectors.SELECTORS`.
    n_sources
        Requested source llms (capped at what remains after the targets).
    sizes
        Subset sizes to evaluate.
    random_seed
        The grid's seed; the selector's streams are derived from it.
    threshold
        MDAD threshold.
    on_run
        Called after each run (progress).

    Returns
    -------
    list of CellResult
        One per size, in the order of ``sizes``.
    """
    data = GridData.from_responses(responses, designs)
    return _block_cells(
        data,
        selector_name,
        n_sources,
        sizes,
        random_seed=random_seed,
        threshold=threshold,
        on_run=on_run,
    )


def _block_cells(
    data: GridData,
    selector_name: str,
    n_sources: int,
    sizes: Sequence[int],
    *,
    random_seed: int,
    threshold: float,
    on_run: Callable[[], None] | None = None,
) -> list[CellResult]:
    from .selectors import get_selector

    selector = get_selector(selector_name)
    values = data.values
    codes = data.subtask_codes
    conf = data.confidence
    designs = data.designs
    key = _name_key(selector_name)
    n_runs = len(designs)
    n_t = len(designs[0].targets)
    est = {n: np.full((n_runs, n_t), np.nan) for n in sizes}
    seen_acc = np.empty((n_runs, n_t))
    unseen_acc = np.empty((n_runs, n_t))
    targets = np.empty((n_runs, n_t), dtype=np.int64)
    notes: dict[int, set[str]] = {int(n): set() for n in sizes}  # per size, over the runs
    used = 0
    for r, design in enumerate(designs):
        truth = _truth(values, design)
        seen_acc[r], unseen_acc[r], targets[r] = truth.seen_acc, truth.unseen_acc, design.targets
        src = design.sources(n_sources)
        used = len(src)
        source = values[np.ix_(src, design.seen)]
        src_conf = None if conf is None else conf[np.ix_(src, design.seen)]
        prepared = selector.prepare(
            source,
            codes[design.seen],
            src_conf,
            random_seed=_rng(random_seed, _TAG_PREPARE, key, int(n_sources), r),
        )
        for n in sizes:
            sel = prepared.select(
                int(n), random_seed=_rng(random_seed, _TAG_SELECT, key, int(n_sources), r, int(n))
            )
            est[n][r] = prepared.estimate(sel, truth.target_seen[:, sel.items])
            # keep the selector's categorical notes (e.g. "signal: correctness"),
            # not per-run numbers such as allocations or a free-text "note"
            notes[int(n)].update(
                f"{k}: {v}"
                for k, v in sel.info.items()
                if isinstance(v, str | bool) and k != "note"
            )
        # before the next run's prepare: one run's matrices at a time (anchor-points holds
        # 432 MB at 6000 seen items)
        del prepared
        if on_run is not None:
            on_run()
    out = []
    for n in sizes:
        out.append(
            summarize_cell(
                selector_name,
                int(n),
                int(n_sources),
                est[n],
                seen_acc,
                unseen_acc,
                targets,
                data.llms,
                threshold=threshold,
                boot_seed=_rng(random_seed, _TAG_BOOT, key, int(n_sources), int(n)),
                extra={"n_source_llms_used": used, "notes": "; ".join(sorted(notes[int(n)]))},
            )
        )
    return out


def analytic_rows(
    responses: Responses,
    designs: Sequence[RunDesign],
    sizes: Sequence[int],
    *,
    random_seed: int,
    threshold: float = DEFAULT_THRESHOLD,
) -> dict[int, list[dict[str, Any]]]:
    """Exact MDAD of uniform random selection on the protocol's own pairs, per size.

    Uses the same runs (targets, splits) as the Monte Carlo cells; item
    sampling is integrated out exactly (:mod:`bayes_microbench.analytic`).
    The interval reflects only which pairs were drawn (see
    :func:`bayes_microbench.analytic.analytic_mdad`). The rows are the same
    for every source count (random selection uses no source llms); the grid
    writes them once per source count so that every cell has its row.
    Returns ``{n: [seen row, unseen row]}`` without ``n_source_llms``.
    """
    data = GridData.from_responses(responses, designs)
    return {
        int(n): _analytic_size(data, int(n), random_seed=random_seed, threshold=threshold)
        for n in sizes
    }


def _analytic_pairs(data: GridData) -> tuple[np.ndarray, ...]:
    """Every run's pairs: discordance counts and the seen / unseen accuracy differences."""
    from .analytic import pair_counts

    only_a, only_b, seen_d, unseen_d = [], [], [], []
    for design in data.designs:
        truth = _truth(data.values, design)
        _, _, oa, ob = pair_counts(truth.target_seen)
        only_a.append(oa)
        only_b.append(ob)
        i, j = np.triu_indices(len(design.targets), 1)
        seen_d.append(truth.seen_acc[i] - truth.seen_acc[j])
        unseen_d.append(truth.unseen_acc[i] - truth.unseen_acc[j])
    return tuple(np.concatenate(x) for x in (only_a, only_b, seen_d, unseen_d))


def _analytic_size(
    data: GridData, n: int, *, random_seed: int, threshold: float
) -> list[dict[str, Any]]:
    from .analytic import prob_ahead_behind

    oa_all, ob_all, seen_all, unseen_all = _analytic_pairs(data)
    n_seen = len(data.designs[0].seen)
    rng = _rng(random_seed, _TAG_BOOT, _name_key(ANALYTIC_NAME), int(n))
    rows = []
    ahead, behind = prob_ahead_behind(oa_all, ob_all, n_seen, int(n))
    for split, diff in (("seen", seen_all), ("unseen", unseen_all)):
        p = np.where(np.copysign(1.0, diff) > 0, ahead, behind)
        res = mdad_from_pairs(diff, p, threshold=threshold, random_seed=rng)
        rows.append(
            {
                "selector": ANALYTIC_NAME,
                "n_items": int(n),
                "split": split,
                **res.as_row(),
                "agreement": float(p.mean()),
            }
        )
    return rows


# --------------------------------------------------------------------------- grid
@dataclass(frozen=True)
class GridConfig:
    """An evaluation grid. ``design`` fields must match to resume into a folder;
    ``selectors``, ``sizes`` and ``source_llms`` may change between reruns (every
    cell's numbers are independent of the rest of the grid)."""

    selectors: tuple[str, ...]
    sizes: tuple[int, ...]
    source_llms: tuple[int, ...]
    target_llms: int = 50
    runs: int = 50
    seed: int = 0
    threshold: float = DEFAULT_THRESHOLD
    target_group: str | None = None
    analytic: bool = True

    def design(self, responses: Responses, fixed_targets: np.ndarray | None) -> dict[str, Any]:
        return {
            "protocol_version": PROTOCOL_VERSION,
            "data_fingerprint": fingerprint(responses),
            "n_llms": responses.n_llms,
            "n_items": responses.n_items,
            "target_llms": self.target_llms if fixed_targets is None else len(fixed_targets),
            "runs": self.runs,
            "seed": self.seed,
            "threshold": self.threshold,
            "target_group": self.target_group,
            "target_group_llms": None
            if fixed_targets is None
            else [str(x) for x in responses.llms[fixed_targets]],
        }


def fingerprint(responses: Responses) -> str:
    """SHA-256 of the responses (:meth:`~bayes_microbench.responses.Responses.fingerprint`)."""
    return responses.fingerprint()


def load_target_group(spec: str, responses: Responses) -> np.ndarray:
    """``FILE:KEY`` (a JSON object of name lists) -> llm positions in ``responses``."""
    name = param("target_group")
    path_text, sep, key = spec.rpartition(":")
    if not sep or not path_text or not key:
        raise UserInputError(
            f"{param('target_group', spec)}: expected FILE:KEY, "
            "e.g. gpqa.llm-groups.json:8b_instruct"
        )
    path = Path(path_text)
    try:
        groups = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserInputError(f"{name}: {path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserInputError(f"{name}: {path}: not a JSON file ({err})") from None
    if not isinstance(groups, dict) or key not in groups:
        keys = list(groups) if isinstance(groups, dict) else []
        raise UserInputError(
            f"{name}: {path} has no group {key!r}; groups there: {preview(keys, 10)}"
        )
    names = groups[key]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise UserInputError(f"{name}: {path}:{key} must be a list of llm names")
    index = {str(n): k for k, n in enumerate(responses.llms)}
    absent = [n for n in names if n not in index]
    if absent:
        raise UserInputError(
            f"{name}: llms of {path.name}:{key} not in the responses {preview(absent)}"
        )
    if len(set(names)) < 2:
        raise UserInputError(f"{name}: {path.name}:{key} needs at least 2 distinct llms")
    return np.array(sorted({index[n] for n in names}), dtype=np.int64)


def validate_grid(
    config: GridConfig, responses: Responses, n_seen: int, n_fixed: int | None
) -> None:
    """Check the grid against the data before any work (user errors)."""
    from .selectors import SELECTORS

    unknown = [s for s in config.selectors if s not in SELECTORS]
    if unknown:
        raise ConfigurationError(
            f"{param('selectors')}: unknown selector(s) {preview(unknown)}; "
            f"choose from {', '.join(SELECTORS)}"
        )
    if not config.selectors:
        raise ConfigurationError(f"{param('selectors')}: give at least one selector")
    too_big = [n for n in config.sizes if n > n_seen]
    if too_big:
        raise ConfigurationError(
            f"{param('sizes')}: {preview(too_big)} larger than the "
            f"{plural(n_seen, 'seen item')} (half "
            f"of each subtask of the {plural(responses.n_items, 'item')}); choose "
            f"{span(1, n_seen, 'item')}"
        )
    n_targets = n_fixed if n_fixed is not None else config.target_llms
    if n_fixed is None:
        try:
            check_int_range(
                config.target_llms,
                "target_llms",
                2,
                responses.n_llms - 1,
                noun="target llm",
                context=f"the responses have {plural(responses.n_llms, 'llm')} and one must "
                "stay a source",
                remedy="use responses with at least 3 llms",
            )
        except UserInputError as err:
            raise ConfigurationError(str(err)) from None
    if responses.n_llms - n_targets < 1:
        raise ConfigurationError(
            f"{param('target_group')}: all {responses.n_llms} llms are targets; "
            "none is left as a source"
        )
    if config.runs < 1:
        raise ConfigurationError(f"{param('runs')} must be at least 1, got {config.runs}")
    check_threshold(config.threshold, "threshold")


def cell_stem(selector: str, n_items: int, n_sources: int) -> str:
    return f"{selector}__n{n_items}__s{n_sources}"


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating | float):
        return None if math.isnan(float(obj)) else float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def _write_json(path: Path, obj: Any) -> None:
    write_atomic(path, lambda t: t.write_text(json.dumps(_json_safe(obj), indent=2) + "\n"))


def selector_settings(name: str) -> dict[str, Any]:
    """The settings a selector runs with: its public attributes, plain values as they are.

    Parameters
    ----------
    name
        A registered selector name, or ``random-analytic`` (no settings).

    Returns
    -------
    dict
        Attribute name to value; a value that is not a plain number, text or
        list of them is recorded by its type name.

    Why: a cell's numbers depend on them, so a resumed cell must have been computed with the same.
    """
    if name == ANALYTIC_NAME:
        return {}
    from .selectors import get_selector

    selector = get_selector(name)
    found = {"name": getattr(selector, "name", name)}
    found.update({k: v for k, v in vars(selector).items() if not k.startswith("_")})
    return {k: _plain(v) for k, v in sorted(found.items())}


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple) and all(
        v is None or isinstance(v, bool | int | float | str) for v in value
    ):
        return list(value)
    return f"<{type(value).__name__}>"


def cell_settings(
    design: dict[str, Any], selector: str, n_items: int, n_sources: int
) -> dict[str, Any]:
    """Everything a cell's numbers depend on, as its file records it.

    The grid's design (protocol version, data fingerprint and shape, targets,
    runs, seed, threshold, target group) and the cell's own selector, selector
    settings, subset size and source count. A rerun reuses a cell only when its
    recorded settings equal these (:func:`evaluate_grid`).
    """
    return _json_safe(
        {
            **design,
            "selector": selector,
            "selector_settings": selector_settings(selector),
            "subset_size": int(n_items),
            "source_llms": int(n_sources),
        }
    )


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_cell(path: Path) -> dict[str, Any]:
    """A cell file of an ``evaluate`` folder, checked; a damaged one is a user error naming it.

    Returns
    -------
    dict
        ``metrics`` (dict), ``mdad`` (list of rows) and, from this version on,
        ``settings`` and ``pairs_sha256``.
    """
    todo = "delete it and rerun the same 'evaluate' command to recompute that cell"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserInputError(f"{path}: cannot be read ({err}); {todo}") from None
    if not text.strip():
        raise UserInputError(f"{path}: the cell file is empty (an interrupted write?); {todo}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserInputError(
            f"{path}: not valid JSON ({err.msg} at line {err.lineno}); {todo}"
        ) from None
    rows = data.get("mdad") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("metrics"), dict)
        or not isinstance(rows, list)
        or not all(isinstance(r, dict) and set(MDAD_COLUMNS) <= set(r) for r in rows)
    ):
        raise UserInputError(
            f"{path}: not a cell file of 'bayes-microbench evaluate' (it needs 'metrics' and "
            f"'mdad' rows with {', '.join(MDAD_COLUMNS)}); {todo}"
        )
    for row in rows:
        for col in ("mdad", "mdad_lower", "mdad_upper"):
            v = row[col]
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise UserInputError(f"{path}: {col} is {v!r}, not a number; {todo}")
        if not isinstance(row["reached"], bool):
            raise UserInputError(f"{path}: reached is {row['reached']!r}, not true/false; {todo}")
    return data


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _reusable(out: Path, stem: str, settings: dict[str, Any], *, with_pairs: bool) -> bool:
    """Whether the cell ``stem`` in ``out`` can be reused; refuses one of other settings."""
    path = out / "cells" / f"{stem}.json"
    if not path.exists():
        return False
    data = read_cell(path)
    recorded = data.get("settings")
    if not isinstance(recorded, dict):
        raise UserInputError(
            f"{param('output', str(out))}: cells/{stem}.json was written by an older version "
            "of bayes-microbench and does not record the settings it was computed with; "
            f"rerun with a new {param('output')} folder"
        )
    differ = [
        k for k in sorted(set(recorded) | set(settings)) if recorded.get(k) != settings.get(k)
    ]
    if differ:
        shown = ", ".join(
            f"{k} ({_shown(recorded.get(k))} there, {_shown(settings.get(k))} now)" for k in differ
        )
        raise UserInputError(
            f"{param('output', str(out))}: cells/{stem}.json was computed with other "
            f"settings: {shown}; rerun with a new {param('output')} folder or the same settings"
        )
    if not with_pairs:
        return True
    pairs = out / "pairs" / f"{stem}.parquet"
    if not pairs.exists():
        return False  # written before its cell file; the cell is recomputed
    if _sha256(pairs) != data.get("pairs_sha256"):
        raise UserInputError(
            f"{pairs}: does not match cells/{stem}.json (damaged, or copied from another run); "
            "delete both and rerun the same 'evaluate' command to recompute that cell"
        )
    return True


@dataclass
class GridReport:
    """What :func:`evaluate_grid` did and where its outputs are."""

    output: Path
    computed: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    mdad: pd.DataFrame | None = None
    metrics: pd.DataFrame | None = None
    seconds: float = 0.0
    skipped_analytic: str | None = None


def _check_previous_config(out: Path, design: dict[str, Any]) -> None:
    cfg_path = out / "config.json"
    if not cfg_path.exists():
        return
    try:
        previous = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as err:
        raise UserInputError(
            f"{cfg_path}: unreadable ({err}); delete it to resume (each cell records its own "
            f"settings), or choose a new {param('output')} folder"
        ) from None
    before = previous.get("design") if isinstance(previous, dict) else None
    if not isinstance(before, dict):
        raise UserInputError(
            f"{cfg_path}: not the config.json of 'bayes-microbench evaluate' (no 'design'); "
            "delete it to resume (each cell records its own settings), or choose a new "
            f"{param('output')} folder"
        )
    now = _json_safe(design)
    if before != now:
        changed = sorted(k for k in set(now) | set(before) if now.get(k) != before.get(k))
        raise UserInputError(
            f"{param('output', str(out))}: holds results of a different configuration (differs in "
            f"{', '.join(changed)}); use a new folder, or the same data and settings to resume"
        )


def evaluate_grid(
    responses: Responses,
    config: GridConfig,
    output: str | os.PathLike[str],
    *,
    progress: bool = False,
    workers: int | None = None,
    scheduler: str | None = None,
    connect_timeout: float | None = None,
) -> GridReport:
    """Run (or resume) an evaluation grid and write its outputs to ``output``.

    Per finished cell: ``pairs/<cell>.parquet`` (the per-pair table) and
    ``cells/<cell>.json`` (metrics, MDAD, the settings it was computed with
    and the pairs file's SHA-256), each atomically, the JSON last, by this
    process whatever computed it. At the end, all or nothing
    (:mod:`bayes_microbench._outputs`): ``config.json``, ``mdad.csv`` and
    ``metrics.parquet`` for the whole grid, removing a ``report`` drawn from
    earlier results. The folder is locked meanwhile (``.evaluate.lock``): a
    second run into it is refused.

    The tasks (one per selector and source count, all its sizes; one per size
    of the exact random rows) run on ``workers`` local processes or on a Dask
    cluster; every number is the same as in a serial run (each task's streams
    are derived from the seed and what it computes, never from where or when
    it runs).

    A rerun reuses a cell only when its recorded settings equal this run's
    (:func:`cell_settings`); a cell of other settings, of an older version
    without settings, or damaged is a user error naming the file, never
    silently reused or recomputed. A ``config.json`` of a different design is
    refused too.

    Parameters
    ----------
    responses
        The full response matrix.
    config
        The grid.
    output
        The output folder (made if absent).
    progress
        Show a progress bar over runs (only where stderr is a terminal).
    workers
        Local worker processes; None: one per CPU core of this process; 1: serial.
    scheduler
        Address of a ``dask.distributed`` scheduler to compute on instead (needs
        the ``distributed`` package); ``workers`` is then ignored.
    connect_timeout
        Seconds to wait for that scheduler (default
        :data:`bayes_microbench._parallel.CONNECT_TIMEOUT_S`).

    Returns
    -------
    GridReport
    """
    from ._parallel import CONNECT_TIMEOUT_S, default_workers, folder_lock

    started = time.perf_counter()
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise UserInputError(
            f"{param('output', str(out))}: exists and is not a folder; choose a folder"
        )
    n_workers = default_workers() if workers is None else int(workers)
    if n_workers < 1:
        raise ConfigurationError(f"workers must be at least 1, got {n_workers}")
    fixed = None
    if config.target_group is not None:
        fixed = load_target_group(config.target_group, responses)
    codes = responses.subtask_codes
    n_seen = int((np.bincount(codes) // 2).sum())
    validate_grid(config, responses, n_seen, None if fixed is None else len(fixed))
    design = config.design(responses, fixed)
    with folder_lock(out):
        report = _run_grid(
            responses,
            config,
            out,
            design,
            fixed,
            n_seen,
            progress=progress,
            workers=n_workers,
            scheduler=scheduler,
            connect_timeout=CONNECT_TIMEOUT_S if connect_timeout is None else connect_timeout,
        )
    report.seconds = time.perf_counter() - started
    return report


def _run_grid(
    responses: Responses,
    config: GridConfig,
    out: Path,
    design: dict[str, Any],
    fixed: np.ndarray | None,
    n_seen: int,
    *,
    progress: bool,
    workers: int,
    scheduler: str | None,
    connect_timeout: float,
) -> GridReport:
    from ._parallel import run_tasks

    _check_previous_config(out, design)
    # temporary files of a run that was killed while writing (this run holds the lock)
    for stale in [*out.glob("cells/.*.tmp"), *out.glob("pairs/.*.tmp")]:
        stale.unlink(missing_ok=True)
    report = GridReport(out)
    blocks: list[BlockTask] = []
    for sel in config.selectors:
        for src in config.source_llms:
            pending = []
            for n in config.sizes:
                stem = cell_stem(sel, n, src)
                if _reusable(out, stem, cell_settings(design, sel, n, src), with_pairs=True):
                    report.reused.append(stem)
                else:
                    pending.append(int(n))
            if pending:
                blocks.append(
                    BlockTask(sel, int(src), tuple(pending), config.seed, config.threshold)
                )
    analytic_pending: list[int] = []
    if config.analytic and "random" in config.selectors:
        for n in config.sizes:
            ok = [
                _reusable(
                    out,
                    cell_stem(ANALYTIC_NAME, n, s),
                    cell_settings(design, ANALYTIC_NAME, n, s),
                    with_pairs=False,
                )
                for s in config.source_llms
            ]
            if not all(ok):
                analytic_pending.append(int(n))
        if np.isnan(responses.values).any():
            report.skipped_analytic = (
                "the responses have missing cells (the exact formula needs complete data)"
            )
            logger.info("random-analytic skipped: %s", report.skipped_analytic)
            analytic_pending = []
    # larger source counts first: the heavy blocks start early, the light ones fill the gaps
    tasks: list[BlockTask | AnalyticTask] = [
        AnalyticTask(n, config.seed, config.threshold) for n in analytic_pending
    ]
    heavy_first: list[BlockTask] = sorted(blocks, key=lambda b: -b.n_sources)
    tasks += heavy_first
    computed: dict[BlockTask | AnalyticTask, list[str]] = {}
    if tasks:
        designs = design_runs(
            responses.n_llms,
            responses.subtask_codes,
            n_runs=config.runs,
            n_targets=config.target_llms,
            random_seed=config.seed,
            fixed_targets=fixed,
        )
        data = GridData.from_responses(responses, designs)
        results = run_tasks(
            run_task,
            data,
            tasks,
            workers=workers,
            scheduler=scheduler,
            connect_timeout=connect_timeout,
        )
        bar = None
        try:
            for k, result in results:
                if bar is None:  # after the workers started (no thread of a bar is forked)
                    bar = _progress(progress, total=len(blocks) * config.runs)
                task = tasks[k]
                if isinstance(task, BlockTask):
                    computed[task] = _save_block(out, design, result)
                    if bar is not None:
                        bar.update(config.runs)
                else:
                    computed[task] = _save_analytic(out, design, config, task.n_items, result)
        finally:
            results.close()
            if bar is not None:
                bar.close()
    # in grid order, whatever order the tasks finished in
    for block in blocks:
        report.computed += computed.get(block, [])
    for n in analytic_pending:
        report.computed += computed.get(AnalyticTask(n, config.seed, config.threshold), [])
    from . import __version__

    config_doc = {
        "design": design,
        "grid": {
            "selectors": list(config.selectors),
            "sizes": list(config.sizes),
            "source_llms": list(config.source_llms),
            "analytic": config.analytic,
        },
        "responses": {"benchmark": responses.benchmark, "n_seen_items": n_seen},
        "package_version": __version__,
    }
    _assemble(out, config, config_doc, report)
    return report


def _save_block(
    out: Path, design: dict[str, Any], result: tuple[list[CellResult], float]
) -> list[str]:
    cells, seconds = result
    stems = []
    for cell in cells:
        cell.metrics["seconds"] = seconds / len(cells)
        settings = cell_settings(design, cell.selector, cell.n_items, cell.n_source_llms)
        _save_cell(out / "cells", out / "pairs", cell, settings)
        stems.append(cell_stem(cell.selector, cell.n_items, cell.n_source_llms))
        logger.info(
            "%s n=%d sources=%d: agreement %.3f, MDAD %s",
            cell.selector,
            cell.n_items,
            cell.n_source_llms,
            cell.metrics["agreement_seen"],
            cell.mdad[0]["mdad"],
        )
    return stems


def _save_analytic(
    out: Path,
    design: dict[str, Any],
    config: GridConfig,
    n: int,
    pair: list[dict[str, Any]],
) -> list[str]:
    """The ``random-analytic`` cells of size ``n``, one per source count (the same rows)."""
    from . import __version__

    stems = []
    for src in config.source_llms:
        stem = cell_stem(ANALYTIC_NAME, n, src)
        metrics = {
            "selector": ANALYTIC_NAME,
            "n_items": n,
            "n_source_llms": src,
            "n_runs": config.runs,
            "agreement_seen": pair[0]["agreement"],
            "agreement_unseen": pair[1]["agreement"],
            "notes": "exact expectation over uniform item samples; no sources used",
        }
        mdad_rows = [
            {k: v for k, v in r.items() if k != "agreement"} | {"n_source_llms": src} for r in pair
        ]
        _write_json(
            out / "cells" / f"{stem}.json",
            {
                "metrics": metrics,
                "mdad": mdad_rows,
                "settings": cell_settings(design, ANALYTIC_NAME, n, src),
                "package_version": __version__,
            },
        )
        stems.append(stem)
    return stems


def _save_cell(
    cells_dir: Path, pairs_dir: Path, cell: CellResult, settings: dict[str, Any]
) -> None:
    from . import __version__

    stem = cell_stem(cell.selector, cell.n_items, cell.n_source_llms)
    encoded = cell.pairs_parquet if cell.pairs_parquet is not None else _parquet_bytes(cell.pairs)
    write_atomic(pairs_dir / f"{stem}.parquet", lambda t: t.write_bytes(encoded))
    _write_json(
        cells_dir / f"{stem}.json",
        {
            "metrics": cell.metrics,
            "mdad": cell.mdad,
            "settings": settings,
            "pairs_sha256": hashlib.sha256(encoded).hexdigest(),
            "package_version": __version__,
        },
    )


def _assemble(
    out: Path, config: GridConfig, config_doc: dict[str, Any], report: GridReport
) -> None:
    """The grid's aggregate files, all or nothing, from its cell files."""
    from ._outputs import REPORT_FILES, output_set

    selectors = list(config.selectors)
    if config.analytic and "random" in selectors and report.skipped_analytic is None:
        selectors.insert(selectors.index("random") + 1, ANALYTIC_NAME)
    mdad_rows: list[dict[str, Any]] = []
    metric_rows: list[dict[str, Any]] = []
    for sel in selectors:
        for src in config.source_llms:
            for n in config.sizes:
                data = read_cell(out / "cells" / f"{cell_stem(sel, n, src)}.json")
                mdad_rows.extend(data["mdad"])
                metric_rows.append(data["metrics"])
    mdad = pd.DataFrame(mdad_rows, columns=MDAD_COLUMNS)
    for col in ("mdad", "mdad_lower", "mdad_upper"):
        mdad[col] = pd.to_numeric(mdad[col]).astype(np.float64)
    mdad["reached"] = mdad["reached"].astype(bool)
    metrics = pd.DataFrame(metric_rows)
    if "seconds" in metrics:
        metrics = metrics.drop(columns="seconds")  # timing is not a result (keeps reruns identical)
    text = json.dumps(_json_safe(config_doc), indent=2) + "\n"
    # a report drawn from the previous mdad.csv would contradict the new one
    with output_set(out, stale=REPORT_FILES) as files:
        files.write("config.json", lambda t: t.write_text(text, encoding="utf-8"))
        files.write("mdad.csv", lambda t: mdad.to_csv(t, index=False, float_format="%.6g"))
        files.write("metrics.parquet", lambda t: metrics.to_parquet(t, index=False))
    report.mdad, report.metrics = mdad, metrics


def _progress(enabled: bool, total: int) -> Any:
    if not enabled or total == 0:
        return None
    from tqdm.auto import tqdm

    # disable=None: no bar where stderr is not a terminal (a log file, a pipe, CI)
    return tqdm(total=total, desc="evaluate (runs)", unit="run", leave=False, disable=None)

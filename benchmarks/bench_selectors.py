"""Time and accuracy of the study's selectors and ours on GPQA, side by side with ``random``.

For each run: 50 target llms drawn uniformly, 300 source llms from the rest,
the items split 50/50 into seen / unseen (within each subtask). Every selector
is prepared on the source llms' seen responses and selects 10/25/50/100/200
items; we record the wall time of ``prepare`` and of each ``select`` +
``estimate``, and the mean absolute error of the 50 targets' estimated seen
accuracy. ``random`` is the reference the study compares every method with.

The Bayesian selectors (``bayes-fisher``, ``bayes-ranking``) are prepared the same
way: a quick posterior of the source llms, their estimator calibrated on them and
their random fallback (docs/decisions/0041, 0042); the report counts the runs in
which a size went random.

A second pass projects the cost of the full GPQA grid (5 sizes x 7
source-llm counts x 50 runs) per selector, from the median prepare + select
time at each source-llm count, so one sees whether the IRT-based selector
dominates it.

The tinyBenchmarks fit cache is cleared before each timed ``prepare`` (the
three tinyBenchmarks estimators share one fit only when prepared on the same
source matrix with the same int seed).

Run: ``.venv/bin/python benchmarks/bench_selectors.py [--runs 10] [--grid-runs 3]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import write_section  # noqa: E402

from bayes_microbench.io import load_responses  # noqa: E402
from bayes_microbench.selectors import get_selector  # noqa: E402
from bayes_microbench.selectors import tinybenchmarks as tb  # noqa: E402
from bayes_microbench.selectors.bayes_fisher import RANDOM_FALLBACK  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "open-llm-leaderboard-v2" / "gpqa.csv"
SIZES = [10, 25, 50, 100, 200]
SOURCE_COUNTS = [10, 50, 100, 150, 200, 250, 300]
SELECTORS = [
    "random",
    "random-subtask-equal",
    "random-subtask-proportional",
    "stratified-confidence",
    "anchor-points",
    "tinybenchmarks",
    "tinybenchmarks-pirt",
    "tinybenchmarks-gpirt",
    "diversity",
    "bayes-fisher",
    "bayes-ranking",
]
#: Not in the study's grid: left out of the grid total and its shares.
NOT_IN_STUDY = ("tinybenchmarks-pirt", "tinybenchmarks-gpirt", "bayes-fisher", "bayes-ranking")


def split(
    y: np.ndarray, codes: np.ndarray, n_source: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Targets, sources (on the seen items) and the seen item positions, as the study does."""
    perm = rng.permutation(y.shape[0])
    targets, rest = perm[:50], perm[50:]
    sources = rest[:n_source]
    seen = []
    for s in np.unique(codes):
        members = rng.permutation(np.flatnonzero(codes == s))
        seen.append(members[: members.size // 2])
    seen_idx = np.sort(np.concatenate(seen))
    return targets, sources, seen_idx


def time_one(
    name: str, source: np.ndarray, codes: np.ndarray, target: np.ndarray | None, seed: int
) -> tuple[float, list[float], list[float], list[bool]]:
    """Prepare ``name`` on ``source`` and select each size: (prepare s, select + estimate s
    per size, the targets' mean absolute error per size, whether each size went random)."""
    tb._CACHE.clear()
    sel = get_selector(name)
    t0 = time.perf_counter()
    prep = sel.prepare(source, codes, None, random_seed=seed)
    t_prep = time.perf_counter() - t0
    t_sel, errs, fell_back = [], [], []
    for k, n in enumerate(SIZES):
        t0 = time.perf_counter()
        s = prep.select(n, random_seed=seed * 100 + k)
        fell_back.append(s.info.get("estimator") == RANDOM_FALLBACK)
        if target is not None:
            est = prep.estimate(s, target[:, s.items])
        t_sel.append(time.perf_counter() - t0)
        if target is not None:
            errs.append(float(np.abs(est - np.nanmean(target, axis=1)).mean()))
    return t_prep, t_sel, errs, fell_back


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="runs at 300 source llms")
    ap.add_argument("--grid-runs", type=int, default=3, help="runs per source-llm count")
    args = ap.parse_args()
    if not DATA.exists():
        sys.exit(f"{DATA} not found (real data lives in ../shared/data)")
    resp = load_responses(DATA)
    y, codes = resp.values, resp.subtask_codes
    load_before = os.getloadavg()[0]

    # ---- warm-up (untimed): first-use imports (SciPy's optimizer, BLAS thread control)
    targets, sources, seen = split(y, codes, 300, np.random.default_rng(12345))
    for name in SELECTORS:
        time_one(name, y[np.ix_(sources, seen)], codes[seen], y[np.ix_(targets, seen)], 0)

    # ---- pass 1: 300 source llms, time + error per size
    prep_t: dict[str, list[float]] = {n: [] for n in SELECTORS}
    sel_t: dict[str, list[list[float]]] = {n: [] for n in SELECTORS}
    err: dict[str, list[list[float]]] = {n: [] for n in SELECTORS}
    went_random: dict[str, list[list[bool]]] = {n: [] for n in SELECTORS}
    iters: list[int] = []
    for run in range(args.runs):
        rng = np.random.default_rng(run)
        targets, sources, seen = split(y, codes, 300, rng)
        source = y[np.ix_(sources, seen)]
        target = y[np.ix_(targets, seen)]
        for name in SELECTORS:
            tp, ts, e, fb = time_one(name, source, codes[seen], target, run)
            prep_t[name].append(tp)
            sel_t[name].append(ts)
            err[name].append(e)
            went_random[name].append(fb)
        iters.append(tb.fit_irt(source, random_seed=run).n_iter)
        print(f"run {run + 1}/{args.runs} done", flush=True)

    # ---- pass 2: projected grid cost per source-llm count
    grid: dict[str, dict[int, float]] = {n: {} for n in SELECTORS}
    for n_src in SOURCE_COUNTS:
        per: dict[str, list[float]] = {n: [] for n in SELECTORS}
        for run in range(args.grid_runs):
            rng = np.random.default_rng(1000 + run)
            _, sources, seen = split(y, codes, n_src, rng)
            source = y[np.ix_(sources, seen)]
            for name in SELECTORS:
                tp, ts, _, _ = time_one(name, source, codes[seen], None, run)
                per[name].append(tp + sum(ts))
        for name in SELECTORS:
            grid[name][n_src] = float(np.median(per[name]))
        print(f"grid timing at {n_src} source llms done", flush=True)
    load_after = os.getloadavg()[0]

    # ---- report
    n_seen = int(sum(np.sum(codes == s) // 2 for s in np.unique(codes)))
    lines = [
        f"GPQA ({y.shape[0]} llms x {y.shape[1]} items; seen half = {n_seen} items), "
        f"50 targets, 300 source llms, {args.runs} runs (seeds 0..{args.runs - 1}). "
        "Times are medians over runs after one untimed warm-up run (first-use imports); "
        "`select` includes `estimate` for the 50 targets. "
        "MAE = mean over runs of the mean |estimated - seen accuracy| over the targets "
        "(accuracy points, 0-100). The study's tinyBenchmarks row is the `tinybenchmarks` "
        "(weighted) estimator; p-IRT / gp-IRT are shown for completeness. GPQA has no "
        "confidences: the confidence-based selectors ran on correctness.",
        "",
        f"Machine load average (1 min) {load_before:.1f} before, {load_after:.1f} after "
        "(2 cores shared with other jobs: absolute times are noisy, ratios within one run "
        "are the figure to read).",
        "",
        "### Time per run (ms): prepare, and select + estimate per size",
        "",
        "| selector | prepare | " + " | ".join(f"n={n}" for n in SIZES) + " | total |",
        "|---|---:|" + "---:|" * len(SIZES) + "---:|",
    ]
    for name in SELECTORS:
        med_sel = np.median(np.array(sel_t[name]), axis=0) * 1e3
        tp = float(np.median(prep_t[name])) * 1e3
        lines.append(
            f"| {name} | {tp:.1f} | "
            + " | ".join(f"{t:.1f}" for t in med_sel)
            + f" | {tp + med_sel.sum():.1f} |"
        )
    lines += [
        "",
        "### Mean absolute estimation error (points) per size, and ratio to random",
        "",
        "| selector | " + " | ".join(f"n={n}" for n in SIZES) + " |",
        "|---|" + "---:|" * len(SIZES),
    ]
    base = np.mean(np.array(err["random"]), axis=0)
    for name in SELECTORS:
        m = np.mean(np.array(err[name]), axis=0)
        cells = [f"{100 * v:.2f} ({v / b:.2f}x)" for v, b in zip(m, base, strict=True)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    fell = {n: np.array(went_random[n]).sum(axis=0) for n in SELECTORS if "bayes" in n}
    lines += [
        "",
        "Runs (of "
        + str(args.runs)
        + ") in which a Bayesian selector returned its calibrated random subset, per size: "
        + "; ".join(
            f"{n} " + ", ".join(f"n={k}: {int(c)}" for k, c in zip(SIZES, fell[n], strict=True))
            for n in fell
        )
        + ".",
        "",
        f"IRT fit (10-D 2PL MAP, L-BFGS capped at 30 iterations): iterations used "
        f"{min(iters)}-{max(iters)} over the runs.",
        "",
        "### Projected full-grid selector cost (5 sizes x 7 source-llm counts x 50 runs)",
        "",
        f"Median prepare + 5 selects at each source-llm count ({args.grid_runs} runs each), "
        "times 50 runs, summed over the counts. This is the selectors' share only; the "
        "protocol's own cost is measured by the evaluate benchmark.",
        "",
        "| selector | "
        + " | ".join(f"{c} src (ms)" for c in SOURCE_COUNTS)
        + " | grid total (s) | share |",
        "|---|" + "---:|" * (len(SOURCE_COUNTS) + 2),
    ]
    grid_study = [n for n in SELECTORS if n not in NOT_IN_STUDY]
    totals = {n: 50 * sum(grid[n].values()) for n in SELECTORS}
    all_total = sum(totals[n] for n in grid_study)
    for name in SELECTORS:
        share = f"{100 * totals[name] / all_total:.0f}%" if name in grid_study else "-"
        lines.append(
            f"| {name} | "
            + " | ".join(f"{1e3 * grid[name][c]:.0f}" for c in SOURCE_COUNTS)
            + f" | {totals[name]:.0f} | {share} |"
        )
    lines += [
        "",
        f"Grid total over the study's seven selectors: {all_total:.0f} s "
        "(shares are of this total; the p-IRT / gp-IRT variants and the Bayesian selectors "
        "are not in the study's grid and are not counted).",
    ]
    body = "\n".join(lines)
    write_section(
        "bench_selectors", "Selectors: time and estimation error on GPQA", body, headline=[1]
    )
    print(body)


if __name__ == "__main__":
    main()

"""The evaluation protocol at paper scale: a simulated 420 x 12000 matrix on 1 and 2 workers.

Issue 25, item 4. A slice of the study's grid (every selector of the study plus the
Bayesian ones; sizes 10 and 100, source counts 20, 100 and 300, 2 runs: 27 selector
tasks and 2 exact-random tasks, the longest (bayes-fisher at 300 sources) about a quarter
of the total, so that two workers can show their speed-up; minutes) on a simulated
MMLU-Pro-sized matrix (420 llms, the leaderboard's count, x 12000 items,
``simulate_responses("mmlu-pro")``), each configuration as its own process, side by side
in one run:

- ``evaluate`` with ``workers=1`` (serial) and ``workers=2`` (two forked processes);
- ``evaluate`` with ``scheduler=`` a 2-worker ``dask.distributed.LocalCluster`` (processes,
  one thread each; its start-up is included).

Per configuration: wall time, CPU time (the process and everything it started), peak RSS
of the client and of the largest worker (psutil, sampled every 0.2 s), speed-up over the
serial run and per worker, and the best speed-up the slice's tasks allow (total task
time over the longest task, at most the worker count). Per selector: its share of the
serial run's task time, beside the same slice on a GPQA-sized matrix (420 x 448,
``simulate_responses("gpqa")``); and a projection of the study's full grid (4
benchmarks x 6 selectors x 7 sizes x 7 source counts x 50 runs) from the two item
counts (a power law in items per selector, fitted through the two measurements; stated
as such).

Usage::

    flock /tmp/briefs/cpu.lock .venv/bin/python benchmarks/bench_protocol_scale.py  # ~5 min
    # smoke (one run, one size, one source count; publishes nothing):
    .venv/bin/python benchmarks/bench_protocol_scale.py --runs 1 --sizes 10 --sources 20 --no-publish
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "protocol_scale.json"
STUDY_SELECTORS = [
    "random",
    "random-subtask-equal",
    "random-subtask-proportional",
    "stratified-confidence",
    "anchor-points",
    "tinybenchmarks",
    "diversity",
]
BAYES_SELECTORS = ["bayes-fisher", "bayes-ranking"]
# the study's grid: benchmark -> items; 6 selectors x 7 sizes x 7 source counts x 50 runs
STUDY_BENCHMARKS = {"MMLU-Pro": 12032, "BBH": 5761, "MMLU": 14042, "GPQA": 448}
STUDY_CELLS_PER_SELECTOR = 7 * 7  # sizes x source counts
STUDY_RUNS = 50
CONFIGS = ["workers=1", "workers=2", "dask LocalCluster 2 workers"]


# --------------------------------------------------------------------------- one configuration
def run_one(config: str, data: Path, out: Path, grid: dict) -> dict:
    """In a child process: one evaluate of the slice; prints a JSON line of its figures."""
    from bayes_microbench import load_responses
    from bayes_microbench.protocol import GridConfig, evaluate_grid

    resp = load_responses(data)
    cfg = GridConfig(
        selectors=tuple(grid["selectors"]),
        sizes=tuple(grid["sizes"]),
        source_llms=tuple(grid["sources"]),
        target_llms=50,
        runs=grid["runs"],
        seed=0,
        analytic=True,
    )
    t0 = time.perf_counter()
    if config.startswith("dask"):
        import distributed

        with distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster:
            report = evaluate_grid(resp, cfg, out, scheduler=cluster.scheduler_address)
    else:
        report = evaluate_grid(resp, cfg, out, workers=int(config.split("=")[1]))
    wall = time.perf_counter() - t0
    per_sel: dict[str, float] = defaultdict(float)
    per_task: dict[str, float] = defaultdict(float)  # one task: a (selector, source count)
    for path in sorted((out / "cells").glob("*.json")):
        m = json.loads(path.read_text())["metrics"]
        if "seconds" in m:
            per_sel[m["selector"]] += m["seconds"]
            per_task[f"{m['selector']}@{m['n_source_llms']}"] += m["seconds"]
    return {
        "grid_wall_s": wall,
        "computed": len(report.computed),
        "per_selector_s": per_sel,
        "per_task_s": per_task,
    }


def task_bound(per_task: dict[str, float], workers: int) -> tuple[str, float, float, float]:
    """The longest task, its seconds, the total, and the speed-up the tasks allow on ``workers``.

    No schedule can finish before the longest task nor before total / workers, so
    ``total / max(longest, total / workers)`` bounds the speed-up of the task time.
    """
    longest = max(per_task, key=per_task.get)
    total = sum(per_task.values())
    return longest, per_task[longest], total, total / max(per_task[longest], total / workers)


def _sample_tree(pid: int, peaks: dict[int, int], stop: threading.Event) -> None:
    import psutil

    try:
        top = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    while not stop.is_set():
        try:
            procs = [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in procs:
            try:
                peaks[p.pid] = max(peaks.get(p.pid, 0), p.memory_info().rss)
            except psutil.NoSuchProcess:
                pass
        stop.wait(0.2)


def measure(config: str, data: Path, work: Path, grid: dict) -> dict:
    """One configuration as a child process: wall, CPU (with descendants), peak RSS per process."""
    out = work / f"out_{config.replace(' ', '_').replace('=', '')}_{data.stem}"
    shutil.rmtree(out, ignore_errors=True)
    result = work / f"{out.name}.json"
    cmd = [sys.executable, __file__, "--one", config, "--data", str(data), "--out", str(out)]
    cmd += ["--result", str(result), "--grid", json.dumps(grid)]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env)
    peaks: dict[int, int] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_tree, args=(proc.pid, peaks, stop), daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{config} on {data.name} failed")
    inner = json.loads(result.read_text())
    workers = [v for k, v in peaks.items() if k != proc.pid]
    return {
        "config": config,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,  # includes the reaped workers
        "client_peak_mib": peaks.get(proc.pid, 0) / 2**20,
        "worker_peak_mib": max(workers) / 2**20 if workers else None,
        "n_processes_seen": len(peaks),
        **inner,
    }


# --------------------------------------------------------------------------- data
def make_data(work: Path, preset: str, n_items: int) -> Path:
    from bayes_microbench import save_responses, simulate_responses

    path = work / f"sim_{preset}_{n_items}.parquet"
    if not path.exists():
        resp = simulate_responses(preset, n_llms=420, n_items=n_items, random_seed=0)
        save_responses(resp, path)
    return path


# --------------------------------------------------------------------------- report
def project(shares_big: dict, shares_small: dict, grid: dict, n_big: int, n_small: int) -> dict:
    """CPU hours of the study's full grid per benchmark from per-cell costs at two item counts."""
    n_cells_slice = len(grid["sizes"]) * len(grid["sources"])
    out: dict[str, dict[str, float]] = {}
    for bench, n_items in STUDY_BENCHMARKS.items():
        row = {}
        for sel in STUDY_SELECTORS:
            if sel not in shares_big or sel not in shares_small:
                continue
            # seconds per (cell, run) at the two item counts, then a power law in items
            big = shares_big[sel] / (n_cells_slice * grid["runs"])
            small = shares_small[sel] / (n_cells_slice * grid["runs"])
            k = math.log(big / small) / math.log(n_big / n_small) if big > 0 and small > 0 else 1
            per = big * (n_items / n_big) ** k
            row[sel] = per * STUDY_CELLS_PER_SELECTOR * STUDY_RUNS
        out[bench] = row
    return out


def render(res: dict) -> str:
    grid = res["grid"]
    big, small = res["runs"]["big"], res["runs"]["small"]
    serial = next(r for r in big if r["config"] == "workers=1")
    lines = [
        f"Slice: selectors {', '.join(grid['selectors'])}; sizes {grid['sizes']}; source llms "
        f"{grid['sources']}; {grid['runs']} runs x 50 targets; exact random-analytic rows "
        f"included; seed 0. Data: `simulate_responses('mmlu-pro')` 420 x {res['n_big']} "
        f"(MMLU-Pro's size, the leaderboard's llm count), {res['n_big'] // 2} seen items per "
        f"run; beside it the same slice on `simulate_responses('gpqa')` 420 x {res['n_small']}. "
        "Each configuration is its own process (start-up, reading the data, writing every "
        "file included); BLAS on one thread per worker. The machine has 2 cores shared with "
        f"other jobs (load average at the end {', '.join(f'{x:.1f}' for x in res['load'])}).",
        "",
        f"### 420 x {res['n_big']}",
        "",
        "| configuration | wall s | CPU s | speed-up | per worker | peak RSS client (MiB) "
        "| peak RSS largest worker (MiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in big:
        n_w = 1 if r["config"] == "workers=1" else 2
        speed = serial["wall_s"] / r["wall_s"]
        worker = "-" if r["worker_peak_mib"] is None else f"{r['worker_peak_mib']:.0f}"
        lines.append(
            f"| {r['config']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {speed:.2f}x | "
            f"{speed / n_w:.2f} | {r['client_peak_mib']:.0f} | {worker} |"
        )
    if serial.get("per_task_s"):
        longest, long_s, total_s, bound = task_bound(serial["per_task_s"], 2)
        n_tasks = len(serial["per_task_s"])
        n_exact = len(grid["sizes"]) if "random" in grid["selectors"] else 0
        lines += [
            "",
            f"{n_tasks} selector task{'s' * (n_tasks != 1)} (one per selector and source "
            f"count, all sizes) and {n_exact} exact-random task{'s' * (n_exact != 1)}; serial task time "
            f"{total_s:.1f} s, the longest task {longest} {long_s:.1f} s: on 2 workers the "
            f"tasks allow at most {bound:.2f}x. The wall times include each process's start, "
            "reading the data and writing every file (and, for the cluster, its start).",
        ]
    sb = serial["per_selector_s"]
    ss = next(r for r in small if r["config"] == "workers=1")["per_selector_s"]
    tot_b = sum(v for k, v in sb.items() if k in STUDY_SELECTORS)
    tot_s = sum(v for k, v in ss.items() if k in STUDY_SELECTORS)
    lines += [
        "",
        "### Share of each selector (serial run's task time; shares of the study's seven)",
        "",
        f"| selector | 420 x {res['n_big']}: s | share | 420 x {res['n_small']}: s | share |",
        "|---|---|---|---|---|",
    ]
    for sel in grid["selectors"]:
        b, s_ = sb.get(sel, 0.0), ss.get(sel, 0.0)
        in_study = sel in STUDY_SELECTORS
        lines.append(
            f"| {sel} | {b:.1f} | {f'{100 * b / tot_b:.1f}%' if in_study else '-'} | {s_:.2f} | "
            f"{f'{100 * s_ / tot_s:.1f}%' if in_study else '-'} |"
        )
    heavy = max((k for k in sb if k in STUDY_SELECTORS), key=sb.get)
    share_b, share_s = sb[heavy] / tot_b, ss.get(heavy, 0.0) / tot_s
    heavy_small = max((k for k in ss if k in STUDY_SELECTORS), key=ss.get)
    top_small = ss[heavy_small] / tot_s
    verdict = "meets" if share_b <= share_s else "misses"
    lines += [
        "",
        f"The heaviest of the seven at {res['n_big']} items is **{heavy}**: {100 * share_b:.1f}% of the "
        f"slice against its {100 * share_s:.1f}% at GPQA size: this **{verdict}** the target "
        f"(no larger share than at GPQA size). The largest share at GPQA size is {heavy_small}'s "
        f"{100 * top_small:.1f}%; against that the heaviest at {res['n_big']} items "
        f"{'stays within it' if share_b <= top_small else 'is still above it'}.",
        "",
        "### Projection of the study's full grid",
        "",
        "The study's seven selectors x 7 sizes x 7 source counts x 50 runs per benchmark "
        "(the Bayesian selectors are not in the study's grid). Each selector's "
        "serial seconds per (cell, run) in this slice, at the two item counts, give a power "
        "law in items through the two points; the slice's sizes and source counts stand for "
        "the study's 7 x 7 (a projection, not a measurement).",
        "",
        "| benchmark (items) | CPU hours, all selectors | wall hours on 2 workers "
        "(measured speed-up) | largest selector |",
        "|---|---|---|---|",
    ]
    two = next(r for r in big if r["config"] == "workers=2")
    speed2 = serial["wall_s"] / two["wall_s"]
    total = 0.0
    for bench, row in res["projection"].items():
        hours = sum(row.values()) / 3600
        total += hours
        top = max(row, key=row.get)
        lines.append(
            f"| {bench} ({STUDY_BENCHMARKS[bench]}) | {hours:.1f} | {hours / speed2:.1f} | "
            f"{top} ({100 * row[top] / sum(row.values()):.0f}%) |"
        )
    lines.append(
        f"| all four | {total:.1f} | {total / speed2:.1f} | |",
    )
    lines += [
        "",
        f"On W workers the wall time is about CPU hours / (W x {speed2 / 2:.2f}) if the 2-worker "
        "efficiency measured here holds (a cluster of 100 cores: "
        f"{total / (100 * speed2 / 2):.1f} h).",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--sizes", default="10,100")
    parser.add_argument("--sources", default="20,100,300")
    parser.add_argument("--items", type=int, default=12000)
    parser.add_argument("--selectors", default=",".join(STUDY_SELECTORS + BAYES_SELECTORS))
    parser.add_argument("--work", default=str(ROOT / "out" / "bench_protocol_scale"))
    parser.add_argument("--no-publish", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--grid", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        res = run_one(args.one, Path(args.data), Path(args.out), json.loads(args.grid))
        Path(args.result).write_text(json.dumps(res))
        return 0
    grid = {
        "selectors": args.selectors.split(","),
        "sizes": [int(x) for x in args.sizes.split(",")],
        "sources": [int(x) for x in args.sources.split(",")],
        "runs": args.runs,
    }
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    big_data = make_data(work, "mmlu-pro", args.items)
    small_data = make_data(work, "gpqa", 448)
    runs = {"small": [measure("workers=1", small_data, work, grid)], "big": []}
    print(json.dumps(runs["small"][0]), flush=True)
    for config in CONFIGS:
        runs["big"].append(measure(config, big_data, work, grid))
        print(json.dumps(runs["big"][-1]), flush=True)
    serial_big = runs["big"][0]["per_selector_s"]
    res = {
        "grid": grid,
        "n_big": args.items,
        "n_small": 448,
        "runs": runs,
        "projection": project(
            serial_big, runs["small"][0]["per_selector_s"], grid, args.items, 448
        ),
        "load": os.getloadavg(),
    }
    body = render(res)
    print(body)
    if args.no_publish:
        return 0
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _report import update_results, write_section

    update_results(RESULTS, **res)

    write_section(
        "bench_protocol_scale",
        "Evaluation protocol at paper scale (420 x 12000)",
        body,
        headline=[0, 2],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

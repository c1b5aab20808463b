"""Write a benchmark's figures into its own section of benchmarks/README.md.

Each benchmark script owns one section, delimited by
``<!-- BEGIN name -->`` / ``<!-- END name -->``; rerunning the script replaces
its section and leaves the others alone. A file lock keeps concurrent scripts
from overwriting each other's sections.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import fcntl
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPORT = Path(__file__).resolve().parent / "README.md"
#: The real matrices beside the checkout (never copied here), by the names the studies take.
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MATRICES = {
    "gpqa": SHARED_DATA / "open-llm-leaderboard-v2" / "gpqa.csv",
    **{
        name: SHARED_DATA / "metabench-oll-v1" / f"{name}.csv"
        for name in ("arc", "mmlu", "gsm8k", "truthfulqa", "winogrande")
    },
    **{
        name: SHARED_DATA / "predictaboard-oll-v2" / f"{name}.csv"
        for name in ("bbh", "mmlu-pro", "musr", "math-hard", "ifeval")
    },
}
HEADER = """# Benchmark report

Figures written by the scripts in this folder, each into its own section.
Rerun a script to refresh its section; the date and machine are recorded with it.
This machine is noisy (2 shared cores): figures are medians, compared side by
side within one run.
"""


def machine() -> str:
    """A one-line description of the machine the figures come from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gb = float("nan")
    return f"{os.cpu_count()} cores ({cpu}), {mem_gb:.0f} GiB, Python {platform.python_version()}"


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPORT.parent,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_section(
    name: str, title: str, body: str, *, run: tuple[str | None, ...] | None = None
) -> Path:
    """Replace (or append) the section ``name`` of the report with ``body``.

    ``run``: (date, commit[, machine]) of a saved run the section is rewritten
    from (machine absent or None where the saved run did not record it); the
    header then names that run, and says when and at which commit it was rewritten.
    """
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    if run is None:
        head = f"_Run {stamp} on {machine()}, commit {commit()}, by `benchmarks/{name}.py`._"
    else:
        where = (run[2] if len(run) > 2 else None) or "a machine its saved rows do not record"
        head = (
            f"_Run {run[0]} on {where}, commit {run[1]}, by `benchmarks/{name}.py`; "
            f"section rewritten from the saved runs {stamp}, commit {commit()}._"
        )
    block = f"<!-- BEGIN {name} -->\n## {title}\n\n{head}\n\n{body.strip()}\n<!-- END {name} -->"
    lock_path = REPORT.with_suffix(".lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = REPORT.read_text() if REPORT.exists() else HEADER
        pattern = re.compile(
            rf"<!-- BEGIN {re.escape(name)} -->.*?<!-- END {re.escape(name)} -->", re.S
        )
        if pattern.search(text):
            text = pattern.sub(lambda _: block, text)
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
        tmp = REPORT.with_suffix(".md.tmp")
        tmp.write_text(text)
        os.replace(tmp, REPORT)
    return REPORT


def run_rows(
    script: str,
    jobs: Sequence[Sequence[str]],
    key: Callable[[dict], tuple],
    results: Path,
) -> list[dict] | None:
    """Run ``script --one ARGS`` in a fresh process per job; merge its ``ROW`` into ``results``.

    ``jobs``: the arguments after ``--one``, one list per row; the script prints
    its row as ``ROW {json}``. Each row gains the 1-minute load average at its
    start and the date, commit and machine of this run (read once: a commit made
    meanwhile is not the rows'), replaces any saved row with the same
    ``key(row)`` and is saved at once. Returns every saved row, or None (having
    printed the failed job's stderr) when a job fails.
    """
    saved = json.loads(results.read_text())["rows"] if results.exists() else []
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head, where = commit(), machine()
    for args in jobs:
        load = os.getloadavg()[0]
        out = subprocess.run(
            [sys.executable, script, "--one", *args], capture_output=True, text=True
        )
        lines = [x for x in out.stdout.splitlines() if x.startswith("ROW ")]
        if out.returncode != 0 or not lines:
            print(f"{' '.join(args)}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
            return None
        row = json.loads(lines[-1][4:])
        row.update(load=load, date=stamp, commit=head, machine=where)
        print(json.dumps(row), flush=True)
        saved = [r for r in saved if key(r) != key(row)] + [row]
        results.parent.mkdir(exist_ok=True)
        results.write_text(json.dumps({"rows": saved}, indent=1) + "\n")
    return saved


def last_run(rows: Sequence[dict]) -> tuple[str, str, str | None]:
    """(date, commit, machine) of the latest run among saved ``rows`` (machine None if unrecorded)."""
    last = max(rows, key=lambda r: (r["date"], r["commit"]))
    return last["date"], last["commit"], last.get("machine")


#: Header cells of :func:`fit_cells` (a NUTS fit's row in a study's table).
FIT_HEADER = (
    "fit s | max R-hat | min bulk ESS | min tail ESS | divergences | steps/draw | converged "
    "| worst R-hat at | lowest bulk ESS at | load"
)


def nuts_row(model: Any, seed: int, parameterization: str) -> tuple[Any, dict]:
    """Fit ``model`` (an ``IRTModel``) by NUTS, 2 x (1000 + 1000); the fit and its row figures.

    The row: ``wall_s`` (the fit call: build, compile, sampling) and the
    diagnostics that :func:`fit_cells` shows. Convergence warnings are silenced:
    the row reports what they would say.
    """
    import warnings

    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = model.fit(
            "nuts",
            chains=2,
            draws=1000,
            tune=1000,
            random_seed=seed,
            progressbar=False,
            parameterization=parameterization,
        )
    wall = time.perf_counter() - t
    assert fit.diagnostics is not None
    return fit, {"wall_s": wall, **fit.diagnostics.to_dict()}


def fit_cells(r: dict) -> str:
    """A saved NUTS row's figures as table cells, in :data:`FIT_HEADER` order."""
    return (
        f"{r['wall_s']:.0f} | {r['max_rhat']:.4f} | {r['min_ess_bulk']:.0f} "
        f"| {r['min_ess_tail']:.0f} | {r['divergences']} | {r['mean_tree_size']:.1f} "
        f"| {r['ok']} | {r['worst_rhat']} | {r['worst_ess_bulk']} | {r['load']:.1f}"
    )


def check_names(
    parser: argparse.ArgumentParser, kind: str, names: Sequence[str], known: Sequence[str]
) -> None:
    """Exit through ``parser.error`` at the first of ``names`` not in ``known``."""
    for name in names:
        if name not in known:
            parser.error(f"unknown {kind} {name!r}; known: {list(known)}")


def rows_note(saved: Sequence[dict]) -> str:
    """What a study's ``load`` column means, and the runs its saved rows come from."""
    runs = sorted({(r["date"], r["commit"]) for r in saved})
    return (
        "`load` = the 1-minute load average at the row's start (2 shared cores: wall times "
        "inflate with load). Rows from " + "; ".join(f"{d} (commit {c})" for d, c in runs) + "."
    )

"""Model choice on real matrices: what ``fit --model auto`` fits, ranks by PSIS-LOO and keeps.

For each matrix, ``bayes_microbench.irt.choice.compare_candidates`` fits every
candidate (default 1PL, 2PL, ``2pl-md`` with 2, 3 and 4 dimensions) as ``fit``
does by default (NUTS, draws extended up to the budget), computes PSIS-LOO over
the observed cells (400 draws) and applies the choice rule of
docs/decisions/0029. One fresh process per matrix; each candidate's fit, LOO
and record go to a store folder as it finishes (``--store-root``, default
``out/model_choice/DATA-seedSEED``), so a study that was stopped resumes
where it stopped (the large matrices take hours). The table gives each
candidate's elpd, its difference and dse to the best, its convergence and fit
time, and which one the rule keeps, with why.

Usage::

    .venv/bin/python benchmarks/study_model_choice.py [--data ifeval,gpqa]
        [--candidates 1pl,2pl,2pl-md:2,2pl-md:3,2pl-md:4] [--seed 0] [--store-root DIR]
        [--report-only]

Rows go to ``benchmarks/results/model_choice.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _report import MATRICES, check_names, cpu_seconds, last_run, rows_note, run_rows, write_section  # noqa: E402

RESULTS = HERE / "results" / "model_choice.json"
STORE_ROOT = HERE.parent / "out" / "model_choice"
from bayes_microbench.irt.choice import DEFAULT_CANDIDATES  # noqa: E402


def one(data: str, candidates: str, seed: int, store_root: Path) -> dict:
    """Compare the candidates on one matrix (resuming from its store); the row of the table."""
    from bayes_microbench import load_responses
    from bayes_microbench.exceptions import ConvergenceWarning
    from bayes_microbench.irt.choice import compare_candidates

    resp = load_responses(MATRICES[data])
    t0, c0 = time.perf_counter(), cpu_seconds()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _, report = compare_candidates(
            resp,
            candidates,
            store=store_root / f"{data}-seed{seed}",
            random_seed=seed,
            progressbar=False,
        )
    cpu = cpu_seconds() - c0
    return {
        "data": data,
        "shape": f"{resp.n_llms} x {resp.n_items}",
        "seed": seed,
        "candidates": candidates,
        "rows": report["rows"],
        "chosen": report["chosen"],
        "why": report["why"],
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "cpu_seconds": round(cpu, 1),
    }


def table(saved: list[dict]) -> str:
    head = (
        "| data | llms x items | candidate | elpd_loo | elpd_diff | dse | Pareto k > 0.7 | "
        "converged | fit s | kept |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for run in sorted(saved, key=lambda r: (r["data"], r["seed"])):
        for r in run["rows"]:
            lines.append(
                f"| {run['data']} | {run['shape']} | {r['candidate']} | {r['elpd_loo']:.1f} | "
                f"{r['elpd_diff']:.1f} | {r['dse']:.1f} | {r['cells_pareto_k_over_0.7']} | "
                f"{'yes' if r['converged'] else 'NO'} | {r['wall_seconds']:.0f} | "
                f"{'**kept**' if r['candidate'] == run['chosen'] else ''} |"
            )
    return "\n".join(lines)


def _time(run: dict) -> str:
    """The run's time, and which candidates an earlier, stopped process had fitted."""
    text = f"{run['wall_seconds']:.0f} s wall, {run['cpu_seconds']:.0f} s CPU"
    earlier = [r["candidate"] for r in run["rows"] if r.get("from_store")]
    if not earlier:
        return "all candidates " + text
    return f"{text} for the rest; {', '.join(earlier)} read from the store of an earlier process"


def report(saved: list[dict]) -> None:
    setup = (
        "`compare_candidates` (what `fit --model auto` and `check --responses` run): every "
        "candidate fitted as `fit` does by default (NUTS, 2 chains x (1000 tune + 1000 draws), "
        "extended up to 4000 draws when only R-hat or ESS miss), PSIS-LOO over the observed "
        "cells with 400 draws, the rule of docs/decisions/0029. " + rows_note(saved)
    )
    whys = "\n".join(
        f"- {r['data']} (seed {r['seed']}): kept **{r['chosen']}**: {r['why']} ({_time(r)})."
        for r in sorted(saved, key=lambda r: (r["data"], r["seed"]))
    )
    write_section(
        "study_model_choice",
        "Model choice by PSIS-LOO on real matrices",
        "\n\n".join([setup, table(saved), whys]),
        run=last_run(saved),
        headline=[
            {
                "table": 0,
                "columns": ["data", "candidate", "elpd_diff", "converged", "kept"],
                "where": {"candidate": ["2pl", "2pl-md:2", "2pl-md:3"]},
            }
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="ifeval,gpqa")
    parser.add_argument("--candidates", default=",".join(DEFAULT_CANDIDATES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--store-root", type=Path, default=STORE_ROOT)
    parser.add_argument("--one", nargs=4, metavar=("DATA", "CANDIDATES", "SEED", "STORE_ROOT"))
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()
    if args.one:
        data, candidates, seed, root = args.one
        print("ROW " + json.dumps(one(data, candidates, int(seed), Path(root)), default=float))
        return 0
    if args.report_only:
        report(json.loads(RESULTS.read_text())["rows"])
        return 0
    datasets = [d for d in args.data.split(",") if d]
    check_names(parser, "data", datasets, list(MATRICES))
    for name in datasets:
        if not MATRICES[name].exists():
            print(f"{MATRICES[name]} not present; nothing to study", file=sys.stderr)
            return 1
    jobs = [[d, args.candidates, str(args.seed), str(args.store_root)] for d in datasets]
    saved = run_rows(__file__, jobs, lambda r: (r["data"], r["seed"], r["candidates"]), RESULTS)
    if saved is None:
        return 1
    if not args.no_report:
        report(saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

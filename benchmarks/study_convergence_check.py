"""Which parameters fail the default fit's convergence check, sampled or derived?

For each matrix and seed, the default ``fit`` (NUTS, package defaults, the
model ``--model``) is run once and its convergence summary computed twice on the
same draws: over every checked parameter (``irt.diagnostics.CHECKED``), and over
the parameters the sampler draws and every answer of the tool is a function of
(abilities, discriminations, intercepts, floors, hyperparameters), leaving out
the derived ``difficulty = -intercept / discrimination``, whose draws are
heavy-tailed by construction wherever a discrimination is near 0. The table
names the worst parameter of each.

Usage::

    .venv/bin/python benchmarks/study_convergence_check.py [--benchmarks gpqa,mmlu]
        [--seeds 0,1,2] [--model 2pl] [--report-only]

Rows are kept in ``results/convergence_check.json`` by (benchmark, model, seed).
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
sys.path.insert(0, str(HERE.parent))

from _report import MATRICES, commit, last_run, machine, update_results, write_section  # noqa: E402

RESULTS = HERE / "results" / "convergence_check.json"
DERIVED = ("difficulty",)


def run_one(name: str, model: str, seed: int) -> dict:
    from bayes_microbench.exceptions import ConvergenceWarning
    from bayes_microbench.io import load_responses
    from bayes_microbench.irt import diagnostics as diag
    from bayes_microbench.irt.model import fit_extending_draws

    resp = load_responses(MATRICES[name])
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = fit_extending_draws(resp, model, random_seed=seed, progressbar=False)
    stats = fit.idata["sample_stats"].to_dataset()
    every = diag.summarize(fit.posterior, stats)
    sampled = diag.summarize(fit.posterior.drop_vars(list(DERIVED), errors="ignore"), stats)
    return {
        "benchmark": name,
        "model": model,
        "seed": seed,
        "n_llms": resp.n_llms,
        "n_items": resp.n_items,
        "parameterization": fit.parameterization,
        "wall_seconds": fit.wall_seconds,
        "wall_seconds_all": fit.fit_info["wall_seconds_all"],
        "attempts": fit.fit_info["attempts"],
        "every": every.to_dict(),
        "sampled": sampled.to_dict(),
        "date": started,
        "commit": commit(),
        "machine": machine(),
    }


def _cells(d: dict) -> str:
    return (
        f"{d['max_rhat']:.4f} ({d['worst_rhat']}) | {d['min_ess_bulk']:.0f} "
        f"({d['worst_ess_bulk']}) | {d['min_ess_tail']:.0f} | {'yes' if d['ok'] else 'no'}"
    )


def _attempts(r: dict) -> str:
    if not r.get("attempts"):  # a row of the plain 1000-draw fit, before the extension
        e = r["every"]
        return f"1000: {e['max_rhat']:.4f} / {e['min_ess_bulk']:.0f} / {e['min_ess_tail']:.0f}"
    return "; ".join(
        f"{a['draws']}: {a['max_rhat']:.4f} / {a['min_ess_bulk']:.0f} / {a['min_ess_tail']:.0f}"
        for a in r["attempts"]
    )


def report(rows: list[dict]) -> None:
    lines = [
        "The default `fit` (NUTS, 2 chains x (1000 tune + 1000 draws), package defaults; "
        "where a fit misses only R-hat or ESS, refitted with more draws per chain up to "
        "4000: `irt.model.fit_extending_draws`) on each matrix and seed. `attempts` lists "
        "each fit's draws per chain: max R-hat / min bulk ESS / min tail ESS (rows without "
        "an extension were run before it existed: one 1000-draw fit). The last fit's "
        "convergence summary is computed twice on the same draws: over every checked "
        "parameter, and without the derived `difficulty` (the sampled parameters). "
        "Thresholds: R-hat <= 1.01, bulk and tail ESS >= 400, no divergences.",
        "",
        "| matrix | model | seed | llms x items | attempts | fit s (all attempts) | "
        "divergences | all: max R-hat (where) | all: min bulk ESS (where) | all: min tail ESS "
        "| all: converged | sampled: max R-hat (where) | sampled: min bulk ESS (where) | "
        "sampled: min tail ESS | sampled: converged |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        total = r.get("wall_seconds_all", r["wall_seconds"])
        lines.append(
            f"| {r['benchmark']} | {r['model']} | {r['seed']} | {r['n_llms']} x {r['n_items']} "
            f"| {_attempts(r)} | {total:.0f} | {r['every']['divergences']} | "
            f"{_cells(r['every'])} | {_cells(r['sampled'])} |"
        )
    last = last_run(rows)
    write_section(
        "study_convergence_check",
        "The default fit's convergence: draws extended, every parameter vs the sampled ones",
        "\n".join(lines),
        run=None if len(rows) == 1 and commit() == last[1] else last,
        headline=[
            {
                "table": 0,
                "columns": [
                    "matrix",
                    "model",
                    "seed",
                    "fit s (all attempts)",
                    "all: converged",
                    "sampled: converged",
                ],
            }
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmarks", default="gpqa")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--model", default="2pl")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    saved = json.loads(RESULTS.read_text())["rows"] if RESULTS.exists() else []
    if not args.report_only:
        for name in args.benchmarks.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                row = run_one(name, args.model, seed)
                print(json.dumps({k: row[k] for k in ("benchmark", "seed", "every", "sampled")}))
                key = (name, args.model, seed)
                saved = [r for r in saved if (r["benchmark"], r["model"], r["seed"]) != key]
                saved.append(row)
                saved.sort(key=lambda r: (r["benchmark"], r["model"], r["seed"]))
                update_results(RESULTS, rows=saved)
    if saved:
        report(saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

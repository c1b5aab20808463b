"""Does the default ``fit`` converge on each shared matrix, and at what cost?

For each matrix and seed, ``bayes_microbench.irt.model.fit_default`` (what
``bayes-microbench fit --responses R --output P`` runs: the 2PL, NUTS, draws
extended up to the budget, then the policy's refits) in a fresh process. The
table gives the kept fit's parameterization and prior, every fit tried (its
draws per chain, max R-hat and divergences), the kept fit's diagnostics, and the
wall and CPU time of all of it (CPU counts the worker processes that ran the chains).

Usage::

    .venv/bin/python benchmarks/study_default_fit.py [--data ifeval,musr] [--seeds 0,1,2]
        [--report-only]

Rows go to ``benchmarks/results/default_fit.json``, keyed by (data, seed).
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
from _report import (  # noqa: E402
    MATRICES,
    check_names,
    cpu_seconds,
    last_run,
    load_results,
    rows_note,
    run_rows,
    write_section,
)

RESULTS = HERE / "results" / "default_fit.json"
#: The matrices of a plain run: those whose three default fits take minutes, not hours, here.
DEFAULT_DATA = "gpqa,ifeval,musr,math-hard"


def one(data: str, seed: int) -> dict:
    """The default fit of one matrix at one seed: the row the table is made from."""
    from bayes_microbench import load_responses
    from bayes_microbench.exceptions import ConvergenceWarning
    from bayes_microbench.irt.model import fit_default

    resp = load_responses(MATRICES[data])
    t0, c0 = time.perf_counter(), cpu_seconds()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = fit_default(resp, "2pl", random_seed=seed, progressbar=False)
    cpu = cpu_seconds() - c0
    d = fit.diagnostics
    assert d is not None
    return {
        "data": data,
        "shape": f"{resp.n_llms} x {resp.n_items}",
        "seed": seed,
        "parameterization": fit.parameterization,
        "prior": fit.config.discrimination_prior,
        "refits": fit.fit_info["refits"],
        "diagnostics": d.to_dict(),
        "converged": bool(fit.converged),
        "fit_seconds": fit.fit_info["wall_seconds_all"],
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "cpu_seconds": round(cpu, 1),
    }


def _tried(row: dict) -> str:
    """Every fit of a row: settings, draws per chain, max R-hat, divergences."""
    out = []
    for r in row["refits"]:
        name = ", ".join(f"{v}" for v in r["settings"].values()) or "default"
        if r.get("skipped"):
            out.append(f"{name}: not tried ({r['skipped']})")
            continue
        draws = "+".join(str(x) for x in r["draws_tried"])
        out.append(
            f"{name} ({r['parameterization']}): {draws} draws, {r['max_rhat']:.4f}, {r['divergences']} div"
        )
    return "; ".join(out)


def table(saved: list[dict]) -> str:
    lines = [
        "| data | llms x items | seed | fits tried: draws per chain, max R-hat, divergences | "
        "kept: parameterization, prior | max R-hat | min bulk ESS | min tail ESS | "
        "divergences | converged | fit s | CPU s | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(saved, key=lambda r: (r["data"], r["seed"])):
        d = r["diagnostics"]
        lines.append(
            f"| {r['data']} | {r['shape']} | {r['seed']} | {_tried(r)} | "
            f"{r['parameterization']}, {r['prior']} | {d['max_rhat']:.4f} | "
            f"{d['min_ess_bulk']:.0f} | {d['min_ess_tail']:.0f} | {d['divergences']} | "
            f"{'yes' if r['converged'] else 'NO'} | {r['fit_seconds']:.0f} | "
            f"{r['cpu_seconds']:.0f} | {r['load']:.1f} |"
        )
    return "\n".join(lines)


def summary_table(saved: list[dict]) -> str:
    """One row per matrix: seeds converged, what was kept, the median fit time."""
    import statistics

    lines = [
        "| data | llms x items | converged | kept | median fit s |",
        "|---|---|---|---|---|",
    ]
    for data in sorted({r["data"] for r in saved}):
        rows = sorted((r for r in saved if r["data"] == data), key=lambda r: r["seed"])
        kept = sorted({f"{r['parameterization']}, {r['prior']}" for r in rows})
        lines.append(
            f"| {data} | {rows[0]['shape']} | {sum(r['converged'] for r in rows)} of {len(rows)} "
            f"| {'; '.join(kept)} | {statistics.median(r['fit_seconds'] for r in rows):.0f} |"
        )
    return "\n".join(lines)


def report(saved: list[dict]) -> None:
    setup = (
        "`irt.model.fit_default`, what `fit` runs without flags: the 2PL, NUTS 2 chains x "
        "(1000 tune + 1000 draws); a fit missing only R-hat or ESS is extended (up to 4000 "
        "draws per chain); an unconverged fit is refitted with the policy's remedies in order "
        "(below 100 llms: the centered items, then those with the truncated-normal prior; "
        "from 100 llms: the truncated-normal prior), each extended the same way, while under "
        "900 s. Converged = every R-hat <= 1.01, bulk and tail ESS >= 400, no divergences, "
        "BFMI >= 0.3. One fresh process per row; fit s = the sampling of every fit tried, "
        "CPU s = the whole process with its chain workers. " + rows_note(saved)
    )
    n_ok = sum(r["converged"] for r in saved)
    summary = (
        f"{n_ok} of {len(saved)} default fits converged. Why the refits: "
        "docs/decisions/0032-default-fit-tries-its-remedies.md."
    )
    write_section(
        "study_default_fit",
        "The default fit on the shared matrices",
        "\n\n".join([setup, table(saved), summary_table(saved), summary]),
        run=last_run(saved),
        headline=[1],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--one", nargs=2, metavar=("DATA", "SEED"))
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(one(args.one[0], int(args.one[1])), default=float))
        return 0
    if args.report_only:
        report(load_results(RESULTS)["rows"])
        return 0
    datasets = [d for d in args.data.split(",") if d]
    check_names(parser, "data", datasets, list(MATRICES))
    for name in datasets:
        if not MATRICES[name].exists():
            print(f"{MATRICES[name]} not present; nothing to study", file=sys.stderr)
            return 1
    seeds = [int(s) for s in args.seeds.split(",") if s]
    jobs = [[d, str(s)] for d in datasets for s in seeds]
    saved = run_rows(__file__, jobs, lambda r: (r["data"], r["seed"]), RESULTS)
    if saved is None:
        return 1
    report(saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

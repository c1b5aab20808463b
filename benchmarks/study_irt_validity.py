"""Validity of the IRT fits on simulated data: recovery at 300 x 500, 90% interval coverage.

Recovery: one simulated 2PL matrix (300 llms x 500 items), NUTS; correlation of
posterior means with the true abilities, difficulties and discriminations
(target >= 0.95 for abilities and difficulties).

Coverage: ``--replicates`` simulated 2PL matrices (40 llms x 50 items each),
fitted with NUTS and with the fast approximations (ADVI, Pathfinder, Laplace);
the fraction of true abilities and difficulties inside the central 90%
intervals (target 85-95% for NUTS; the approximations are reported so users
know when the fast path understates uncertainty).

Usage::

    .venv/bin/python benchmarks/study_irt_validity.py [--replicates 50] [--methods nuts,advi,...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    from bayes_microbench.irt.validity import coverage_study, recovery

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=50)
    parser.add_argument("--methods", default="nuts,advi,pathfinder,laplace")
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()
    rec = None
    if not args.skip_recovery:
        rec = recovery("nuts", n_llms=300, n_items=500, random_seed=11)
        print(json.dumps(rec), flush=True)
    cov: list[dict] = []
    if not args.no_report and rec:
        report(rec, cov, args)
    for method in [m for m in args.methods.split(",") if m]:
        res = coverage_study(method, replicates=args.replicates, n_llms=40, n_items=50)
        print(json.dumps(res), flush=True)
        cov.append(res)
        if not args.no_report:  # rewritten after each method: a long study reports as it goes
            report(rec, cov, args)
    return 0


def report(rec: dict | None, cov: list[dict], args: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE))
    from _report import write_section

    lines = []
    if rec:
        lines += [
            "Recovery, simulated hierarchical 2PL, 300 llms x 500 items, NUTS 2 x (500 + 500):",
            "",
            "| corr(ability) | corr(difficulty) | corr(discrimination) | max R-hat | min bulk ESS | seconds |",
            "|---|---|---|---|---|---|",
            f"| {rec['corr_ability']:.3f} | {rec['corr_difficulty']:.3f} | "
            f"{rec['corr_discrimination']:.3f} | {rec.get('max_rhat', float('nan')):.3f} | "
            f"{rec.get('min_ess_bulk', float('nan')):.0f} | {rec['seconds']:.0f} |",
            "",
        ]
    if cov:
        lines += [
            f"Coverage of central 90% intervals over {args.replicates} replicates "
            "(40 llms x 50 items each, simulated hierarchical 2PL; pooled over all llms / items; "
            "sd = spread over replicates):",
            "",
            "| method | ability coverage | sd | difficulty coverage | sd | median width ability | "
            "median width difficulty | seconds |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in cov:
            lines.append(
                f"| {r['method']} | {r['ability']:.3f} | {r['ability_replicate_sd']:.3f} | "
                f"{r['difficulty']:.3f} | {r['difficulty_replicate_sd']:.3f} | "
                f"{r['ability_median_width']:.2f} | {r['difficulty_median_width']:.2f} | "
                f"{r['seconds']:.0f} |"
            )
    write_section(
        "study_irt_validity", "IRT validity: recovery and interval coverage", "\n".join(lines)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Validity of the IRT fits on simulated data: recovery at 300 x 500, 90% interval coverage.

Recovery: one simulated 2PL matrix (300 llms x 500 items), NUTS; correlation of
posterior means with the true abilities, difficulties and discriminations
(target >= 0.95 for abilities and difficulties).

Coverage: ``--replicates`` simulated hierarchical 2PL matrices (40 llms x 50
items, one subtask, difficulty mean 0; replicate ``r`` uses seed ``r``), each
fitted with NUTS (2 x (300 + 300)) and with the fast approximations (ADVI,
Pathfinder, Laplace; 600 draws each); the fraction of true abilities and
difficulties inside the central 90% intervals (target 85-95% for NUTS; the
approximations are reported so users know when the fast path understates
uncertainty). A replicate whose fit raises is counted as a failure (with its
message) and left out of the coverage, never dropped silently.

Results are kept per method in ``benchmarks/results/irt_validity.json`` (each
entry with its run date, commit, load average and CPU time); a run with a
subset of ``--methods`` replaces only those entries, and the README section is
rendered from the whole file, so rows measured earlier are kept with their own
date and commit.

Usage::

    .venv/bin/python benchmarks/study_irt_validity.py [--replicates 50] [--methods nuts,advi,...]
        [--skip-recovery]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "irt_validity.json"
CI_PROB = 0.9
N_LLMS, N_ITEMS = 40, 50


def _stamp() -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from _report import commit

    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
    }


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def coverage(method: str, replicates: int, draws: int = 300, tune: int = 300) -> dict[str, Any]:
    """Coverage of central 90% intervals of ``method`` over ``replicates`` simulated matrices."""
    from bayes_microbench import simulate_responses
    from bayes_microbench.exceptions import ConvergenceWarning
    from bayes_microbench.irt import IRTModel

    hits: dict[str, list[float]] = {"ability": [], "difficulty": []}
    width: dict[str, list[float]] = {"ability": [], "difficulty": []}
    failures: list[str] = []
    per_rep: list[float] = []
    info_keys: dict[str, list[Any]] = {}
    load0, cpu0, start = os.getloadavg()[0], _cpu(), time.perf_counter()
    q = [(1 - CI_PROB) / 2, 1 - (1 - CI_PROB) / 2]
    for r in range(replicates):
        resp, truth = simulate_responses(
            "gpqa",
            n_llms=N_LLMS,
            n_items=N_ITEMS,
            model="2pl",
            n_subtasks=1,
            difficulty_mean=0.0,
            random_seed=r,
            return_truth=True,
        )
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                fit = IRTModel(resp, "2pl").fit(method, draws=draws, tune=tune, random_seed=r)
        except Exception as exc:  # a failed replicate is counted and reported
            failures.append(f"replicate {r}: {type(exc).__name__}: {str(exc)[:160]}")
            print(f"{method} replicate {r} failed: {exc}", file=sys.stderr, flush=True)
            continue
        per_rep.append(time.perf_counter() - t0)
        for key in ("iterations", "converged", "optimizer_converged"):
            if key in fit.fit_info:
                info_keys.setdefault(key, []).append(fit.fit_info[key])
        post = fit.posterior
        for name, dim in (("ability", "llm"), ("difficulty", "item")):
            d = post[name].values.reshape(-1, post.sizes[dim])
            lo, hi = np.quantile(d, q, axis=0)
            t = getattr(truth, name).values
            hits[name].append(float(np.mean((t >= lo) & (t <= hi))))
            width[name].append(float(np.median(hi - lo)))
    out: dict[str, Any] = {
        "method": method,
        "replicates": replicates,
        "failures": len(failures),
        "failure_messages": failures[:5],
        "n_llms": N_LLMS,
        "n_items": N_ITEMS,
        "ci_prob": CI_PROB,
        "seconds": time.perf_counter() - start,
        "cpu_seconds": _cpu() - cpu0,
        "median_seconds_per_fit": float(np.median(per_rep)) if per_rep else float("nan"),
        "load": load0,
        **_stamp(),
    }
    if method == "nuts":
        out["settings"] = f"2 x ({tune} + {draws})"
    else:
        out["settings"] = f"{2 * draws} draws"
    for key, vals in info_keys.items():
        if key == "iterations":
            out["median_iterations"] = float(np.median(vals))
        else:
            out[f"fraction_{key}"] = float(np.mean([bool(v) for v in vals]))
    for name in hits:
        ok = len(hits[name]) > 0
        out[name] = float(np.mean(hits[name])) if ok else float("nan")
        out[f"{name}_replicate_sd"] = float(np.std(hits[name])) if ok else float("nan")
        out[f"{name}_median_width"] = float(np.median(width[name])) if ok else float("nan")
    return out


def recovery() -> dict[str, Any]:
    from bayes_microbench.irt.validity import recovery as run

    load0, cpu0 = os.getloadavg()[0], _cpu()
    rec = run("nuts", n_llms=300, n_items=500, random_seed=11)
    return {**rec, "cpu_seconds": _cpu() - cpu0, "load": load0, **_stamp()}


def load_results() -> dict[str, Any]:
    if RESULTS.exists():
        data: dict[str, Any] = json.loads(RESULTS.read_text())
        return data
    return {"recovery": None, "coverage": {}}


def save_results(results: dict[str, Any]) -> None:
    from bayes_microbench.io import write_atomic

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=1, default=float) + "\n"
    write_atomic(RESULTS, lambda tmp: tmp.write_text(text))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=50)
    parser.add_argument("--methods", default="nuts,advi,pathfinder,laplace")
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()
    results = load_results()
    if not args.skip_recovery:
        results["recovery"] = recovery()
        print(json.dumps(results["recovery"]), flush=True)
        save_results(results)
    for method in [m for m in args.methods.split(",") if m]:
        res = coverage(method, args.replicates)
        print(json.dumps(res), flush=True)
        results["coverage"][method] = res
        save_results(results)  # after each method: a long study keeps what it measured
        if not args.no_report:
            report(results)
    if not args.no_report:
        report(results)
    return 0


def _f(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "-"
    return format(value, fmt)


def report(results: dict[str, Any]) -> None:
    sys.path.insert(0, str(HERE))
    from _report import write_section

    lines: list[str] = [
        "Per-method results live in `benchmarks/results/irt_validity.json`; each row below "
        "states the date and commit of its own run (a rerun with `--methods` replaces only "
        "those rows). `load` = 1-minute load average at the start (2 shared cores).",
        "",
    ]
    rec = results.get("recovery")
    if rec:
        lines += [
            "Recovery, simulated hierarchical 2PL, 300 llms x 500 items, NUTS 2 x (500 + 500):",
            "",
            "| corr(ability) | corr(difficulty) | corr(discrimination) | max R-hat | "
            "min bulk ESS | seconds | run |",
            "|---|---|---|---|---|---|---|",
            f"| {rec['corr_ability']:.3f} | {rec['corr_difficulty']:.3f} | "
            f"{rec['corr_discrimination']:.3f} | {_f(rec.get('max_rhat'), '.3f')} | "
            f"{_f(rec.get('min_ess_bulk'), '.0f')} | {rec['seconds']:.0f} | "
            f"{rec.get('date', '?')}, {rec.get('commit', '?')} |",
            "",
        ]
    cov = results.get("coverage", {})
    if cov:
        lines += [
            "Coverage of central 90% intervals (simulated hierarchical 2PL, 40 llms x 50 items, "
            "one subtask, replicate r = seed r; pooled over all llms / items of the replicates "
            "that fitted; sd = spread over replicates; widths are medians over llms / items and "
            "replicates). Target for a calibrated method: 0.85-0.95.",
            "",
            "| method | settings | replicates | failed | ability coverage | sd | "
            "difficulty coverage | sd | median width ability | median width difficulty | "
            "seconds (per fit) | CPU s | load | run |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        order = ["nuts", "advi", "pathfinder", "laplace"]
        for method in sorted(cov, key=lambda m: order.index(m) if m in order else 99):
            r = cov[method]
            per = r.get("median_seconds_per_fit")
            secs = f"{r['seconds']:.0f}" + (f" ({per:.1f})" if per is not None else "")
            lines.append(
                f"| {method} | {r.get('settings', '-')} | {r['replicates']} | "
                f"{r.get('failures', '-')} | {_f(r['ability'], '.3f')} | "
                f"{_f(r['ability_replicate_sd'], '.3f')} | {_f(r['difficulty'], '.3f')} | "
                f"{_f(r['difficulty_replicate_sd'], '.3f')} | "
                f"{_f(r['ability_median_width'], '.2f')} | "
                f"{_f(r['difficulty_median_width'], '.2f')} | {secs} | "
                f"{_f(r.get('cpu_seconds'), '.0f')} | {_f(r.get('load'), '.1f')} | "
                f"{r.get('date', '?')}, {r.get('commit', '?')} |"
            )
        fails = [
            f"- {m}: " + "; ".join(r["failure_messages"])
            for m, r in cov.items()
            if r.get("failure_messages")
        ]
        if fails:
            lines += ["", "Failed replicates (first five messages per method):", "", *fails]
        notes = results.get("notes")
        if notes:
            lines += ["", notes]
    write_section(
        "study_irt_validity",
        "IRT validity: recovery and interval coverage",
        "\n".join(lines),
        headline=[
            0,
            {
                "table": 1,
                "columns": [
                    "method",
                    "settings",
                    "replicates",
                    "ability coverage",
                    "difficulty coverage",
                    "median width ability",
                    "median width difficulty",
                    "run",
                ],
            },
        ],
    )


if __name__ == "__main__":
    sys.exit(main())

"""IRT fits at scale: wall time and peak memory of NUTS and of the fast approximations.

Data: PredictaBoard BBH (78 x 5761), PredictaBoard MMLU-Pro (43 x 12032), a
simulated 450 x 12000 (MMLU-Pro at the leaderboard's llm count, 5.4M cells)
and a simulated 5000 x 250 (metabench-like). Each (data, method) runs in a
fresh subprocess with a timeout; peak memory is the child's max RSS.

NUTS runs a short 2 x (``--nuts-tune`` + ``--nuts-draws``); the report gives
its measured time and, separately and labelled as such, the linear
extrapolation to 2 x (1000 + 1000).

Usage::

    .venv/bin/python benchmarks/bench_irt_scale.py [--methods advi,pathfinder,nuts] [--data bbh,...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "data"

DATA = {
    "bbh": ("file", "predictaboard-oll-v2/bbh.csv"),
    "mmlu-pro": ("file", "predictaboard-oll-v2/mmlu-pro.csv"),
    "sim-450x12000": ("sim", "mmlu-pro:450:12000"),
    "sim-5000x250": ("sim", "metabench:5000:250"),
}


def load(name: str):  # type: ignore[no-untyped-def]
    from bayes_microbench import load_responses, simulate_responses

    kind, spec = DATA[name]
    if kind == "file":
        return load_responses(SHARED / spec)
    preset, n_l, n_i = spec.split(":")
    return simulate_responses(preset, n_llms=int(n_l), n_items=int(n_i), random_seed=0)


def one(name: str, method: str, tune: int, draws: int) -> dict:
    import warnings

    from bayes_microbench.exceptions import ConvergenceWarning
    from bayes_microbench.irt import IRTModel

    resp = load(name)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = IRTModel(resp, "2pl").fit(
            method, tune=tune, draws=draws, random_seed=0, advi_iterations=20000
        )
    out = {
        "n_llms": resp.n_llms,
        "n_items": resp.n_items,
        "fit_s": time.perf_counter() - start,
        "sampling_s": fit.wall_seconds,
    }
    if fit.diagnostics is not None:
        out.update(
            max_rhat=fit.diagnostics.max_rhat,
            min_ess_bulk=fit.diagnostics.min_ess_bulk,
            divergences=fit.diagnostics.divergences,
        )
    out["info"] = fit.fit_info
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=",".join(DATA))
    parser.add_argument("--methods", default="advi,pathfinder,nuts")
    parser.add_argument("--nuts-tune", type=int, default=200)
    parser.add_argument("--nuts-draws", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        res = one(args.one[0], args.one[1], args.nuts_tune, args.nuts_draws)
        print(json.dumps(res, default=float))
        return 0
    rows = []
    for name in [d for d in args.data.split(",") if d]:
        for method in [m for m in args.methods.split(",") if m]:
            cmd = [sys.executable, __file__, "--one", name, method]
            cmd += ["--nuts-tune", str(args.nuts_tune), "--nuts-draws", str(args.nuts_draws)]
            load0 = os.getloadavg()[0]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            try:
                proc = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT
                )
                ok, out, err = proc.returncode == 0, proc.stdout, proc.stderr
            except subprocess.TimeoutExpired:
                ok, out, err = False, "", f"timed out after {args.timeout:.0f} s"
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            row = {
                "data": name,
                "method": method,
                "wall_s": wall,
                "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
                "peak_mib": after.ru_maxrss / 1024,
                "load": load0,
                "error": "" if ok else (err.strip().splitlines() or ["failed"])[-1][:160],
            }
            lines = [ln for ln in out.strip().splitlines() if ln.startswith("{")]
            if ok and lines:
                row.update(json.loads(lines[-1]))
            print(json.dumps(row, default=float), flush=True)
            rows.append(row)
    if not args.no_report:
        report(rows, args)
    return 0


def report(rows: list[dict], args: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE))
    from _report import write_section

    lines = [
        "Hierarchical 2PL; each (data, method) a fresh process (load + build + compile + fit "
        f"counted in wall s). NUTS: 2 x ({args.nuts_tune} + {args.nuts_draws}); "
        "'NUTS 2x(1000+1000) est.' scales the measured sampling time linearly by "
        f"{2000 / (args.nuts_tune + args.nuts_draws):.1f} (an extrapolation, not a measurement). "
        "Peak MiB is the largest child max-RSS so far (monotone across rows). Machine shared "
        "with other jobs; `load` = 1-minute load average at start.",
        "",
        "| data | llms x items | method | wall s | CPU s | peak MiB | NUTS 2x(1000+1000) est. s | "
        "max R-hat | load | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        shape = f"{r.get('n_llms', '?')} x {r.get('n_items', '?')}"
        est = "-"
        if r["method"] == "nuts" and not r["error"] and r.get("sampling_s"):
            est = f"{r['sampling_s'] * 2000 / (args.nuts_tune + args.nuts_draws):.0f}"
        rhat = f"{r['max_rhat']:.3f}" if "max_rhat" in r else "-"
        lines.append(
            f"| {r['data']} | {shape} | {r['method']} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | "
            f"{r['peak_mib']:.0f} | {est} | {rhat} | {r['load']:.1f} | {r['error'] or ''} |"
        )
    write_section("bench_irt_scale", "IRT at scale: NUTS vs fast approximations", "\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())

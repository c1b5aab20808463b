"""IRT fits at scale: wall time, CPU time and peak memory of NUTS and of the fast approximations.

Data: PredictaBoard BBH (78 x 5761), PredictaBoard MMLU-Pro (43 x 12032), a
simulated 450 x 12000 (MMLU-Pro at the leaderboard's llm count, 5.4M cells)
and a simulated 5000 x 250 (metabench-like). Each (data, method) runs in a
fresh subprocess with a timeout; wall time counts load + build + compile +
fit; CPU time and peak memory (max RSS) are the child's own (``os.wait4``).

Before a NUTS fit the child times one log-density gradient of the same model
(the callable the NUTS workers hand nutpie) in a forked process of its own and
reports it at once, so that a run stopped at the timeout still shows its cost
per gradient; the fit then runs its chains in forked workers as ``fit`` does.
NUTS runs a short 2 x (``--nuts-tune`` + ``--nuts-draws``); the report gives its
measured time, its leapfrog steps per draw and diagnostics, and, labelled as a
projection, the cost of 2 x (1000 + 1000) from the measured time per gradient.

Per-run results are kept in ``benchmarks/results/irt_scale.json`` keyed by
(data, method), each with its date, commit and load; a run with a subset of
``--data`` / ``--methods`` replaces only those entries and the README section
is rendered from the whole file.

Usage::

    .venv/bin/python benchmarks/bench_irt_scale.py [--methods advi,pathfinder,nuts] [--data bbh,...]
        [--nuts-tune 200 --nuts-draws 200] [--timeout 1200] [--grad-only]

``--grad-only`` (NUTS) stops after timing the gradient: the row then gives the
projected cost only, and says that nothing was sampled.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "data"
RESULTS = HERE / "results" / "irt_scale.json"

DATA = {
    "bbh": ("file", "predictaboard-oll-v2/bbh.csv"),
    "mmlu-pro": ("file", "predictaboard-oll-v2/mmlu-pro.csv"),
    "sim-450x12000": ("sim", "mmlu-pro:450:12000"),
    "sim-5000x250": ("sim", "metabench:5000:250"),
}

#: Leapfrog steps per NUTS draw assumed by the projection when a run did not finish
#: (the decoupled 2PL on GPQA 420 x 448 took 31, see the IRT sampling section).
ASSUMED_STEPS = 31


def load(name: str) -> tuple[Any, Any]:
    """The responses of ``name`` and, for simulated data, the truth (else None)."""
    from bayes_microbench import load_responses, simulate_responses

    kind, spec = DATA[name]
    if kind == "file":
        return load_responses(SHARED / spec), None
    preset, n_l, n_i = spec.split(":")
    resp, truth = simulate_responses(
        preset, n_llms=int(n_l), n_items=int(n_i), random_seed=0, return_truth=True
    )
    return resp, truth


def truth_coverage(post: Any, truth: Any) -> dict[str, float]:
    """Coverage of the true abilities / difficulties by central 90% intervals, correlations."""
    import numpy as np

    out: dict[str, float] = {}
    for name, dim in (("ability", "llm"), ("difficulty", "item")):
        d = np.asarray(post[name].values).reshape(-1, post.sizes[dim])
        lo, hi = np.quantile(d, [0.05, 0.95], axis=0)
        t = getattr(truth, name).values
        out[f"{name}_coverage"] = float(np.mean((t >= lo) & (t <= hi)))
        out[f"{name}_corr"] = float(np.corrcoef(d.mean(0), t)[0, 1])
    return out


def time_gradient(im: Any) -> dict[str, Any]:
    """Seconds per log density + gradient of the model NUTS samples, as nutpie calls it.

    The callable the NUTS workers hand nutpie (JAX, float32, through the FFI
    likelihood kernel where it applies), timed alone on one process.
    """
    import warnings

    import numpy as np
    import pytensor
    from pymc.blocking import DictToArrayBijection

    from bayes_microbench.irt._chains import compile_for_nutpie

    param = im.policy("nuts").parameterization  # the model fit("nuts") samples
    with pytensor.config.change_flags(floatX="float32"):
        model = im.build_model(parameterization=param, float32=True)
        point = model.initial_point(0)
        fn = compile_for_nutpie(model)._make_logp_func()
        # float32 sampling: JAX notes that float64 constants become 32-bit
        warnings.filterwarnings("ignore", message="Explicitly requested dtype")
        x = DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars}).data
        x = np.asarray(x, dtype="float32")
        value, grad = fn(x)
        if not (np.isfinite(value) and np.all(np.isfinite(grad))):
            raise RuntimeError("the log density or its gradient is not finite at the start")
        reps, start = 0, time.perf_counter()
        while reps < 50 and time.perf_counter() - start < 10:
            fn(x)
            reps += 1
    return {"gradient_s": (time.perf_counter() - start) / reps, "parameterization": param}


def _in_child(task: Any) -> int:
    """Run ``task`` in a forked child, wait for it and return its exit status.

    The gradient timing starts JAX's runtime; in the process that then samples
    that would make the NUTS chains threads of one process instead of forked
    workers (see ``irt/_chains.py``), which is not how ``fit`` runs them.
    """
    import warnings

    sys.stdout.flush()
    with warnings.catch_warnings():
        # Python 3.12 warns about forking a multi-threaded process (BLAS pools), as
        # for fit's own chain workers; the child builds its model and starts JAX afresh
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 0
        try:
            task()
        except BaseException as err:  # the child reports and exits, never returns
            print(f"gradient timing failed: {type(err).__name__}: {err}", file=sys.stderr)
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def one(name: str, method: str, tune: int, draws: int, grad_only: bool = False) -> None:
    import warnings

    import numpy as np

    from bayes_microbench.exceptions import ConvergenceWarning
    from bayes_microbench.irt import IRTModel

    resp, truth = load(name)
    im = IRTModel(resp, "2pl")
    out: dict[str, Any] = {"n_llms": resp.n_llms, "n_items": resp.n_items}
    out["cells"] = int(np.isfinite(im.data.values).sum())
    if method == "nuts":
        status = _in_child(lambda: print(json.dumps(out | time_gradient(im), default=float)))
        if grad_only:
            if status != 0:
                raise SystemExit("the gradient could not be timed (see above)")
            return
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = im.fit(method, tune=tune, draws=draws, random_seed=0)
    out["fit_s"] = time.perf_counter() - start
    out["sampling_s"] = fit.wall_seconds
    if fit.diagnostics is not None:
        d = fit.diagnostics
        out.update(max_rhat=d.max_rhat, min_ess_bulk=d.min_ess_bulk, divergences=d.divergences)
        assert fit.idata is not None
        steps = np.asarray(fit.idata["sample_stats"]["n_steps"].values)
        out["steps_per_draw"] = float(steps.mean())
    out["info"] = {k: v for k, v in fit.fit_info.items() if isinstance(v, (int, float, bool, str))}
    if truth is not None:
        out.update(truth_coverage(fit.posterior, truth))
    print(json.dumps(out, default=float), flush=True)


def run_child(cmd: list[str], timeout: float) -> tuple[int | None, str, str, Any]:
    """Run ``cmd``; kill it after ``timeout`` s. Return (status, stdout, stderr, rusage)."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    chunks: dict[str, list[str]] = {"out": [], "err": []}

    def drain(stream: Any, key: str) -> None:
        for line in stream:
            chunks[key].append(line)

    readers = [
        threading.Thread(target=drain, args=(proc.stdout, "out"), daemon=True),
        threading.Thread(target=drain, args=(proc.stderr, "err"), daemon=True),
    ]
    for t in readers:
        t.start()
    timer = threading.Timer(timeout, lambda: os.kill(proc.pid, signal.SIGKILL))
    timer.start()
    _, status, usage = os.wait4(proc.pid, 0)
    timer.cancel()
    for t in readers:
        t.join(timeout=5)
    proc.returncode = os.waitstatus_to_exitcode(status)
    code = None if proc.returncode == -signal.SIGKILL else proc.returncode
    return code, "".join(chunks["out"]), "".join(chunks["err"]), usage


def load_results() -> dict[str, Any]:
    if RESULTS.exists():
        data: dict[str, Any] = json.loads(RESULTS.read_text())
        return data
    return {}


def save_results(results: dict[str, Any]) -> None:
    from bayes_microbench.io import write_atomic

    text = json.dumps(results, indent=1, default=float) + "\n"
    write_atomic(RESULTS, lambda tmp: tmp.write_text(text))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=",".join(DATA))
    parser.add_argument("--methods", default="advi,pathfinder,nuts")
    parser.add_argument("--nuts-tune", type=int, default=200)
    parser.add_argument("--nuts-draws", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument(
        "--grad-only",
        action="store_true",
        help="NUTS: time the gradient only (no sampling); the row gives the projection",
    )
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.one[0], args.one[1], args.nuts_tune, args.nuts_draws, args.grad_only)
        return 0
    sys.path.insert(0, str(HERE))
    from _report import commit

    results = load_results()
    for name in [d for d in args.data.split(",") if d]:
        for method in [m for m in args.methods.split(",") if m]:
            cmd = [sys.executable, __file__, "--one", name, method]
            cmd += ["--nuts-tune", str(args.nuts_tune), "--nuts-draws", str(args.nuts_draws)]
            cmd += ["--grad-only"] if args.grad_only else []
            load0 = os.getloadavg()[0]
            start = time.perf_counter()
            code, out, err, usage = run_child(cmd, args.timeout)
            wall = time.perf_counter() - start
            if code is None:
                error = f"stopped at the {args.timeout:.0f} s timeout"
            elif code != 0:
                error = (err.strip().splitlines() or ["failed"])[-1][:200]
            else:
                error = ""
            row: dict[str, Any] = {
                "data": name,
                "method": method,
                "wall_s": wall,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "peak_mib": usage.ru_maxrss / 1024,
                "load": load0,
                "timeout_s": args.timeout,
                "error": error,
                "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                "commit": commit(),
            }
            if method == "nuts" and args.grad_only:
                row["nuts"] = "not sampled: gradient timed only (--grad-only)"
            elif method == "nuts":
                row["nuts"] = f"2 x ({args.nuts_tune} + {args.nuts_draws})"
                row["nuts_iterations"] = args.nuts_tune + args.nuts_draws
            for line in out.strip().splitlines():
                if line.startswith("{"):
                    row.update(json.loads(line))
            print(json.dumps(row, default=float), flush=True)
            results[f"{name}/{method}"] = row
            save_results(results)
            if not args.no_report:
                report(results)
    return 0


def _fmt(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def report(results: dict[str, Any]) -> None:
    from _report import write_section

    lines = [
        "Hierarchical 2PL. Each (data, method) is a fresh process; wall s counts load + "
        "build + compile + fit, CPU s and peak MiB are that process's own. The machine has "
        "2 cores shared with other jobs: `load` is the 1-minute load average at the start "
        "(CPU s is the fairer figure when load > 2). Per-run date and commit in "
        "`benchmarks/results/irt_scale.json`. NUTS: nutpie (JAX), 2 chains, float32; "
        "`s/grad` is one log density + gradient of the sampled model timed alone before "
        "sampling (inside nutpie each gradient costs several times more: chain overhead, two "
        "chains sharing the cores); `cell-grads/s` = cells x iterations x steps/draw / "
        "sampling s, per chain, measured. `2x(1000+1000) proj.` is a projection, not a "
        "measurement: the sampled run's time scaled to 2000 iterations per chain, or, for "
        f"rows not sampled, cells x 2000 x {ASSUMED_STEPS} steps / the median cell-grads/s of "
        "the sampled rows. Simulated data: `truth in 90%` is the fraction of the true abilities / "
        "difficulties inside the central 90% intervals (the 450 x 12000 matrix is drawn from a "
        "3PL with 10 options, so a 2PL fit of it is misspecified; the 5000 x 250 one is a 2PL).",
        "",
        "| data | llms x items | cells | method | wall s | CPU s | peak MiB | fit details | "
        "s/grad | steps/draw | cell-grads/s | max R-hat | min ESS | div. | "
        "2x(1000+1000) proj. s | truth in 90% ability / difficulty | load | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = list(DATA)
    meth = ["advi", "pathfinder", "laplace", "map", "nuts"]
    rows = sorted(
        [v for k, v in results.items() if isinstance(v, dict) and k != "report"],
        key=lambda r: (
            order.index(r["data"]) if r["data"] in order else 99,
            meth.index(r["method"]) if r["method"] in meth else 99,
        ),
    )

    def rate(r: dict[str, Any]) -> float | None:
        if r["method"] != "nuts" or r["error"] or not r.get("sampling_s"):
            return None
        if not r.get("steps_per_draw") or not r.get("nuts_iterations"):
            return None
        return float(r["cells"] * r["nuts_iterations"] * r["steps_per_draw"] / r["sampling_s"])

    rates = sorted(x for x in (rate(r) for r in rows) if x)
    typical = rates[len(rates) // 2] if rates else None
    for r in rows:
        shape = f"{r.get('n_llms', '?')} x {r.get('n_items', '?')}"
        info = r.get("info", {})
        details = []
        if r["method"] == "nuts":
            details.append(r.get("nuts", ""))
        if "iterations" in info:
            details.append(f"{info['iterations']} iterations")
        if "converged" in info:
            details.append("converged" if info["converged"] else "NOT converged")
        if "path_length" in info:
            details.append(f"path {info['path_length']}, chose {info.get('chosen_iteration')}")
        if "logp_evaluations" in info:
            details.append(f"{info['logp_evaluations']} logp evals")
        proj = "-"
        r_rate = rate(r)
        if r_rate:
            proj = f"{r['sampling_s'] * 2000 / r['nuts_iterations']:.0f}"
        elif r["method"] == "nuts" and typical and r.get("cells"):
            proj = f"{r['cells'] * 2000 * ASSUMED_STEPS / typical:.0f} (from cells)"
        truth = "-"
        if "ability_coverage" in r:
            truth = f"{r['ability_coverage']:.2f} / {r['difficulty_coverage']:.2f}"
        lines.append(
            f"| {r['data']} | {shape} | {_fmt(r.get('cells'), ',')} | {r['method']} | "
            f"{r['wall_s']:.0f} | {r['cpu_s']:.0f} | {r['peak_mib']:.0f} | "
            f"{'; '.join(d for d in details if d) or '-'} | {_fmt(r.get('gradient_s'), '.4f')} | "
            f"{_fmt(r.get('steps_per_draw'), '.0f')} | {_fmt(r_rate, '.1e')} | "
            f"{_fmt(r.get('max_rhat'), '.3f')} | "
            f"{_fmt(r.get('min_ess_bulk'), '.0f')} | {_fmt(r.get('divergences'), 'd')} | "
            f"{proj} | {truth} | {r['load']:.1f} | {r['error'] or ''} |"
        )
    notes = results.get("_notes")
    body = "\n".join(lines)
    if isinstance(notes, str):
        body += "\n\n" + notes
    write_section(
        "bench_irt_scale",
        "IRT at scale: NUTS vs fast approximations",
        body,
        headline=[
            {
                "table": 0,
                "columns": [
                    "data",
                    "llms x items",
                    "method",
                    "wall s",
                    "CPU s",
                    "max R-hat",
                    "min ESS",
                    "2x(1000+1000) proj. s",
                    "truth in 90% ability / difficulty",
                    "load",
                ],
            }
        ],
    )


if __name__ == "__main__":
    sys.exit(main())

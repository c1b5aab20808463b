"""The NUTS accelerators side by side: GPQA's default 2PL fit with each one left out, and none.

Each fit is the default NUTS fit of GPQA (420 x 448, 2PL, 2 chains x (1000 tune + 1000
draws), fixed seed) in a fresh process, with ``BAYES_MICROBENCH_ACCELERATE`` set per variant:

- ``auto``: every accelerator (the FFI kernel, the forked pinned workers);
- ``no-ffi`` / ``no-workers``: all but that one;
- ``off``: none (plain nutpie threads, XLA's kernel for the fused likelihood Op);
- ``lean_logp``: ``auto`` plus the nutpie callback patch that was dropped
  (:func:`lean_logp`, kept here only to measure it: docs/decisions/0027).

The variants run in interleaved rounds (the order rotated each round), so that a change
in the machine's load falls on every variant alike. Figures per row: ``sampling_s`` (the
fit's own ``wall_seconds``: compile, tune and draws), the child's wall and CPU seconds,
the accelerators active (from ``_accelerators.status``) and a fingerprint of the draws.
``--calls ROUNDS`` times one log-density-and-gradient call instead, per kernel and
callback, in one process.

Usage (timings only under the machine's CPU lock: it is shared)::

    flock /tmp/cpu.lock .venv/bin/python benchmarks/bench_accelerators.py --repeats 3
    flock /tmp/cpu.lock .venv/bin/python benchmarks/bench_accelerators.py --calls 40
    .venv/bin/python benchmarks/bench_accelerators.py --report-only   # section from results

Rows go to ``benchmarks/results/accelerators.json`` (per-call figures under its
``calls`` key); the section of ``benchmarks/README.md`` shows per set of
active accelerators the median times and their ratio to ``ffi+workers`` (the default).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _report import (  # noqa: E402
    MATRICES,
    check_names,
    last_run,
    run_rows,
    update_results,
    write_section,
)

RESULTS = HERE / "results" / "accelerators.json"
#: variant -> the value of BAYES_MICROBENCH_ACCELERATE it runs with.
VARIANTS = {
    "auto": "auto",
    "lean_logp": "auto",
    "no-ffi": "workers",
    "no-workers": "ffi",
    "off": "off",
}
SEED = 0
#: the set of accelerators the ratios are taken against (the default).
REFERENCE = "ffi+workers"


def lean_logp(compiled: Any) -> Any:
    """``compiled`` with a nutpie log-density callback that returns one array per gradient.

    The patch the package dropped (docs/decisions/0027): it replaces nutpie's private
    ``_make_logp_func`` with one that jits value and gradient into one array of the
    sampling dtype and converts it once, where nutpie converts the two separately.
    """
    import dataclasses

    import jax
    import jax.numpy as jnp
    import numpy as np

    raw = compiled._raw_logp_fn

    @jax.jit
    def value_and_grad(x: Any) -> Any:
        value, grad = jax.value_and_grad(lambda v: raw(v)[0])(x)
        return jnp.concatenate([grad, value[None].astype(grad.dtype)])

    def make_logp_func() -> Any:
        def logp(x: Any, **shared: Any) -> tuple[float, Any]:
            out = np.asarray(value_and_grad(x), dtype=np.float64)
            return float(out[-1]), out[:-1]

        return logp

    return dataclasses.replace(compiled, _make_logp_func=make_logp_func)


def one(variant: str, repeat: int) -> dict:
    """Fit GPQA's default 2PL under ``variant`` in this process; its figures."""
    os.environ["BAYES_MICROBENCH_ACCELERATE"] = VARIANTS[variant]
    import warnings

    import numpy as np

    from bayes_microbench import load_responses
    from bayes_microbench.irt import IRTModel, _accelerators, _chains

    if variant == "lean_logp":  # the forked workers inherit the patched compile
        plain = _chains.compile_for_nutpie
        _chains.compile_for_nutpie = lambda model: lean_logp(plain(model))  # type: ignore
    start = time.perf_counter()
    resp = load_responses(MATRICES["gpqa"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the row reports convergence itself
        fit = IRTModel(resp, "2pl").fit("nuts", random_seed=SEED, progressbar=False)
    wall = time.perf_counter() - start
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the joined NUTS workers
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    d = fit.diagnostics
    assert d is not None
    ability = np.ascontiguousarray(fit.posterior["ability"].values)
    return {
        "variant": variant,
        "switch": VARIANTS[variant],
        "repeat": repeat,
        "sampling_s": fit.wall_seconds,
        "wall_s": wall,
        "cpu_s": cpu,
        "draws_sha": hashlib.sha256(ability.tobytes()).hexdigest()[:16],
        "max_rhat": d.max_rhat,
        "min_ess_bulk": d.min_ess_bulk,
        "divergences": d.divergences,
        "converged": d.ok,
        "status": _accelerators.status(),
        "lean_logp_patch": variant == "lean_logp",
    }


def per_call(rounds: int, calls: int) -> dict:
    """One log-density-and-gradient call's time, per callback and kernel, side by side.

    GPQA's default 2PL (decoupled, float32) compiled for nutpie twice in this process
    (the FFI kernel on, then off), each with nutpie's own callback and with
    ``lean_logp``'s: four callbacks, timed in ``rounds`` interleaved rounds of ``calls``
    calls each (the order rotated each round) on one pinned core, at nutpie's initial
    point. Returns each callback's per-call milliseconds (every round), and the largest
    difference of its value and gradient from nutpie's own callback with the FFI kernel.
    """
    import warnings

    import numpy as np

    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    import nutpie
    import pytensor

    from bayes_microbench import load_responses
    from bayes_microbench.irt import IRTModel

    resp = load_responses(MATRICES["gpqa"])
    funcs = {}
    with pytensor.config.change_flags(floatX="float32"):
        model = IRTModel(resp, "2pl").build_model(parameterization="decoupled", float32=True)
        for kernel, switch in (("ffi", "ffi"), ("xla", "off")):
            os.environ["BAYES_MICROBENCH_ACCELERATE"] = switch
            compiled = nutpie.compile_pymc_model(
                model, backend="jax", gradient_backend="jax", jitter_rvs=set()
            )
            funcs[f"{kernel}+nutpie"] = compiled._make_logp_func()
            funcs[f"{kernel}+lean_logp"] = lean_logp(compiled)._make_logp_func()
        x = np.asarray(compiled._make_initial_points(0), dtype=np.float64)
    names = list(funcs)
    ms: dict[str, list[float]] = {n: [] for n in names}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Explicitly requested dtype")
        ref_v, ref_g = funcs["ffi+nutpie"](x)
        diff = {}
        for n in names:
            v, g = funcs[n](x)
            diff[n] = [abs(v - ref_v), float(np.abs(g - ref_g).max())]
        for r in range(rounds):
            for k in range(len(names)):
                n = names[(k + r) % len(names)]
                f = funcs[n]
                t = time.perf_counter()
                for _ in range(calls):
                    f(x)
                ms[n].append(1e3 * (time.perf_counter() - t) / calls)
    return {"rounds": rounds, "calls": calls, "ms": ms, "diff_from_ffi_nutpie": diff}


def calls_section(res: dict) -> str:
    """Per-call medians and lower quartiles of :func:`per_call`, with the two ratios."""
    q = {n: (statistics.median(v), statistics.quantiles(v, n=4)[0]) for n, v in res["ms"].items()}
    lines = [
        f"One log-density-and-gradient call (GPQA 2PL, decoupled, float32; {res['rounds']} "
        f"interleaved rounds of {res['calls']} calls on one pinned core; ms per call):",
        "",
        "| callback | median ms | lower quartile ms | value diff | largest gradient diff |",
        "|---|---|---|---|---|",
    ]
    for n, (med, low) in q.items():
        dv, dg = res["diff_from_ffi_nutpie"][n]
        lines.append(f"| {n} | {med:.3f} | {low:.3f} | {dv:.2g} | {dg:.2g} |")
    lines += [
        "",
        "Ratios of medians: nutpie's callback over `lean_logp`'s "
        f"{q['ffi+nutpie'][0] / q['ffi+lean_logp'][0]:.2f} (FFI kernel), "
        f"{q['xla+nutpie'][0] / q['xla+lean_logp'][0]:.2f} (XLA's); XLA's kernel over the "
        f"FFI kernel {q['xla+nutpie'][0] / q['ffi+nutpie'][0]:.2f} (nutpie's callback), "
        f"{q['xla+lean_logp'][0] / q['ffi+lean_logp'][0]:.2f} (`lean_logp`). diffs: from "
        "`ffi+nutpie` at the same point.",
    ]
    return "\n".join(lines)


def active(row: dict) -> str:
    """The accelerators a row ran with, as ``ffi+workers`` (``none``: the plain path)."""
    names = [k for k, v in row["status"].items() if v == "active"]
    if row.get("lean_logp_patch"):
        names.append("lean_logp")  # the benchmark's own copy of the dropped patch
    return "+".join(names) or "none"


def section(rows: list[dict]) -> str:
    """The report section: median sampling and CPU seconds per set of active accelerators."""
    groups: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["date"], r["repeat"])):
        groups.setdefault(active(r), []).append(r)
    med = {k: statistics.median(r["sampling_s"] for r in rs) for k, rs in groups.items()}
    cpu = {k: statistics.median(r["cpu_s"] for r in rs) for k, rs in groups.items()}
    lines = [
        "GPQA 420 x 448, the default 2PL NUTS fit (2 chains x (1000 tune + 1000 draws), "
        f"seed {SEED}), each row a fresh process, variants in interleaved rounds, "
        "`BAYES_MICROBENCH_ACCELERATE` per variant. sampling s = the fit's `wall_seconds` "
        "(compile, tune, draws); CPU s = the process and its NUTS workers; ratios = the "
        f"median over `{REFERENCE}`'s (the default; above 1: slower). Run under "
        "`flock /tmp/cpu.lock`, but on a machine shared with other jobs that do not take "
        "the lock (load = 1-minute load average at each row's start; 2 cores): the wall "
        "times swing with the load, the CPU seconds much less.",
        "",
        "| active accelerators | runs | median sampling s | wall ratio | sampling s (each) "
        "| median CPU s | CPU ratio | draws | load | commit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k, rs in groups.items():
        wall_ratio = med[k] / med[REFERENCE] if REFERENCE in med else float("nan")
        cpu_ratio = cpu[k] / cpu[REFERENCE] if REFERENCE in cpu else float("nan")
        each = ", ".join(f"{r['sampling_s']:.1f}" for r in rs)
        shas = ", ".join(sorted({r["draws_sha"] for r in rs}))
        load = ", ".join(f"{r['load']:.1f}" for r in rs)
        commits = ", ".join(sorted({r["commit"] for r in rs}))
        lines.append(
            f"| {k} | {len(rs)} | {med[k]:.1f} | {wall_ratio:.2f} | {each} | {cpu[k]:.0f} "
            f"| {cpu_ratio:.2f} | {shas} | {load} | {commits} |"
        )
    lines += [
        "",
        "draws = a fingerprint of the ability draws (equal fingerprints: equal draws). "
        "`lean_logp` = the dropped nutpie callback patch (at commit 32af2b6 it was part of "
        "the package; since then the benchmark applies its own copy).",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=2, metavar=("VARIANT", "REPEAT"), help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument(
        "--calls", type=int, default=0, metavar="ROUNDS",
        help="time the callbacks per call in ROUNDS interleaved rounds instead of fitting",
    )  # fmt: skip
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(one(args.one[0], int(args.one[1]))), flush=True)
        return 0
    if args.calls:
        res = per_call(args.calls, 100)
        res.update(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load=os.getloadavg()[0])
        update_results(RESULTS, calls=res)
        print(calls_section(res))
        return 0
    names = [v for v in args.variants.split(",") if v]
    check_names(parser, "variant", names, list(VARIANTS))
    if args.report_only:
        rows = json.loads(RESULTS.read_text())["rows"]
    else:
        jobs = [
            [names[(k + r) % len(names)], str(r)]
            for r in range(args.repeats)
            for k in range(len(names))
        ]
        got = run_rows(__file__, jobs, lambda r: (r["variant"], r["repeat"], r["commit"]), RESULTS)
        if got is None:
            return 1
        rows = got
    body = section(rows)
    calls = json.loads(RESULTS.read_text()).get("calls") if RESULTS.exists() else None
    if calls:
        body += "\n\n" + calls_section(calls)
    print(body)
    if not args.no_report:
        write_section(
            "bench_accelerators",
            "NUTS accelerators side by side (GPQA 2PL)",
            body,
            run=last_run(rows) if args.report_only else None,
            headline=[
                {
                    "table": 0,
                    "columns": [
                        "active accelerators",
                        "median sampling s",
                        "wall ratio",
                        "median CPU s",
                        "CPU ratio",
                    ],
                }
            ],
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

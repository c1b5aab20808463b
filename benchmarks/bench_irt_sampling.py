"""NUTS on GPQA (420 x 448): our parameterizations and back ends vs py-irt's SVI, side by side.

Each variant runs in a fresh subprocess (so compile time counts, and CPU time
and peak memory are measured per variant), one after the other, in the same
run as py-irt's hierarchical 2PL SVI (2000 epochs, the tinyBenchmarks recipe)
when its throwaway environment exists (``/work/pyirt-env/bin/python`` or
``$PYIRT_PYTHON``; see ``benchmarks/reference/setup_pyirt.sh``).

Usage::

    .venv/bin/python benchmarks/bench_irt_sampling.py                 # default variants
    .venv/bin/python benchmarks/bench_irt_sampling.py --variants decoupled-numpyro,3pl
    .venv/bin/python benchmarks/bench_irt_sampling.py --no-report     # print only

Every run is appended to ``benchmarks/results/irt_sampling.json`` (with its
date and commit); the report shows the latest run in full and every earlier
run's rows beneath it, so what was tried stays on record.

Figures: wall seconds of the whole fit (model build + compile + tune + draws),
CPU seconds of the process (on a machine shared with other jobs the wall time
inflates, CPU time much less; with 2 parallel chains the unloaded wall time is
roughly CPU / 2), worst R-hat, worst bulk ESS, divergences, mean leapfrog steps.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "irt_sampling.json"
GPQA = ROOT.parent / "shared" / "data" / "open-llm-leaderboard-v2" / "gpqa.csv"

# name -> (model, parameterization, backend, IRTConfig extras, nutpie adaptation)
TN = {"discrimination_prior": "truncated-normal"}
VARIANTS: dict[str, tuple[str, str, str, dict, str]] = {
    "decoupled-nutpie": ("2pl", "decoupled", "nutpie", {}, "auto"),
    "decoupled-nutpie-tn": ("2pl", "decoupled", "nutpie", TN, "auto"),
    # the same without the one-pass FFI likelihood kernel (XLA's own passes)
    "decoupled-nutpie-tn-xla": ("2pl", "decoupled", "nutpie", TN, "auto"),
    "decoupled-nutpie-diag": ("2pl", "decoupled", "nutpie", {}, "diag"),
    "decoupled-nutpie-tn-diag": ("2pl", "decoupled", "nutpie", TN, "diag"),
    "decoupled-nutpie-lowrank": ("2pl", "decoupled", "nutpie", {}, "low_rank"),
    "decoupled-numpyro": ("2pl", "decoupled", "numpyro", {}, "auto"),
    "non-centered-nutpie": ("2pl", "non-centered", "nutpie", {}, "auto"),
    "3pl-nutpie": ("3pl", "decoupled", "nutpie", {"n_options": 4}, "auto"),
    "3pl-nutpie-tn": ("3pl", "decoupled", "nutpie", {"n_options": 4, **TN}, "auto"),
    "3pl-nutpie-tn-xla": ("3pl", "decoupled", "nutpie", {"n_options": 4, **TN}, "auto"),
    "3pl-learned-nutpie": ("3pl", "decoupled", "nutpie", {}, "auto"),
}
DEFAULT = ["decoupled-nutpie", "decoupled-nutpie-tn", "decoupled-nutpie-diag"]
# what `fit --responses gpqa.csv --output ...` runs with no other flag (`irt.model.fit_default`:
# the data's prior, the chains continued while only R-hat or ESS miss, the remedies), and
# the same for the 2-D multidimensional 2PL (`fit --model 2pl-md`)
DEFAULT_FITS = {"default": ("2pl", {}), "default-md": ("2pl-md", {"n_dims": 2})}


def one(name: str, tune: int, draws: int, seed: int) -> dict:
    """Fit one variant in this process and return its figures."""
    import warnings

    from bayes_microbench import load_responses
    from bayes_microbench.exceptions import ConvergenceWarning
    from bayes_microbench.irt import IRTModel

    if name in DEFAULT_FITS:
        return one_default(name, seed)
    model, param, backend, config, adaptation = VARIANTS[name]
    if name.endswith("-xla"):
        os.environ["BAYES_MICROBENCH_ACCELERATE"] = "workers"  # all but the FFI kernel
    start = time.perf_counter()
    resp = load_responses(GPQA)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = IRTModel(resp, model, config=config).fit(
            "nuts",
            tune=tune,
            draws=draws,
            chains=2,
            random_seed=seed,
            backend=backend,
            parameterization=param,
            adaptation=adaptation,
        )
    wall = time.perf_counter() - start
    d = fit.diagnostics
    assert d is not None
    return {
        "variant": name,
        "model": model,
        "parameterization": param,
        "backend": backend,
        "wall_s": wall,
        "sampling_s": fit.wall_seconds,
        "max_rhat": d.max_rhat,
        "worst_rhat": d.worst_rhat,
        "min_ess_bulk": d.min_ess_bulk,
        "worst_ess": d.worst_ess_bulk,
        "min_ess_tail": d.min_ess_tail,
        "divergences": d.divergences,
        "min_bfmi": d.min_bfmi,
        "steps": d.mean_tree_size,
        "converged": d.ok,
    }


def one_default(name: str, seed: int) -> dict:
    """The default fit (``fit_default``) of one of :data:`DEFAULT_FITS`, in this process."""
    import warnings

    from bayes_microbench import load_responses
    from bayes_microbench.exceptions import ConvergenceWarning
    from bayes_microbench.irt.model import fit_default

    model, config = DEFAULT_FITS[name]
    start = time.perf_counter()
    resp = load_responses(GPQA)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = fit_default(resp, model, config or None, random_seed=seed)
    wall = time.perf_counter() - start
    d = fit.diagnostics
    assert d is not None
    return {
        "variant": name,
        "model": model,
        "parameterization": fit.parameterization,
        "backend": "nutpie",
        "prior": fit.config.discrimination_prior,
        "draws_tried": [r.get("draws_tried") for r in fit.fit_info.get("refits", [])],
        "seed": seed,
        "wall_s": wall,
        "sampling_s": fit.fit_info.get("wall_seconds_all"),
        "max_rhat": d.max_rhat,
        "worst_rhat": d.worst_rhat,
        "min_ess_bulk": d.min_ess_bulk,
        "worst_ess": d.worst_ess_bulk,
        "min_ess_tail": d.min_ess_tail,
        "divergences": d.divergences,
        "min_bfmi": d.min_bfmi,
        "steps": d.mean_tree_size,
        "converged": d.ok,
    }


# runs one command and prints its own peak RSS (KiB) last: RUSAGE_CHILDREN of the
# benchmark process would be the maximum over every child so far
_PEAK_WRAPPER = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
    "print('PEAK_KIB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True); "
    "sys.exit(r.returncode)"
)


def _child(cmd: list[str], timeout: float) -> tuple[dict | None, float, float, float | None, str]:
    """Run ``cmd``; return (last JSON line, wall s, CPU s, its own peak MiB, error tail)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # its own session, so that a timeout kills the whole tree (the wrapper, the
    # variant and its NUTS worker processes), not just the wrapper
    proc = subprocess.Popen(
        [sys.executable, "-c", _PEAK_WRAPPER, *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        ok = proc.returncode == 0
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        out, err, ok = "", f"timed out after {timeout:.0f} s", False
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # a killed tree's CPU time is not accounted (its processes were never waited for)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime) if ok else None
    peak = None
    result = None
    for line in reversed(out.strip().splitlines()):
        if line.startswith("PEAK_KIB") and peak is None:
            peak = int(line.split()[1]) / 1024
        elif line.startswith("{") and result is None:
            try:
                result = json.loads(line)
            except json.JSONDecodeError:
                continue
    tail = "" if ok else (err.strip().splitlines() or ["failed"])[-1][:200]
    return result, wall, cpu, peak, tail


def _measure(cmd: list[str], timeout: float, **labels: object) -> tuple[dict, dict | None]:
    """Run ``cmd`` as a child: ``labels`` with its figures, and its own JSON result."""
    load = os.getloadavg()[0]
    res, wall, cpu, peak, err = _child(cmd, timeout)
    figures = {"wall_s": wall, "cpu_s": cpu, "peak_mib": peak, "load": load, "error": err}
    return {**labels, **figures}, res


def pyirt_python() -> str | None:
    env = os.environ.get("PYIRT_PYTHON")
    if env and Path(env).exists():
        return env
    default = Path("/work/pyirt-env/bin/python")
    return str(default) if default.exists() else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(DEFAULT))
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--seeds",
        help="comma list: one repetition per seed (the seed of our variants; py-irt keeps "
        "its own), replacing --seed and --repeat",
    )
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the variants and py-irt this many times, interleaved (medians reported)",
    )
    parser.add_argument(
        "--pyirt-threads",
        type=int,
        default=1,
        help="torch threads of py-irt (default 1: on this shared 2-core machine torch's own "
        "two threads spin under load, benchmarks/reference/README.md; 0 = torch's own)",
    )
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the section from the saved runs"
    )
    args = parser.parse_args()
    if args.report_only:
        runs = json.loads(RESULTS.read_text())["runs"]
        last = runs[-1]
        args.tune, args.draws, args.seed = last["tune"], last["draws"], last["seed"]
        seeds = last.get("seeds")
        args.seeds = ",".join(str(x) for x in seeds) if seeds else None
        args.pyirt_threads = last.get("pyirt_threads")
        report(
            last["rows"],
            last.get("pyirt"),
            args,
            runs[:-1],
            last.get("pyirt_reps", []),
            saved_run=(last["date"], last["commit"], last.get("machine")),
        )
        return 0
    if args.one:
        print(json.dumps(one(args.one, args.tune, args.draws, args.seed), default=float))
        return 0
    if not GPQA.exists():
        print(f"{GPQA} not present; nothing to benchmark", file=sys.stderr)
        return 1
    names = [v for v in args.variants.split(",") if v]
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else None
    if seeds:
        args.repeat, args.seed = len(seeds), seeds[0]
    for name in names:
        if name not in VARIANTS and name not in DEFAULT_FITS:
            parser.error(f"unknown variant {name!r}; known: {[*VARIANTS, *DEFAULT_FITS]}")
    rows: list[dict] = []
    refs: list[dict] = []
    py = pyirt_python()
    # interleaved (ours, py-irt, ours, py-irt, ...): a slow spell of this shared machine
    # then hits both sides of a ratio
    pyirt_cmd = [str(py), str(HERE / "reference" / "run_pyirt.py"), "--responses", str(GPQA)]
    pyirt_cmd += ["--epochs", "2000"]
    if args.pyirt_threads:
        pyirt_cmd += ["--threads", str(args.pyirt_threads)]
    for rep in range(args.repeat):
        for name in names:
            cmd = [sys.executable, __file__, "--one", name, "--tune", str(args.tune)]
            seed = seeds[rep] if seeds else args.seed
            cmd += ["--draws", str(args.draws), "--seed", str(seed)]
            row, res = _measure(cmd, args.timeout, variant=name, rep=rep)
            row.update({k: v for k, v in (res or {}).items() if k not in row})
            print(json.dumps(row, default=float), flush=True)
            rows.append(row)
        if py:
            one_ref, res = _measure(pyirt_cmd, args.timeout, rep=rep)
            if res:
                one_ref["reported_wall_s"] = res.get("wall_seconds")
                one_ref["reported_cpu_s"] = res.get("cpu_seconds")
            print(json.dumps({"py-irt": one_ref}, default=float), flush=True)
            refs.append(one_ref)
    good = sorted((r for r in refs if not r.get("error")), key=lambda r: r["wall_s"])
    # the median py-irt run stands for the reference in the single-run tables
    ref = good[(len(good) - 1) // 2] if good else (refs[0] if refs else None)
    if not args.no_report:
        sys.path.insert(0, str(HERE))
        from _report import commit, machine, update_results

        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        runs = json.loads(RESULTS.read_text())["runs"] if RESULTS.exists() else []
        runs.append(
            {
                "date": stamp,
                "commit": commit(),
                "machine": machine(),
                "tune": args.tune,
                "draws": args.draws,
                "seed": args.seed,
                "seeds": seeds,
                "pyirt_threads": args.pyirt_threads,
                "rows": rows,
                "pyirt": ref,
                "pyirt_reps": refs,
            }
        )
        update_results(RESULTS, runs=runs)
        report(rows, ref, args, runs[:-1], refs)
    return 0


def _f(x: object, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _label(r: dict) -> str:
    """The variant, with its repetition from the second on (``name #2``); a default fit
    with its seed, prior and the draws per chain of each fit it tried."""
    if r.get("draws_tried"):
        fits = "; ".join(", ".join(str(d) for d in tried) for tried in r["draws_tried"])
        return f"{r['variant']} (seed {r['seed']}, {r.get('prior')}, checked at {fits} draws)"
    return r["variant"] + (f" #{r['rep'] + 1}" if r.get("rep") else "")


def _row(r: dict) -> str:
    if r.get("error"):
        return (
            f"| {_label(r)} | {r['wall_s']:.0f} | {_f(r.get('cpu_s'), '.0f')} | - | - | - | - | - | "
            f"failed: {r['error']} | {r['load']:.1f} |"
        )
    return (
        f"| {_label(r)} | {r['wall_s']:.0f} | {_f(r.get('cpu_s'), '.0f')} | "
        f"{_f(r.get('peak_mib'), '.0f')} | "
        f"{_f(r.get('max_rhat'), '.4f')} | {_f(r.get('min_ess_bulk'), '.0f')} | "
        f"{r.get('divergences')} | {_f(r.get('steps'), '.1f')} | {r.get('converged')} | "
        f"{r['load']:.1f} |"
    )


HEAD = (
    "| variant | wall s | CPU s | peak MiB | max R-hat | min bulk ESS | divergences | "
    "leapfrog steps/draw | converged | load |"
)


def _repeat_summary(rows: list[dict], refs: list[dict]) -> list[str]:
    """Medians over repeated, interleaved runs and the paired wall ratios."""
    by_rep = {r["rep"]: r for r in refs if not r.get("error")}
    lines = [
        f"Repeated {len(refs)} times, interleaved (each repetition: the variants, then py-irt). "
        f"py-irt wall per repetition: "
        + ", ".join(f"{r['wall_s']:.1f}" for r in refs if not r.get("error"))
        + " s.",
        "",
        "| variant | runs | median wall s | median CPU s | wall ratio to py-irt per repetition "
        "| median ratio | CPU ratio per repetition | median CPU ratio | converged |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == name and not r.get("error")]
        if not mine:
            continue
        ratios = [r["wall_s"] / by_rep[r["rep"]]["wall_s"] for r in mine if r["rep"] in by_rep]
        cpu = [r["cpu_s"] / by_rep[r["rep"]]["cpu_s"] for r in mine if r["rep"] in by_rep]
        lines.append(
            f"| {name} | {len(mine)} | {statistics.median(r['wall_s'] for r in mine):.1f} | "
            f"{statistics.median(r['cpu_s'] for r in mine):.0f} | "
            + ", ".join(f"{x:.2f}" for x in ratios)
            + f" | {statistics.median(ratios):.2f} | "
            + ", ".join(f"{x:.2f}" for x in cpu)
            + f" | {statistics.median(cpu):.2f} | "
            f"{sum(bool(r.get('converged')) for r in mine)}/{len(mine)} |"
            if ratios
            else f"| {name} | {len(mine)} | - | - | - | - | - | - | - |"
        )
    return [*lines, ""]


def report(
    rows: list[dict],
    ref: dict | None,
    args: argparse.Namespace,
    earlier: list[dict],
    refs: list[dict] | None = None,
    saved_run: tuple[str, str, str | None] | None = None,
) -> None:
    sys.path.insert(0, str(HERE))
    from _report import write_section

    seeds = getattr(args, "seeds", None)
    lines = [
        f"GPQA 420 x 448, NUTS 2 chains x ({args.tune} tune + {args.draws} draws), seed "
        + (f"{seeds} (one repetition per seed)" if seeds else f"{args.seed}")
        + "; `default` / `default-md` = what `fit` does with no other flag for the 2PL / the "
        "2-D `2pl-md` (`irt.model.fit_default`: the discrimination prior the data choose, "
        "draws continued while only R-hat or ESS miss, up to 4000; docs/decisions/0036), "
        "labelled with the seed, prior and draws per chain of each fit it tried"
        "; each variant a fresh process (build + JAX compile + sampling counted). "
        "Converged = every R-hat <= 1.01, every bulk and tail ESS >= 400, no divergences, "
        "BFMI >= 0.3 over ability, difficulty, discrimination, intercept and the subtask "
        "parameters. `load` is the 1-minute load average when the variant started "
        "(2 cores, shared with other jobs: wall times inflate with load; CPU seconds less so). "
        "Wall = the whole child process (interpreter start, imports, data, build, compile, "
        "sampling), as for py-irt. Variants: `decoupled-nutpie` = the defaults (lognormal "
        "discrimination prior, `adaptation='auto'` = nutpie's `draw_diag` here); `-tn` = "
        "`discrimination_prior='truncated-normal'`; `-diag` = nutpie's gradient-based `diag` "
        "mass matrix. Every variant runs its 2 chains in 2 forked worker processes pinned to "
        "one core each and uses the fused likelihood Op (the 3PL since commit fa24b31; "
        "earlier 3PL rows autodiffed a `logaddexp` graph); since commit 091dab5 each worker "
        "hands nutpie the value and the gradient as one array (`lean_logp`: the same draws, "
        "one host transfer per gradient; dropped after commit 32af2b6, docs/decisions/0027). "
        "Since commit 21d1bb3 the "
        "float32 2PL likelihood is one compiled pass over the cells that XLA calls through "
        "JAX's FFI (`irt/_ffi_2pl.py`), and since commit 2d57184 the 3PL's with its floors "
        "fixed (`3pl-*`: floors 1/4; since ddb2d93 its items' slopes are centred by the "
        "3PL's information); `-xla` = the same model with that kernel switched off "
        "(`BAYES_MICROBENCH_FFI_KERNEL=0`, since 32af2b6 `BAYES_MICROBENCH_ACCELERATE=workers`: "
        "XLA's own passes, as in every earlier run). "
        "Peak MiB = the largest single "
        "process (each of the two workers holds about that much).",
        "",
        HEAD,
        "|---|---|---|---|---|---|---|---|---|---|",
        *(_row(r) for r in rows),
        "",
    ]
    if refs and len(refs) > 1:
        lines += _repeat_summary(rows, refs)
    if ref is None:
        lines.append(
            "py-irt reference: **not measured in this run** (no /work/pyirt-env/bin/python "
            "or $PYIRT_PYTHON; see benchmarks/reference/setup_pyirt.sh)."
        )
    elif ref.get("error"):
        lines.append(f"py-irt reference failed in this run: {ref['error']}")
    else:
        threads = getattr(args, "pyirt_threads", None)
        lines.append(
            "py-irt hierarchical 2PL SVI, 2000 epochs (same run"
            + (f", torch on {threads} thread" if threads else "")
            + f"): wall {ref['wall_s']:.1f} s "
            f"(its own timer, training loop only: {_f(ref.get('reported_wall_s'), '.1f')} s wall, "
            f"{_f(ref.get('reported_cpu_s'), '.1f')} s CPU), process CPU {ref['cpu_s']:.0f} s, "
            f"peak {_f(ref.get('peak_mib'), '.0f')} MiB, "
            f"load {ref['load']:.1f} at start."
        )
        for ours in rows if not (refs and len(refs) > 1) else []:
            if ours.get("error"):
                continue
            lines.append(
                f"Ratio {ours['variant']} (full NUTS posterior) / py-irt (SVI point fit): "
                f"wall {ours['wall_s'] / ref['wall_s']:.2f}, "
                f"CPU {ours['cpu_s'] / max(ref['cpu_s'], 1e-9):.2f}."
            )
    if earlier:
        lines += ["", "### Earlier runs (older code; kept for the record)", ""]
        for run in reversed(earlier):
            pyirt = run.get("pyirt") or {}
            note = (
                f"py-irt {pyirt['wall_s']:.1f} s wall"
                if pyirt.get("wall_s") and not pyirt.get("error")
                else f"py-irt: {pyirt.get('error', 'not measured')}"
            )
            lines += [
                f"{run['date']}, commit {run['commit']}, 2 x ({run['tune']} + {run['draws']}), "
                f"seed {run['seed']}; {note}."
                + (f" Source: {run['source']}." if run.get("source") else "")
                + (f" Note: {run['note']}." if run.get("note") else ""),
                "",
                HEAD,
                "|---|---|---|---|---|---|---|---|---|---|",
                *(_row(r) for r in run["rows"]),
                "",
            ]
            if len(run.get("pyirt_reps", [])) > 1:
                lines += _repeat_summary(run["rows"], run["pyirt_reps"])
            elif pyirt.get("wall_s") and not pyirt.get("error"):
                lines += [
                    "Wall ratio to py-irt (same run): "
                    + ", ".join(
                        f"{r['variant']} {r['wall_s'] / pyirt['wall_s']:.2f}"
                        for r in run["rows"]
                        if not r.get("error")
                    )
                    + ".",
                    "",
                ]
    write_section(
        "bench_irt_sampling",
        "IRT sampling on GPQA: parameterizations, back ends, py-irt",
        "\n".join(lines),
        run=saved_run,
        headline=[1] if refs and len(refs) > 1 else [0],
    )


if __name__ == "__main__":
    sys.exit(main())

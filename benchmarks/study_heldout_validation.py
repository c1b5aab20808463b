"""Held-out validation of the tool's defaults on real matrices (``bayes-microbench validate``).

For each benchmark and seed, ``bayes_microbench.validate.validate`` holds out
``--held-out`` llms, fits the posterior on the others exactly as ``fit`` does
with no flags (NUTS and the calibration it saves), and reports on the held-out
llms: the coverage and width of the default ``score`` intervals per design and
size, the predicted against the realized MDAD, and the calibration of the
predicted P(correct ranking) in deciles. Targets (the project's issue "Right by
default"): coverage 85-95%; |predicted - realized| <= 0.05 in every decile with
at least 100 pairs; the realized MDAD inside the 90% band for >= 85% of rows,
point error <= 1 point (issue 20 item 4 restates these).

Usage::

    .venv/bin/python benchmarks/study_heldout_validation.py [--benchmarks gpqa,arc]
        [--seeds 0,1] [--held-out 60] [--model 2pl-md:3] [--fit-cache DIR] [--report-only]

``--model`` is 1pl, 2pl, 3pl or 2pl-md:D (D ability dimensions; ``2pl-md`` alone is
D = 2, the model's default, and runs are labelled so).

``--fit-cache DIR`` (outside the repository) keeps each training fit there and reuses
it when a later run holds out the same llms with the same fit seed: the default fit
is the costly part, and a change to the design or the calibration does not change
it. The calibration is always recomputed by the checkout's code.

Each (benchmark, model, seed) run is kept in ``results/heldout_validation.json`` (a
rerun replaces it); the section shows every saved run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _report import MATRICES, commit, last_run, machine, update_results, write_section  # noqa: E402

from bayes_microbench.validate import mdad_check  # noqa: E402

RESULTS = HERE / "results" / "heldout_validation.json"


def _fmt(v: float | None) -> str:
    return "not reached" if v is None or (isinstance(v, float) and math.isinf(v)) else f"{v:.1f}"


def _study(m: dict) -> str:
    if "study_lower" not in m:
        return "-"
    return f"[{_fmt(m['study_lower'])}, {_fmt(m['study_upper'])}]"


def _within(m: dict) -> str:
    return "-" if m.get("study_within_one") is None else f"{m['study_within_one']:.2f}"


def _inside(m: dict) -> str:
    """The row's verdict; a random design's with how many of its subsets' studies agree."""
    studies = m.get("realized_studies")
    if not studies or len(studies) == 1:
        return str(m["inside"])
    return f"{m['inside']} ({m['studies_inside']}/{len(studies)})"


def _studies(rows: list[dict]) -> tuple[int, int] | None:
    """Single studies (one per subset) inside the study band, and how many there are."""
    if any("realized_studies" not in m for m in rows):
        return None  # a run before the per-subset studies
    n = sum(len(m["realized_studies"]) for m in rows)
    return sum(m["studies_inside"] for m in rows), n


def summary_rows(runs: list[dict]) -> list[str]:
    """One line per run and one for all: rows inside the study band, point error <= 1,
    the rows the simulated studies expect within 1 point of the prediction, and the
    single studies (every subset of a random design) inside the band."""
    out = []
    totals = [0, 0, 0, 0.0]
    all_studies: list[int] | None = [0, 0]
    for run in runs:
        rows = run["mdad"]
        inside, close = mdad_check(rows)
        studies = _studies(rows)
        if studies is None or all_studies is None:
            all_studies = None
        else:
            all_studies = [all_studies[0] + studies[0], all_studies[1] + studies[1]]
        studies_s = "-" if studies is None else f"{studies[0]} of {studies[1]}"
        expect = [m.get("study_within_one") for m in rows]
        exp = (
            sum(e for e in expect if e is not None) if all(e is not None for e in expect) else None
        )
        totals[0] += len(rows)
        totals[1] += inside
        totals[2] += close
        totals[3] = None if exp is None or totals[3] is None else totals[3] + exp
        exp_s = "-" if exp is None else f"{exp:.1f}"
        out.append(
            f"| {_label(run)} | {run['seed']}, {run['commit']} | {run['settings']['held_out']} | "
            f"{len(rows)} | {inside} | {close} | {exp_s} | {studies_s} |"
        )
    n, inside, close, exp = totals
    exp_s = "-" if exp is None else f"{exp:.1f}"
    studies_s = (
        "-"
        if all_studies is None
        else f"{all_studies[0]} of {all_studies[1]} ({all_studies[0] / max(all_studies[1], 1):.0%})"
    )
    out.append(
        f"| all | | | {n} | {inside} ({inside / max(n, 1):.0%}) | {close} ({close / max(n, 1):.0%}) "
        f"| {exp_s} | {studies_s} |"
    )
    return out


def model_spec(text: str) -> tuple[str, str, int | None]:
    """``--model`` as (run label, model, n_dims): ``2pl-md:2`` is labelled ``2pl-md``."""
    from bayes_microbench.irt.choice import candidate_label, parse_candidate

    model, config = parse_candidate(text)
    n_dims = config.get("n_dims")
    return candidate_label(model, n_dims), model, n_dims


def cached_fit(folder: Path, name: str, label: str):
    """``validate``'s default fit of ``model``, saved in ``folder`` and reused from there.

    A fit is keyed by benchmark, model, fit seed and a hash of the training llms'
    names; the calibration (misfit and population) is recomputed by this checkout.
    """
    import hashlib
    import warnings

    from bayes_microbench.exceptions import ConvergenceWarning
    from bayes_microbench.irt import load_posterior, save_posterior
    from bayes_microbench.irt.calibration import calibrate_fitted
    from bayes_microbench.irt.model import fit_default
    from bayes_microbench.validate import FittedPosterior

    _, model, n_dims = model_spec(label)
    config = None if n_dims is None else {"n_dims": n_dims}

    def fit(train, seed: int) -> FittedPosterior:
        llms = hashlib.sha256("\n".join(map(str, train.llms)).encode()).hexdigest()[:12]
        path = folder / f"{name}-{label.replace(':', '')}-{seed}-{llms}.nc"
        fit.reused.append(path.exists())
        if path.exists():
            saved = load_posterior(path)
            posterior, converged = saved, saved.converged
            problems = saved.convergence_problems()
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                irt = fit_default(train, model, config, random_seed=seed, progressbar=False)
            folder.mkdir(parents=True, exist_ok=True)
            save_posterior(irt, path)
            posterior, converged = irt, irt.converged
            problems = irt.convergence_problems() if converged is False else []
        misfit = calibrate_fitted(posterior, train, random_seed=seed)
        return FittedPosterior(posterior.posterior, misfit, converged, "; ".join(problems))

    fit.reused = []  # type: ignore[attr-defined]  # one flag per split: loaded, not fitted
    return fit


def run_one(name: str, seed: int, args: argparse.Namespace) -> dict:
    from bayes_microbench.io import load_responses
    from bayes_microbench.validate import validate

    resp = load_responses(MATRICES[name])
    sizes = [n for n in args.sizes if n < resp.n_items]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    label, model, n_dims = model_spec(args.model)
    fitter = None if args.fit_cache is None else cached_fit(args.fit_cache, name, label)
    t0 = time.perf_counter()
    res = validate(
        resp,
        designs=args.designs,
        sizes=sizes,
        held_out=args.held_out,
        splits=args.splits,
        random_seed=seed,
        model=model,
        n_dims=n_dims,
        fit=fitter,
    )
    doc = res.to_json()
    if fitter is not None:  # fit s of a reused fit: loading it and the calibration
        for row, reused in zip(doc["fits"], fitter.reused, strict=True):
            row["reused"] = reused
    doc.update(
        benchmark=name,
        model=args.model,
        seed=seed,
        date=started,
        commit=commit(),
        machine=machine(),
        wall_seconds=time.perf_counter() - t0,
    )
    return doc


def _model(run: dict) -> str:
    return run.get("model", "2pl")  # runs before the --model option fitted the 2PL


def _label(run: dict) -> str:
    model = _model(run)
    return run["benchmark"] if model == "2pl" else f"{run['benchmark']} ({model})"


def report(runs: list[dict]) -> None:
    lines = [
        "Each run holds out llms of a real matrix, fits the posterior on the others with "
        "`fit`'s defaults (NUTS; the calibration `fit` saves), and scores the held-out llms "
        "with `score`'s defaults; truth = a held-out llm's accuracy on every item. The "
        "random design draws 10 subsets per size shared by all held-out llms; the Bayesian "
        "selectors choose once per split from the training posterior. Targets: coverage "
        "85-95%; realized MDAD inside the 90% band in >= 85% of rows, point error <= 1. "
        "The MDAD columns: the design's MDAD [its posterior band] and the band of the MDAD a "
        "study of as many new llms as were held out would measure (the curve's uncertainty "
        "and which llms such a study holds); `realized` is pooled over a random design's "
        "subsets; `inside` is one study's realized MDAD within that band (a random design: "
        "its first subset, and in brackets how many of its subsets' studies are inside; "
        "runs before the per-subset studies judged the pooled MDAD; runs before the saved "
        "population have no study band: `-`). A benchmark "
        "followed by a model in brackets fitted that model instead of the default 2PL "
        "(`--model`).",
        "",
        "| benchmark | seed, commit | fits converged | design | n | coverage | width (pts) | "
        "abs error (pts) | interval | MDAD predicted [posterior band] | study band | "
        "P(study within 1) | realized | realized (isotonic) | inside |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        conv = ", ".join(str(f["converged"]) for f in run["fits"])
        for s, m in zip(run["scores"], run["mdad"], strict=True):
            lines.append(
                f"| {_label(run)} | {run['seed']}, {run['commit']} | {conv} | {s['design']} "
                f"| {s['n']} | "
                f"{s['coverage']:.2f} | {s['width'] * 100:.1f} | {s['abs_error'] * 100:.1f} | "
                f"{s['interval']} | {_fmt(m['predicted'])} [{_fmt(m['lower'])}, "
                f"{_fmt(m['upper'])}] | {_study(m)} | {_within(m)} | {_fmt(m['realized'])} | "
                f"{_fmt(m['realized_isotonic'])} | {_inside(m)} |"
            )
    lines += [
        "",
        "MDAD rows per run: inside the study band, point error <= 1 point, and how many rows "
        "the simulated studies expect within 1 point of the prediction (the sum of `P(study "
        "within 1)`: even a right prediction misses a point where one study's first crossing "
        "is that noisy; `-`: a run before that column).",
        "",
        "| benchmark | seed, commit | held out | rows | inside | error <= 1 | expected <= 1 "
        "| single studies inside |",
        "|---|---|---|---|---|---|---|---|",
        *summary_rows(runs),
        "",
        "P(correct ranking) per decile of the prediction (pooled over the run's designs "
        "and sizes):",
        "",
        "| benchmark | seed | decile | pairs | predicted | realized | off by |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for r in run["ranking"]:
            lines.append(
                f"| {_label(run)} | {run['seed']} | [{r['bin_lower']:.1f}, "
                f"{r['bin_upper']:.1f}) | {r['n_pairs']} | {r['predicted']:.3f} | "
                f"{r['realized']:.3f} | {r['realized'] - r['predicted']:+.3f} |"
            )
    lines += [
        "",
        "| benchmark | seed | split | training llms | converged | fit s | failed checks |",
    ]
    lines.append("|---|---|---|---|---|---|---|")
    for run in runs:
        for f in run["fits"]:
            seconds = f"{f['seconds']:.0f}" + (" (saved fit)" if f.get("reused") else "")
            lines.append(
                f"| {_label(run)} | {run['seed']} | {f['split']} | {f['n_train']} | "
                f"{f['converged']} | {seconds} | {f['note'] or '-'} |"
            )
    last = last_run(runs)
    write_section(
        "study_heldout_validation",
        "Held-out validation of the defaults (score intervals, MDAD, P(correct ranking))",
        "\n".join(lines),
        run=None if len(runs) == 1 and commit() == last[1] else last,
        headline=[
            {
                "table": 0,
                "columns": [
                    "benchmark",
                    "seed, commit",
                    "design",
                    "n",
                    "coverage",
                    "MDAD predicted [posterior band]",
                    "realized",
                ],
                # the 2PL runs (every run is in the summary below)
                "where": {
                    "n": ["50"],
                    "design": ["bayes-fisher"],
                    "benchmark": sorted({_label(r) for r in runs if _model(r) == "2pl"}),
                },
            },
            1,
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmarks", default="gpqa")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--held-out", type=int, default=60)
    parser.add_argument("--splits", type=int, default=1)
    parser.add_argument("--sizes", default="25,50,100")
    parser.add_argument("--designs", default="random,bayes-fisher,bayes-ranking")
    parser.add_argument(
        "--model", default="2pl", help="IRT model: 1pl, 2pl, 3pl or 2pl-md:D (default 2pl)"
    )
    parser.add_argument(
        "--fit-cache",
        type=Path,
        default=None,
        help="folder (outside the repository) to keep the training fits in and reuse them from",
    )
    parser.add_argument("--report-only", action="store_true", help="rewrite the section")
    args = parser.parse_args()
    args.model = model_spec(args.model)[0]
    args.sizes = [int(n) for n in args.sizes.split(",")]
    args.designs = args.designs.split(",")
    saved = json.loads(RESULTS.read_text())["runs"] if RESULTS.exists() else []
    if not args.report_only:
        for name in args.benchmarks.split(","):
            if not MATRICES[name].exists():
                print(f"{MATRICES[name]}: not found (real data lives in ../shared/data)")
                return 2
            for seed in (int(s) for s in args.seeds.split(",")):
                run = run_one(name, seed, args)
                print(json.dumps(run["scores"]), flush=True)
                key = (name, args.model, seed)
                saved = [r for r in saved if (r["benchmark"], _model(r), r["seed"]) != key]
                saved.append(run)
                saved.sort(key=lambda r: (r["benchmark"], _model(r), r["seed"]))
                update_results(RESULTS, runs=saved)
    if saved:
        report(saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

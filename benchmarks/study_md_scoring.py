"""GPQA: scoring held-out llms with the 2PL against the multidimensional 2PL, side by side.

``--heldout`` llms of GPQA (420 x 448) are set aside; the 2PL and the ``2pl-md``
(``--dims`` ability dims) are fitted by NUTS on the other llms only, with the
same settings (package defaults otherwise). Each held-out llm is then scored
from its responses on a random subset of 25, 50 and 100 items (a different
subset per llm, the same subsets for both models), and we count how often its
true full-benchmark accuracy (all 448 items) falls inside the 90% interval,
with the plain IRT predictive and recalibrated by ``estimate_misfit`` on the
training llms (in-sample item-split cross-validation, the ``score
--calibrate-with`` recipe), beside the Wilson interval of the subset accuracy.
Also: the mean absolute error of the posterior-mean accuracy and the mean
interval width.

Usage::

    .venv/bin/python benchmarks/study_md_scoring.py [--heldout 100] [--seed 0]
        [--tune 500] [--draws 500] [--dims 2] [--report-only]

Each (D, seed) run is kept in ``results/md_scoring.json`` (a rerun replaces
it) and the section shows every saved run; D >= 3 is scored by importance
sampling (``ability._importance_samples``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _report import commit, last_run, machine, update_results, write_section  # noqa: E402

GPQA = HERE.parent.parent / "shared" / "data" / "open-llm-leaderboard-v2" / "gpqa.csv"
RESULTS = HERE / "results" / "md_scoring.json"
SIZES = (25, 50, 100)


def fit_train(train, model: str, args: argparse.Namespace) -> tuple[object, dict]:
    """NUTS on the training llms; the posterior and a row of diagnostics."""
    from bayes_microbench.exceptions import ConvergenceWarning
    from bayes_microbench.irt import IRTModel

    config = {"n_dims": args.dims} if model == "2pl-md" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # reported in the table
        fit = IRTModel(train, model, config=config).fit(
            "nuts", chains=2, draws=args.draws, tune=args.tune, random_seed=args.seed
        )
    row = {"model": model, "fit_wall_seconds": fit.wall_seconds, **fit.diagnostics.to_dict()}
    return fit.posterior, row


def score_heldout(post, train, test, subsets, args) -> list[dict]:
    """Coverage, width and error of the held-out scores at each subset size."""
    from bayes_microbench.misfit import estimate_misfit
    from bayes_microbench.posterior import item_draws
    from bayes_microbench.scoring import score

    draws = item_draws(post, max_draws=args.max_draws, multidim=True)
    t0 = time.perf_counter()
    misfit = estimate_misfit(post, train, sizes=SIZES, random_seed=args.seed, draws=draws)
    misfit_seconds = time.perf_counter() - t0
    y = test.values
    truth = np.nanmean(y, axis=1)
    rows = []
    for n in SIZES:
        cols = subsets[n].any(axis=0)  # the items some held-out llm observes
        sub = np.where(subsets[n], y, np.nan)[:, cols]
        obs = type(test).from_arrays(
            sub, test.llms, test.items[cols], subtask=test.item_subtask[cols]
        )
        row: dict = {"n_items": n}
        for label, mf in (("plain", None), ("calibrated", misfit)):
            t0 = time.perf_counter()
            res = score(post, obs, draws=draws, random_seed=args.seed, misfit=mf)
            row[f"{label}_seconds"] = time.perf_counter() - t0
            lo, hi = res["accuracy_interval"].values.T
            row[f"{label}_coverage"] = float(np.mean((lo <= truth) & (truth <= hi)))
            row[f"{label}_width"] = float(np.mean(hi - lo))
            row[f"{label}_mae"] = float(np.mean(np.abs(res["accuracy_mean"].values - truth)))
        blo, bhi = res["binomial_interval"].values.T
        row["wilson_coverage"] = float(np.mean((blo <= truth) & (truth <= bhi)))
        row["wilson_width"] = float(np.mean(bhi - blo))
        row["subset_mae"] = float(np.mean(np.abs(res["observed_accuracy"].values - truth)))
        rows.append(row)
    return [dict(r, misfit_seconds=misfit_seconds) for r in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", default=str(GPQA))
    parser.add_argument("--heldout", type=int, default=100)
    parser.add_argument("--dims", type=int, default=2)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--max-draws", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--report-only", action="store_true", help="rewrite the section")
    args = parser.parse_args()

    from bayes_microbench.io import load_responses

    if not Path(args.responses).exists():
        print(f"{args.responses}: not found (real data lives in ../shared/data)", file=sys.stderr)
        return 2
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rev = commit()
    resp = load_responses(args.responses)
    if args.report_only:
        report(json.loads(RESULTS.read_text())["runs"], resp)
        return 0
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(resp.n_llms)
    test, train = resp.isel(llm=order[: args.heldout]), resp.isel(llm=order[args.heldout :])
    # one random subset per held-out llm and size, shared by both models
    subsets = {}
    for n in SIZES:
        keys = rng.random(test.values.shape)
        mask = np.zeros(test.values.shape, dtype=bool)
        np.put_along_axis(mask, np.argsort(keys, axis=1)[:, :n], True, axis=1)
        subsets[n] = mask
    out = {
        "date": started,
        "commit": rev,
        "machine": machine(),
        "args": vars(args),
        "fits": [],
        "scores": {},
    }
    for model in ("2pl", "2pl-md"):
        post, fit_row = fit_train(train, model, args)
        print(json.dumps(fit_row, default=float), flush=True)
        out["fits"].append(fit_row)
        rows = score_heldout(post, train, test, subsets, args)
        for r in rows:
            print(model, json.dumps(r), flush=True)
        out["scores"][model] = rows
    # one saved run per (D, seed): a rerun replaces it; the section shows them all
    saved = json.loads(RESULTS.read_text())["runs"] if RESULTS.exists() else []
    runs = sorted(
        [r for r in saved if _key(r) != _key(out)] + [out],
        key=_key,
    )
    update_results(RESULTS, runs=runs)
    if not args.no_report:
        report(runs, resp)
    return 0


def _key(run: dict) -> tuple[int, int]:
    return run["args"]["dims"], run["args"]["seed"]


def _label(run: dict, model: str) -> str:
    return f"2pl-md (D = {run['args']['dims']})" if model == "2pl-md" else model


def report(runs: list[dict], resp) -> None:
    first = runs[0]["args"]
    lines = [
        f"GPQA ({resp.n_llms} llms x {resp.n_items} items): per seed, {first['heldout']} "
        "held-out llms; the item posteriors are fitted by NUTS on the other llms, 2 chains "
        "x (tune + draws) as in the first table, package defaults otherwise; "
        "`2pl-md` with the D its rows name (each run refits the 2PL beside it). Each "
        "held-out llm is observed on a random "
        "subset (its own, the same for both models) and scored with "
        f"{first['max_draws']} posterior draws; truth = its accuracy on all "
        f"{resp.n_items} items. `calibrated` = recalibrated by `estimate_misfit` on the "
        "training llms (in-sample, sizes 25/50/100). Target coverage of the 90% "
        "intervals: 85-95% (with 100 llms a coverage has a binomial sd of 3 points).",
        "",
        "| seed, commit | model | NUTS 2 x | fit wall s | max R-hat | min bulk ESS | "
        "divergences | steps/draw | misfit estimate s | one scoring s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for f in run["fits"]:
            rows = run["scores"][f["model"]]
            lines.append(
                f"| {run['args']['seed']}, {run['commit']} | {_label(run, f['model'])} | "
                f"({run['args']['tune']} + {run['args']['draws']}) | "
                f"{f['fit_wall_seconds']:.0f} | {f['max_rhat']:.3f} | {f['min_ess_bulk']:.0f} | "
                f"{f['divergences']} | {f['mean_tree_size']:.1f} | "
                f"{rows[0]['misfit_seconds']:.0f} | "
                f"{np.median([r['plain_seconds'] for r in rows]):.1f} |"
            )
    lines += [
        "",
        "| seed | model | items observed | plain coverage | plain width | calibrated "
        "coverage | calibrated width | Wilson coverage | Wilson width | MAE plain | "
        "MAE calibrated | MAE subset accuracy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for model, rows in run["scores"].items():
            for r in rows:
                lines.append(
                    f"| {run['args']['seed']} | {_label(run, model)} | {r['n_items']} | "
                    f"{r['plain_coverage']:.2f} | {r['plain_width']:.3f} | "
                    f"{r['calibrated_coverage']:.2f} | {r['calibrated_width']:.3f} | "
                    f"{r['wilson_coverage']:.2f} | {r['wilson_width']:.3f} | "
                    f"{r['plain_mae']:.4f} | {r['calibrated_mae']:.4f} | {r['subset_mae']:.4f} |"
                )
    lines += [
        "",
        "`one scoring s` = the median time of one `score` call over the held-out llms "
        "(plain, per size). The fits are short and the table says whether they converged: "
        "where R-hat > 1.01 or ESS < 400 the posteriors are indicative only.",
    ]
    last = last_run(runs)  # (date, commit, machine)
    write_section(
        "study_md_scoring",
        "GPQA: held-out scoring with the 2PL vs the multidimensional 2PL",
        "\n".join(lines),
        run=None if len(runs) == 1 and commit() == last[1] else last,
        headline=[
            {
                "table": 1,
                "columns": [
                    "seed",
                    "model",
                    "items observed",
                    "plain coverage",
                    "calibrated coverage",
                    "calibrated width",
                    "Wilson coverage",
                    "MAE calibrated",
                    "MAE subset accuracy",
                ],
                "where": {"items observed": ["50"]},
            }
        ],
    )


if __name__ == "__main__":
    raise SystemExit(main())

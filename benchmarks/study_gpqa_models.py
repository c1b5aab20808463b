"""GPQA: the 1PL, 2PL, 3PL and multidimensional 2PL side by side (NUTS, PPC, LOO).

Every model is fitted by NUTS (nutpie, the package defaults otherwise) on
``../shared/data/open-llm-leaderboard-v2/gpqa.csv`` (420 llms x 448 items) with
the same settings and seed; the 3PL's floors are fixed at 1/4 (GPQA's four
options). For each fit we report the wall time, the convergence diagnostics
and the posterior predictive checks (how many llms / items have a per-llm
accuracy / per-item proportion-correct p-value outside [0.05, 0.95]); the
models are compared by PSIS-LOO over every observed cell
(``bayes_microbench.irt.checks.loo``, 400 thinned draws; about 2 minutes per
model) and ``arviz_stats.compare``.

For the 3PL the study also reads where its posterior puts each item (its
floor split): in each draw, how far the strongest llm rises above the item's
floor (``sigmoid(discrimination * (ability_max - difficulty))``, the share of
the way from the floor to 1). An item is *at the floor* in a draw where that
is under 5%: no llm answers it better than by guessing. An item whose draws
fall at the floor in 5-95% of draws is *split* between two readings (no llm
above the floor; a step among the strongest llms), and its chains must cross
between them to agree.

Usage::

    .venv/bin/python benchmarks/study_gpqa_models.py [--models 1pl,2pl,3pl,2pl-md]
        [--tune 1000] [--draws 1000] [--seeds 0,1] [--loo-draws 400] [--no-report]

Results of the latest run go to ``benchmarks/results/gpqa_models.json``.
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
GPQA = HERE.parent.parent / "shared" / "data" / "open-llm-leaderboard-v2" / "gpqa.csv"
RESULTS = HERE / "results" / "gpqa_models.json"
MODELS = ("1pl", "2pl", "3pl", "2pl-md")
#: an item is at its floor in a draw where the strongest llm rises less than this above it
AT_FLOOR = 0.05


def canonical_correlations(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    qx, _ = np.linalg.qr(x - x.mean(0))
    qy, _ = np.linalg.qr(y - y.mean(0))
    return np.linalg.svd(qx.T @ qy, compute_uv=False)


def fit_one(resp, model: str, seed: int, args: argparse.Namespace) -> tuple[object, dict]:
    from bayes_microbench.exceptions import ConvergenceWarning
    from bayes_microbench.irt import IRTModel
    from bayes_microbench.irt.checks import posterior_predictive_check

    config = {"2pl-md": {"n_dims": args.dims}, "3pl": {"n_options": 4}}.get(model)
    cpu0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # reported in the table
        fit = IRTModel(resp, model, config=config).fit(
            "nuts", chains=args.chains, draws=args.draws, tune=args.tune, random_seed=seed
        )
    cpu = time.process_time() - cpu0
    d = fit.diagnostics
    ppc = posterior_predictive_check(fit, max_draws=400, random_seed=seed)
    row = {
        "model": model if model != "2pl-md" else f"2pl-md (D={args.dims})",
        "seed": seed,
        "wall_seconds": fit.wall_seconds,
        "process_cpu_seconds": cpu,
        **d.to_dict(),
        **{f"ppc_{k}": v for k, v in ppc.summary.items()},
    }
    return fit, row


def floor_split(fit, resp) -> dict:
    """Where a 3PL posterior puts each item: at its floor, above it, or split (see the docstring)."""
    from scipy.special import expit

    from bayes_microbench.irt.diagnostics import rank_diagnostics

    post = fit.posterior
    a = post["discrimination"].values
    b = post["difficulty"].values
    top = post["ability"].values.max(axis=-1)[..., None]
    at_floor = expit(a * (top - b)) < AT_FLOOR  # chain, draw, item
    share = at_floor.mean(axis=(0, 1))
    per_chain = at_floor.mean(axis=1)
    split = (share > AT_FLOOR) & (share < 1 - AT_FLOOR)
    rhat = np.zeros(a.shape[-1])
    ess = np.full(a.shape[-1], np.inf)
    for name in ("discrimination", "difficulty", "intercept"):
        d = rank_diagnostics(np.moveaxis(post[name].values, -1, 0))
        rhat, ess = np.fmax(rhat, d["rhat"]), np.fmin(ess, d["ess_bulk"])
    poor = (rhat > 1.01) | (ess < 400)
    steep = np.median(a, axis=(0, 1)) > 5.0
    items = list(post["item"].values)
    below = set(fit.data.notes.get("items_below_floor", []))
    is_below = np.array([i in below for i in items])
    ability = post["ability"].values.mean(axis=(0, 1))
    strongest = np.argsort(-ability)[:20]
    values = resp.values
    worst = []
    for i in np.argsort(-rhat)[:5]:
        worst.append(
            {
                "item": items[i],
                "rhat": float(rhat[i]),
                "ess_bulk": float(ess[i]),
                "at_floor_per_chain": [float(x) for x in per_chain[:, i]],
                "median_discrimination": float(np.median(a[..., i])),
                "p_correct": float(np.nanmean(values[:, i])),
                "p_correct_strongest_20": float(np.nanmean(values[strongest, i])),
                "below_floor": bool(is_below[i]),
            }
        )
    return {
        "n_items": len(items),
        "at_floor": int((share >= 1 - AT_FLOOR).sum()),
        "split": int(split.sum()),
        "above": int((share <= AT_FLOOR).sum()),
        "steep": int(steep.sum()),
        "poor": int(poor.sum()),
        "poor_split": int((poor & split).sum()),
        "poor_steep": int((poor & steep).sum()),
        "poor_split_or_steep": int((poor & (split | steep)).sum()),
        "below_floor": int(is_below.sum()),
        "below_floor_at_floor_or_split": int((is_below & (share > AT_FLOOR)).sum()),
        "worst": worst,
    }


def md_extras(one_fit, md_fit) -> dict:
    """How the 2PL's ability sits in the multidimensional 2PL's ability space."""
    ab_md = md_fit.posterior["ability"].mean(("chain", "draw")).values
    ab_1d = one_fit.posterior["ability"].mean(("chain", "draw")).values
    return {
        "corr_ability_2pl_vs_md_dim0": float(np.corrcoef(ab_1d, ab_md[:, 0])[0, 1]),
        "canonical_corr_ability_2pl_vs_md": float(canonical_correlations(ab_1d[:, None], ab_md)[0]),
        "loading_sd_posterior_mean": [
            float(v) for v in md_fit.posterior["loading_sd"].mean(("chain", "draw")).values
        ],
        "anchors": md_fit.posterior.attrs.get("anchors", ""),
    }


def run_loo(fits: dict, args: argparse.Namespace) -> dict:
    """PSIS-LOO of every fit over all observed cells (``checks.loo``), compared (``loo_rows``)."""
    from bayes_microbench.irt.checks import loo, loo_rows

    t0 = time.perf_counter()
    elpd = {name: loo(fit, max_draws=args.loo_draws) for name, fit in fits.items()}
    return {"seconds": time.perf_counter() - t0, "table": loo_rows(elpd)}


def run_seed(resp, seed: int, args: argparse.Namespace) -> dict:
    fits, rows = {}, []
    for model in args.models.split(","):
        fit, row = fit_one(resp, model, seed, args)
        print(json.dumps(row, default=float), flush=True)
        fits[row["model"]] = fit
        rows.append(row)
    n_cells = int((~np.isnan(resp.values)).sum())
    out: dict = {"seed": seed, "rows": rows, "n_cells": n_cells}
    out["loo"] = run_loo(fits, args)
    print(json.dumps(out["loo"]), flush=True)
    if "3pl" in fits:
        out["floor_split"] = floor_split(fits["3pl"], resp)
        print(json.dumps(out["floor_split"]), flush=True)
    md = [name for name in fits if name.startswith("2pl-md")]
    if "2pl" in fits and md:
        out["md"] = md_extras(fits["2pl"], fits[md[0]])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", default=str(GPQA))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--dims", type=int, default=2)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--loo-draws", type=int, default=400)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()

    from bayes_microbench.io import load_responses

    unknown = sorted(set(args.models.split(",")) - set(MODELS))
    if unknown:
        print(f"--models: unknown {unknown}; choose from {list(MODELS)}", file=sys.stderr)
        return 2
    if not Path(args.responses).exists():
        print(f"{args.responses}: not found (real data lives in ../shared/data)", file=sys.stderr)
        return 2
    resp = load_responses(args.responses)
    runs = [run_seed(resp, int(s), args) for s in args.seeds.split(",")]
    settings = {k: getattr(args, k) for k in ("chains", "tune", "draws", "dims", "loo_draws")}
    if not args.no_report:
        sys.path.insert(0, str(HERE))
        from _report import commit, machine, update_results, write_section

        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        update_results(
            RESULTS, date=stamp, commit=commit(), machine=machine(), settings=settings, runs=runs
        )
        write_section(
            "study_gpqa_models",
            "GPQA: 1PL, 2PL, 3PL and multidimensional 2PL (NUTS, PPC, LOO)",
            report(runs, resp, settings),
            # the fits' diagnostics stay in the JSON: the default fit's section has the current ones
            headline=[
                {"table": 1, "columns": ["model", "elpd_loo", "SE", "elpd_diff", "dse"]},
            ],
        )
    return 0


def _fit_line(r: dict) -> str:
    return (
        f"| {r['model']} | {r['seed']} | {r['wall_seconds']:.0f} | {r['process_cpu_seconds']:.0f} "
        f"| {r['max_rhat']:.3f} ({r['worst_rhat']}) | {r['min_ess_bulk']:.0f} "
        f"({r['worst_ess_bulk']}) | {r['min_ess_tail']:.0f} | {r['divergences']} "
        f"| {r['mean_tree_size']:.0f} | {r['ok']} | {r['ppc_llm_accuracy_ppp_outside_5_95']} of "
        f"{r['ppc_n_llms']} | {r['ppc_item_p_correct_ppp_outside_5_95']} of {r['ppc_n_items']} "
        f"| {r['ppc_raw_score_sd_ppp']:.2f} |"
    )


def report(runs: list[dict], resp, settings: dict) -> str:
    n_llms, n_items = resp.values.shape
    first = runs[0]
    lines = [
        f"GPQA ({n_llms} llms x {n_items} items, {first['n_cells']} observed cells), NUTS "
        f"(nutpie, float32, package defaults: lognormal discrimination prior, "
        f"`parameterization='auto'`), {settings['chains']} chains x ({settings['tune']} tune + "
        f"{settings['draws']} draws), every model with the same seed, seeds "
        f"{', '.join(str(r['seed']) for r in runs)}. The 3PL's floors are fixed at 1/4; the "
        f"2pl-md is the anchored multidimensional 2PL of `bayes_microbench.irt.multidim` "
        f"(D = {settings['dims']}). Converged = every R-hat <= 1.01, every bulk and tail ESS "
        ">= 400, no divergences (the package's check).",
        "",
        "| model | seed | wall s | CPU s | max R-hat | min bulk ESS | min tail ESS | divergences "
        "| steps/draw | converged | llms with PPC p outside [0.05, 0.95] | items with PPC p "
        "outside [0.05, 0.95] | raw-score sd p |",
        "|---" * 13 + "|",
    ]
    lines += [_fit_line(r) for run in runs for r in run["rows"]]
    for run in runs:
        loo = run["loo"]
        lines += [
            "",
            f"Seed {run['seed']}: PSIS-LOO over all {run['n_cells']} cells "
            f"(`checks.loo`, {settings['loo_draws']} posterior draws; {loo['seconds']:.0f} s "
            "for all models) and `arviz_stats.compare`:",
            "",
            "| model | elpd_loo | SE | p_loo | elpd_diff | dse | cells with Pareto k > 0.7 "
            "| k > 1 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {t['model']} | {t['elpd_loo']:.1f} | {t['se']:.1f} | {t['p_loo']:.1f} "
            f"| {t['elpd_diff']:.1f} | {t['dse']:.1f} | {t['cells_pareto_k_over_0.7']} "
            f"| {t['cells_pareto_k_over_1']} |"
            for t in loo["table"]
        ]
    splits = [(run["seed"], run["floor_split"]) for run in runs if "floor_split" in run]
    if splits:
        lines += [
            "",
            "### The 3PL's items: at the floor, above it, or split",
            "",
            f"Per draw, an item is at its floor where the strongest llm rises less than "
            f"{AT_FLOOR:.0%} of the way from the floor to 1 "
            "(`sigmoid(discrimination * (max ability - difficulty))`). Split: at the floor in "
            f"{AT_FLOOR:.0%}-{1 - AT_FLOOR:.0%} of the draws. Steep: posterior-median "
            "discrimination above 5 (a step between neighbouring llms). Poorly mixed: R-hat > 1.01 "
            "or bulk ESS < 400 for its discrimination, difficulty or intercept. Below the floor: "
            "answered correctly less often than 1/4 allows (binomial p < 0.01).",
            "",
            "| seed | items | at the floor | split | above | steep | below the floor (data) "
            "| poorly mixed | of which split | of which steep | of which split or steep |",
            "|---" * 11 + "|",
        ]
        lines += [
            f"| {seed} | {s['n_items']} | {s['at_floor']} | {s['split']} | {s['above']} "
            f"| {s['steep']} | {s['below_floor']} | {s['poor']} | {s['poor_split']} "
            f"| {s['poor_steep']} | {s['poor_split_or_steep']} |"
            for seed, s in splits
        ]
        lines += [
            "",
            "The five worst-mixing items per seed (share of draws at the floor, per chain):",
            "",
            "| seed | item | R-hat | bulk ESS | at the floor: chain 0, chain 1 | median "
            "discrimination | p correct | p correct, 20 strongest llms | below the floor |",
            "|---" * 9 + "|",
        ]
        lines += [
            f"| {seed} | {w['item']} | {w['rhat']:.3f} | {w['ess_bulk']:.0f} "
            f"| {', '.join(f'{x:.2f}' for x in w['at_floor_per_chain'])} "
            f"| {w['median_discrimination']:.2f} | {w['p_correct']:.3f} "
            f"| {w['p_correct_strongest_20']:.2f} | {w['below_floor']} |"
            for seed, s in splits
            for w in s["worst"]
        ]
    for run in runs:
        if "md" not in run:
            continue
        md = run["md"]
        lines += [
            "",
            f"Seed {run['seed']}: the 2PL's ability lies inside the md ability space (canonical "
            f"correlation of the posterior means {md['canonical_corr_ability_2pl_vs_md']:.3f}); "
            f"along the md's dimension 0 (the first anchor item's loading direction; anchors "
            f"{md['anchors']}) the correlation is {md['corr_ability_2pl_vs_md_dim0']:.3f}: compare "
            "md dimensions by rotation-invariant summaries. Posterior mean of the dimension-1 "
            f"loading sd: {', '.join(f'{v:.2f}' for v in md['loading_sd_posterior_mean'])}.",
        ]
    lines += [
        "",
        "Where a row shows R-hat > 1.01 or ESS < 400 the fit has not converged by the package's "
        "thresholds, and its LOO and PPC figures are indicative only.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

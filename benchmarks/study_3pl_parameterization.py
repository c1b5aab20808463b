"""NUTS for the 3PL: centered or non-centered items, on well-specified and real data.

``fit(parameterization="auto")`` samples a 2PL or 3PL of ``CENTERED_MIN_LLMS``
llms or more with centered items (``"decoupled"``): each item is seen by
hundreds of llms, so the data pin down its slope and intercept. A 3PL with a
guessing floor spends much of that information: an llm near the floor says
little about an item's slope, so on a hard benchmark (GPQA: accuracy near
0.3 over a floor of 0.25) the items' slopes rest on few llms and the
hierarchical prior matters. This study measures both forms on 3PL data drawn
from the model (``simulate_responses``, floors 1/K known and fixed at the
truth) and on GPQA's real matrix, whose 1/4 floor contradicts 158 items.

Designs (``DESIGNS``): ``gpqa-like`` (the simulator's GPQA preset: 420 x 448,
3 subtasks, 4 options, accuracy about 0.3), ``gpqa-like-mid`` and
``gpqa-like-strong`` (the same with abilities shifted up by 0.75 and 1.5:
accuracy about 0.34 and 0.39), ``200x100`` (the GPQA preset at 200 llms x 100
items), ``mmlu-pro-like`` (the MMLU-Pro preset at 450 llms x 1400 items: 14
subtasks, 10 options) and ``gpqa`` (the real matrix, floors 1/4). A design's
simulated matrix is drawn with the row's seed.

Variants: ``decoupled`` (centered items) and ``decoupled-nc`` (non-centered
items), both with the default lognormal discrimination prior; ``decoupled-tn``
(centered, truncated-normal prior) on request.

Each (design, variant, seed) is one 3PL NUTS fit, 2 chains x (1000 tune + 1000
draws), in a fresh process (as a user's fit runs: chains in forked workers).
Reported: the fit call's wall time, the worst R-hat and bulk / tail ESS over
the checked parameters (and which parameter), divergences, leapfrog steps per
draw, and for simulated data the correlation of the posterior-mean abilities
with the truth. Converged = the package's own check.

Usage::

    .venv/bin/python benchmarks/study_3pl_parameterization.py
        [--designs gpqa-like,200x100] [--variants decoupled,decoupled-nc]
        [--seeds 0,1] [--no-report] [--report-only]

Results accumulate in ``benchmarks/results/3pl_parameterization.json`` (a
rerun of a (design, variant, seed) replaces its row).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import (
    FIT_HEADER,
    check_names,
    fit_cells,
    last_run,
    nuts_row,
    rows_note,
    run_rows,
    write_section,
)

HERE = Path(__file__).resolve().parent
GPQA = HERE.parent.parent / "shared" / "data" / "open-llm-leaderboard-v2" / "gpqa.csv"
RESULTS = HERE / "results" / "3pl_parameterization.json"
#: design -> (simulator preset, overrides); None: the real GPQA matrix
DESIGNS: dict[str, tuple[str, dict] | None] = {
    "gpqa-like": ("gpqa", {}),
    "gpqa-like-mid": ("gpqa", {"ability_mean": 0.75}),
    "gpqa-like-strong": ("gpqa", {"ability_mean": 1.5}),
    "200x100": ("gpqa", {"n_llms": 200, "n_items": 100}),
    "mmlu-pro-like": ("mmlu-pro", {"n_items": 1400}),
    "gpqa": None,
}
DEFAULT_DESIGNS = ("gpqa-like", "gpqa-like-strong", "200x100", "gpqa")
#: variant -> (parameterization, discrimination prior)
VARIANTS = {
    "decoupled": ("decoupled", "lognormal"),
    "decoupled-nc": ("decoupled-nc", "lognormal"),
    "decoupled-tn": ("decoupled", "truncated-normal"),
}
DEFAULT_VARIANTS = ("decoupled", "decoupled-nc")


def data(design: str, seed: int) -> tuple:
    """The design's responses and, for simulated data, the true abilities."""
    from bayes_microbench import load_responses, simulate_responses

    spec = DESIGNS[design]
    if spec is None:
        return load_responses(str(GPQA)), None
    preset, overrides = spec
    resp, truth = simulate_responses(preset, random_seed=seed, return_truth=True, **overrides)
    return resp, truth.ability.to_numpy()


def one(design: str, variant: str, seed: int) -> dict:
    """Fit one (design, variant, seed) in this process; the row of the report."""
    import numpy as np

    from bayes_microbench.irt import IRTModel

    parameterization, prior = VARIANTS[variant]
    resp, ability = data(design, seed)
    config = {"discrimination_prior": prior}
    if DESIGNS[design] is None:
        config["n_options"] = 4
    fit, figures = nuts_row(IRTModel(resp, "3pl", config=config), seed, parameterization)
    corr = None
    if ability is not None:
        mean = fit.posterior["ability"].mean(("chain", "draw")).to_numpy()
        corr = float(np.corrcoef(mean, ability)[0, 1])
    return {
        "design": design,
        "shape": f"{resp.n_llms} x {resp.n_items}",
        "accuracy": float(np.nanmean(resp.values)),
        "variant": variant,
        "seed": seed,
        "ability_corr": corr,
        **figures,
    }


def table(rows: list[dict]) -> str:
    head = f"| design | llms x items | accuracy | variant | seed | ability corr | {FIT_HEADER} |"
    lines = [head, "|---" * 16 + "|"]
    order = {name: k for k, name in enumerate(DESIGNS)}
    vorder = {name: k for k, name in enumerate(VARIANTS)}
    for r in sorted(rows, key=lambda r: (order[r["design"]], r["seed"], vorder[r["variant"]])):
        corr = "" if r["ability_corr"] is None else f"{r['ability_corr']:.3f}"
        lines.append(
            f"| {r['design']} | {r['shape']} | {r['accuracy']:.2f} | {r['variant']} "
            f"| {r['seed']} | {corr} | {fit_cells(r)} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", default=",".join(DEFAULT_DESIGNS))
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the section from the saved rows"
    )
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        row = one(args.one[0], args.one[1], int(args.one[2]))
        print("ROW " + json.dumps(row, default=float))
        return 0
    if args.report_only:
        report(json.loads(RESULTS.read_text())["rows"])
        return 0
    designs = [d for d in args.designs.split(",") if d]
    variants = [v for v in args.variants.split(",") if v]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    check_names(parser, "design", designs, list(DESIGNS))
    check_names(parser, "variant", variants, list(VARIANTS))
    if any(DESIGNS[name] is None for name in designs) and not GPQA.exists():
        print(f"{GPQA} not present; drop the design 'gpqa'", file=sys.stderr)
        return 1
    jobs = [[d, v, str(seed)] for seed in seeds for d in designs for v in variants]
    saved = run_rows(__file__, jobs, lambda r: (r["design"], r["variant"], r["seed"]), RESULTS)
    if saved is None:
        return 1
    if not args.no_report:
        report(saved)
    return 0


def report(saved: list[dict]) -> None:
    """Write the section from every saved row."""
    setup = (
        "3PL NUTS, 2 chains x (1000 tune + 1000 draws), one fresh process per row; fit s = "
        "the fit call (build, compile, sampling). Simulated designs are drawn from the "
        "3PL with floors 1/K, which the fit fixes at the truth; `gpqa` is the real "
        "matrix (floors 1/4). Variants: `decoupled` = centered items, `decoupled-nc` = "
        "non-centered items (both lognormal prior); `-tn` = the truncated-normal prior, "
        "centered. " + rows_note(saved)
    )
    write_section(
        "study_3pl_parameterization",
        "NUTS for the 3PL: centered or non-centered items",
        "\n\n".join(x for x in (setup, table(saved), READING) if x),
        run=last_run(saved),
        headline=[
            {
                "table": 0,
                "columns": [
                    "design",
                    "variant",
                    "seed",
                    "max R-hat",
                    "min bulk ESS",
                    "divergences",
                    "converged",
                ],
                # the real matrices; the simulated designs are in the section
                "where": {"design": ["gpqa", "bbh", "mmlu-pro"]},
            }
        ],
    )


#: The reading of the saved rows (written once they were measured).
READING = """Reading: no 3PL fit here passes every check at 2 x 1000 draws, but which
form comes closer depends on how well the data pin each item's slope down, which
`pymc_model.slope_sd` measures before fitting (the median over items of the sd that
an item's likelihood alone leaves its log discrimination, at the starting values):
0.30-0.33 for `gpqa-like`, 0.50-0.53 for `200x100`, 0.25-0.27 for `gpqa-like-mid`,
0.22-0.23 for `gpqa-like-strong`, 0.15 for `mmlu-pro-like` (seeds 0-2) and 0.69 for
`gpqa`. Where it is high the centered items mix badly: on `gpqa-like` R-hat 1.13 and
1.023 (bulk ESS 11 and 55) against 1.012 and 1.011 (270 and 228) for the
non-centered items in the same time, the worst parameter the subtask sd of the log
discriminations; at `200x100` the centered chains diverged 1022 and 452 times. On
`gpqa-like-mid` the non-centered items had the higher lowest bulk ESS on both
seeds (268 and 234 against 109 and 164; R-hat split). Where it is low the centered
items win and take fewer leapfrog steps: `gpqa-like-strong` bulk ESS 261 and 413
against 151 and 154 (15 against 26-29 steps per draw), `mmlu-pro-like` R-hat 1.0117
and bulk ESS 1071 against 1.084 and 32. So `fit(parameterization="auto")` samples a
lognormal 3PL with fixed floors non-centered where the median slope sd exceeds
`WEAK_SLOPE_SD` = 0.24 (`policy.weak_slopes`). The truncated-normal prior
(centered) was worst on `gpqa-like` (R-hat 1.19, 193 divergences, 153 steps per
draw), so an unconverged fit there does not suggest it. GPQA's real matrix goes the
other way: the centered items mixed better (R-hat 1.027 and 1.042 against 1.14 and
1.28), with divergences (7 and 10) and 103-111 steps per draw. 158 of its items are
answered correctly below the 1/4 floor (binomial p < 0.01), 118 of them beyond
chance (p < 0.01 / 448), which no 3PL fits; `weak_slopes` is False where any item is
beyond chance, the items stay centered and an unconverged fit names the 2PL. (Of the
simulated matrices, which fit by construction, the chance-level test flags 0-2 items
and the Bonferroni test none.)"""


if __name__ == "__main__":
    raise SystemExit(main())

"""NUTS below 100 llms: which parameterization and discrimination prior sample real matrices.

``fit(parameterization="auto")`` samples a lognormal 2PL of fewer than
``CENTERED_MIN_LLMS`` llms in the ``"decoupled-nc"`` form (non-centered items),
chosen on 40 x 50 simulated matrices and on BBH / MMLU-Pro against the plain
non-centered form. This study compares it, on the real PredictaBoard matrices
(43-81 llms), with the centered ``"decoupled"`` form under both
discrimination priors.

Each (data, variant) is one 2PL NUTS fit, 2 chains x (1000 tune + 1000 draws),
seed 0, in a fresh process (as a user's fit runs: chains in forked workers).
Reported: the fit call's wall time, the worst R-hat and bulk / tail ESS over the
checked parameters (and which parameter), divergences, leapfrog steps per draw.
Converged = the package's own check (every R-hat <= 1.01, every ESS >= 400, no
divergences).

Usage::

    .venv/bin/python benchmarks/study_small_matrices.py [--data ifeval,musr,math-hard]
        [--variants decoupled-nc,decoupled,decoupled-tn] [--seed 0] [--no-report]

BBH (78 x 5761) and MMLU-Pro (43 x 12032) are accepted by ``--data`` but take
10-20 minutes per fit here. Results accumulate in
``benchmarks/results/small_matrices.json`` (a rerun of a (data, variant, seed)
replaces its row).
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
DATA = HERE.parent.parent / "shared" / "data" / "predictaboard-oll-v2"
RESULTS = HERE / "results" / "small_matrices.json"
DATASETS = ("ifeval", "musr", "math-hard", "bbh", "mmlu-pro")
DEFAULT_DATA = ("ifeval", "musr", "math-hard")
#: variant -> (parameterization, discrimination prior)
VARIANTS = {
    "decoupled-nc": ("decoupled-nc", "lognormal"),
    "decoupled": ("decoupled", "lognormal"),
    "decoupled-tn": ("decoupled", "truncated-normal"),
}


def one(data: str, variant: str, seed: int) -> dict:
    """Fit one (data, variant) in this process; the row of the report."""
    from bayes_microbench import load_responses
    from bayes_microbench.irt import IRTModel

    parameterization, prior = VARIANTS[variant]
    resp = load_responses(str(DATA / f"{data}.csv"))
    model = IRTModel(resp, "2pl", config={"discrimination_prior": prior})
    _, figures = nuts_row(model, seed, parameterization)
    return {
        "data": data,
        "shape": f"{resp.n_llms} x {resp.n_items}",
        "variant": variant,
        "seed": seed,
        **figures,
    }


def table(rows: list[dict]) -> str:
    lines = [f"| data | llms x items | variant | {FIT_HEADER} |", "|---" * 13 + "|"]
    order = {name: k for k, name in enumerate(DATASETS)}
    vorder = {name: k for k, name in enumerate(VARIANTS)}
    for r in sorted(rows, key=lambda r: (order[r["data"]], r["seed"], vorder[r["variant"]])):
        lines.append(f"| {r['data']} | {r['shape']} | {r['variant']} | {fit_cells(r)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=",".join(DEFAULT_DATA))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the section from the saved rows"
    )
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(one(args.one[0], args.one[1], args.seed), default=float))
        return 0
    if args.report_only:
        report(json.loads(RESULTS.read_text())["rows"])
        return 0
    datasets = [d for d in args.data.split(",") if d]
    variants = [v for v in args.variants.split(",") if v]
    check_names(parser, "data", datasets, list(DATASETS))
    check_names(parser, "variant", variants, list(VARIANTS))
    for name in datasets:
        if not (DATA / f"{name}.csv").exists():
            print(f"{DATA / name}.csv not present; nothing to study", file=sys.stderr)
            return 1
    jobs = [[d, v, "--seed", str(args.seed)] for d in datasets for v in variants]
    saved = run_rows(__file__, jobs, lambda r: (r["data"], r["variant"], r["seed"]), RESULTS)
    if saved is None:
        return 1
    if not args.no_report:
        report(saved)
    return 0


def report(saved: list[dict]) -> None:
    """Write the section from every saved row."""
    setup = (
        "2PL NUTS, 2 chains x (1000 tune + 1000 draws), one fresh process per row; fit s = "
        "the fit call (build, compile, sampling). Variants: `decoupled-nc` = what "
        "`parameterization='auto'` samples below `CENTERED_MIN_LLMS` llms (lognormal "
        "prior, non-centered items); `decoupled` = the centered form used from that many "
        "llms on; `-tn` = the truncated-normal discrimination prior. " + rows_note(saved)
    )
    reading = (
        "Reading: below 100 llms no variant converges on every matrix. The centered "
        "`decoupled` form mixes better than the `decoupled-nc` default wherever both "
        "were run: a lower worst R-hat and a higher lowest bulk ESS, and IFEval "
        "converges only in it. But with the lognormal prior it diverges on MuSR. By "
        "hand (seed 0, same settings, not in the table): on BBH (78 x 5761) `decoupled` "
        "reached R-hat 1.017, bulk ESS 333 with 87 divergences and 223 leapfrog steps "
        "per draw (1031 s at load 5-7), against `decoupled-nc`'s 1.039 / 55 and no "
        "divergences (an earlier session); on MMLU-Pro (43 x 12032) 1.014 / 379 with 29 "
        "divergences (461 s), against 1.019 / 150. The divergences come with the "
        "lognormal prior's funnel at weakly discriminating items; the truncated-normal "
        "prior removes them on all five matrices and gives the highest lowest bulk ESS "
        "on MuSR, BBH and MMLU-Pro (on MuSR it misses only R-hat, 1.0154), but it still "
        "misses R-hat and tail ESS on BBH and MMLU-Pro, and on MATH its subtask-level "
        "sd mixes worst of all. Centering "
        "only the items the data inform (item-rest correlation above 2 standard errors, "
        "the dropped design of commit 5d8dd3b) gave, by hand, IFEval 1.0108 / 1055, "
        "MuSR 1.012 / 318 with 64 divergences, MATH 1.0109 / 198: no better. So `auto` "
        "keeps `decoupled-nc` (1 divergence in its five fits, against 98, 87 and 29 for "
        "centered on MuSR, BBH and MMLU-Pro) and an unconverged `decoupled-nc` "
        "fit names `parameterization='decoupled'` (CLI: `--parameterization "
        "decoupled`), alone or with the truncated-normal prior, as what to try next."
    )
    write_section(
        "study_small_matrices",
        "NUTS below 100 llms: real matrices",
        "\n\n".join([setup, table(saved), reading]),
        run=last_run(saved),
        headline=[
            {
                "table": 0,
                "columns": [
                    "data",
                    "variant",
                    "max R-hat",
                    "min bulk ESS",
                    "divergences",
                    "converged",
                ],
            }
        ],
    )


if __name__ == "__main__":
    raise SystemExit(main())

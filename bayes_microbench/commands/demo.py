"""``bayes-microbench demo``: the whole pipeline on an embedded default, no download.

Loads the shipped GPQA posterior (``models/gpqa-2pl.nc``; ``--simulate`` fits a
quick posterior to a simulated GPQA-like benchmark instead), then prints the
Bayesian MDAD with 90% intervals for random and informative (``bayes-fisher``,
``bayes-ranking``) micro-benchmarks of 10-200 items, scores simulated new
llms from 50 items each, plans the size needed to detect a 2-point gap, and
writes tables, figures and ``report.md`` to ``--output``.
"""

from __future__ import annotations

import argparse

from .._defaults import DEFAULT_CI_PROB, percent
from ._common import POSITIVE_INT, add_output_flags, add_seed, check_output_folder, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run the whole pipeline on an embedded default (no download)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--output",
        metavar="DIR",
        default="bayes-microbench-demo",
        help="folder for tables, figures and report.md (default ./bayes-microbench-demo)",
    )
    p.add_argument(
        "--simulate",
        action="store_true",
        help="simulate a GPQA-like benchmark and fit it, instead of loading the shipped posterior",
    )
    p.add_argument(
        "--max-draws", type=POSITIVE_INT, default=400, help="posterior draws used (default 400)"
    )
    add_seed(p)
    add_output_flags(p)
    p.set_defaults(func=run)


def _fmt(lo: float, mid: float, hi: float, unit: str = "") -> str:
    def one(v: float) -> str:
        return "inf" if v == float("inf") else f"{v:.1f}{unit}"

    return f"{one(mid)} [{one(lo)}, {one(hi)}]"


def run(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    check_output_folder(args.output)  # before minutes of computing
    res = run_demo(
        args.output, simulate=args.simulate, random_seed=args.seed, max_draws=args.max_draws
    )
    inside = (
        (res.scores["accuracy_lower"] <= res.scores["true_accuracy"])
        & (res.scores["true_accuracy"] <= res.scores["accuracy_upper"])
    ).mean()
    if args.json:
        print_json(
            {
                "source": res.source,
                "mdad": res.mdad.to_dict("records"),
                "plan": res.plan.to_dict("records"),
                "scores_coverage": float(inside),
                "output": args.output,
                "seconds": res.seconds,
            }
        )
        return 0
    if args.quiet:
        return 0
    print(f"Posterior: {res.source}")
    print()
    print(
        f"Bayesian MDAD (accuracy points, {percent(DEFAULT_CI_PROB)} interval): the smallest "
        "full-benchmark gap a"
    )
    print("micro-benchmark ranks correctly with probability >= 0.8")
    table = res.mdad.assign(
        cell=[
            _fmt(lo, m, hi)
            for lo, m, hi in res.mdad[["mdad_lower", "mdad", "mdad_upper"]].to_numpy()
        ]
    ).pivot_table(index="selector", columns="n_items", values="cell", aggfunc="first", sort=False)
    table.columns = [f"n={c}" for c in table.columns]
    print(table.to_string())
    print()
    sc = res.scores
    width_b = (sc["accuracy_upper"] - sc["accuracy_lower"]).mean() * 100
    width_w = (sc["wilson_upper"] - sc["wilson_lower"]).mean() * 100
    print(
        f"Scoring {len(sc)} simulated new llms from 50 random items each: "
        f"{percent(DEFAULT_CI_PROB)} credible intervals "
        f"{width_b:.1f} points wide on average (Wilson {width_w:.1f}), covering the true "
        f"full-benchmark accuracy for {inside:.0%} of them."
    )
    first = sc.iloc[0]
    print(
        f"  e.g. {first['llm']}: {_fmt(first['accuracy_lower'] * 100, first['accuracy_mean'] * 100, first['accuracy_upper'] * 100)} "
        f"(true {first['true_accuracy'] * 100:.1f})"
    )
    print()
    print(
        "Items needed to rank a pair correctly with probability 0.8 "
        f"({percent(DEFAULT_CI_PROB)} interval):"
    )
    pl = res.plan.assign(
        cell=[
            _fmt(lo, m, hi).replace(".0", "")
            for lo, m, hi in res.plan[["n_lower", "n_required", "n_upper"]].to_numpy()
        ]
    ).pivot_table(index="selector", columns="gap", values="cell", aggfunc="first", sort=False)
    pl.columns = [f"gap {g:g} pts" for g in pl.columns]
    print(pl.to_string())
    print()
    print(
        f"Wrote tables, figures and report.md to {args.output}/ ({sum(res.seconds.values()):.0f} s)"
    )
    return 0

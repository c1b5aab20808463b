"""``bayes-microbench plan``: how many items detect a given accuracy gap?

The smallest subset size at which a pair of llms whose full-benchmark
accuracies differ by ``--delta`` points is ranked correctly with probability
``--prob``, with a credible interval, plus a table for gaps of 1, 2, 3, 5 and
10 points.
"""

from __future__ import annotations

import argparse

from .._defaults import DEFAULT_CI_PROB
from ._common import (
    GAP_POINTS,
    POSITIVE_INT,
    PROBABILITY,
    RAW_DESIGN_HELP,
    add_output_flags,
    add_posterior,
    add_raw_model,
    add_seed,
    print_json,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="smallest subset size that detects an accuracy gap (with an interval)",
        description=__doc__,
    )
    add_posterior(p)
    add_raw_model(p, RAW_DESIGN_HELP)
    p.add_argument(
        "--delta", type=GAP_POINTS, default=2.0, help="accuracy gap in points (default 2)"
    )
    p.add_argument(
        "--prob", type=PROBABILITY, default=0.8, help="required P(correct) (default 0.8)"
    )
    p.add_argument(
        "--selector", default="random", help="random (default), bayes-ranking or any selector"
    )
    p.add_argument(
        "--ci-prob",
        type=PROBABILITY,
        default=DEFAULT_CI_PROB,
        help=f"interval probability (default {DEFAULT_CI_PROB:g})",
    )
    p.add_argument(
        "--max-draws", type=POSITIVE_INT, default=1000, help="posterior draws used (default 1000)"
    )
    add_seed(p)
    add_output_flags(p)
    p.set_defaults(func=run)


def _fmt(v: float) -> str:
    if v != v:  # NaN: a gap the population does not produce
        return "-"
    return "more than all" if v == float("inf") else f"{v:.0f}"


def _number(v: float) -> float | None:
    """JSON value of a size: ``None`` for not reached (inf) or not produced (NaN)."""
    return None if v != v or v == float("inf") else v


def run(args: argparse.Namespace) -> int:
    from ..design import plan, saved_population
    from ..posterior import read_posterior_file

    posterior, saved = read_posterior_file(args.posterior)
    population = None if args.raw_model else saved_population(saved, args.posterior)
    res = plan(
        posterior,
        args.delta,
        prob=args.prob,
        selector=args.selector,
        ci_prob=args.ci_prob,
        max_draws=args.max_draws,
        random_seed=args.seed,
        population=population,
    )
    ci = float(res.attrs["ci_prob"])
    rows = []
    for k, gap in enumerate(res["gap"].to_numpy()):
        lo, hi = res["n_required_interval"].to_numpy()[k]
        rows.append(
            {
                "gap": float(gap),
                "n_items": float(res["n_required"][k]),
                "n_items_lower": float(lo),
                "n_items_upper": float(hi),
                "reached": bool(res["reached"][k]),
                "producible": round(float(res["producible"][k]), 6),
            }
        )
    main = next(r for r in rows if r["gap"] == float(args.delta))
    if args.json:
        clean = [
            {k: (_number(v) if k.startswith("n_items") else v) for k, v in r.items()} for r in rows
        ]
        print_json(
            {
                "delta": float(args.delta),
                "prob": float(args.prob),
                "selector": args.selector,
                "ci_prob": ci,
                "n_benchmark_items": int(res.attrs["n_benchmark_items"]),
                "n_items": _number(main["n_items"]),
                "n_items_lower": _number(main["n_items_lower"]),
                "n_items_upper": _number(main["n_items_upper"]),
                "producible": main["producible"],
                "table": clean,
            }
        )
        return 0
    n_b = int(res.attrs["n_benchmark_items"])
    if main["producible"] == 0:
        print(
            f"{args.selector}: the population never produces a pair {args.delta:g} points "
            f"apart (under none of the posterior draws): no subset size applies; ask a "
            f"smaller --delta (benchmark has {n_b} items)"
        )
    else:
        print(
            f"{args.selector}: to rank a pair {args.delta:g} points apart correctly with "
            f"P >= {args.prob:g}: n = {_fmt(main['n_items'])} items "
            f"[{_fmt(main['n_items_lower'])}, {_fmt(main['n_items_upper'])}] ({ci:.0%} "
            f"interval; benchmark has {n_b})"
        )
    print("  gap (points)   n items   interval")
    for r in rows:
        if r["producible"] == 0:
            print(f"  {r['gap']:>12g}   not produced by the population")
            continue
        note = "" if r["producible"] == 1 else f"   (produced under {r['producible']:.0%} of draws)"
        print(
            f"  {r['gap']:>12g}   {_fmt(r['n_items']):>7}   "
            f"[{_fmt(r['n_items_lower'])}, {_fmt(r['n_items_upper'])}]{note}"
        )
    return 0

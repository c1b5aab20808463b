"""``bayes-microbench validate``: check the tool's intervals on llms the posterior never saw.

Holds out ``--held-out`` llms of a responses file, fits the posterior on the
others exactly as ``fit`` does with no flags (NUTS, then its calibration), and
reports on the held-out llms, per design and size: the coverage and width of
``score``'s intervals, the predicted against the realized MDAD, and the
calibration of the predicted P(correct ranking) in deciles. Each split refits,
so expect the ``fit`` time of the data per split.
"""

from __future__ import annotations

import argparse
import math

from .._defaults import DEFAULT_CI_PROB
from ._common import (
    POSITIVE_INT,
    PROBABILITY,
    add_dims,
    add_output_flags,
    add_responses,
    add_seed,
    check_dims,
    check_output_file,
    print_json,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="held-out check of score intervals, MDAD and P(correct ranking)",
        description=__doc__,
    )
    add_responses(p)
    p.add_argument(
        "--designs",
        default="random,bayes-fisher,bayes-ranking",
        help="comma-separated designs: random and/or selectors (default random,bayes-fisher,"
        "bayes-ranking)",
    )
    p.add_argument(
        "--sizes", default="25,50,100", help="comma-separated subset sizes (default 25,50,100)"
    )
    p.add_argument(
        "--held-out", type=POSITIVE_INT, default=60, help="llms held out per split (default 60)"
    )
    p.add_argument("--splits", type=POSITIVE_INT, default=1, help="held-out splits (default 1)")
    p.add_argument(
        "--model",
        default="2pl",
        choices=["1pl", "2pl", "3pl", "2pl-md"],
        help="IRT model fitted on the training llms (default 2pl)",
    )
    add_dims(p)
    p.add_argument(
        "--replicates",
        type=POSITIVE_INT,
        default=10,
        help="random subsets per size of the random design (default 10)",
    )
    p.add_argument(
        "--ci-prob",
        type=PROBABILITY,
        default=DEFAULT_CI_PROB,
        help=f"interval probability (default {DEFAULT_CI_PROB:g})",
    )
    p.add_argument("--output", metavar="PATH", default=None, help="write the tables as JSON")
    add_seed(p)
    add_output_flags(p)
    p.set_defaults(func=run)


def _fmt(value: float) -> str:
    return "not reached" if math.isinf(value) else f"{value:.1f}"


def run(args: argparse.Namespace) -> int:
    import json

    from .._validate import parse_int_list
    from ..io import load_responses, write_atomic
    from ..validate import validate

    check_dims(args)
    if args.output is not None:
        check_output_file(args.output)
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    sizes = parse_int_list(args.sizes, "--sizes")
    resp = load_responses(args.responses, args.items)
    result = validate(
        resp,
        designs=designs,
        sizes=sizes,
        held_out=args.held_out,
        splits=args.splits,
        n_replicates=args.replicates,
        model=args.model,
        n_dims=args.dims,
        ci_prob=args.ci_prob,
        random_seed=args.seed,
    )
    doc = result.to_json()
    if args.output is not None:
        write_atomic(args.output, lambda p: p.write_text(json.dumps(doc, indent=2) + "\n", "utf-8"))
    if args.json:
        print_json(doc)
        return 0
    if args.quiet:
        return 0
    ci = result.settings["ci_prob"]
    print(
        f"{resp.benchmark}: {args.held_out} llms held out x {args.splits} split(s); "
        f"{ci:.0%} score intervals ({result.scores['interval'].iloc[0]})"
    )
    print(
        "design              n  coverage  width  |error|  MDAD predicted [band]  study band"
        "   realized  (isotonic)  studies in band   (points)"
    )
    for s, m in zip(
        result.scores.itertuples(index=False), result.mdad.itertuples(index=False), strict=True
    ):
        print(
            f"{s.design:<18}{s.n:>3}  {s.coverage:>8.1%}  {s.width * 100:>5.1f}  "
            f"{s.abs_error * 100:>7.1f}  {_fmt(m.predicted):>6} [{_fmt(m.lower)}, "
            f"{_fmt(m.upper)}]  [{_fmt(m.study_lower)}, {_fmt(m.study_upper)}]  "
            f"{_fmt(m.realized):>9}  ({_fmt(m.realized_isotonic)})  "
            f"{m.studies_inside}/{len(m.realized_studies)}"
        )
    print("P(correct ranking): predicted vs realized share, per decile of the prediction")
    for r in result.ranking.itertuples(index=False):
        print(
            f"  [{r.bin_lower:.1f}, {r.bin_upper:.1f}): predicted {r.predicted:.3f}, "
            f"realized {r.realized:.3f} ({r.n_pairs} pairs)"
        )
    return 0

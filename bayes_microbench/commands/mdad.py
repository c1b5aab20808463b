"""``bayes-microbench mdad``: Bayesian MDAD of a micro-benchmark design, with credible intervals.

P(correct ranking | gap, design) for pairs of llms from the fitted population
whose full-benchmark accuracies differ by 0-30 points, and the smallest gap at
which it reaches the threshold (MDAD), per subset size. Designs: random
subsets (``--selector random``), any registered selector, or a fixed subset
(``--subset FILE``: one item id per line, or a CSV with an ``item`` column).

Writes DIR/mdad.csv (selector,n_items,mdad,mdad_lower,mdad_upper,ci_prob;
points; inf where the threshold is not reached within 30 points),
DIR/curves.csv (the mean curve and its band per size and gap) and
DIR/curves.nc (every draw's curve): all three or none (a failure keeps the
folder as it was), and a report drawn from earlier results is removed with them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .._defaults import DEFAULT_CI_PROB
from ._common import (
    POSITIVE_INT,
    PROBABILITY,
    RANKING_THRESHOLD,
    RAW_DESIGN_HELP,
    add_output_flags,
    add_posterior,
    add_raw_model,
    add_seed,
    check_output_folder,
    print_json,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mdad",
        help="Bayesian MDAD (with credible intervals) of a random, selected or fixed subset",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_posterior(p)
    add_raw_model(p, RAW_DESIGN_HELP)
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--selector", default=None, help="random (default) or any registered selector name"
    )
    group.add_argument("--subset", metavar="FILE", default=None, help="file of item ids")
    p.add_argument(
        "--sizes", default=None, help="comma-separated subset sizes (default 10,25,50,100,200)"
    )
    p.add_argument("--output", required=True, metavar="DIR", help="output folder")
    p.add_argument(
        "--threshold", type=RANKING_THRESHOLD, default=0.8, help="P(correct) for MDAD (0.8)"
    )
    p.add_argument(
        "--ci-prob",
        type=PROBABILITY,
        default=DEFAULT_CI_PROB,
        help=f"interval probability (default {DEFAULT_CI_PROB:g})",
    )
    p.add_argument(
        "--source",
        metavar="PATH",
        default=None,
        help="real source responses for a selector (default: a posterior-predictive population)",
    )
    p.add_argument(
        "--max-draws", type=POSITIVE_INT, default=1000, help="posterior draws used (default 1000)"
    )
    add_seed(p)
    add_output_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .._outputs import REPORT_FILES, output_set
    from .._validate import parse_int_list
    from ..design import DEFAULT_SIZES, curves_tables, design_curves, saved_population
    from ..exceptions import UserInputError
    from ..io import load_responses, read_subset
    from ..mdad import check_threshold
    from ..posterior import read_posterior_file

    check_output_folder(args.output)
    threshold = check_threshold(args.threshold, "--threshold")
    if args.subset is not None and args.sizes is not None:
        raise UserInputError("--sizes does not apply with --subset (the subset has its own size)")
    sizes = DEFAULT_SIZES if args.sizes is None else parse_int_list(args.sizes, "--sizes")
    posterior, saved = read_posterior_file(args.posterior)
    population = None if args.raw_model else saved_population(saved, args.posterior)
    source = load_responses(args.source) if args.source is not None else None
    subset = read_subset(args.subset) if args.subset is not None else None
    res = design_curves(
        posterior,
        sizes=None if subset is not None else sizes,
        subset=subset,
        selector=args.selector,
        threshold=threshold,
        ci_prob=args.ci_prob,
        max_draws=args.max_draws,
        source=source,
        random_seed=args.seed,
        population=population,
        progressbar=not args.quiet and not args.json,
    )
    table, curves = curves_tables(res)
    label = str(res.attrs["design"])
    ci = float(res.attrs["ci_prob"])
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise UserInputError(f"{out}: --output must be a folder")
    # a report drawn from the previous mdad.csv would contradict the new one
    with output_set(out, stale=REPORT_FILES) as files:
        files.write("mdad.csv", lambda t: table.to_csv(t, index=False))
        files.write("curves.csv", lambda t: curves.to_csv(t, index=False))
        files.write("curves.nc", lambda t: res.to_netcdf(t))
    if args.json:
        print_json({"output": str(out), "mdad": table.to_dict("records")})
        return 0
    if args.quiet:
        return 0
    thr = float(res.attrs["threshold"])
    print(f"Bayesian MDAD ({label}, P(correct) >= {thr:g}, {ci:.0%} intervals), points:")
    for row in table.itertuples():
        print(
            f"  n = {row.n_items:>5}: {row.mdad:5.1f}  [{row.mdad_lower:.1f}, {row.mdad_upper:.1f}]"
        )
    print(f"wrote {out / 'mdad.csv'}, {out / 'curves.csv'}, {out / 'curves.nc'}")
    return 0

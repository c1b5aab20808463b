"""``bayes-microbench evaluate``: the study's meta-evaluation grid with MDAD per cell.

Outputs in ``--output DIR``: ``mdad.csv`` (selector, n_items, n_source_llms,
split, mdad, mdad_lower, mdad_upper, reached; points 0-100), ``metrics.parquet``
(per cell: agreement, Kendall tau, estimation error, monotone MDAD variants),
``pairs/*.parquet`` (the per-pair table, one file per cell; read the folder
with ``pandas.read_parquet(DIR / "pairs")``), ``cells/*.json`` and
``config.json``. Rerunning the same command resumes: finished cells are not
recomputed. Each cell file records the settings it was computed with (data,
seed, runs, targets, threshold, selector); a rerun with other settings into the
same folder is an error, never a silent reuse. Sizes larger than the seen items
(half of each subtask) are an error.

The cells run on every CPU core by default (``--workers``), or on a Dask cluster
(``--scheduler ADDRESS``, needs ``pip install 'bayes-microbench[cluster]'``; see
docs/scale-out.md); the numbers are the same as a serial run's. This process
writes every file and locks the folder (``.evaluate.lock``) meanwhile; if it or
a worker is stopped, the finished cells stay and the same command resumes.
"""

from __future__ import annotations

import argparse
import sys

from ._common import (
    POSITIVE_INT,
    RANKING_THRESHOLD,
    add_output_flags,
    add_responses,
    add_seed,
    check_output_folder,
    print_json,
    whole_number,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="the study's selector evaluation grid (agreement, Kendall tau, MDAD)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_responses(p)
    p.add_argument(
        "--selectors",
        default="random",
        help="comma-separated selector names (default random)",
    )
    p.add_argument(
        "--sizes",
        default="10,25,50,100,250,500,1000",
        help="comma-separated subset sizes (default 10,25,50,100,250,500,1000)",
    )
    p.add_argument(
        "--source-llms",
        default="10,50,100,150,200,250,300",
        help="comma-separated source-llm counts (default 10,50,100,150,200,250,300)",
    )
    p.add_argument(
        "--target-llms",
        type=whole_number(2),
        default="50",
        help="target llms sampled per run (default 50)",
    )
    p.add_argument("--runs", type=POSITIVE_INT, default="50", help="runs per cell (default 50)")
    add_seed(p)
    p.add_argument("--output", metavar="DIR", required=True, help="output folder")
    p.add_argument(
        "--target-group",
        metavar="FILE:KEY",
        default=None,
        help="fixed targets: a JSON file of llm-name lists and the key of one list",
    )
    p.add_argument(
        "--threshold",
        type=RANKING_THRESHOLD,
        default="0.8",
        help="MDAD share-correct threshold (default 0.8)",
    )
    p.add_argument(
        "--no-analytic",
        action="store_true",
        help="do not add the exact random-analytic rows",
    )
    p.add_argument(
        "--workers",
        type=POSITIVE_INT,
        default=None,
        metavar="N",
        help="local worker processes (default: one per CPU core; 1 = serial)",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="compute on the dask.distributed cluster of this scheduler (e.g. "
        "tcp://host:8786) instead of local processes",
    )
    add_output_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .._validate import check_positive_int, parse_int_list
    from ..io import load_responses
    from ..mdad import check_threshold
    from ..protocol import GridConfig, evaluate_grid

    check_output_folder(args.output)
    selectors = tuple(s.strip() for s in args.selectors.split(",") if s.strip())
    sizes = tuple(parse_int_list(args.sizes, "--sizes"))
    sources = tuple(parse_int_list(args.source_llms, "--source-llms"))
    config = GridConfig(
        selectors=selectors,
        sizes=sizes,
        source_llms=sources,
        target_llms=check_positive_int(args.target_llms, "--target-llms", minimum=2),
        runs=check_positive_int(args.runs, "--runs"),
        seed=args.seed,
        threshold=check_threshold(args.threshold, "--threshold"),
        target_group=args.target_group,
        analytic=not args.no_analytic,
    )
    responses = load_responses(args.responses, args.items)
    show_bar = not args.quiet and sys.stderr.isatty()
    workers = None if args.workers is None else check_positive_int(args.workers, "--workers")
    report = evaluate_grid(
        responses,
        config,
        args.output,
        progress=show_bar,
        workers=workers,
        scheduler=args.scheduler,
    )
    assert report.mdad is not None
    if args.json:
        print_json(
            {
                "output": str(report.output),
                "computed_cells": len(report.computed),
                "reused_cells": len(report.reused),
                "seconds": round(report.seconds, 3),
                "analytic_skipped": report.skipped_analytic,
                "mdad": report.mdad.to_dict(orient="records"),
            }
        )
        return 0
    if not args.quiet:
        print(
            f"{len(report.computed)} cells computed, {len(report.reused)} reused, "
            f"in {report.seconds:.1f} s -> {report.output}"
        )
        seen = report.mdad[report.mdad["split"] == "seen"]
        print(seen.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    return 0

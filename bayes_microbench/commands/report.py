"""``bayes-microbench report DIR``: an ``evaluate`` or ``mdad`` output folder as a report."""

from __future__ import annotations

import argparse

from ._common import add_output_flags


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report", help="turn an evaluate/mdad output folder into a report", description=__doc__
    )
    p.add_argument("folder", metavar="DIR", help="the --output folder of 'evaluate' or 'mdad'")
    p.add_argument(
        "--format", choices=["md", "html"], default="md", help="report format (default md)"
    )
    add_output_flags(p, json_flag=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..report import write_report

    path = write_report(args.folder, args.format)
    if not args.quiet:
        print(f"wrote {path}")
    return 0

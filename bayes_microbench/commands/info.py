"""``bayes-microbench info PATH``: summary of a responses file."""

from __future__ import annotations

import argparse

from ._common import add_output_flags, add_responses, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="summarize a responses file", description=__doc__)
    add_responses(p, positional=True)
    add_output_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..io import load_responses

    resp = load_responses(args.responses, args.items)
    summary = resp.summary()
    if args.json:
        print_json(summary)
        return 0
    print(f"{args.responses}")
    print(f"  llms x items : {summary['n_llms']} x {summary['n_items']}")
    print(f"  subtasks     : {summary['n_subtasks']}")
    print(f"  missing cells: {summary['n_missing']} of {summary['n_cells']}")
    print(
        f"  accuracy     : mean {summary['mean_accuracy']:.3f} "
        f"(min {summary['min_accuracy']:.3f}, max {summary['max_accuracy']:.3f})"
    )
    print(f"  confidences  : {'yes' if summary['has_confidence'] else 'no'}")
    if summary["n_subtasks"] > 1:
        width = max(len(s) for s in summary["subtasks"])
        for name, count in summary["subtasks"].items():
            print(f"    {name:<{width}}  {count} items")
    return 0

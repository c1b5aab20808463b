"""``bayes-microbench demo``: the package end to end on an embedded default, no download."""

from __future__ import annotations

import argparse

from ._common import add_output_flags, add_seed, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the pipeline on a simulated GPQA-like benchmark", description=__doc__
    )
    add_seed(p)
    p.add_argument(
        "--preset",
        default="gpqa",
        help="simulation preset: gpqa, mmlu-pro, metabench (default gpqa)",
    )
    p.add_argument(
        "--llms", type=int, default=None, help="number of simulated llms (default: the preset's)"
    )
    p.add_argument(
        "--items", dest="n_items", type=int, default=None, help="number of simulated items"
    )
    add_output_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..simulate import simulate_responses

    overrides = {}
    if args.llms is not None:
        overrides["n_llms"] = args.llms
    if args.n_items is not None:
        overrides["n_items"] = args.n_items
    resp, truth = simulate_responses(
        args.preset, random_seed=args.seed, return_truth=True, **overrides
    )
    summary = resp.summary()
    summary["true_accuracy_sd"] = round(float(truth.expected_accuracy.std()), 6)
    if args.json:
        print_json(summary)
        return 0
    print(f"Simulated benchmark ({args.preset}, seed {args.seed}): {resp}")
    print(
        f"  true expected accuracy: mean {truth.expected_accuracy.mean():.3f}, sd {truth.expected_accuracy.std():.3f}"
    )
    for name, count in summary["subtasks"].items():
        print(f"  {name}: {count} items")
    return 0

"""``bayes-microbench select``: choose a micro-benchmark and write its item ids.

With ``--responses`` the selector learns from every llm in the file (the
source llms) on every item; with ``--posterior`` the Bayesian selectors work
from a saved IRT posterior instead, on llms simulated from it with the misfit of
the llms it was fitted on (its calibration), so that there too a size goes to a
random subset where that ranks close pairs better (``random`` needs nothing else).
The output JSON lists the chosen item ids with their estimator weights, and,
for item ids of the form ``task:doc_id``, the ``lm_eval_samples`` mapping that
lm-evaluation-harness takes as ``--samples`` (see the README).
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from typing import Any

import numpy as np

from .._validate import check_int_range, plural
from ..exceptions import UserInputError
from ._common import (
    POSITIVE_INT,
    add_output_flags,
    add_posterior,
    add_seed,
    check_output_file,
    print_json,
)

_TASK_DOC = re.compile(r"^(?P<task>.+):(?P<doc>\d+)$")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("select", help="choose a micro-benchmark subset", description=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--responses", metavar="PATH", help="responses of the source llms")
    add_posterior(src, required=False)
    p.add_argument(
        "--items", metavar="PATH", default=None, help="items file for a wide --responses CSV"
    )
    p.add_argument("--selector", default="random", help="selection method (default random)")
    p.add_argument("--n", type=POSITIVE_INT, required=True, help="number of items to choose")
    p.add_argument("--output", metavar="FILE", required=True, help="where to write the subset JSON")
    add_seed(p)
    add_output_flags(p)
    p.set_defaults(func=run)


def lm_eval_samples(item_ids: list[str]) -> dict[str, list[int]] | None:
    """``{"task": [doc_id, ...]}`` when every id is ``task:doc_id``; else ``None``."""
    groups: dict[str, list[int]] = defaultdict(list)
    for item in item_ids:
        m = _TASK_DOC.match(item)
        if m is None:
            return None
        groups[m["task"]].append(int(m["doc"]))
    return {task: sorted(docs) for task, docs in groups.items()}


def subset_document(
    *,
    selector: str,
    seed: int,
    source: str,
    item_ids: list[str],
    subtasks: list[str],
    weights: np.ndarray,
    info: dict[str, Any],
) -> dict[str, Any]:
    """The JSON document ``select`` writes (also read by ``mdad --subset``)."""
    doc: dict[str, Any] = {
        "selector": selector,
        "n_items": len(item_ids),
        "seed": seed,
        "source": source,
        "item_ids": item_ids,
        "items": [
            {"item": i, "subtask": s, "weight": float(w)}
            for i, s, w in zip(item_ids, subtasks, weights, strict=True)
        ],
    }
    samples = lm_eval_samples(item_ids)
    if samples is not None:
        doc["lm_eval_samples"] = samples
    if info:
        doc["info"] = {k: v for k, v in info.items() if isinstance(v, str | int | float | bool)}
    return doc


def run(args: argparse.Namespace) -> int:
    from ..io import load_responses
    from ..selectors import get_selector

    check_output_file(args.output, suggest="subset.json")
    if args.posterior is not None:
        return _run_from_posterior(args)
    if args.items is not None and args.responses is None:
        raise UserInputError("--items goes with --responses")
    resp = load_responses(args.responses, args.items)
    _check_n(args.n, resp.n_items, f"--responses {args.responses}")
    selector = get_selector(args.selector)
    rng = np.random.default_rng(args.seed)
    prepared = selector.prepare(resp.values, resp.subtask_codes, resp.confidence, rng)
    selection = prepared.select(args.n, rng)
    ids = [str(i) for i in resp.items[selection.items]]
    subtasks = [str(s) for s in resp.item_subtask[selection.items]]
    return _emit(args, str(args.responses), ids, subtasks, selection.weights, selection.info)


def _check_n(n: int, n_items: int, source: str) -> None:
    """``--n`` against the items the source offers, in the words of the command line."""
    check_int_range(
        n,
        "--n",
        1,
        n_items,
        noun="item",
        context=f"{source} has {plural(n_items, 'item')}",
        remedy="choose a source with items",
    )


def _run_from_posterior(args: argparse.Namespace) -> int:
    from ..design import saved_population, select_from_posterior
    from ..posterior import read_posterior_file

    posterior, saved = read_posterior_file(args.posterior)
    _check_n(args.n, int(posterior.sizes["item"]), f"--posterior {args.posterior}")
    ids, subtasks, weights, info = select_from_posterior(
        posterior,
        args.selector,
        args.n,
        random_seed=args.seed,
        population=saved_population(saved, args.posterior),
    )
    return _emit(args, str(args.posterior), ids, subtasks, weights, info)


def _emit(
    args: argparse.Namespace,
    source: str,
    item_ids: list[str],
    subtasks: list[str],
    weights: np.ndarray,
    info: dict[str, Any],
) -> int:
    """Write the subset document atomically to ``--output`` and report it."""
    import json

    from ..io import write_atomic

    doc = subset_document(
        selector=args.selector,
        seed=args.seed,
        source=source,
        item_ids=item_ids,
        subtasks=subtasks,
        weights=weights,
        info=info,
    )
    text = json.dumps(doc, indent=2) + "\n"
    write_atomic(args.output, lambda tmp: tmp.write_text(text))
    if args.json:
        print_json(doc)
    elif not args.quiet:
        print(f"wrote {doc['n_items']} items chosen by {doc['selector']} to {args.output}")
        if isinstance(info.get("note"), str):
            print(f"note: {info['note']}")
    return 0

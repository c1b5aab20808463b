"""``bayes-microbench import FORMAT PATH... --output NAME.csv``: harness logs to a responses file.

FORMAT is lm-eval (lm-evaluation-harness --log_samples output), oll-details
(Open LLM Leaderboard details: Parquet files, or downloaded
<org>__<model>/samples_leaderboard_*.jsonl / .json), inspect (inspect-ai .json/.eval
logs, zstd-compressed or not) or auto. Writes NAME.csv (wide: llm, then one column per item),
NAME.items.csv (item,subtask[,n_options]) and, when the logs hold per-option
log-likelihoods, NAME.confidence.csv; all or nothing.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ._common import FINITE_NUMBER, NON_NEGATIVE_INT, add_output_flags, print_json

logger = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="convert harness logs (lm-eval, Open LLM Leaderboard details, inspect) to a responses CSV",
        description=(__doc__ or "").split("\n", 2)[-1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("format", metavar="FORMAT", help="lm-eval, oll-details, inspect or auto")
    p.add_argument(
        "paths", metavar="PATH", nargs="+", help="log files or folders (searched recursively)"
    )
    p.add_argument(
        "--output",
        "-o",
        metavar="NAME.csv",
        required=True,
        help="output responses file (.csv: wide matrix plus companions; .parquet: long table)",
    )
    p.add_argument(
        "--metric",
        metavar="NAME[,NAME...]",
        default=None,
        help="the per-item metric (lm-eval, oll-details) or scorer (inspect) that becomes "
        "correct; with a list each task uses the first it logs. Default: the first of acc, "
        "acc_norm, exact_match, prompt_level_strict_acc (lm-eval, oll-details); the only "
        "scorer (inspect; SCORER.KEY picks a value of a scorer that gives a dict)",
    )
    p.add_argument(
        "--threshold",
        metavar="T",
        type=FINITE_NUMBER,
        default=None,
        help="count a continuous metric's values >= T as correct (needed for metrics other "
        "than 0/1; T must lie within the values logged; ignored, with a note, for 0/1 metrics)",
    )
    p.add_argument(
        "--filter",
        dest="lm_filter",
        metavar="NAME",
        default=None,
        help="lm-eval filter for tasks logged under several (default 'none' when present)",
    )
    p.add_argument(
        "--item-key",
        choices=("doc_id", "doc_hash"),
        default="doc_id",
        help="lm-eval, oll-details item ids: task:doc_id (default) or task:doc_hash",
    )
    p.add_argument(
        "--epoch",
        metavar="N",
        type=NON_NEGATIVE_INT,
        default=None,
        help="inspect: the epoch to import, for logs run over several",
    )
    add_output_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..exceptions import ResponsesError
    from ..importers import read_harness
    from ..io import companion, save_responses
    from ..responses import Responses

    output = Path(args.output)
    if output.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise ResponsesError(f"--output {output}: must end in .csv (wide) or .parquet (long)")
    if output.exists() and output.is_dir():
        raise ResponsesError(f"--output {output}: is a folder; give a file name such as NAME.csv")
    frame = read_harness(
        args.format,
        args.paths,
        metric=args.metric,
        threshold=args.threshold,
        lm_filter=args.lm_filter,
        item_key=args.item_key,
        epoch=args.epoch,
    )
    resp = Responses.from_long(
        frame.drop(columns="source"),
        benchmark=output.stem,
        where=f"{frame.attrs['format']} import",
    )
    written = save_responses(resp, output)
    stale = companion(output, "confidence")
    if output.suffix.lower() == ".csv" and resp.confidence is None and stale.exists():
        stale.unlink()
        logger.info("removed %s left by an earlier import (these logs hold no confidences)", stale)
    summary = resp.summary()
    summary.update(
        format=frame.attrs["format"],
        n_files=frame.attrs["n_files"],
        written=[str(p) for p in written],
    )
    if args.json:
        print_json(summary)
        return 0
    extra = ", ".join(p.name for p in written[1:])
    print(
        f"wrote {written[0]}{f' (+ {extra})' if extra else ''}: {resp.n_llms} llms x "
        f"{resp.n_items} items, {resp.n_subtasks} subtask(s), {resp.n_missing} missing, "
        f"mean accuracy {resp.mean_accuracy:.3f}, from {summary['n_files']} "
        f"{summary['format']} file(s)"
    )
    return 0

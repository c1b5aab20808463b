"""``bayes-microbench adapt``: the next items to ask an llm, or stop, from its answers so far.

A stateless step between harness runs: from the answers so far
(``--responses SO_FAR.csv``, and/or a state ``--state`` written by an earlier
step) and a saved posterior, write to ``--output`` either the next batch of
item ids (with the ``lm_eval_samples`` mapping ``select`` writes, for
lm-evaluation-harness's ``--samples``) or ``stop`` with the full-benchmark
accuracy and its interval (calibrated when the posterior carries its
calibration). The output is itself a state that ``--state`` resumes.

Goals: ``--goal accuracy --width W`` stops when the interval at ``--prob`` is
at most W points wide; ``--goal rank --reference FILE [--reference-llm NAME]``
stops when P(accuracy above the reference's) passes ``--prob`` or ``1 - prob``.
Both stop at ``--budget`` items and never before ``--minimum``.

``--replay FULL.csv [--llm NAME]`` simulates the loop for every llm of a
complete responses file (or one), answering from it, and writes each
trajectory to ``--output``.

Any posterior ``score`` accepts, a ``2pl-md`` one included (its ability is
``D``-dim; ``--rule fisher`` is then the ``D``-dim c-optimal rule).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .._defaults import DEFAULT_CI_PROB, DEFAULT_RANK_PROB
from ..exceptions import UserInputError
from ._common import (
    GAP_POINTS,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    PROBABILITY,
    add_output_flags,
    add_posterior,
    add_seed,
    check_output_file,
    print_json,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "adapt",
        help="adaptive evaluation: the next items to ask, or stop with the estimate",
        description=__doc__,
    )
    add_posterior(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--responses", metavar="PATH", help="the llm's answers so far (omit: start from the prior)"
    )
    src.add_argument(
        "--replay", metavar="PATH", help="complete responses: simulate the loop for its llms"
    )
    p.add_argument("--items", metavar="PATH", default=None, help="items file for a wide CSV")
    p.add_argument("--state", metavar="PATH", default=None, help="a state an earlier step wrote")
    p.add_argument("--llm", default=None, help="the llm of the responses file (default: all/one)")
    p.add_argument("--goal", choices=("accuracy", "rank"), default="accuracy")
    p.add_argument(
        "--width", type=GAP_POINTS, default=2.0, help="accuracy goal: interval width, points"
    )
    p.add_argument(
        "--prob",
        type=PROBABILITY,
        default=None,
        help=f"accuracy goal: interval probability (default {DEFAULT_CI_PROB:g}); "
        f"rank goal: certainty to stop (default {DEFAULT_RANK_PROB:g})",
    )
    p.add_argument("--batch", type=POSITIVE_INT, default=1, help="items per step (default 1)")
    p.add_argument("--budget", type=POSITIVE_INT, default=200, help="most items (default 200)")
    p.add_argument("--minimum", type=NON_NEGATIVE_INT, default=5, help="fewest items (default 5)")
    p.add_argument(
        "--rule",
        choices=("goal", "fisher", "random"),
        default=None,
        help="how the next items are chosen (default: goal for --goal accuracy, fisher for "
        "--goal rank, whose goal rule stops over-confident on held-out llms)",
    )
    p.add_argument("--reference", metavar="PATH", default=None, help="rank goal: responses/state")
    p.add_argument("--reference-llm", default=None, help="rank goal: the reference's row")
    p.add_argument("--max-draws", type=POSITIVE_INT, default=400, help="posterior draws used")
    p.add_argument("--output", metavar="FILE", required=True, help="where to write the JSON")
    add_seed(p)
    add_output_flags(p)
    p.set_defaults(func=run)


def _rows(path: str, items: str | None, flag: str) -> dict[str, dict[str, int]]:
    """Each llm's answers in a responses file: ``{llm: {item: 0/1}}``."""
    import numpy as np

    from ..io import load_responses

    try:
        resp = load_responses(path, items, on_empty="subset")
    except UserInputError as err:
        raise type(err)(f"{flag} {path}: {err}") from None
    out: dict[str, dict[str, int]] = {}
    for k, llm in enumerate(resp.llms):
        row = resp.values[k]
        out[str(llm)] = {
            str(i): int(v) for i, v in zip(resp.items, row, strict=True) if not np.isnan(v)
        }
    return out


def _pick(rows: dict[str, dict[str, int]], name: str | None, flag: str, path: str) -> str:
    if name is None:
        if len(rows) != 1:
            raise UserInputError(
                f"{flag} {path}: has {len(rows)} llms; name one with "
                f"{'--reference-llm' if flag == '--reference' else '--llm'}"
            )
        return next(iter(rows))
    if name not in rows:
        raise UserInputError(
            f"{flag} {path}: no llm {name!r} (it has {len(rows)}: "
            f"{', '.join(list(rows)[:3])}{'...' if len(rows) > 3 else ''}); give a row it holds"
        )
    return name


def _known(answers: dict[str, int], index: set[str], flag: str, path: str) -> None:
    unknown = [i for i in answers if i not in index]
    if answers and len(unknown) == len(answers):
        raise UserInputError(
            f"{flag} {path}: the llm answered none of the posterior's items (e.g. "
            f"{unknown[0]!r}); to start from the prior omit --responses, else give answers "
            "on the posterior's item ids"
        )
    if unknown:
        raise UserInputError(
            f"{flag} {path}: {len(unknown)} item id(s) not in the posterior, e.g. "
            f"{unknown[0]!r}; answer only items the posterior was fitted on"
        )


def run(args: argparse.Namespace) -> int:
    from ..adaptive import AdaptiveState, Reference, Settings, run_replay, summaries
    from ..io import write_atomic
    from ..posterior import read_posterior_file
    from .select import lm_eval_samples

    check_output_file(args.output, suggest="next.json")
    if args.minimum > args.budget:
        raise UserInputError(f"--minimum {args.minimum} exceeds --budget {args.budget}")
    if args.goal == "rank":
        if args.reference is None:
            raise UserInputError("--goal rank needs --reference FILE (responses or a state)")
        if args.prob is not None and args.prob <= 0.5:
            raise UserInputError(f"--prob {args.prob:g}: the rank goal needs a value above 0.5")
    elif args.reference is not None:
        raise UserInputError("--reference goes with --goal rank")
    if args.replay is not None and args.state is not None:
        raise UserInputError("--state resumes one run; it does not go with --replay")
    posterior, misfit = read_posterior_file(args.posterior)
    default = DEFAULT_RANK_PROB if args.goal == "rank" else DEFAULT_CI_PROB
    prob = args.prob if args.prob is not None else default
    settings = Settings(
        goal=args.goal,
        width=args.width / 100,
        prob=prob,
        budget=args.budget,
        minimum=args.minimum,
        rule=args.rule,
        seed=args.seed,
    )
    index = {str(i) for i in posterior["item"].to_numpy()}
    reference = None
    if args.reference is not None:
        if args.reference.endswith(".json"):
            ref_state = AdaptiveState.from_json(
                args.reference, posterior, misfit
            )  # fingerprint-checked
            reference = Reference(ref_state.llm, dict(ref_state.answers))
        else:
            rows = _rows(args.reference, None, "--reference")
            name = _pick(rows, args.reference_llm, "--reference", args.reference)
            _known(rows[name], index, "--reference", args.reference)
            reference = Reference(name, rows[name])

    def make(available: list[str] | None, llm: str) -> AdaptiveState:
        return AdaptiveState(
            posterior,
            settings=settings,
            misfit=misfit,
            reference=reference,
            available=available,
            max_draws=args.max_draws,
            llm=llm,
        )

    if args.replay is not None:
        rows = _rows(args.replay, args.items, "--replay")
        names = [_pick(rows, args.llm, "--replay", args.replay)] if args.llm else list(rows)
        if reference is not None:
            names = [n for n in names if n != reference.name]
        runs = []
        for name in names:
            _known(rows[name], index, "--replay", args.replay)
            final, traj = run_replay(lambda av, n=name: make(av, n), rows[name], args.batch)
            runs.append(
                {
                    **final,
                    "items": [i for step in traj for i in step["asked"]],
                    "trajectory": [
                        {
                            k: step[k]
                            for k in (
                                "items_used",
                                "accuracy_mean",
                                "accuracy_lower",
                                "accuracy_upper",
                            )
                        }
                        for step in traj
                    ],
                }
            )
        doc: dict[str, Any] = {
            "posterior": str(args.posterior),
            "replay": str(args.replay),
            "settings": vars(settings),
            "llms": runs,
        }
        text = json.dumps(doc, indent=2) + "\n"
        write_atomic(args.output, lambda tmp: tmp.write_text(text))
        if args.json:
            print_json({"llms": summaries(runs)})
        elif not args.quiet:
            for r in summaries(runs):
                print(
                    f"{r['llm']}: {r['items_used']} items, accuracy {r['accuracy_mean']:.3f} "
                    f"[{r['accuracy_lower']:.3f}, {r['accuracy_upper']:.3f}] ({r['stopped']})"
                )
        return 0

    if args.state is not None:
        st = AdaptiveState.from_json(args.state, posterior, misfit)
    else:
        st = make(None, args.llm or "llm")
    if args.responses is not None:
        rows = _rows(args.responses, args.items, "--responses")
        name = _pick(rows, args.llm, "--responses", args.responses)
        _known(rows[name], index, "--responses", args.responses)
        st.llm = name
        try:
            st.record(rows[name])
        except UserInputError as err:
            raise type(err)(f"--responses {args.responses}: {err}") from None
    nxt = st.next_items(args.batch)
    summary = st.state()
    doc = st.to_dict()
    if nxt:
        doc["action"] = "next"
        doc["items"] = nxt
        samples = lm_eval_samples(nxt)
        if samples is not None:
            doc["lm_eval_samples"] = samples
    else:
        doc["action"] = "stop"
        doc.update({k: summary[k] for k in summary})
    text = json.dumps(doc, indent=2) + "\n"
    write_atomic(args.output, lambda tmp: tmp.write_text(text))
    if args.json:
        print_json(
            {k: doc[k] for k in ("action", "items", "lm_eval_samples") if k in doc}
            | {"state": summary}
        )
    elif not args.quiet:
        acc = f"{summary['accuracy_mean']:.3f} [{summary['accuracy_lower']:.3f}, "
        acc += f"{summary['accuracy_upper']:.3f}] ({summary['interval_kind']})"
        if nxt:
            print(f"ask {len(nxt)} item(s) next: {', '.join(nxt[:10])}; accuracy so far {acc}")
        else:
            print(f"stop ({summary['stopped']}) after {summary['items_used']} items: {acc}")
    return 0

"""Flags, argument types and output helpers shared by the sub-commands.

The argument types (:func:`whole_number`, :func:`number`, :data:`SEED`, ...)
check a flag's value when the command line is parsed, so that a bad value
stops the command before it reads, computes or writes anything, with one
line naming the flag, the value and what it accepts.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any

from .._defaults import MAX_SEED
from .._validate import check_output_path

#: The largest count a flag accepts (draws, chains, sizes, runs ...): int32, which
#: every array library indexes without overflow.
MAX_COUNT = 2**31 - 1


def whole_number(minimum: int, maximum: int = MAX_COUNT) -> Callable[[str], int]:
    """An argparse ``type=``: a whole number in ``[minimum, maximum]``.

    Why: ``type=int`` lets ``--draws -5`` or ``--seed -1`` through to the
    library, which fails later with an internal error (or after writing files).
    """

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            value = None
        if value is None or not minimum <= value <= maximum:
            big = value is not None and value > maximum
            top = f" and at most {maximum}" if big or maximum != MAX_COUNT else ""
            raise argparse.ArgumentTypeError(
                f"expected a whole number of at least {minimum}{top}, got {text!r}"
            )
        return value

    parse.__name__ = "whole number"
    return parse


def number(
    low: float = -math.inf,
    high: float = math.inf,
    *,
    open_low: bool = True,
    open_high: bool = True,
) -> Callable[[str], float]:
    """An argparse ``type=``: a finite number between ``low`` and ``high``.

    The bounds are excluded unless ``open_low`` / ``open_high`` is False; NaN
    and infinities are refused. Why: ``type=float`` accepts ``nan`` and
    ``inf``, which then pass every ``<`` check downstream.
    """

    def describe() -> str:
        parts = []
        if low > -math.inf:
            parts.append(f"above {low:g}" if open_low else f"at least {low:g}")
        if high < math.inf:
            parts.append(f"below {high:g}" if open_high else f"at most {high:g}")
        return "a finite number" + (" " + " and ".join(parts) if parts else "")

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            value = math.nan
        ok = (
            math.isfinite(value)
            and (value > low if open_low else value >= low)
            and (value < high if open_high else value <= high)
        )
        if not ok:
            raise argparse.ArgumentTypeError(f"expected {describe()}, got {text!r}")
        return value

    parse.__name__ = "number"
    return parse


#: ``--seed``: 0 to 2**32 - 1.
SEED = whole_number(0, MAX_SEED)
#: Counts that may be zero (``--tune``).
NON_NEGATIVE_INT = whole_number(0)
#: Counts of at least one (``--draws``, ``--chains``, ``--n``, ``--max-draws`` ...).
POSITIVE_INT = whole_number(1)
#: Probabilities strictly inside (0, 1) (``--threshold``, ``--prob``, ``--ci-prob``).
PROBABILITY = number(0.0, 1.0)
#: The ranking-probability threshold of an MDAD, strictly in (0.5, 1) (``--threshold``,
#: ``plan --prob``): the argparse twin of :func:`bayes_microbench.mdad.check_threshold`,
#: which the library applies to the same bounds.
RANKING_THRESHOLD = number(0.5, 1.0)
#: Any finite number (``import --threshold``: metric values of any scale).
FINITE_NUMBER = number()
#: An accuracy gap in points, in (0, 100] (``plan --delta``).
GAP_POINTS = number(0.0, 100.0, open_high=False)


def check_output_file(path: str, flag: str = "--output", *, suggest: str | None = None) -> None:
    """Fail now, with one line naming ``flag``, if the output file ``path`` cannot be written."""
    check_output_path(path, flag, folder=False, suggest=suggest)


def check_output_folder(path: str, flag: str = "--output") -> None:
    """Fail now, with one line naming ``flag``, if the output folder ``path`` cannot be written."""
    check_output_path(path, flag, folder=True)


def add_responses(
    parser: argparse.ArgumentParser, *, required: bool = True, positional: bool = False
) -> None:
    """``--responses PATH`` (or a positional PATH) and ``--items PATH``."""
    if positional:
        parser.add_argument(
            "responses", metavar="PATH", help="responses file (wide CSV, long CSV or Parquet)"
        )
    else:
        parser.add_argument(
            "--responses",
            metavar="PATH",
            required=required,
            help="responses file (wide CSV, long CSV or Parquet)",
        )
    parser.add_argument(
        "--items",
        metavar="PATH",
        default=None,
        help="items file item,subtask[,n_options] (default: NAME.items.csv beside NAME.csv)",
    )


def posterior_arg(text: str) -> str:
    """An argparse ``type=`` for ``--posterior``: a path, or a shipped model's name.

    ``gpqa`` (a benchmark: its default model) or ``gpqa-2pl-md`` (a file in the
    models folder) become that file's path; a path is kept as given (its loader
    says what is wrong with it). Why at parse time: an unknown name stops the
    command before it reads anything, with one line listing the known names.
    """
    from ..exceptions import UserInputError
    from ..shipped import resolve_posterior

    try:
        return resolve_posterior(text.strip())
    except UserInputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


posterior_arg.__name__ = "posterior"


def add_posterior(parser: Any, *, required: bool = True, help: str | None = None) -> None:
    """``--posterior PATH|NAME`` on a parser or an argument group (see :func:`posterior_arg`)."""
    parser.add_argument(
        "--posterior",
        required=required,
        type=posterior_arg,
        metavar="PATH|NAME",
        help=help
        or "saved posterior (.nc), or a shipped model's name (gpqa, gpqa-2pl-md, ...: "
        "'bayes-microbench models' lists them)",
    )


def add_raw_model(parser: argparse.ArgumentParser, help: str) -> None:
    """``--raw-model``: answer with the model as is, without what the posterior's calibration saved."""
    parser.add_argument("--raw-model", action="store_true", help=help)


#: ``--raw-model`` of the design commands (``mdad``, ``plan``).
RAW_DESIGN_HELP = (
    "the prior population and the model as is, without the fitted llms' population "
    "and misfit saved with the posterior"
)


def add_dims(parser: argparse.ArgumentParser) -> None:
    """``--dims D``: the ability dimensions of ``--model 2pl-md`` (checked by :func:`check_dims`)."""
    parser.add_argument(
        "--dims",
        type=POSITIVE_INT,
        default=None,
        metavar="D",
        help="2pl-md only: number of ability dimensions (default 2)",
    )


def check_dims(args: argparse.Namespace) -> None:
    """Refuse ``--dims`` with a ``--model`` other than ``2pl-md`` (one line, exit 2)."""
    if args.dims is not None and args.model != "2pl-md":
        from ..exceptions import UserInputError

        raise UserInputError(
            f"--dims applies only to --model 2pl-md (got --model {args.model}); drop --dims"
        )


def add_output_flags(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    """``--json`` (unless ``json_flag`` is False) and ``--quiet``."""
    if json_flag:
        parser.add_argument(
            "--json", action="store_true", help="print the result as JSON on stdout"
        )
    parser.add_argument("--quiet", action="store_true", help="no progress or information messages")


def add_seed(parser: argparse.ArgumentParser, default: int = 0) -> None:
    """``--seed N``: a whole number from 0 to 2**32 - 1, checked when the line is parsed."""
    parser.add_argument(
        "--seed", type=SEED, default=default, help=f"random seed 0-{MAX_SEED} (default {default})"
    )


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=_json_default)
    sys.stdout.write("\n")


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return None if np.isnan(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def print_model_choice(choice: dict[str, object]) -> None:
    """The candidates' PSIS-LOO ranking and the choice (``fit --model auto``, ``check --responses``)."""
    print("candidate      elpd_loo      se  elpd_diff     dse  converged  wall s")
    for r in choice["rows"]:  # type: ignore[attr-defined]
        print(
            f"{r['candidate']:<12} {r['elpd_loo']:>10.1f} {r['se']:>7.1f} {r['elpd_diff']:>10.1f} "
            f"{r['dse']:>7.1f}  {'yes' if r['converged'] else 'NO':<9} {r['wall_seconds']:>7.1f}"
        )
    print(f"chosen: {choice['chosen']} ({choice['why']})")

"""Flags and output helpers shared by the sub-commands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


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


def add_output_flags(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    if json_flag:
        parser.add_argument(
            "--json", action="store_true", help="print the result as JSON on stdout"
        )
    parser.add_argument("--quiet", action="store_true", help="no progress or information messages")


def add_seed(parser: argparse.ArgumentParser, default: int = 0) -> None:
    parser.add_argument(
        "--seed", type=int, default=default, help=f"random seed (default {default})"
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

"""``bayes-microbench models``: the shipped posteriors that ``--posterior NAME`` accepts.

One row per file in the models folder (``$BAYES_MICROBENCH_MODELS``, else
``models/`` beside the package in a checkout or an editable install): its
name and the benchmark key that resolves to it, the model, llms x items it was
fitted on, saved draws, whether it carries its calibration and whether its fit
converged, and its size. An unconverged model is listed as such (every command
that reads it warns too).
"""

from __future__ import annotations

import argparse

from ._common import add_output_flags, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "models",
        help="list the shipped posteriors (--posterior NAME)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_output_flags(p)
    p.set_defaults(func=run)


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "NO")


def run(args: argparse.Namespace) -> int:
    from ..exceptions import UserInputError
    from ..shipped import MODELS_ENV, model_info, models_dir, shipped_files

    folder = models_dir()
    files = shipped_files(folder)
    if not files:
        where = (
            f"{folder} holds no .nc file"
            if folder is not None
            else "no models folder beside the package (an install from a wheel carries none)"
        )
        raise UserInputError(
            f"no shipped models: {where}; set {MODELS_ENV} to a checkout's models/ folder"
        )
    rows = [model_info(p) for p in files.values()]
    if args.json:
        print_json({"folder": str(folder), "models": rows})
        return 0
    if args.quiet:
        return 0
    header = (
        "name",
        "alias",
        "benchmark",
        "model",
        "llms x items",
        "draws",
        "calibrated",
        "converged",
        "MB",
    )
    table = [
        (
            r["name"],
            ",".join(r["aliases"]) or "-",
            r["benchmark"],
            r["model"],
            f"{r['n_llms'] if r['n_llms'] is not None else '?'} x {r['n_items']}",
            str(r["draws"]),
            _yes_no(r["calibrated"]),
            _yes_no(r["converged"]),
            f"{r['file_bytes'] / 1e6:.1f}",
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(t[k]) for t in table)) for k, h in enumerate(header)]
    print(f"shipped models in {folder} (--posterior NAME or ALIAS):")
    for line in (header, *table):
        print("  " + "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    bad = [r["name"] for r in rows if r["converged"] is False]
    if bad:
        print(
            f"unconverged (shipped marked, with a warning when read; see each model card): "
            f"{', '.join(bad)}"
        )
    return 0

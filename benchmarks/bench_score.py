"""What `score`'s calibration costs: a shared subset calibrated on itself vs the random-subset path.

``score`` calibrates a subset that every scored llm answered on itself, from the
fitted llms the posterior's calibration carries (``Misfit.for_subset``,
docs/decisions/0053); llms on subsets of their own keep the random-subset
calibration, widened for their subset. This script times both on GPQA with the
shipped posteriors (``models/gpqa-2pl.nc``, ``models/gpqa-2pl-md.nc``), whose
calibrations carry no llms: the carried llms are added here from the shared
matrix (``carried_training``), as ``fit`` adds them to a posterior a user fits.

For each posterior and subset size, ``--llms`` llms of the matrix are scored:

* ``shared, not carried``: all on one random subset, with the shipped calibration
  (the random-subset path with its widening, as ``score --posterior gpqa`` runs: the
  reference);
* ``shared, carried``: the same subset, the calibration carrying the fitted llms
  (the subset calibrated on itself);
* ``own subsets``: each llm on a random subset of its own (the random-subset path
  again, over the union of the llms' items).

Timings are the median wall seconds of ``--repeats`` calls of
:func:`bayes_microbench.scoring.score` (the item draws extracted once beforehand,
as the CLI does per call); the ratio is to the reference at the same size. What the
self-calibration buys (coverage and width on held-out llms) is the held-out study's
(``study_heldout_validation.py``); the scored llms here are fitted llms.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from _report import MATRICES, masked, update_results, write_section

RESULTS = Path(__file__).parent / "results" / "score.json"
MODELS = Path(__file__).resolve().parents[1] / "models"
POSTERIORS = {"2pl": "gpqa-2pl.nc", "2pl-md": "gpqa-2pl-md.nc"}
CASES = ("shared, not carried", "shared, carried", "own subsets")
REFERENCE = "shared, not carried"


def time_case(draws: Any, misfit: Any, scored: Any, repeats: int) -> tuple[float, str]:
    """Median wall seconds of ``score`` and its calibration note."""
    from bayes_microbench.scoring import score

    walls = []
    for rep in range(repeats):
        t0 = time.perf_counter()
        res = score(None, scored, draws=draws, misfit=misfit, random_seed=rep)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), str(res.attrs["misfit"])


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Time every (posterior, size, case); the rows."""
    from bayes_microbench import load_responses
    from bayes_microbench.misfit import carried_training
    from bayes_microbench.posterior import DEFAULT_MAX_DRAWS, item_draws, read_posterior_file

    resp = load_responses(MATRICES["gpqa"])
    rng = np.random.default_rng(args.seed)
    who = np.sort(rng.choice(resp.n_llms, size=args.llms, replace=False))
    scored_full = resp.isel(llm=who)
    carried = carried_training(resp, random_seed=args.seed)
    rows = []
    for model in args.models:
        dataset, shipped = read_posterior_file(MODELS / POSTERIORS[model])
        if shipped is None:
            raise SystemExit(f"{POSTERIORS[model]} carries no calibration; rebuild models/")
        with_llms = dataclasses.replace(shipped, training=carried)
        draws = item_draws(dataset, max_draws=DEFAULT_MAX_DRAWS, multidim=True)
        for n in args.sizes:
            own = [rng.choice(resp.n_items, size=n, replace=False) for _ in range(args.llms)]
            shared = [rng.choice(resp.n_items, size=n, replace=False)] * args.llms
            plans = {
                "own subsets": (own, with_llms),
                "shared, not carried": (shared, shipped),
                "shared, carried": (shared, with_llms),
            }
            base = None
            for case in CASES:
                picks, misfit = plans[case]
                wall, note = time_case(draws, misfit, masked(scored_full, picks), args.repeats)
                base = wall if base is None else base  # the reference comes first
                rows.append(
                    {
                        "model": model,
                        "n": n,
                        "case": case,
                        "wall_s": round(wall, 3),
                        "ratio": round(wall / base, 2),
                        "self_calibrated": "calibrated on that subset itself" in note,
                    }
                )
                print(rows[-1], flush=True)
    return rows


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The section: one row per (posterior, size, case)."""
    lines = [
        f"GPQA ({args.llms} llms scored per call, draws extracted once, median wall seconds "
        f"of {args.repeats} calls; ratio to `{REFERENCE}` at that size):",
        "",
        "| posterior | n | case | wall s | ratio | calibrated on itself |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['n']} | {r['case']} | {r['wall_s']:.2f} | {r['ratio']:.2f} "
            f"| {'yes' if r['self_calibrated'] else 'no'} |"
        )
    write_section(
        "bench_score",
        "Scoring: the cost of calibrating a shared subset on itself",
        "\n".join(lines),
        headline=[
            {
                "table": 0,
                "columns": ["posterior", "n", "case", "wall s", "ratio"],
                "where": {"n": ["50"], "case": [REFERENCE, "shared, carried"]},
            }
        ],
    )


def main() -> None:
    """Parse the flags, time the cases, write the results and the report section."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="2pl,2pl-md", type=lambda s: s.split(","))
    p.add_argument("--sizes", default="25,50,100", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--llms", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if not MATRICES["gpqa"].exists():
        raise SystemExit(f"needs the shared GPQA matrix at {MATRICES['gpqa']}")
    rows = run(args)
    update_results(RESULTS, rows=rows)
    report(rows, args)


if __name__ == "__main__":
    main()

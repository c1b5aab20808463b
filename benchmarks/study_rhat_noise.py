"""How large the worst R-hat is when every chain mixes well: the noise floor of "every R-hat <= 1.01".

A fit's convergence check takes the worst rank-normalized split R-hat (bulk
and folded, as ``bayes_microbench.irt.diagnostics.rank_diagnostics`` computes
it for every fit) over all its parameters. With many parameters that maximum
is an extreme of a noisy statistic: this study draws chains that are
*stationary by construction* and reports how often the worst R-hat still
exceeds 1.01.

Design: ``P`` parameters, 2 chains x 1000 draws (the GPQA benchmark's
sampler settings), each parameter an independent stationary AR(1) series with
coefficient ``rho`` started in its stationary distribution: ``rho = 0``
(independent draws, bulk ESS about 2000), ``rho = -0.3`` (antithetic draws,
as NUTS often gives: ESS above the number of draws), ``rho = 0.3`` (ESS about
1000). ``P = 1768`` is the number of parameters the GPQA 2PL's check covers
(420 abilities, 448 difficulties, discriminations and intercepts, 4 subtask
parameters). 20 replicates per cell, seeded.

Usage::

    .venv/bin/python benchmarks/study_rhat_noise.py [--replicates 20] [--no-report]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import write_section

from bayes_microbench.irt.diagnostics import rank_diagnostics

CHAINS, DRAWS = 2, 1000
SIZES = (100, 500, 1768)
RHOS = (-0.3, 0.0, 0.3)


def stationary_ar1(rng: np.random.Generator, p: int, rho: float) -> np.ndarray:
    """(p, chains, draws) stationary AR(1) series with unit marginal variance."""
    eps = rng.normal(size=(p, CHAINS, DRAWS))
    x = np.empty_like(eps)
    x[..., 0] = eps[..., 0]
    scale = np.sqrt(1.0 - rho**2)
    for t in range(1, DRAWS):
        x[..., t] = rho * x[..., t - 1] + scale * eps[..., t]
    return x


def cell(p: int, rho: float, replicates: int, seed: int) -> dict[str, float]:
    """Worst R-hat over ``p`` parameters in each replicate, summarized."""
    rng = np.random.default_rng(seed)
    worst, ess = [], []
    for _ in range(replicates):
        diag = rank_diagnostics(stationary_ar1(rng, p, rho))
        worst.append(float(np.max(diag["rhat"])))
        ess.append(float(np.median(diag["ess_bulk"])))
    w = np.asarray(worst)
    return {
        "p": p,
        "rho": rho,
        "median_ess": float(np.median(ess)),
        "median_worst": float(np.median(w)),
        "q90_worst": float(np.quantile(w, 0.9)),
        "max_worst": float(w.max()),
        "pass": float(np.mean(w <= 1.01)),
    }


def table(rows: list[dict[str, float]], replicates: int) -> str:
    lines = [
        "| parameters | AR(1) rho | median bulk ESS | worst R-hat: median | 90th pct | max "
        f"| replicates with every R-hat <= 1.01 (of {replicates}) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['p']} | {r['rho']:+.1f} | {r['median_ess']:.0f} | {r['median_worst']:.4f} "
            f"| {r['q90_worst']:.4f} | {r['max_worst']:.4f} | {r['pass'] * replicates:.0f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args()
    t0 = time.perf_counter()
    rows = [
        cell(p, rho, args.replicates, seed=1000 * i + j)
        for i, p in enumerate(SIZES)
        for j, rho in enumerate(RHOS)
    ]
    elapsed = time.perf_counter() - t0
    body = "\n\n".join(
        [
            (
                f"Stationary chains by construction: each parameter an independent AR(1) "
                f"series, {CHAINS} chains x {DRAWS} draws, {args.replicates} seeded "
                "replicates per row; worst = the largest rank-normalized split R-hat "
                "(bulk or folded) over the parameters, as every fit's check computes it. "
                "1768 parameters = the GPQA 2PL's check. "
                f"Took {elapsed:.0f} s."
            ),
            table(rows, args.replicates),
            (
                "Reading: chains that mix perfectly still do not give R-hat = 1. With "
                "independent or antithetic draws of 1768 parameters the worst R-hat "
                "has a median near 1.006 and passes 1.01 every time; with a bulk ESS "
                "near 1000 for every parameter the median worst is about 1.010 and most "
                "replicates fail. A NUTS fit of GPQA (2PL, truncated normal) sits in "
                "between: by hand, over seeds 0, 2 and 3, the median bulk ESS of its "
                "parameters was 2269-2596 and the lowest 1% 1069-1176 (the IRT sampling "
                'section gives each run\'s minimum), so "every R-hat <= 1.01" there is '
                "met or missed by a few thousandths depending on the seed."
            ),
        ]
    )
    print(table(rows, args.replicates))
    if not args.no_report:
        write_section(
            "study_rhat_noise",
            "R-hat noise floor: the worst R-hat of well-mixed chains",
            body,
            headline=[0],
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

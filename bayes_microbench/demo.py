"""The end-to-end demo: posterior -> designs -> Bayesian MDAD -> scoring -> planning -> plots.

Runs with no download and no data of the user's. By default it loads the
shipped GPQA posterior (``models/gpqa-2pl.nc`` beside the package in a source
checkout); with ``simulate=True``, or when that file is not there, it
simulates a GPQA-like benchmark and fits a quick item posterior to it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import response_model
from ._defaults import DEFAULT_CI_PROB, percent
from ._outputs import REPORT_FILES, output_set

logger = logging.getLogger(__name__)

#: The shipped posterior the demo loads (present in a source checkout).
SHIPPED_POSTERIOR = Path(__file__).resolve().parent.parent / "models" / "gpqa-2pl.nc"
SIZES = (10, 25, 50, 100, 200)
SELECTORS = ("random", "bayes-fisher", "bayes-ranking")


@dataclass
class DemoResult:
    """What the demo computed, and where it wrote its files."""

    source: str
    mdad: pd.DataFrame
    scores: pd.DataFrame
    plan: pd.DataFrame
    files: list[Path] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def _posterior(simulate: bool, seed: int, progress: bool) -> tuple[Any, str]:
    if not simulate and SHIPPED_POSTERIOR.exists():
        from .posterior import read_posterior

        return read_posterior(
            str(SHIPPED_POSTERIOR)
        ), f"shipped posterior {SHIPPED_POSTERIOR.name} (GPQA, 2PL, NUTS)"
    from .selectors.bayes_fisher import quick_item_posterior
    from .simulate import simulate_responses

    resp = simulate_responses("gpqa", model="2pl", n_llms=300, n_items=400, random_seed=seed)
    post = quick_item_posterior(resp.values, model="2pl", n_draws=400, random_seed=seed)
    post = post.assign_coords(item=resp.items, subtask=("item", resp.item_subtask))
    return post, "simulated GPQA-like benchmark (300 llms x 400 items), quick 2PL item posterior"


def run_demo(
    output: str | Path = "bayes-microbench-demo",
    *,
    simulate: bool = False,
    random_seed: int = 0,
    max_draws: int = 400,
    progress: bool = False,
) -> DemoResult:
    """Run the demo and write ``mdad.csv``, ``curves.csv``, figures and ``report.md`` to ``output``."""
    from . import plots
    from .design import curves_tables, design_curves, plan, select_from_posterior
    from .posterior import item_draws
    from .report import write_report
    from .scoring import score

    out = Path(output)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    posterior, source = _posterior(simulate, random_seed, progress)
    draws = item_draws(posterior, max_draws=max_draws)
    seconds["posterior"] = time.perf_counter() - t0

    # 1. Bayesian MDAD of random and informative designs
    t0 = time.perf_counter()
    rows, curve_rows = [], []
    for name in SELECTORS:
        res = design_curves(
            posterior,
            sizes=SIZES,
            selector=name,
            draws=draws,
            n_replicates=5,
            random_seed=random_seed,
        )
        table, curve_table = curves_tables(res, label=name)
        rows.append(table)
        curve_rows.append(curve_table)
    mdad = pd.concat(rows, ignore_index=True)
    curves = pd.concat(curve_rows, ignore_index=True)
    seconds["mdad"] = time.perf_counter() - t0

    # 2. Score simulated new llms from 50 random items each, against their true accuracy
    t0 = time.perf_counter()
    rng = np.random.default_rng(random_seed)
    scores = _score_new_llms(draws, score, posterior, rng, n_llms=30, n_observed=50)
    seconds["score"] = time.perf_counter() - t0

    # 3. How many items to rank a pair 2 points apart correctly 80% of the time?
    t0 = time.perf_counter()
    plans = []
    for name in ("random", "bayes-ranking"):
        p = plan(posterior, 2.0, prob=0.8, selector=name, draws=draws, random_seed=random_seed)
        iv = p["n_required_interval"].to_numpy()
        plans.append(
            pd.DataFrame(
                {
                    "selector": name,
                    "gap": p["gap"].to_numpy(),
                    "n_required": p["n_required"].to_numpy(),
                    "n_lower": iv[:, 0],
                    "n_upper": iv[:, 1],
                }
            )
        )
    plan_table = pd.concat(plans, ignore_index=True)
    seconds["plan"] = time.perf_counter() - t0

    # 4. Files: tables, figures, report
    t0 = time.perf_counter()
    ids = select_from_posterior(
        posterior, "bayes-ranking", 50, random_seed=random_seed, max_draws=max_draws
    )[0]
    chosen = pd.Index(draws.items).isin(ids)
    items = pd.DataFrame(
        {
            "item": draws.items,
            "subtask": draws.subtask,
            # P(wrong) for an llm of average ability: finite even where discrimination ~ 0
            "difficulty": 1.0 - draws.prob(np.zeros((draws.n_draws, 1)))[:, 0, :].mean(axis=0),
            "chosen": chosen,
        }
    )
    tables = {"mdad.csv": mdad, "curves.csv": curves, "scores.csv": scores, "plan.csv": plan_table}
    figures = {
        "figures/mdad_vs_n": lambda: plots.plot_mdad_vs_n(
            mdad, title=f"Bayesian MDAD by design ({percent(DEFAULT_CI_PROB)} intervals)"
        ),
        "figures/ranking_curve_random": lambda: plots.plot_ranking_curve(
            curves[curves["selector"] == "random"],
            title="Random subsets: P(correct ranking) vs gap",
        ),
        "figures/estimates": lambda: plots.plot_estimates(
            scores, title="New llms scored from 50 random items"
        ),
        "figures/selection": lambda: plots.plot_selection(
            items,
            title="The 50 items bayes-ranking chooses",
            ylabel="P(wrong) for an llm of average ability",
        ),
    }
    files: list[Path] = []
    # the tables and figures describe one run: written all together or not at all
    with output_set(out, stale=REPORT_FILES) as staged:
        for name, table in tables.items():
            files.append(staged.write(name, partial(table.to_csv, index=False)))
        for stem, draw in figures.items():
            for path in plots.save_figure(draw(), staged.path(stem)):
                files.append(out / path.relative_to(staged.staging))
    files.append(write_report(out, "md"))
    seconds["files"] = time.perf_counter() - t0
    return DemoResult(
        source=source, mdad=mdad, scores=scores, plan=plan_table, files=files, seconds=seconds
    )


def _score_new_llms(
    draws: Any,
    score: Any,
    posterior: Any,
    rng: np.random.Generator,
    *,
    n_llms: int,
    n_observed: int,
) -> pd.DataFrame:
    """Simulate new llms from the posterior population, observe a random subset, score them."""
    from .responses import Responses

    s = rng.integers(draws.n_draws, size=n_llms)
    ability = rng.standard_normal(n_llms)
    a, b, c = draws.discrimination[s], draws.difficulty[s], draws.guessing[s]
    p = response_model.prob(response_model.logit(ability[:, None], a, b), c)
    full = (rng.random(p.shape) < p).astype(float)
    true_acc = full.mean(axis=1)
    observed = np.full_like(full, np.nan)
    for j in range(n_llms):
        cols = rng.choice(draws.n_items, size=n_observed, replace=False)
        observed[j, cols] = full[j, cols]
    llms = [f"new-llm-{j:02d}" for j in range(n_llms)]
    seen = ~np.isnan(observed).all(axis=0)  # items no demo llm was asked are simply absent
    resp = Responses.from_arrays(
        observed[:, seen], llms, draws.items[seen], subtask=draws.subtask[seen], where="demo llms"
    )
    res = score(posterior, resp, random_seed=0)
    iv = res["accuracy_interval"].to_numpy()
    wilson = res["binomial_interval"].to_numpy()
    return pd.DataFrame(
        {
            "llm": llms,
            "n_observed": n_observed,
            "accuracy_mean": res["accuracy_mean"].to_numpy(),
            "accuracy_lower": iv[:, 0],
            "accuracy_upper": iv[:, 1],
            "wilson_lower": wilson[:, 0],
            "wilson_upper": wilson[:, 1],
            "true_accuracy": true_acc,
        }
    )

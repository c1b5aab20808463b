"""Validity studies on simulated data: parameter recovery and interval coverage.

Used by the slow tests and by ``benchmarks/study_irt_validity.py``.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

from .._defaults import DEFAULT_CI_PROB
from ..exceptions import ConvergenceWarning
from ..simulate import simulate_responses
from .model import IRTModel


def _interval_hits(draws: np.ndarray, truth: np.ndarray, prob: float) -> np.ndarray:
    lo, hi = np.quantile(draws, [(1 - prob) / 2, 1 - (1 - prob) / 2], axis=0)
    return (truth >= lo) & (truth <= hi)


def recovery(
    method: str = "nuts",
    *,
    n_llms: int = 300,
    n_items: int = 500,
    model: str = "2pl",
    random_seed: int = 0,
    draws: int = 500,
    tune: int = 500,
) -> dict[str, Any]:
    """Fit one simulated matrix; correlations of posterior means with the truth."""
    resp, truth = simulate_responses(
        "gpqa",
        n_llms=n_llms,
        n_items=n_items,
        model=model,
        difficulty_mean=0.0,
        random_seed=random_seed,
        return_truth=True,
    )
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = IRTModel(resp, model).fit(method, draws=draws, tune=tune, random_seed=random_seed)
    post = fit.posterior
    out: dict[str, Any] = {"method": method, "seconds": time.perf_counter() - start}
    for name in ("ability", "difficulty", "discrimination"):
        est = post[name].mean(("chain", "draw")).values
        out[f"corr_{name}"] = float(np.corrcoef(est, getattr(truth, name).values)[0, 1])
    if fit.diagnostics is not None:
        out["max_rhat"] = fit.diagnostics.max_rhat
        out["min_ess_bulk"] = fit.diagnostics.min_ess_bulk
    return out


def coverage_study(
    method: str = "nuts",
    *,
    replicates: int = 50,
    n_llms: int = 40,
    n_items: int = 50,
    model: str = "2pl",
    ci_prob: float = DEFAULT_CI_PROB,
    draws: int = 300,
    tune: int = 300,
    random_seed: int = 0,
    advi_iterations: int = 10000,
) -> dict[str, Any]:
    """Fraction of true abilities / difficulties inside central ``ci_prob`` intervals.

    Each replicate simulates a fresh matrix (seed ``random_seed + r``) from the
    simulator's hierarchical 2PL, fits it with ``method`` and checks every
    llm's ability and every item's difficulty. Returns the pooled coverage per
    parameter, its replicate-level spread, and timing.
    """
    hits: dict[str, list[float]] = {"ability": [], "difficulty": []}
    width: dict[str, list[float]] = {"ability": [], "difficulty": []}
    start = time.perf_counter()
    for r in range(replicates):
        resp, truth = simulate_responses(
            "gpqa",
            n_llms=n_llms,
            n_items=n_items,
            model=model,
            n_subtasks=1,
            difficulty_mean=0.0,
            random_seed=random_seed + r,
            return_truth=True,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = IRTModel(resp, model).fit(
                method,
                draws=draws,
                tune=tune,
                random_seed=random_seed + r,
                advi_iterations=advi_iterations,
            )
        post = fit.posterior
        for name in hits:
            d = post[name].values.reshape(-1, post.sizes["llm" if name == "ability" else "item"])
            t = getattr(truth, name).values
            hits[name].append(float(_interval_hits(d, t, ci_prob).mean()))
            lo, hi = np.quantile(d, [(1 - ci_prob) / 2, 1 - (1 - ci_prob) / 2], axis=0)
            width[name].append(float(np.median(hi - lo)))
    out: dict[str, Any] = {
        "method": method,
        "replicates": replicates,
        "n_llms": n_llms,
        "n_items": n_items,
        "ci_prob": ci_prob,
        "seconds": time.perf_counter() - start,
    }
    for name in hits:
        out[name] = float(np.mean(hits[name]))
        out[f"{name}_replicate_sd"] = float(np.std(hits[name]))
        out[f"{name}_median_width"] = float(np.median(width[name]))
    return out

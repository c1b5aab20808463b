"""Rebuild the fitted posterior artifacts in ``models/`` and their model cards.

Run from the repository root::

    .venv/bin/python -m bayes_microbench.irt.build_models            # every artifact
    .venv/bin/python -m bayes_microbench.irt.build_models gpqa-2pl   # one
    .venv/bin/python -m bayes_microbench.irt.build_models --calibrate  # calibration only

``--calibrate`` computes, for the existing artifacts, the calibration ``score``
applies by default (:mod:`bayes_microbench.irt.calibration`, on the responses in
``../shared/data`` the artifact was fitted on) and writes it into each file,
without refitting (a full build computes it too).

Each artifact is an items-only, thinned NetCDF posterior (item and subtask
parameters, no abilities) loadable with
:func:`bayes_microbench.irt.load_posterior`, plus a Markdown model card with the
data, model, sampler settings, diagnostics, posterior predictive summary and
timing. The data come from ``../shared/data`` (never copied into the repo).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
MODELS = ROOT / "models"

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArtifactSpec:
    name: str
    data: str  # relative to ../shared/data
    model: str
    chains: int = 2
    draws: int = 1000
    tune: int = 1000
    thin: int = 5
    seed: int = 0
    n_options: int | None = None
    config: tuple[tuple[str, Any], ...] = ()  # IRTConfig entries beyond the defaults
    description: str = ""


ARTIFACTS: dict[str, ArtifactSpec] = {
    "gpqa-2pl": ArtifactSpec(
        name="gpqa-2pl",
        data="open-llm-leaderboard-v2/gpqa.csv",
        model="2pl",
        # samples GPQA's many near-zero discriminations far better than the
        # lognormal default (benchmarks/bench_irt_sampling.py)
        config=(("discrimination_prior", "truncated-normal"),),
        # 2 x 1000 draws leave the worst of ~1770 R-hats at its noise floor,
        # 1.008-1.021 over seeds 0-15 with either likelihood kernel (by hand; see
        # benchmarks/README.md, "R-hat noise floor"); 2000 draws raise every ESS
        draws=2000,
        thin=10,
        description=(
            "GPQA (main, 448 items, 4-option multiple choice) from the Open LLM "
            "Leaderboard v2: 420 llms, complete matrix, one subtask"
        ),
    ),
    "gpqa-2pl-md": ArtifactSpec(
        name="gpqa-2pl-md",
        data="open-llm-leaderboard-v2/gpqa.csv",
        model="2pl-md",
        # scores held-out GPQA llms with intervals much closer to their stated
        # coverage than the 2PL's (benchmarks/study_md_scoring.py); 2 x (1000 +
        # 1000) left R-hat 1.030 and bulk ESS 170 (loading_sd[1]) and 2 x (2000 + 2000)
        # R-hat 1.015 and bulk ESS 257, so it runs longer
        draws=4000,
        tune=2000,
        thin=20,
        config=(("n_dims", 2),),
        description=(
            "GPQA (main, 448 items, 4-option multiple choice) from the Open LLM "
            "Leaderboard v2: 420 llms, complete matrix, one subtask"
        ),
    ),
}


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its reaped children (the NUTS chain workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def build(spec: ArtifactSpec, *, out_dir: Path = MODELS) -> dict[str, Any]:
    """Fit ``spec``, write ``<name>.nc`` and ``<name>.md`` into ``out_dir``; return the card data."""
    from .. import __version__
    from ..exceptions import ConvergenceWarning, ResponsesError
    from ..io import load_responses, write_atomic
    from .checks import posterior_predictive_check
    from .model import IRTModel

    path = DATA / spec.data
    if not path.exists():
        raise ResponsesError(f"{path}: not present; the artifacts are built from ../shared/data")
    resp = load_responses(path)
    config = dict(spec.config) | ({"n_options": spec.n_options} if spec.n_options else {})
    cpu0 = _cpu_seconds()
    with warnings.catch_warnings():
        warnings.simplefilter("always", ConvergenceWarning)
        fit = IRTModel(resp, spec.model, config=config).fit(
            "nuts", chains=spec.chains, draws=spec.draws, tune=spec.tune, random_seed=spec.seed
        )
    cpu = _cpu_seconds() - cpu0
    ppc = posterior_predictive_check(fit, max_draws=400, random_seed=spec.seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    nc = out_dir / f"{spec.name}.nc"
    t_cal = time.perf_counter()
    fit.calibrate(random_seed=spec.seed)  # the calibration score applies by default
    calibration_seconds = time.perf_counter() - t_cal
    fit.save(nc, items_only=True, thin=spec.thin)
    diag = fit.diagnostics
    assert diag is not None
    post = fit.posterior
    card = {
        "name": spec.name,
        "data": f"../shared/data/{spec.data}",
        "description": spec.description,
        "n_llms": fit.data.n_llms,
        "n_items": fit.data.n_items,
        "subtasks": [str(s) for s in fit.data.subtasks],
        "model": spec.model,
        "config": fit.config.to_dict(),
        "config_hash": fit.config.hash(),
        "sampler": fit.sampler.to_dict() if fit.sampler else {},
        "diagnostics": diag.to_dict(),
        "ppc": ppc.summary,
        "wall_seconds": round(float(fit.wall_seconds or 0.0), 1),
        "cpu_seconds": round(cpu, 1),
        "load_average_1min": round(os.getloadavg()[0], 1),
        "file_bytes": nc.stat().st_size,
        "thin": spec.thin,
        "saved_draws": int(post.sizes["chain"] * -(-post.sizes["draw"] // spec.thin)),
        "package_version": __version__,
        "python": platform.python_version(),
        "notes": fit.data.notes,
        "subtask_parameters": [str(k) for k in post.data_vars if post[k].dims[2:] == ("subtask",)],
        "item_parameters": [str(k) for k in post.data_vars if post[k].dims[2:3] == ("item",)],
        "parameterization": fit.parameterization,
        "anchors": str(post.attrs.get("anchors", "")),
        "discrimination_prior": fit.config.discrimination_prior,
        "discrimination_median": float(post["discrimination"].median()),
        "ability_sd_posterior_mean": float(post["ability"].mean(("chain", "draw")).std()),
        "calibration_seconds": round(calibration_seconds, 1),
        "seed": spec.seed,
    }
    text = _card_markdown(card)
    write_atomic(out_dir / f"{spec.name}.md", lambda tmp: tmp.write_text(text))
    return card


def _card_markdown(c: dict[str, Any]) -> str:
    d = c["diagnostics"]
    p = c["ppc"]
    s = c["sampler"]
    status = "converged" if d["ok"] else "NOT converged: " + "; ".join(d["problems"])
    notes = "\n".join(f"- {k.replace('_', ' ')}: {', '.join(v)}" for k, v in c["notes"].items())
    if c["model"] == "2pl-md":
        n_dims = c["config"]["n_dims"]
        model = (
            f"Hierarchical multidimensional 2PL with D = {n_dims} (`IRTConfig`, hash "
            f"`{c['config_hash']}`): `logit P(correct) = sum_d discrimination[i, d] * "
            f"ability[j, d] + intercept[i]`, ability ~ Normal(0, I_{n_dims}) (the llm "
            "population), dimension-0 loadings log-normal and intercepts partially pooled "
            "by subtask, the other loadings Normal(0, loading_sd[d]); rotations fixed by "
            f"the anchor items {c['anchors']} (see `bayes_microbench/irt/multidim.py`). "
            "`difficulty` and `mdisc` are the rotation-invariant multidimensional "
            "difficulty and discrimination"
        )
        population = f"ability ~ Normal(0, I_{n_dims})"
        per_dim = "; `loading_sd` per dimension 1..D-1"
    else:
        model = (
            f"Hierarchical {c['model'].upper()} (`IRTConfig`, hash `{c['config_hash']}`): "
            "`logit P(correct) = discrimination * (ability - difficulty)`, ability ~ "
            "Normal(0, 1) (the llm population, fixed location and scale), discrimination "
            f"({c['discrimination_prior']} prior) and intercept partially pooled by subtask"
        )
        population = "ability ~ Normal(0, 1)"
        per_dim = ""
    item_vars = ", ".join(f"`{k}`" for k in c["item_parameters"])
    subtask_vars = ", ".join(f"`{k}`" for k in c["subtask_parameters"])
    return f"""# Model card: `{c["name"]}`

Rebuild: `.venv/bin/python -m bayes_microbench.irt.build_models {c["name"]}` (from the repository root).
Load: `from bayes_microbench.irt import load_posterior; art = load_posterior("models/{c["name"]}.nc")`.

## Data
{c["description"]}. File `{c["data"]}`: {c["n_llms"]} llms x {c["n_items"]} items,
subtask(s): {", ".join(c["subtasks"])}.

Degenerate items/llms (all observed responses correct or wrong; their
parameters rest on the priors, finite but wide):
{notes or "- none"}

## Model
{model}. Configuration: `{json.dumps(c["config"])}`.

The file holds **item and subtask parameters only** ({item_vars} per item;
{subtask_vars} per subtask{per_dim}), {c["saved_draws"]} draws
(every {c["thin"]}th of {s.get("chains")} x {s.get("draws")}), float32,
{c["file_bytes"] / 1e6:.2f} MB. New llms are scored against these draws with
{population} as the prior.

## Sampler
NUTS via {s.get("backend")} (JAX-compiled log density, fused likelihood, one
worker process per chain), the `{c["parameterization"]}` parameterization and nutpie's
`draw_diag` mass matrix (see `bayes_microbench/irt/pymc_model.py`),
{s.get("chains")} chains x ({s.get("tune")} tune + {s.get("draws")} draws), target accept
{s.get("target_accept")}, float32 likelihood, seed {s.get("random_seed")}.

## Diagnostics ({status})
| max R-hat | min bulk ESS | min tail ESS | divergences | min BFMI | mean leapfrog steps |
|---|---|---|---|---|---|
| {d["max_rhat"]:.4f} ({d["worst_rhat"]}) | {d["min_ess_bulk"]:.0f} ({d["worst_ess_bulk"]}) | {d["min_ess_tail"]:.0f} | {d["divergences"]} | {d["min_bfmi"]:.2f} | {d["mean_tree_size"]:.1f} |

## Posterior predictive checks ({p["draws_used"]} draws)
- per-llm accuracy: {p["llm_accuracy_ppp_outside_5_95"]} of {p["n_llms"]} llms with a p-value outside [0.05, 0.95]; mean |observed - predicted| = {p["llm_accuracy_mean_abs_error"]:.4f}
- per-item proportion correct: {p["item_p_correct_ppp_outside_5_95"]} of {p["n_items"]} items outside [0.05, 0.95]; mean |observed - predicted| = {p["item_p_correct_mean_abs_error"]:.4f}
- raw-score distribution: sd observed {p["raw_score_sd_observed"]:.2f}, p-value {p["raw_score_sd_ppp"]:.2f}; {100 * p["sorted_raw_scores_inside_interval"]:.0f}% of the sorted raw scores inside their 90% predictive band

## Calibration
The file carries a `calibration` group: the split-conformal recalibration of the
IRT predictive of unobserved items (`scoring.estimate_misfit`, item-split
cross-validation on the {c["n_llms"]} llms it was fitted on, in-sample for the items,
random subsets of 25/50/100/200 items, 2 splits, 200 draws, seed {c.get("seed", 0)}), with a
`calibration_hash` checked on load. `score` applies it by default (`--raw-model`
for the raw interval); it took {c.get("calibration_seconds", "?")} s here. Why in-sample:
`docs/decisions/0002-calibration-saved-with-the-posterior.md`.

## Timing
Sampling wall time {c["wall_seconds"]} s (CPU {c["cpu_seconds"]} s, the fitting process and
its chain workers) on a shared 2-core
machine with 1-minute load average {c["load_average_1min"]} at the end of the fit;
bayes_microbench {c["package_version"]}, Python {c["python"]}.
"""


def calibrate_artifact(spec: ArtifactSpec, *, out_dir: Path = MODELS) -> dict[str, Any]:
    """Compute an existing artifact's calibration from its data and write it into the file."""
    import time

    from ..io import load_responses
    from .calibration import calibrate_fitted
    from .io import add_calibration, load_posterior

    path = out_dir / f"{spec.name}.nc"
    resp = load_responses(DATA / spec.data)
    start = time.perf_counter()
    misfit = calibrate_fitted(load_posterior(path), resp, random_seed=spec.seed)
    seconds = time.perf_counter() - start
    add_calibration(path, misfit)
    return {
        "name": spec.name,
        "calibration_seconds": round(seconds, 1),
        "file_bytes": path.stat().st_size,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", help=f"artifacts to build (default all: {list(ARTIFACTS)})"
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="only compute the calibration of the existing artifacts and write it in",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    names = args.names or list(ARTIFACTS)
    unknown = [n for n in names if n not in ARTIFACTS]
    if unknown:
        parser.error(f"unknown artifact(s) {unknown}; known: {list(ARTIFACTS)}")
    for name in names:
        if args.calibrate:
            print(json.dumps(calibrate_artifact(ARTIFACTS[name])))
            continue
        card = build(ARTIFACTS[name])
        print(json.dumps({k: card[k] for k in ("name", "wall_seconds", "file_bytes")}))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""Rebuild the shipped posteriors in ``models/`` and their model cards.

Run from the repository root (under ``flock /tmp/briefs/cpu.lock`` on a shared machine)::

    .venv/bin/python -m bayes_microbench.irt.build_models              # every artifact, with LOO
    .venv/bin/python -m bayes_microbench.irt.build_models --only musr  # one (name or key)
    .venv/bin/python -m bayes_microbench.irt.build_models --calibrate  # calibration only

Every shared matrix of :data:`bayes_microbench.shipped.BENCHMARKS` gets its
default fit, ``KEY-2pl`` (what ``bayes-microbench fit`` does with no flags: the
2PL by NUTS, draws extended until the checks pass or the budget is spent), its
saved calibration, draws thinned (float32) so that the file stays under
:data:`MAX_FILE_BYTES`, what that thinning changes in ``score`` and ``mdad``
measured against the unthinned draws, and a model card. A fit that does not
converge is written all the same, marked as such in its card, in its file (the
loader warns) and in ``bayes-microbench models``. GPQA also ships a
hand-tuned 2PL (``gpqa-2pl``), the default fit of the 2-D ``2pl-md``
(``gpqa-2pl-md``) and of the 3-D one its data choose (``gpqa-2pl-md3``).

``--calibrate`` computes, for the existing artifacts, the calibration ``score``
applies by default (:mod:`bayes_microbench.irt.calibration`, on the responses in
``../shared/data`` the artifact was fitted on) and writes it into each file,
without refitting (a full build computes it too).

Each artifact is an items-only NetCDF posterior (item and subtask parameters, no
abilities) loadable with :func:`bayes_microbench.irt.load_posterior`, plus a
Markdown model card. The data come from ``../shared/data`` (never copied into
the repository).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._defaults import DEFAULT_CI_PROB, percent
from ..shipped import BENCHMARKS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
MODELS = ROOT / "models"
#: The largest shipped file (the repository stays small).
MAX_FILE_BYTES = 10_000_000
#: the held-out study's saved runs, read into each card
HELDOUT_RESULTS = ROOT / "benchmarks" / "results" / "heldout_validation.json"
CHOICE_RESULTS = ROOT / "benchmarks" / "results" / "model_choice.json"
#: Saved draws aimed at (``score``'s default ``max_draws``): thinning keeps at most these.
TARGET_DRAWS = 1000
#: Below this many float32 draws under the cap a 1-D artifact is saved in the compact
#: form (``irt.io``: int16-packed, difficulty recomputed on load); twice ``score``'s minimum.
COMPACT_BELOW = 200
#: Llms and items of the compaction check (score from a random subset of each llm's items).
CHECK_LLMS = 40
CHECK_ITEMS = 50

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArtifactSpec:
    """How one shipped posterior is fitted.

    ``default_fit``: the default ``fit`` (``fit_default``: ``draws`` is the
    first attempt's, extended up to the budget, then the policy's refits); otherwise one NUTS fit of
    ``draws`` per chain with ``config``. ``thin=None`` thins to the file-size cap.
    """

    name: str
    data: str  # relative to ../shared/data
    model: str
    chains: int = 2
    draws: int = 1000
    tune: int = 1000
    thin: int | None = None
    seed: int = 0
    n_options: int | None = None
    config: tuple[tuple[str, Any], ...] = ()  # IRTConfig entries beyond the defaults
    description: str = ""
    default_fit: bool = False
    benchmark: str = ""


def _default_spec(key: str) -> ArtifactSpec:
    b = BENCHMARKS[key]
    return ArtifactSpec(
        name=b.default_model,
        data=b.data,
        model="2pl",
        default_fit=True,
        description=b.title,
        benchmark=key,
    )


_GPQA = (
    "GPQA (main, 448 items, 4-option multiple choice) from the Open LLM "
    "Leaderboard v2: 420 llms, complete matrix, one subtask"
)


def _gpqa_md_spec(name: str, n_dims: int) -> ArtifactSpec:
    """GPQA's default ``2pl-md`` fit with ``n_dims`` ability dimensions."""
    return ArtifactSpec(
        name=name,
        data="open-llm-leaderboard-v2/gpqa.csv",
        model="2pl-md",
        default_fit=True,
        config=(("n_dims", n_dims),),
        description=_GPQA,
        benchmark="gpqa",
    )


ARTIFACTS: dict[str, ArtifactSpec] = {
    "gpqa-2pl": ArtifactSpec(
        name="gpqa-2pl",
        data="open-llm-leaderboard-v2/gpqa.csv",
        model="2pl",
        # samples GPQA's many near-zero discriminations far better than the
        # lognormal default (benchmarks/bench_irt_sampling.py)
        config=(("discrimination_prior", "truncated-normal"),),
        # 2000 draws: 1000 leave the worst R-hat at its noise floor (measured:
        # docs/decisions/0009-shipped-models-default-fit-and-unconverged.md)
        draws=2000,
        thin=10,
        description=_GPQA,
        benchmark="gpqa",
    ),
    # scores held-out GPQA llms with intervals much closer to their stated coverage
    # than the 2PL's (benchmarks/study_md_scoring.py); the default fit (decoupled:
    # docs/decisions/0050) converges on it
    "gpqa-2pl-md": _gpqa_md_spec("gpqa-2pl-md", 2),
    # the model GPQA's data choose (benchmarks/study_model_choice.py: PSIS-LOO over
    # 1pl, 2pl and 2pl-md D = 2..4), fitted as fit --model auto fits it
    "gpqa-2pl-md3": _gpqa_md_spec("gpqa-2pl-md3", 3),
    # the default fit of every other shared matrix, cheapest first
    **{
        BENCHMARKS[k].default_model: _default_spec(k)
        for k in (
            "arc",
            "truthfulqa",
            "winogrande",
            "musr",
            "ifeval",
            "math-hard",
            "mmlu",
            "gsm8k",
            "bbh",
            "mmlu-pro",
        )
    },
}


def spec_for(name: str) -> ArtifactSpec:
    """The spec of an artifact name (``musr-2pl``) or a benchmark key (``musr``)."""
    if name in ARTIFACTS:
        return ARTIFACTS[name]
    if name in BENCHMARKS and BENCHMARKS[name].default_model in ARTIFACTS:
        return ARTIFACTS[BENCHMARKS[name].default_model]
    raise KeyError(name)


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its reaped children (the NUTS chain workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def thin_for(posterior: Any, total_draws: int, *, compact: bool = False) -> int:
    """The smallest thinning that keeps at most :data:`TARGET_DRAWS` draws under the size cap.

    The size is the items-only payload (item and subtask parameters) per saved
    draw: float32, or for the ``compact`` form int16 item parameters without the
    derived ``difficulty``; compression gains little on draws, so the raw size is the bound.
    """
    per_draw = 0
    for name, v in posterior.data_vars.items():
        if "llm" in v.dims or (compact and name == "difficulty"):
            continue
        cells = math.prod(n for d, n in v.sizes.items() if d not in ("chain", "draw"))
        per_draw += (2 if compact and "item" in v.dims else 4) * cells
    keep = min(TARGET_DRAWS, int(0.95 * MAX_FILE_BYTES) // max(per_draw, 1))
    return max(1, math.ceil(total_draws / max(keep, 1)))


def choose_form(posterior: Any, total_draws: int, model: str) -> tuple[int, bool]:
    """(thinning, compact): the float32 form unless it keeps under :data:`COMPACT_BELOW` draws.

    Why: float32 is exact to the sampler's precision; the compact form is used only
    where float32 would leave too few draws for intervals (a benchmark of ~10000 items).
    """
    thin = thin_for(posterior, total_draws)
    if model == "2pl-md" or -(-total_draws // thin) >= COMPACT_BELOW:
        return thin, False
    return thin_for(posterior, total_draws, compact=True), True


def compaction_check(full: Path, thinned: Path, resp: Any, *, seed: int = 0) -> dict[str, Any]:
    """What thinning changes in ``score`` and ``mdad``: the thinned file against all draws.

    ``score``: :data:`CHECK_LLMS` of the fitted llms, each observed on a random
    :data:`CHECK_ITEMS` of its items (as a new llm evaluated on a micro-benchmark),
    scored with each file's calibration; the largest change of the mean and of the
    90% bounds, in accuracy points. ``mdad``: random designs of 10 / 25 / 50 / 100
    items (those below the benchmark's size), each file's saved population; the
    largest change of the MDAD and of its band, in points.
    """
    import numpy as np

    from ..design import design_curves, saved_population
    from ..posterior import read_posterior_file
    from ..responses import Responses
    from ..scoring import score

    rng = np.random.default_rng(seed)
    picks = np.sort(rng.choice(resp.n_llms, size=min(CHECK_LLMS, resp.n_llms), replace=False))
    sub = resp.isel(llm=picks)
    vals = np.array(sub.values, dtype=float)
    n_obs = min(CHECK_ITEMS, resp.n_items // 2)
    for row in vals:
        seen = np.flatnonzero(~np.isnan(row))
        hide = np.setdiff1d(seen, rng.choice(seen, size=min(n_obs, seen.size), replace=False))
        row[hide] = np.nan
    target = Responses.from_arrays(
        vals,
        sub.llms,
        sub.items,
        subtask=sub.item_subtask,
        benchmark=sub.benchmark,
        on_empty="subset",
    )
    sizes = [n for n in (10, 25, 50, 100) if n < resp.n_items]
    out: dict[str, Any] = {"llms": int(picks.size), "observed_items": n_obs, "sizes": sizes}
    res = {}
    for label, path in (("full", full), ("thinned", thinned)):
        post, cal = read_posterior_file(str(path))
        draws = int(post.sizes["chain"] * post.sizes["draw"])
        t0 = time.perf_counter()
        s = score(post, target, misfit=cal, max_draws=draws, random_seed=seed)
        t_score = time.perf_counter() - t0
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            c = design_curves(
                post,
                sizes=sizes,
                max_draws=draws,
                random_seed=seed,
                population=saved_population(cal, str(path)),
            )
        t_mdad = time.perf_counter() - t0
        res[label] = (s, c)
        out[f"{label}_draws"] = draws
        out[f"{label}_score_seconds"] = round(t_score, 2)
        out[f"{label}_mdad_seconds"] = round(t_mdad, 2)
    (s0, c0), (s1, c1) = res["full"], res["thinned"]
    out["score_mean_max_abs_diff_points"] = round(
        100 * float(np.abs(s0["accuracy_mean"] - s1["accuracy_mean"]).max()), 3
    )
    out["score_bound_max_abs_diff_points"] = round(
        100 * float(np.abs(s0["accuracy_interval"] - s1["accuracy_interval"]).max()), 3
    )
    out["score_width_full_points"] = round(
        100 * float(s0["accuracy_interval"].diff("ci_bound").mean()), 3
    )
    m0, m1 = c0["mdad"].to_numpy(), c1["mdad"].to_numpy()
    b0, b1 = c0["mdad_interval"].to_numpy(), c1["mdad_interval"].to_numpy()
    out["mdad_full"] = [round(float(x), 2) for x in m0]
    out["mdad_thinned"] = [round(float(x), 2) for x in m1]
    out["mdad_band_full"] = [[round(float(a), 2), round(float(b), 2)] for a, b in b0.reshape(-1, 2)]
    out["mdad_band_thinned"] = [
        [round(float(a), 2), round(float(b), 2)] for a, b in b1.reshape(-1, 2)
    ]
    with np.errstate(invalid="ignore"):  # inf - inf: both never reach the threshold, equal
        out["mdad_max_abs_diff_points"] = round(float(np.nanmax(np.abs(m0 - m1))), 3)
        out["mdad_band_max_abs_diff_points"] = round(float(np.nanmax(np.abs(b0 - b1))), 3)
    return out


def build(spec: ArtifactSpec, *, out_dir: Path = MODELS, loo: bool = False) -> dict[str, Any]:
    """Fit ``spec``, write ``<name>.nc`` and ``<name>.md`` into ``out_dir``; return the card data.

    An unconverged fit is written and marked (card, file, ``models``), never
    passed off as converged. ``loo``: also fit the default 1PL and compare the
    two by PSIS-LOO (the card's model choice).
    """
    from .. import __version__
    from ..exceptions import ConvergenceWarning, ResponsesError
    from ..io import load_responses, write_atomic
    from .checks import posterior_predictive_check
    from .model import IRTModel, fit_default

    path = DATA / spec.data
    if not path.exists():
        raise ResponsesError(f"{path}: not present; the artifacts are built from ../shared/data")
    t_build = time.perf_counter()
    resp = load_responses(path)
    config = dict(spec.config) | ({"n_options": spec.n_options} if spec.n_options else {})
    cpu0 = _cpu_seconds()
    with warnings.catch_warnings():
        warnings.simplefilter("always", ConvergenceWarning)
        if spec.default_fit:
            fit = fit_default(
                resp,
                spec.model,
                config or None,
                draws=spec.draws,
                chains=spec.chains,
                tune=spec.tune,
                random_seed=spec.seed,
                progressbar=False,
            )
        else:
            fit = IRTModel(resp, spec.model, config=config).fit(
                "nuts", chains=spec.chains, draws=spec.draws, tune=spec.tune, random_seed=spec.seed
            )
    cpu = _cpu_seconds() - cpu0
    fit_wall = float(fit.fit_info.get("wall_seconds_all", fit.wall_seconds) or 0.0)
    load_avg = round(os.getloadavg()[0], 1)
    ppc = posterior_predictive_check(fit, max_draws=400, random_seed=spec.seed)
    loo_table = _loo_vs_1pl(fit, resp, spec) if loo else None
    out_dir.mkdir(parents=True, exist_ok=True)
    nc = out_dir / f"{spec.name}.nc"
    t_cal = time.perf_counter()
    fit.calibrate(random_seed=spec.seed)  # the calibration score applies by default
    fit.calibration = without_fitted_llms(fit.calibration)
    calibration_seconds = time.perf_counter() - t_cal
    post = fit.posterior
    total = int(post.sizes["draw"])
    if spec.thin is not None:
        thin, compact = spec.thin, False
    else:
        thin, compact = choose_form(post, total * int(post.sizes["chain"]), spec.model)
    compaction = None
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        staged = Path(tmp) / nc.name
        fit.save(staged, items_only=True, thin=thin, compact=compact)
        size = staged.stat().st_size
        # the draws' estimate leaves out the calibration and its population (for
        # thousands of items a few hundred kB): thin further while the file is over the cap
        while size > MAX_FILE_BYTES and spec.thin is None and thin < total:
            thin = max(thin + 1, math.ceil(thin * size / (0.95 * MAX_FILE_BYTES)))
            fit.save(staged, items_only=True, thin=thin, compact=compact)
            size = staged.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ResponsesError(
                f"{spec.name}: {size / 1e6:.1f} MB after thinning by {thin}, over the "
                f"{MAX_FILE_BYTES / 1e6:.0f} MB cap; raise its thinning"
            )
        if thin > 1 or compact:
            full = Path(tmp) / "full.nc"
            fit.save(full, items_only=True, thin=1)
            compaction = compaction_check(full, staged, resp, seed=spec.seed)
        os.replace(staged, nc)
    diag = fit.diagnostics
    assert diag is not None
    card = {
        "name": spec.name,
        "benchmark": spec.benchmark,
        "data": f"../shared/data/{spec.data}",
        "description": spec.description,
        "n_llms": fit.data.n_llms,
        "n_items": fit.data.n_items,
        "subtasks": [str(s) for s in fit.data.subtasks],
        "model": spec.model,
        "default_fit": spec.default_fit,
        "config": fit.config.to_dict(),
        "config_hash": fit.config.hash(),
        "sampler": fit.sampler.to_dict() if fit.sampler else {},
        "attempts": fit.fit_info.get("attempts", []),
        "refits": fit.fit_info.get("refits", []),
        "diagnostics": diag.to_dict(),
        "ppc": ppc.summary,
        "loo": loo_table,
        "wall_seconds": round(fit_wall, 1),
        "cpu_seconds": round(cpu, 1),
        "load_average_1min": load_avg,
        "file_bytes": nc.stat().st_size,
        "thin": thin,
        "compact": compact,
        "saved_draws": int(post.sizes["chain"] * -(-post.sizes["draw"] // thin)),
        "compaction": compaction,
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
        "calibration_sizes": [int(n) for n in fit.calibration.n_observed],
        "calibration_splits": int(fit.calibration.n_splits),
        "build_seconds": round(time.perf_counter() - t_build, 1),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seed": spec.seed,
    }
    text = _card_markdown(card)
    # the card's figures as data, so that a card can be rewritten without refitting
    _write_facts(out_dir / f"{spec.name}.json", card)
    write_atomic(out_dir / f"{spec.name}.md", lambda tmp: tmp.write_text(text))
    return card


def _loo_vs_1pl(fit: Any, resp: Any, spec: ArtifactSpec) -> list[dict[str, Any]]:
    """PSIS-LOO of the fit beside the default 1PL's on the same responses, best first."""
    import numpy as np

    from ..exceptions import ConvergenceWarning
    from .checks import loo, loo_rows
    from .model import fit_default

    with warnings.catch_warnings():
        warnings.simplefilter("always", ConvergenceWarning)
        one = fit_default(
            resp,
            "1pl",
            None,
            chains=spec.chains,
            tune=spec.tune,
            random_seed=spec.seed,
            progressbar=False,
        )
    draws = loo_draws(int(np.isfinite(resp.values).sum()))
    rows = loo_rows({spec.model: loo(fit, max_draws=draws), "1pl": loo(one, max_draws=draws)})
    for r in rows:
        r["converged"] = bool((fit if r["model"] == spec.model else one).converged)
        r["draws"] = draws
    return rows


#: Most (observed cell x draw) values one PSIS-LOO holds: its log-likelihood and weights
#: are several arrays of that size (GSM8K's 1.25 M cells at 400 draws took 24 GB).
LOO_VALUES = 250_000_000


def loo_draws(cells: int, most: int = 400) -> int:
    """Posterior draws for a PSIS-LOO of ``cells`` observed cells: ``most``, fewer where
    ``cells x draws`` would pass :data:`LOO_VALUES` (at least 100). Why: memory."""
    return int(max(100, min(most, LOO_VALUES // max(cells, 1))))


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
    attempts = _attempts_text(c.get("attempts") or [], c.get("refits") or [])
    cal_sizes = "/".join(str(n) for n in c.get("calibration_sizes") or (25, 50, 100, 200))
    build_line = (
        f"the whole build (fit, checks, calibration, compaction check) took "
        f"{c['build_seconds']} s, finished {c['date']}; "
        if c.get("build_seconds") is not None
        else ""
    )
    compaction = _compaction_text(c.get("compaction"), c["thin"], bool(c.get("compact")))
    loo = _loo_text(c.get("loo")) + _choice_text(c.get("benchmark"))
    recalibrated = (
        f" (recalibrated {c['calibration_date']}, `build_models --calibrate`)"
        if c.get("calibration_date")
        else ""
    )
    heldout = _heldout_text(
        c.get("benchmark"),
        # a recalibration changes the procedure the held-out runs measured, as a rebuild does
        built=max(c.get("date") or "", c.get("calibration_date") or "") or None,
        model=_run_label(c),
        default_fit=c.get("default_fit", True),
    )
    if not d["ok"]:
        status_note = (
            "\n**This fit did not converge.** It is shipped marked as such: `load_posterior` "
            "and every command that reads it warn, and `bayes-microbench models` lists it "
            "as unconverged. Its intervals and designs rest on chains that did not "
            "agree; treat them as approximate, or refit with the remedy that `fit` "
            "names.\n"
        )
    else:
        status_note = ""
    form = (
        "in the compact form (item parameters packed as int16 over their range, "
        "`difficulty` recomputed on load; `bayes_microbench/irt/io.py`)"
        if c.get("compact")
        else "float32"
    )
    item_vars = ", ".join(f"`{k}`" for k in c["item_parameters"])
    subtask_vars = ", ".join(f"`{k}`" for k in c["subtask_parameters"])
    ci = percent(DEFAULT_CI_PROB)
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
(1 draw in {c["thin"]} of {s.get("chains")} x {s.get("draws")}), {form},
{c["file_bytes"] / 1e6:.2f} MB. New llms are scored against these draws with
{population} as the prior.

## Sampler
NUTS via {s.get("backend")} (JAX-compiled log density, fused likelihood, one
worker process per chain), the `{c["parameterization"]}` parameterization and the
`auto` mass-matrix adaptation (nutpie's `draw_diag` for `decoupled`, `diag`
otherwise; see `bayes_microbench/irt/model.py`),
{s.get("chains")} chains x ({s.get("tune")} tune + {s.get("draws")} draws), target accept
{s.get("target_accept")}, float32 likelihood, seed {s.get("random_seed")}.
{attempts}
## Diagnostics ({status})
| max R-hat | min bulk ESS | min tail ESS | divergences | min BFMI | mean leapfrog steps |
|---|---|---|---|---|---|
| {d["max_rhat"]:.4f} ({d["worst_rhat"]}) | {d["min_ess_bulk"]:.0f} ({d["worst_ess_bulk"]}) | {d["min_ess_tail"]:.0f} | {d["divergences"]} | {d["min_bfmi"]:.2f} | {d["mean_tree_size"]:.1f} |
{status_note}
## Posterior predictive checks ({p["draws_used"]} draws)
- per-llm accuracy: {p["llm_accuracy_ppp_outside_5_95"]} of {p["n_llms"]} llms with a p-value outside [0.05, 0.95]; mean |observed - predicted| = {p["llm_accuracy_mean_abs_error"]:.4f}
- per-item proportion correct: {p["item_p_correct_ppp_outside_5_95"]} of {p["n_items"]} items outside [0.05, 0.95]; mean |observed - predicted| = {p["item_p_correct_mean_abs_error"]:.4f}
- raw-score distribution: sd observed {p["raw_score_sd_observed"]:.2f}, p-value {p["raw_score_sd_ppp"]:.2f}; {100 * p["sorted_raw_scores_inside_interval"]:.0f}% of the sorted raw scores inside their {ci} predictive band

## Calibration
The file carries a `calibration` group: the split-conformal recalibration of the
IRT predictive of unobserved items (`misfit.estimate_misfit`, item-split
cross-validation on the {c["n_llms"]} llms it was fitted on, in-sample for the items,
random subsets of {cal_sizes} items, {c.get("calibration_splits", 2)} splits, 200 draws, seed {c.get("seed", 0)}), with a
`calibration_hash` checked on load. `score` applies it by default (`--raw-model`
for the raw interval); it took {c.get("calibration_seconds", "?")} s here{recalibrated}. Why in-sample:
`docs/decisions/0002-calibration-saved-with-the-posterior.md`.

## Timing
Sampling wall time {c["wall_seconds"]} s{" over every attempt" if c.get("attempts") else ""} (CPU {c["cpu_seconds"]} s, the fitting process and
its chain workers) on a shared 2-core
machine with 1-minute load average {c["load_average_1min"]} at the end of the fit;
{build_line}bayes_microbench {c["package_version"]}, Python {c["python"]}.
{compaction}{loo}{heldout}"""


_ESS_KEYS = ("min_ess_bulk", "min_ess_tail")


def _attempts_text(attempts: list[dict[str, Any]], refits: Sequence[dict[str, Any]] = ()) -> str:
    """The default fit's refits and the kept fit's draws-extension attempts (empty for one fit)."""
    lines = []
    if len(refits) > 1:
        lines += [
            "",
            "The default fit's refits (`irt.model.fit_default`: the policy's remedies, tried "
            "in order until one converged):",
            "",
            "| settings | parameterization | draws per chain | max R-hat | min bulk ESS | "
            "min tail ESS | divergences | converged |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in refits:
            settings = ", ".join(f"{k}={v}" for k, v in r["settings"].items()) or "defaults"
            if r.get("skipped"):
                lines.append(f"| {settings} | not tried: {r['skipped']} | | | | | | |")
                continue
            tried = ", ".join(str(d) for d in r["draws_tried"])
            # records written before the ESS was kept show "-"
            ess = [f"{r[k]:.0f}" if r.get(k) is not None else "-" for k in _ESS_KEYS]
            lines.append(
                f"| {settings} | {r['parameterization']} | {tried} | {r['max_rhat']:.4f} | "
                f"{ess[0]} | {ess[1]} | {r['divergences']} | {'yes' if r['converged'] else 'no'} |"
            )
    if not attempts:
        return "\n".join(lines) + "\n" if lines else ""
    how = (
        "its chains checked and continued to more draws per chain while only R-hat or ESS "
        "missed, up to the budget; wall seconds so far at each check"
        if attempts[0].get("continued")
        else "refitted with more draws per chain while only R-hat or ESS missed, up to the budget"
    )
    lines += [
        "",
        f"The default fit's attempts (`irt.model.fit_extending_draws`: {how}):",
        "",
        "| draws per chain | max R-hat | min bulk ESS | min tail ESS | divergences | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for a in attempts:
        lines.append(
            f"| {a['draws']} | {a['max_rhat']:.4f} | {a['min_ess_bulk']:.0f} | "
            f"{a['min_ess_tail']:.0f} | {a['divergences']} | {a['wall_seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def _compaction_text(comp: dict[str, Any] | None, thin: int, compact: bool = False) -> str:
    """What thinning (and the compact form) changed in ``score`` and ``mdad``, as the card's section."""
    if not comp:
        return ""
    sizes = ", ".join(str(n) for n in comp["sizes"])
    rows = "\n".join(
        f"| {n} | {a:.1f} [{fb[0]:.1f}, {fb[1]:.1f}] | {b:.1f} [{tb[0]:.1f}, {tb[1]:.1f}] |"
        for n, a, b, fb, tb in zip(
            comp["sizes"],
            comp["mdad_full"],
            comp["mdad_thinned"],
            comp["mdad_band_full"],
            comp["mdad_band_thinned"],
            strict=True,
        )
    )
    ci = percent(DEFAULT_CI_PROB)
    what = "thinning and the compact form" if compact else "thinning"
    packed = ", in the compact form" if compact else ""
    forms = "the reference items-only float32" if compact else "both items-only float32"
    return f"""
## What {what} changes
The file keeps 1 draw in {thin} ({comp["thinned_draws"]} of {comp["full_draws"]}){packed}. Measured
at build time against all {comp["full_draws"]} draws ({forms}, each
with the same calibration, seed 0):

- `score`: {comp["llms"]} of the fitted llms, each observed on a random {comp["observed_items"]} of
  its items, scored with all draws of each file: the posterior mean moved by at most
  {comp["score_mean_max_abs_diff_points"]} accuracy points and the {ci} bounds by at most
  {comp["score_bound_max_abs_diff_points"]} (mean interval width with all draws
  {comp["score_width_full_points"]} points).
- `mdad` (random designs of {sizes} items, the saved population): MDAD moved by at most
  {comp["mdad_max_abs_diff_points"]} points and its {ci} band's ends by at most
  {comp["mdad_band_max_abs_diff_points"]}:

| n | MDAD, all draws [{ci} band] | MDAD, shipped draws [{ci} band] |
|---|---|---|
{rows}
"""


def _run_label(card: dict[str, Any]) -> str:
    """The held-out study's label of a card's model (:func:`~.choice.candidate_label`)."""
    from .choice import candidate_label

    return candidate_label(str(card.get("model", "2pl")), (card.get("config") or {}).get("n_dims"))


def _heldout_text(
    benchmark: str | None,
    results: Path = HELDOUT_RESULTS,
    built: str | None = None,
    *,
    model: str = "2pl",
    default_fit: bool = True,
) -> str:
    """The card's held-out section: the coverage of the default intervals on llms the
    posterior never saw, from ``benchmarks/study_heldout_validation.py``'s saved runs.

    ``built``: the card's build date (``YYYY-MM-DD HH:MM UTC``); runs older than it are
    said to predate the file, whose procedure may have changed since. ``model``: only
    runs that fitted this model (a run without one fitted the 2PL). ``default_fit``:
    False for a file built with settings of its own, which the runs (always the
    default fit) did not use: the section says so.
    """
    runs = []
    if benchmark and results.is_file():
        runs = [
            r
            for r in json.loads(results.read_text()).get("runs", [])
            if r.get("settings", {}).get("benchmark") == benchmark
            and r.get("model", "2pl") == model
        ]
    head = "\n## Held-out coverage\n"
    if not runs:
        return (
            f"{head}Not measured yet for this model ({model}) of this benchmark. "
            "`bayes-microbench validate --responses "
            "DATA.csv` holds llms out, fits on the rest as `fit` does by default and reports the "
            "coverage of `score`'s intervals on the held-out llms; "
            "`benchmarks/study_heldout_validation.py` records it for the report.\n"
        )
    procedure = (
        "The procedure that built this file (the default fit and its calibration)"
        if default_fit
        else "The default procedure of this benchmark (the default fit and its calibration)"
    )
    lines = [
        head,
        f"{procedure}, rerun "
        "with llms held out and scored by default `score` on subsets of each design and size "
        "(`benchmarks/study_heldout_validation.py`; `benchmarks/results/heldout_validation.json` "
        "has the MDAD and ranking checks of the same runs). Coverage of the 90% interval of "
        "the full-benchmark "
        "accuracy (target 0.85-0.95) and mean width in points:",
        "",
        "Where 100 or more llms were fitted, the posterior of these runs carries them (as "
        "`fit` writes one), so since decision 0053 a subset the held-out llms share (a "
        "Bayesian selector's) is calibrated on itself; the shipped file carries none (the "
        "data stay out of the repository), so `score` with it gives such a subset the "
        "random-subset calibration, wider than these rows (`score --calibrate-with` the "
        "benchmark's matrix calibrates it on itself).",
        "",
        "| seed | held out | design | n | coverage | width |",
        "|---|---|---|---|---|---|",
    ]
    older = sorted(
        {
            (r.get("date", "?"), r.get("commit", "?"))
            for r in runs
            if built and r.get("date", "") < built
        }
    )
    if not default_fit:
        lines[2:2] = [
            "",
            "**These runs fitted the default procedure, not this file's own settings** "
            "(its prior, parameterization and draws above).",
        ]
    if older:
        when = "; ".join(f"{d} (commit {c})" for d, c in older)
        lines[2:2] = [
            "",
            f"**These runs predate this file** (runs of {when}; file built or last "
            f"recalibrated {built}): they "
            "measure the default procedure of then, which may differ from the one that built "
            "this file (its fit and refits above).",
        ]
    for r in runs:
        st = r["settings"]
        for row in r.get("scores", []):
            lines.append(
                f"| {st.get('random_seed')} | {st.get('held_out')} | {row['design']} | "
                f"{row['n']} | {row['coverage']:.3f} | {100 * row['width']:.1f} |"
            )
    checks = [_design_check(r) for r in runs if r.get("mdad")]
    if checks:
        lines += [
            "",
            "Designs, the same runs: the held-out llms' realized MDAD against the predicted one "
            "per design and size (target: inside the simulated studies' 90% band in at least "
            f"85% of rows, within 1 point): {'; '.join(checks)}.",
        ]
    unconverged = [
        f"seed {r['settings'].get('random_seed')} ({f.get('note') or 'not converged'})"
        for r in runs
        for f in r.get("fits", [])
        if f.get("converged") is False
    ]
    if unconverged:
        lines += [
            "",
            "**A training fit did not converge** and its figures rest on it: "
            f"{'; '.join(unconverged)}.",
        ]
    return "\n".join(lines) + "\n"


def _design_check(run: dict[str, Any]) -> str:
    """One run's MDAD check (:func:`~bayes_microbench.validate.mdad_check`) as a phrase."""
    from ..validate import mdad_check

    rows = run["mdad"]
    inside, close = mdad_check(rows)
    return (
        f"seed {run['settings'].get('random_seed')}: inside in {inside} of {len(rows)} rows, "
        f"within 1 point in {close}"
    )


def rewrite_cards(out_dir: Path = MODELS) -> list[str]:
    """Re-render every card ``NAME.md`` from its ``NAME.json`` (and the held-out runs).

    Why: the cards' held-out section changes when the study reruns; the fit need not.
    """
    from ..io import write_atomic

    done = []
    for facts_path in sorted(out_dir.glob("*.json")):
        card = json.loads(facts_path.read_text())
        text = _card_markdown(card)

        def write(tmp: Path, text: str = text) -> int:
            return tmp.write_text(text)

        write_atomic(facts_path.with_suffix(".md"), write)
        done.append(facts_path.stem)
    return done


def _loo_text(rows: list[dict[str, Any]] | None) -> str:
    """The PSIS-LOO comparison with the 1PL, as the card's section."""
    if not rows:
        return ""
    body = "\n".join(
        f"| {r['model']} | {r['elpd_loo']:.1f} | {r['se']:.1f} | {r['elpd_diff']:.1f} | "
        f"{r['dse']:.1f} | {r['cells_pareto_k_over_0.7']} | {'yes' if r['converged'] else 'no'} |"
        for r in rows
    )
    return f"""
## Model choice: PSIS-LOO against the 1PL
This file's fit and the default 1PL on the same responses (`irt.checks.loo_rows`,
{rows[0].get("draws", 400)} draws), best first:

| model | elpd_loo | SE | elpd_diff | dse | cells k > 0.7 | converged |
|---|---|---|---|---|---|---|
{body}
{_pareto_note(rows)}"""


def _choice_text(benchmark: str | None, results: Path = CHOICE_RESULTS) -> str:
    """The card's comparison with every candidate of ``fit --model auto``, where measured.

    From ``benchmarks/study_model_choice.py``'s saved rows for ``benchmark``: each
    candidate's PSIS-LOO, convergence and fit time, and what the rule kept and why.
    Why: the multidimensional candidates are fitted there, once per benchmark, not
    by the build.
    """
    runs = []
    if benchmark and results.is_file():
        runs = [
            r for r in json.loads(results.read_text()).get("rows", []) if r["data"] == benchmark
        ]
    if not runs:
        return ""
    run = max(runs, key=lambda r: r.get("date", ""))
    body = "\n".join(
        f"| {r['candidate']} | {r['elpd_loo']:.1f} | {r['elpd_diff']:.1f} | {r['dse']:.1f} | "
        f"{'yes' if r['converged'] else 'no: ' + '; '.join(r['problems'][:1])} | "
        f"{r['wall_seconds']:.0f} |"
        for r in run["rows"]
    )
    return f"""
## Model choice: every candidate of `fit --model auto`
`benchmarks/study_model_choice.py` (run {run.get("date", "?")}, commit {run.get("commit", "?")},
seed {run["seed"]}) fitted each candidate as `fit` does by default and ranked them by
PSIS-LOO ({run["candidates"]}), best first:

| candidate | elpd_loo | elpd_diff | dse | converged | fit s |
|---|---|---|---|---|---|
{body}

Kept: **{run["chosen"]}**: {run["why"]} (the rule: docs/decisions/0029; an
unconverged candidate's LOO is not evidence).
"""


#: Largest share of cells with Pareto k > 0.7 at which a card calls a clear LOO ranking
#: settled: PSIS overstates the elpd of the model those cells belong to.
PARETO_SHARE_OK = 0.005


def _pareto_note(rows: list[dict[str, Any]]) -> str:
    """A line on the cells where PSIS is unreliable (Pareto k > 0.7), when there are any."""
    worst = max(rows, key=lambda r: r["cells_pareto_k_over_0.7"])
    bad, cells = worst["cells_pareto_k_over_0.7"], worst.get("cells")
    if not bad or not cells:
        return ""
    # the runner-up's gap to the best, in standard errors of the difference
    gaps = [abs(r["elpd_diff"]) / r["dse"] for r in rows if r["elpd_diff"] and r["dse"] > 0]
    share = bad / cells
    trails = f"the runner-up trails by {min(gaps):.0f} standard errors, " if gaps else ""
    if gaps and min(gaps) > 10.0 and share <= PARETO_SHARE_OK:
        verdict = f"{trails}so the ranking stands"
    else:
        caveat = "but unreliable cells overstate the model they belong to, so " if gaps else ""
        verdict = (
            f"{trails}{caveat}the ranking is indicative only; K-fold cross-validation would "
            "settle it"
        )
    return (
        f"\nPareto k > 0.7 in {bad} of {cells} cells ({100 * share:.1f}%, the "
        f"{worst['model']}): PSIS-LOO is unreliable in those cells (answers so influential "
        f"that leaving one out moves the posterior further than importance sampling can "
        f"follow); {verdict}.\n"
    )


def _write_facts(path: Path, facts: dict[str, Any]) -> None:
    """Write a card's facts file (``NAME.json``, what ``--cards`` renders), atomically."""
    from ..io import write_atomic

    text = json.dumps(facts, indent=1, default=float) + "\n"
    write_atomic(path, lambda tmp: tmp.write_text(text))


def without_fitted_llms(misfit: Any) -> Any:
    """The calibration without the fitted llms' responses (``Misfit.training``).

    Why: a shipped file would otherwise hold the shared matrices' responses, which
    never go into the repository; its subsets keep the random-subset calibration
    (docs/decisions/0053-a-shared-subset-calibrated-on-itself.md).
    """
    import dataclasses

    return dataclasses.replace(misfit, training=None)


def calibrate_artifact(spec: ArtifactSpec, *, out_dir: Path = MODELS) -> dict[str, Any]:
    """Compute an existing artifact's calibration from its data and write it into the file.

    Its figures (time, sizes, splits) go into the card's facts file too, which
    ``--cards`` renders.
    """
    import time

    from ..io import load_responses
    from .calibration import calibrate_fitted
    from .io import add_calibration, load_posterior

    path = out_dir / f"{spec.name}.nc"
    resp = load_responses(DATA / spec.data)
    start = time.perf_counter()
    misfit = without_fitted_llms(
        calibrate_fitted(load_posterior(path), resp, random_seed=spec.seed)
    )
    seconds = time.perf_counter() - start
    add_calibration(path, misfit)
    figures = {
        "calibration_date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "calibration_seconds": round(seconds, 1),
        "calibration_sizes": [int(n) for n in misfit.n_observed],
        "calibration_splits": int(misfit.n_splits),
        "file_bytes": path.stat().st_size,
    }
    facts_path = path.with_suffix(".json")
    if facts_path.is_file():  # the card (``--cards``) renders the new calibration's figures
        _write_facts(facts_path, json.loads(facts_path.read_text()) | figures)
    return {"name": spec.name} | figures


INDEX_BEGIN = "<!-- BEGIN models table (written by build_models) -->"
INDEX_END = "<!-- END models table -->"


def write_index(out_dir: Path = MODELS) -> str:
    """Rewrite the table of ``models/README.md`` from the files present; return the table.

    One row per ``.nc``: name, the key that resolves to it, llms x items, model,
    saved draws, calibrated, converged, size, build time (from its card's facts).
    """
    from ..io import write_atomic
    from ..shipped import model_info, shipped_files

    rows = [
        "| name | `--posterior` alias | benchmark | llms x items | model | draws | calibrated "
        "| converged | MB | build s | card |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, path in shipped_files(out_dir).items():
        info = model_info(path)
        facts_path = path.with_suffix(".json")
        facts = json.loads(facts_path.read_text()) if facts_path.is_file() else {}
        title = BENCHMARKS[info["benchmark"]].title if info["benchmark"] in BENCHMARKS else ""
        conv = {True: "yes", False: "**no**", None: "unknown"}[info["converged"]]
        rows.append(
            f"| `{name}` | {', '.join(f'`{a}`' for a in info['aliases']) or '-'} | "
            f"{title or info['benchmark']} | {info['n_llms']} x {info['n_items']} | "
            f"{info['model']} | {info['draws']} | {'yes' if info['calibrated'] else 'no'} | "
            f"{conv} | {info['file_bytes'] / 1e6:.1f} | {facts.get('build_seconds', '-')} | "
            f"[{name}.md]({name}.md) |"
        )
    table = "\n".join(rows)
    readme = out_dir / "README.md"
    text = readme.read_text() if readme.is_file() else ""
    if INDEX_BEGIN in text and INDEX_END in text:
        head, rest = text.split(INDEX_BEGIN, 1)
        tail = rest.split(INDEX_END, 1)[1]
        new = f"{head}{INDEX_BEGIN}\n{table}\n{INDEX_END}{tail}"
        write_atomic(readme, lambda tmp: tmp.write_text(new))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", help=f"artifacts to build (default all: {list(ARTIFACTS)})"
    )
    parser.add_argument(
        "--only",
        metavar="NAME",
        action="append",
        default=[],
        help="build only this artifact (a file name such as musr-2pl, or a benchmark key "
        "such as musr; repeatable)",
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="only compute the calibration of the existing artifacts and write it in",
    )
    parser.add_argument(
        "--loo",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also fit the default 1PL and compare the two by PSIS-LOO in the card "
        "(the default; --no-loo skips it)",
    )
    parser.add_argument(
        "--cards",
        action="store_true",
        help="only re-render every card from its NAME.json (e.g. after the held-out study reran)",
    )
    parser.add_argument(
        "--index",
        action="store_true",
        help="only rewrite the table of models/README.md from the files present",
    )
    args = parser.parse_args(argv)
    if args.cards:
        print(json.dumps(rewrite_cards()))
        return 0
    if args.index:
        print(write_index())
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    wanted = [*args.names, *args.only] or list(ARTIFACTS)
    specs = []
    for name in wanted:
        try:
            specs.append(spec_for(name))
        except KeyError:
            parser.error(
                f"unknown artifact {name!r}; known: {', '.join(ARTIFACTS)} "
                f"(or a benchmark key: {', '.join(BENCHMARKS)})"
            )
    for spec in specs:
        if args.calibrate:
            print(json.dumps(calibrate_artifact(spec)))
            continue
        card = build(spec, loo=args.loo)
        keys = ("name", "wall_seconds", "build_seconds", "file_bytes", "thin")
        print(json.dumps({k: card[k] for k in keys} | {"converged": card["diagnostics"]["ok"]}))
    write_index()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""Model choice by PSIS-LOO: fit each candidate by default, rank them, keep what the data choose.

Behind ``bayes-microbench fit --model auto`` and ``check --responses``. The
candidates are written ``1pl``, ``2pl``, ``3pl`` or ``2pl-md:D`` (the
multidimensional 2PL with D ability dimensions), simplest first. The rule
(:data:`RULE`) prefers the simpler of two converged fits unless the richer one
predicts held-out cells clearly better; why: a richer model that LOO cannot
tell apart from a simpler one buys slower sampling and wider posteriors for
nothing, and an unconverged fit's LOO is not evidence (docs/decisions/0029).
"""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
from pathlib import Path
from typing import Any

from .._validate import param
from ..exceptions import ConfigurationError, ConvergenceWarning
from ..responses import Responses

logger = logging.getLogger(__name__)

#: What ``auto`` compares, simplest first.
DEFAULT_CANDIDATES = ("1pl", "2pl", "2pl-md:2", "2pl-md:3", "2pl-md:4")
#: An elpd difference below this is small whatever its standard error (LOO's usual threshold).
SMALL_ELPD = 4.0
#: A richer model is chosen only when it beats the simpler one by this many dse too.
DSE_MULTIPLE = 2.0
RULE = (
    f"the simplest converged candidate whose PSIS-LOO elpd is within {SMALL_ELPD:g} or "
    f"{DSE_MULTIPLE:g} standard errors of the difference of the best converged "
    "candidate's; unconverged candidates are ranked but never chosen unless none converged"
)


def parse_candidate(text: str) -> tuple[str, dict[str, Any]]:
    """``"2pl-md:3"`` -> ``("2pl-md", {"n_dims": 3})``; ``"2pl"`` -> ``("2pl", {})``.

    Parameters
    ----------
    text
        A candidate as written in ``candidates``.

    Returns
    -------
    The model name and the configuration entries it sets.
    """
    name, _, dims = text.strip().partition(":")
    if name == "2pl-md":
        try:
            n_dims = int(dims or 2)
        except ValueError:
            n_dims = 0
        if n_dims < 1:
            raise ConfigurationError(
                f"{param('candidates')}: {text!r}: the dimensions of 2pl-md must be a whole "
                "number >= 1 (e.g. 2pl-md:2)"
            )
        return name, {"n_dims": n_dims}
    if name in ("1pl", "2pl", "3pl") and not dims:
        return name, {}
    raise ConfigurationError(
        f"{param('candidates')}: {text!r} is not a model; expected 1pl, 2pl, 3pl or "
        "2pl-md:D (e.g. 2pl-md:2)"
    )


def candidate_label(model: str, n_dims: int | None = None) -> str:
    """The short name of a fitted model: ``2pl-md:D`` where D is not the default 2.

    Parameters
    ----------
    model
        ``1pl``, ``2pl``, ``3pl`` or ``2pl-md``.
    n_dims
        The ``2pl-md``'s ability dimensions (None: the default).

    Returns
    -------
    ``model`` itself, or ``2pl-md:D``; the held-out runs and the model cards match by it.
    """
    return model if model != "2pl-md" or n_dims in (None, 2) else f"{model}:{n_dims}"


def parse_candidates(texts: Any = None) -> list[str]:
    """Candidates from a comma-separated string or a sequence (None: :data:`DEFAULT_CANDIDATES`),
    checked, duplicates refused."""
    if texts is None:
        texts = DEFAULT_CANDIDATES
    items = [t.strip() for t in texts.split(",")] if isinstance(texts, str) else list(texts)
    items = [t for t in items if t]
    for t in items:
        parse_candidate(t)
    if len(items) < 2:
        raise ConfigurationError(
            f"{param('candidates', ','.join(items))}: give at least two models to choose between"
        )
    if len(set(items)) != len(items):
        raise ConfigurationError(f"{param('candidates', ','.join(items))}: names a model twice")
    return items


def choose(rows: list[dict[str, Any]], order: list[str]) -> tuple[str, str]:
    """Apply :data:`RULE` to ranked LOO rows; return the chosen candidate and why.

    Parameters
    ----------
    rows
        :func:`~bayes_microbench.irt.checks.loo_rows` of the converged candidates
        (``candidate``, ``elpd_loo``, ``elpd_diff``, ``dse`` to the best of them), best
        first; may be empty.
    order
        Every candidate, simplest first.

    Returns
    -------
    The chosen candidate and one sentence saying why; ``("", ...)`` when ``rows`` is empty.
    """
    if not rows:
        return "", "no candidate converged"
    best = rows[0]
    by_name = {r["candidate"]: r for r in rows}
    for name in order:
        r = by_name.get(name)
        if r is None:
            continue
        gap = best["elpd_loo"] - r["elpd_loo"]
        if name == best["candidate"]:
            return name, (
                f"{name} has the highest elpd of the converged candidates "
                f"({best['elpd_loo']:.1f}) and no simpler one is within "
                f"{SMALL_ELPD:g} or {DSE_MULTIPLE:g} dse of it"
            )
        if gap <= SMALL_ELPD or gap <= DSE_MULTIPLE * r["dse"]:
            return name, (
                f"{name} is within {gap:.1f} elpd (dse {r['dse']:.1f}) of the best converged "
                f"candidate, {best['candidate']}, and simpler"
            )
    raise AssertionError("the best row is always among the candidates")  # pragma: no cover


def compare_candidates(
    responses: Responses,
    candidates: Any = DEFAULT_CANDIDATES,
    *,
    config: dict[str, Any] | None = None,
    draws: int | None = None,
    max_draws: int = 400,
    store: str | os.PathLike[str] | None = None,
    **fit_kwargs: Any,
) -> tuple[Any, dict[str, Any]]:
    """Fit every candidate as ``fit`` does by default, rank them by PSIS-LOO, choose by :data:`RULE`.

    Parameters
    ----------
    responses
        The responses to fit.
    candidates
        Models to compare (see :func:`parse_candidate`), simplest first.
    config
        Configuration entries for every candidate (e.g. ``discrimination_prior``);
        entries a model does not use are left out for it.
    draws
        Draws per chain of every NUTS fit; ``None`` extends them as the default fit
        does (:func:`~bayes_microbench.irt.model.fit_default`).
    max_draws
        Posterior draws per PSIS-LOO.
    store
        A folder for each candidate's fit (``NAME.nc``), its PSIS-LOO (``NAME.loo.nc``)
        and its record (``NAME.json``, written last). With it, each fit leaves memory
        once its LOO is taken (the chosen one is read back at the end), and a
        comparison that was stopped resumes: a candidate whose record names these
        responses and settings is read, not refitted.
    **fit_kwargs
        Passed to each fit (``chains``, ``tune``, ``random_seed``, ``progressbar`` ...).

    Returns
    -------
    The chosen fitted :class:`~bayes_microbench.irt.IRTModel` (its ``fit_info["model_choice"]``
    holds the report) and the report: ``rule``, ``rows`` (every candidate, best
    elpd first, with ``converged``, ``wall_seconds`` and ``from_store``), ``chosen``, ``why``.

    Why: which IRT model a benchmark needs is a property of its data (GPQA: a second
    ability dimension; MMLU: the 2PL), so the tool measures it instead of assuming it.
    """
    from .checks import loo, loo_rows
    from .model import IRTModel

    order = parse_candidates(candidates)
    folder = None if store is None else Path(store)
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    fits: dict[str, Any] = {}
    elpd: dict[str, Any] = {}
    records: dict[str, dict[str, Any]] = {}
    for name in order:
        model, entries = parse_candidate(name)
        cfg = dict(config or {})
        if model == "2pl-md" or model == "1pl":
            cfg.pop("discrimination_prior", None)
        if model != "3pl":
            cfg.pop("n_options", None)
        cfg.update(entries)
        settings = _settings(responses, name, cfg, draws, max_draws, fit_kwargs)
        kept = None if folder is None else _read_candidate(folder, name, settings)
        if kept is not None:
            elpd[name], records[name] = kept
            logger.info("candidate %s: read from %s", name, folder)
            continue
        start = time.perf_counter()
        fit = _fit_candidate(responses, model, cfg, draws, fit_kwargs)
        wall = round(time.perf_counter() - start, 1)
        elpd[name] = loo(fit, max_draws=max_draws)
        records[name] = {
            "settings": settings,
            "converged": bool(fit.converged),
            "problems": fit.convergence_problems(),
            "wall_seconds": wall,
            "from_store": False,
        }
        logger.info(
            "candidate %s: %s in %.0f s, elpd_loo %.1f",
            name,
            "converged" if fit.converged else "NOT converged",
            wall,
            float(elpd[name].elpd),
        )
        if folder is None:
            fits[name] = fit
        else:
            _write_candidate(folder, name, fit, elpd[name], records[name])
            del fit
    rows = loo_rows(elpd, key="candidate")
    for r in rows:
        rec = records[r["candidate"]]
        r.update({k: rec[k] for k in ("converged", "problems", "wall_seconds", "from_store")})
    good = [n for n in order if records[n]["converged"]]
    if len(good) > 1:
        chosen, why = choose(loo_rows({n: elpd[n] for n in good}, key="candidate"), order)
    elif good:
        chosen, why = good[0], f"{good[0]} is the only candidate that converged"
    else:
        chosen = rows[0]["candidate"]
        why = f"no candidate converged; {chosen} has the highest elpd and is kept unconverged"
        logger.warning("model choice: %s", why)
    report = {
        "rule": RULE,
        "candidates": order,
        "rows": rows,
        "chosen": chosen,
        "why": why,
        "max_draws": max_draws,
    }
    if folder is None:
        best = fits[chosen]
    else:
        best = IRTModel.load(folder / f"{_file_stem(chosen)}.nc", responses=responses)
    best.fit_info["model_choice"] = report
    return best, report


def _fit_candidate(
    responses: Responses,
    model: str,
    cfg: dict[str, Any],
    draws: int | None,
    fit_kwargs: dict[str, Any],
) -> Any:
    """One candidate fitted as ``fit`` does (draws extended when ``draws`` is None)."""
    from .model import IRTModel, fit_default
    from .policy import prior_choice

    cfg = dict(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # recorded per candidate
        if draws is None:
            return fit_default(responses, model, cfg or None, **fit_kwargs)
        # draws given: no refits, but the data still choose the 2PL's prior
        prior_chosen = prior_choice(
            responses.values, model, cfg, fit_kwargs.get("parameterization", "auto")
        )
        if prior_chosen is not None:
            cfg["discrimination_prior"] = prior_chosen["prior"]
        fit = IRTModel(responses, model, config=cfg or None)
        fit.fit("nuts", draws=draws, **fit_kwargs)
        if prior_chosen is not None:
            fit.fit_info["prior_choice"] = prior_chosen
        return fit


def _file_stem(name: str) -> str:
    """A candidate's file name in a store: ``2pl-md:3`` -> ``2pl-md-3``."""
    return name.replace(":", "-")


def _settings(
    responses: Responses,
    name: str,
    cfg: dict[str, Any],
    draws: int | None,
    max_draws: int,
    fit_kwargs: dict[str, Any],
) -> dict[str, Any]:
    """What a stored candidate must match to be reused (JSON-ready)."""
    fit = {k: v for k, v in sorted(fit_kwargs.items()) if k != "progressbar"}
    settings = {
        "candidate": name,
        "responses": responses.fingerprint(),
        "config": cfg,
        "draws": draws,
        "max_draws": max_draws,
        "fit": fit,
    }
    return json.loads(json.dumps(settings, default=str))


def _write_candidate(folder: Path, name: str, fit: Any, res: Any, record: dict[str, Any]) -> None:
    """Save a candidate's fit and PSIS-LOO, then its record (what marks it complete)."""
    import xarray as xr

    from ..io import write_atomic

    stem = _file_stem(name)
    fit.save(folder / f"{stem}.nc")
    scalars = {f: _plain(getattr(res, f)) for f in _LOO_SCALARS}
    ds = xr.Dataset({"elpd_i": res.elpd_i, "pareto_k": res.pareto_k})
    ds.attrs["scalars_json"] = json.dumps(scalars, default=float)
    write_atomic(folder / f"{stem}.loo.nc", ds.to_netcdf)
    text = json.dumps(record, indent=1, default=float)
    write_atomic(folder / f"{stem}.json", lambda tmp: tmp.write_text(text))


def _read_candidate(
    folder: Path, name: str, settings: dict[str, Any]
) -> tuple[Any, dict[str, Any]] | None:
    """A stored candidate's PSIS-LOO and record, or None where absent or made otherwise."""
    import xarray as xr
    from arviz_stats.utils import ELPDDataLOO

    stem = _file_stem(name)
    paths = [folder / f"{stem}{ext}" for ext in (".json", ".loo.nc", ".nc")]
    if not all(p.exists() for p in paths):
        return None
    record = json.loads(paths[0].read_text())
    if record.get("settings") != settings:
        logger.info("candidate %s: the stored fit was made otherwise; fitting again", name)
        return None
    with xr.open_dataset(paths[1]) as ds:
        ds = ds.load()
    scalars = json.loads(ds.attrs["scalars_json"])
    res = ELPDDataLOO(
        **scalars, elpd_i=ds["elpd_i"], pareto_k=ds["pareto_k"], approx_posterior=False
    )
    return res, dict(record, from_store=True)


def _plain(value: Any) -> Any:
    """A numpy scalar as its Python value (JSON keeps ints ints); others as they are."""
    return value.item() if hasattr(value, "item") else value


#: The scalar fields of a PSIS-LOO result a store keeps beside its pointwise values.
_LOO_SCALARS = ("elpd", "se", "p", "n_samples", "n_data_points", "scale", "warning", "good_k")

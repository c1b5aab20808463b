"""Posterior predictive checks and LOO model comparison of fitted IRT models.

Both work on any fitted object with ``.posterior`` (``ability`` (chain, draw,
llm), ``discrimination``, ``intercept``, optional ``guessing``; for the
multidimensional 2PL ``ability`` (chain, draw, llm, dim) and ``discrimination``
(chain, draw, item, dim), with ``logit P = ability . discrimination +
intercept``) and the observed
matrix (an :class:`IRTModel`, or a :class:`FittedIRT` that kept its
``observed_data``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from .._defaults import DEFAULT_CI_PROB
from .._validate import param, step
from ..exceptions import ConfigurationError
from ..response_model import logit_md, loglik, prob

logger = logging.getLogger(__name__)


#: (draws x) cells per vectorized block of the checks (about 32 MB of float64 each).
_CHUNK_CELLS = 4_000_000
#: Fewest posterior draws a posterior predictive check uses: its p-values move in steps
#: of 1 / draws, and one outside [0.05, 0.95] needs at least 20 to be seen at all.
MIN_PPC_DRAWS = 20
#: Fewest posterior draws of a PSIS-LOO: the Pareto fit of each cell's weights uses the
#: largest ``min(S / 5, 3 sqrt(S))`` of them (30 of 100), and ``psis_weights`` compares
#: the largest ``FLAT_TOP``.
MIN_LOO_DRAWS = 100


def _require_draws(fit: Any, max_draws: int, need: int, what: str) -> None:
    """One line refusing ``what`` when fewer than ``need`` posterior draws would be used.

    Why: a MAP fit has one draw, on which a predictive p-value is 0, 0.5 or 1 and
    the Pareto smoothing of LOO fails (numpy's "kth out of bounds").
    """
    post = fit.posterior
    total = int(post.sizes["chain"] * post.sizes["draw"])
    used = len(range(0, total, max(1, int(np.ceil(total / max_draws)))))
    if used >= need:
        return
    name = str(getattr(fit, "path", "this posterior"))
    if total < need:
        kind = " (a MAP point estimate)" if total == 1 else ""
        nuts = step("bayes-microbench fit --method nuts", "IRTModel.fit(method='nuts')")
        raise ConfigurationError(
            f"{name}: has {total} posterior draw(s){kind}; {what} needs at least {need}: "
            f"check a fit with draws ({nuts}, or method 'laplace' / 'pathfinder' for an "
            "approximate one)"
        )
    raise ConfigurationError(
        f"{param('max_draws', max_draws)}: {what} of {name} would use {used} of its {total} "
        f"draws; it needs at least {need}: use {param('max_draws', need)} or more"
    )


def _draws(post: xr.Dataset, max_draws: int) -> dict[str, np.ndarray]:
    """Item/llm parameters stacked over (chain, draw), thinned to at most ``max_draws``."""
    if "ability" not in post:
        raise ConfigurationError(
            "this posterior has no 'ability' (an items-only artifact); checks need a full fit"
        )
    n = post.sizes["chain"] * post.sizes["draw"]
    step = max(1, int(np.ceil(n / max_draws)))

    def flat(name: str) -> np.ndarray:
        da = post[name]
        vals = np.asarray(da.values, dtype=np.float64)
        return vals.reshape(n, *vals.shape[2:])[::step]

    out = {k: flat(k) for k in ("ability", "discrimination", "intercept")}
    out["guessing"] = flat("guessing") if "guessing" in post else np.zeros_like(out["intercept"])
    out["thin_step"] = np.array(step)
    return out


def _observed(fit: Any) -> np.ndarray:
    tree = fit.idata
    if "observed_data" not in tree.children:
        raise ConfigurationError(
            "this posterior has no observed_data group (an items-only artifact); "
            "checks need the fitted responses"
        )
    return np.asarray(tree["observed_data"]["correct"].values, dtype=np.float64)


def _p_correct(d: dict[str, np.ndarray], s: int | slice) -> np.ndarray:
    """P(correct) of every (llm, item) under draw ``s`` ``(L, I)``, or draws ``s`` ``(S, L, I)``."""
    ab, a, e = d["ability"][s], d["discrimination"][s], d["intercept"][s]
    if d["ability"].ndim == 2:  # 1-D: a slope-intercept logit is the md one with D = 1
        ab, a = ab[..., None], a[..., None]
    return prob(logit_md(ab, a, e), d["guessing"][s][..., None, :])


def _ppp(rep: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """Mid posterior predictive p-value P(T_rep > T_obs) + P(T_rep = T_obs) / 2."""
    return np.mean(rep > obs, axis=0) + 0.5 * np.mean(rep == obs, axis=0)


@dataclass(frozen=True)
class PPCResult:
    """Posterior predictive checks: per-llm, per-item and raw-score statistics.

    ``llm`` and ``item`` hold observed values, predictive means, predictive
    intervals at ``ci_prob`` (dim ``ci_bound``; default 90%) and mid p-values
    (``ppp``); ``scores`` holds the raw-score distribution checks. ``summary`` is
    JSON-ready.
    """

    llm: xr.Dataset
    item: xr.Dataset
    scores: xr.Dataset
    summary: dict[str, Any]


def posterior_predictive_check(
    fit: Any, *, max_draws: int = 400, ci_prob: float = DEFAULT_CI_PROB, random_seed: int | None = 0
) -> PPCResult:
    """Replicate the response matrix from the posterior and compare it with the data.

    Parameters
    ----------
    fit
        A fitted ``IRTModel`` (or ``FittedIRT`` with observed data).
    max_draws
        Posterior draws used (thinned evenly).
    ci_prob
        Probability of the predictive intervals (default :data:`DEFAULT_CI_PROB`).
    random_seed
        Seed of the replicated responses.

    Returns
    -------
    PPCResult
        Per llm: observed accuracy vs replicated; per item: observed proportion
        correct vs replicated; raw scores (number correct per llm): the sorted
        score curve and the score sd, each with its p-value. A p-value near 0
        or 1 flags misfit; ``summary`` counts llms/items outside [0.05, 0.95].

    Raises
    ------
    ConfigurationError
        Fewer than :data:`MIN_PPC_DRAWS` draws would be used (e.g. a MAP fit).
    """
    y = _observed(fit)
    obs = ~np.isnan(y)
    _require_draws(fit, max_draws, MIN_PPC_DRAWS, "a posterior predictive check")
    d = _draws(fit.posterior, max_draws)
    n_s = d["ability"].shape[0]
    rng = np.random.default_rng(random_seed)
    n_obs_llm = obs.sum(axis=1)
    n_obs_item = obs.sum(axis=0)
    acc_obs = np.nansum(y, axis=1) / n_obs_llm
    item_obs = np.nansum(y, axis=0) / n_obs_item
    score_obs = np.nansum(y, axis=1)
    acc_rep = np.empty((n_s, y.shape[0]))
    item_rep = np.empty((n_s, y.shape[1]))
    sorted_rep = np.empty((n_s, y.shape[0]))
    chunk = max(1, _CHUNK_CELLS // max(1, y.size))
    for start in range(0, n_s, chunk):  # vectorized over draws, chunked to bound memory
        sl = slice(start, min(n_s, start + chunk))
        p = _p_correct(d, sl)  # (s, L, I); uniforms in the order of a loop over draws
        yr = (rng.random(p.shape) < p) & obs
        scores = yr.sum(axis=2)
        acc_rep[sl] = scores / n_obs_llm
        item_rep[sl] = yr.sum(axis=1) / n_obs_item
        sorted_rep[sl] = np.sort(scores, axis=1)
    lo, hi = (1 - ci_prob) / 2, 1 - (1 - ci_prob) / 2
    bounds = xr.DataArray(["lower", "upper"], dims="ci_bound")

    def band(rep: np.ndarray, dim: str) -> xr.DataArray:
        q = np.quantile(rep, [lo, hi], axis=0)
        return xr.DataArray(q.T, dims=(dim, "ci_bound")).assign_coords(ci_bound=bounds)

    llm_ds = xr.Dataset(
        {
            "observed": ("llm", acc_obs),
            "predicted": ("llm", acc_rep.mean(axis=0)),
            "interval": band(acc_rep, "llm"),
            "ppp": ("llm", _ppp(acc_rep, acc_obs)),
        },
        coords={"llm": fit.posterior["llm"].values},
    )
    item_ds = xr.Dataset(
        {
            "observed": ("item", item_obs),
            "predicted": ("item", item_rep.mean(axis=0)),
            "interval": band(item_rep, "item"),
            "ppp": ("item", _ppp(item_rep, item_obs)),
        },
        coords={"item": fit.posterior["item"].values},
    )
    sorted_obs = np.sort(score_obs)
    rank = np.arange(y.shape[0])
    sd_rep = sorted_rep.std(axis=1)
    sd_obs = float(score_obs.std())
    scores_ds = xr.Dataset(
        {
            "observed": ("rank", sorted_obs),
            "predicted": ("rank", sorted_rep.mean(axis=0)),
            "interval": band(sorted_rep, "rank"),
            "sd_observed": ((), sd_obs),
            "sd_ppp": ((), float(_ppp(sd_rep[:, None], np.array([sd_obs]))[0])),
        },
        coords={"rank": rank},
    )
    for ds in (llm_ds, item_ds, scores_ds):
        ds["interval"].attrs.update({"ci_kind": "eti", "ci_prob": ci_prob})

    def outside(ppp: np.ndarray) -> int:
        return int(np.sum((ppp < 0.05) | (ppp > 0.95)))

    in_band = float(
        np.mean(
            (sorted_obs >= scores_ds["interval"].sel(ci_bound="lower").values)
            & (sorted_obs <= scores_ds["interval"].sel(ci_bound="upper").values)
        )
    )
    summary = {
        "draws_used": int(n_s),
        "llm_accuracy_ppp_outside_5_95": outside(llm_ds["ppp"].values),
        "item_p_correct_ppp_outside_5_95": outside(item_ds["ppp"].values),
        "n_llms": int(y.shape[0]),
        "n_items": int(y.shape[1]),
        "llm_accuracy_mean_abs_error": float(np.mean(np.abs(llm_ds["predicted"] - acc_obs))),
        "item_p_correct_mean_abs_error": float(np.mean(np.abs(item_ds["predicted"] - item_obs))),
        "raw_score_sd_observed": sd_obs,
        "raw_score_sd_ppp": float(scores_ds["sd_ppp"]),
        "sorted_raw_scores_inside_interval": in_band,
    }
    return PPCResult(llm=llm_ds, item=item_ds, scores=scores_ds, summary=summary)


def log_likelihood(fit: Any, *, max_draws: int = 400) -> xr.DataTree:
    """A DataTree with ``posterior`` and pointwise ``log_likelihood`` (dim ``cell``).

    Each observed (llm, item) cell is one observation; draws are thinned
    evenly to at most ``max_draws`` per chain-set (memory: draws x cells x 4 bytes).
    """
    y = _observed(fit)
    rows, cols = np.nonzero(~np.isnan(y))
    yk = y[rows, cols]
    post = fit.posterior
    n_chain = post.sizes["chain"]
    per_chain = max(1, max_draws // n_chain)
    step = max(1, int(np.ceil(post.sizes["draw"] / per_chain)))
    post = post.isel(draw=slice(None, None, step))
    n_draw = post.sizes["draw"]
    ab = np.asarray(post["ability"].values, dtype=np.float64)
    a = np.asarray(post["discrimination"].values, dtype=np.float64)
    e = np.asarray(post["intercept"].values, dtype=np.float64)
    g = np.asarray(post["guessing"].values, dtype=np.float64) if "guessing" in post else None
    n = n_chain * n_draw
    ab, a, e = ab.reshape(n, *ab.shape[2:]), a.reshape(n, *a.shape[2:]), e.reshape(n, -1)
    if ab.ndim == 2:  # 1-D: the md logit with D = 1
        ab, a = ab[..., None], a[..., None]
    if g is not None:
        g = np.broadcast_to(g, (n_chain, n_draw, g.shape[-1])).reshape(n, -1)
    ll = np.empty((n, len(yk)), dtype=np.float32)
    chunk = max(1, _CHUNK_CELLS // max(1, len(yk) * ab.shape[-1]))
    for start in range(0, n, chunk):  # vectorized over draws and cells, chunked
        sl = slice(start, min(n, start + chunk))
        eta = np.einsum("skd,skd->sk", ab[sl][:, rows], a[sl][:, cols]) + e[sl][:, cols]
        ll[sl] = loglik(eta, yk, None if g is None else g[sl][:, cols])
    ll = ll.reshape(n_chain, n_draw, len(yk))
    cell = xr.Dataset(
        {"correct": (("chain", "draw", "cell"), ll)},
        coords={
            "chain": post["chain"].values,
            "draw": post["draw"].values,
            "cell_llm": ("cell", post["llm"].values[rows]),
            "cell_item": ("cell", post["item"].values[cols]),
        },
    )
    small = post[["discrimination", "intercept"]]
    observed = xr.Dataset({"correct": ("cell", yk)})
    return xr.DataTree.from_dict(
        {"posterior": small, "log_likelihood": cell, "observed_data": observed}
    )


#: A cell whose ``FLAT_TOP`` largest importance weights agree to a factor ``exp(FLAT_TOL)``
#: has a flat upper tail and keeps its raw weights (:func:`psis_weights`).
FLAT_TOP = 5
FLAT_TOL = 1e-6


def psis_weights(tree: xr.DataTree) -> tuple[xr.DataArray, xr.DataArray, float]:
    """Each cell's PSIS log weights and Pareto k, and the relative ESS used.

    ``tree``: from :func:`log_likelihood`. The weights of leaving cell ``i`` out
    are ``1 / p(y_i | draw)``, Pareto-smoothed in their upper tail
    (``arviz_stats``). A 3PL cell at an item the posterior puts at its floor
    has a likelihood equal to the floor's in every draw, or in many, to within
    rounding: GPQA's 3PL has thousands of such cells. Their largest weights
    tie, and the Pareto fit of a flat tail fails (ArviZ raises "All tail values
    are the same", or returns k = NaN when a few rounding steps separate them).
    Weights whose ``FLAT_TOP`` largest agree to a factor ``exp(FLAT_TOL)`` have
    no heavy tail to smooth: such a cell keeps its raw normalized weights, with
    k = 0. Where a few huge weights stand over such a flat rest the Pareto fit
    gives no k (NaN) and ArviZ keeps the raw weights: that cell's k is set to
    inf, so that it counts as unreliable.
    """
    import arviz_stats as azs
    from scipy.special import logsumexp

    ll = tree["log_likelihood"]["correct"].transpose("chain", "draw", "cell")
    n = ll.sizes["chain"] * ll.sizes["draw"]
    post = tree["posterior"].to_dataset()
    if ll.sizes["chain"] > 1:
        ess = azs.ess(post, method="mean")
        reff = float(np.mean(np.hstack([ess[v].values.ravel() for v in ess.data_vars]))) / n
    else:
        reff = 1.0
    neg = -np.asarray(ll.values, dtype=np.float64).reshape(n, -1)
    top = np.partition(neg, n - FLAT_TOP, axis=0)[n - FLAT_TOP :]
    flat = top.max(axis=0) - top.min(axis=0) <= FLAT_TOL
    log_w = neg - logsumexp(neg, axis=0)
    k = np.zeros(neg.shape[1])
    if (~flat).any():
        lw, kk = ll.isel(cell=np.nonzero(~flat)[0]).azstats.psislw(
            r_eff=reff, dim=["chain", "draw"]
        )
        log_w[:, ~flat] = lw.transpose("chain", "draw", "cell").values.reshape(n, -1)
        # NaN: no Pareto fit of a tail of a few huge weights over a flat rest; count it
        # as unreliable (k = inf), not as unchecked
        k[~flat] = np.where(np.isnan(kk.values), np.inf, kk.values)
    weights = ll.copy(data=log_w.reshape(ll.shape))
    return weights, xr.DataArray(k, dims="cell", coords=ll["cell"].coords), reff


def loo(fit: Any, *, max_draws: int = 400) -> Any:
    """PSIS-LOO over observed cells (``arviz_stats.loo``), returned as its ``ELPDData``.

    The weights come from :func:`psis_weights` (cells at a 3PL floor included);
    the result keeps the pointwise elpd and Pareto k but not the weights
    (draws x cells floats: 1.4 GB on BBH's 449k cells, and nothing here reads them).
    Fewer than :data:`MIN_LOO_DRAWS` draws (a MAP fit has one) are refused with
    one line (:class:`ConfigurationError`).
    """
    import warnings

    import arviz_stats as azs

    _require_draws(fit, max_draws, MIN_LOO_DRAWS, "PSIS-LOO")
    tree = log_likelihood(fit, max_draws=max_draws)
    log_w, k, reff = psis_weights(tree)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = azs.loo(
            tree, pointwise=True, var_name="correct", reff=reff, log_weights=log_w, pareto_k=k
        )
    _log_pareto(caught)
    res.log_weights = None
    return res


def _log_pareto(caught: list[Any]) -> None:
    """ArviZ warns when Pareto k > 0.5 somewhere; report it in the log, not as an exception."""
    for w in caught:
        logger.warning("loo: %s", w.message)


def compare_models(fits: dict[str, Any], *, max_draws: int = 400) -> pd.DataFrame:
    """LOO comparison (``arviz_stats.compare``) of fits of the same responses.

    Parameters
    ----------
    fits
        ``{"1pl": fit1, "2pl": fit2, "3pl": fit3}``; all must be fitted on the
        same llms and items.

    Returns
    -------
    pandas.DataFrame
        ArviZ's comparison table (``elpd``, ``elpd_diff``, ``dse``, ``weight``,
        ...), best model first.
    """
    check_same_responses(fits)
    return compare_loo({name: loo(f, max_draws=max_draws) for name, f in fits.items()})


def check_same_responses(fits: dict[str, Any]) -> None:
    """Refuse fewer than two fits, or fits made on other llms or items than the first."""
    if len(fits) < 2:
        raise ConfigurationError(f"compare needs at least two fits, got {len(fits)}")
    shapes = {
        name: (tuple(f.posterior["llm"].values), tuple(f.posterior["item"].values))
        for name, f in fits.items()
    }
    first = next(iter(shapes.values()))
    differ = [n for n, s in shapes.items() if s != first]
    if differ:
        raise ConfigurationError(
            f"fits {differ} were made on other llms or items than {next(iter(shapes))!r}; "
            "compare fits of the same responses"
        )


def compare_loo(elpd: dict[str, Any]) -> pd.DataFrame:
    """``arviz_stats.compare`` of :func:`loo` results, its warnings sent to the log.

    The figures are unrounded (ArviZ's default rounds ``elpd`` to the digits its
    SE supports: -95600 for GPQA's 2PL at -95576.6).
    """
    import warnings

    import arviz_stats as azs

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = azs.compare(elpd, round_to="none")
    _log_pareto(caught)
    return table


def loo_rows(elpd: dict[str, Any], *, key: str = "model") -> list[dict[str, Any]]:
    """:func:`compare_loo` of :func:`loo` results as rows, best first.

    Each row: the fit's name (under ``key``), ``elpd_loo``, ``se``, ``p_loo``,
    ``elpd_diff`` and ``dse`` (to the best fit), its cells with Pareto k above
    0.7 and above 1, and its number of cells.
    """
    table = compare_loo(elpd)
    rows = []
    for name in table.index:
        k = np.asarray(elpd[name].pareto_k)
        rows.append(
            {
                key: name,
                "elpd_loo": float(table.loc[name, "elpd"]),
                "se": float(table.loc[name, "se"]),
                "p_loo": float(table.loc[name, "p"]),
                "elpd_diff": float(table.loc[name, "elpd_diff"]),
                "dse": float(table.loc[name, "dse"]),
                "cells_pareto_k_over_0.7": int(np.sum(k > 0.7)),
                "cells_pareto_k_over_1": int(np.sum(k > 1.0)),
                "cells": int(k.size),
            }
        )
    return rows

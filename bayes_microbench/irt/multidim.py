"""The multidimensional 2PL (``model="2pl-md"``, ``n_dims=D``): PyMC graph and saved scale.

``logit P(correct[j, i]) = sum_d discrimination[i, d] * ability[j, d] + intercept[i]`` with
``ability ~ Normal(0, I_D)``, the 2PL's priors for the intercepts and dimension 0, and a
learned per-dimension loading scale (``loading_sd``, prior :data:`LOADING_SD_SCALE`) for
the others. Identified by ``D`` anchor items chosen from the data (lower-triangular
loadings, positive dimension-0 loadings; ids in the posterior's ``anchors`` attr).
Saved: ``ability`` (llm, dim), ``discrimination`` (item, dim), ``intercept``, ``mdisc`` =
``|discrimination[i]|``, ``difficulty`` = ``-intercept / mdisc``, ``loading_sd``
(``extra_dim``). Parameterizations: ``"decoupled"`` (NUTS from 100 llms: each ability
column as the 2PL's mean, scale and direction), ``"centered"`` (the plain abilities, its
refit) and ``"non-centered"`` (the approximations, small matrices); :func:`item_embeddings`.

Why: docs/decisions/0015-multidimensional-2pl-identification.md (the model, the anchors,
what is identified, the saved scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from ..exceptions import ConfigurationError
from .config import PARAMETERIZATIONS_MD, IRTConfig
from .data import IRTData

PARAMETERIZATIONS = tuple(PARAMETERIZATIONS_MD)

#: Prior scale (half-normal) of the per-dimension sd of the loadings on dims 1..D-1.
LOADING_SD_SCALE = 1.0


@dataclass(frozen=True)
class Start:
    """Data-driven anchors and starting values (from an SVD of the response matrix)."""

    anchors: np.ndarray  # (D,) item positions
    ability: np.ndarray  # (llm, D)
    loadings: np.ndarray  # (item, D); dim 0 positive
    intercept: np.ndarray  # (item,)


def check_dims(data: IRTData, n_dims: int) -> None:
    """Refuse a dimension count the data cannot carry (one line)."""
    if n_dims > min(data.n_items, data.n_llms) - 1:
        raise ConfigurationError(
            f"n_dims = {n_dims} is too large for {data.n_llms} llms x {data.n_items} items; "
            f"use at most {max(1, min(data.n_items, data.n_llms) - 1)} dimensions"
        )


def start_values(data: IRTData, n_dims: int) -> Start:
    """Anchors and starting values (deterministic) for ``n_dims`` dimensions."""
    from .pymc_model import initial_values

    y = data.values
    obs = data.observed
    n = data.n_llms
    with np.errstate(invalid="ignore"):
        p_item = np.nanmean(y, axis=0)
    filled = np.where(obs, y, p_item[None, :])
    x = filled - filled.mean(axis=0, keepdims=True)
    d = n_dims
    # dimension 0 starts as the standardized logit accuracy (the 2PL's start), the
    # others as the leading principal components of what it leaves unexplained
    z = initial_values(data)["z"]
    load0 = x.T @ z / (n - 1)
    resid = x - z[:, None] * load0[None, :]
    u, s, vt = np.linalg.svd(resid, full_matrices=False)
    k = min(d - 1, s.size)
    scores = np.hstack([z[:, None], u[:, :k] * np.sqrt(n - 1)])
    load = np.hstack([load0[:, None], vt[:k].T * s[:k] / np.sqrt(n - 1)])
    if k < d - 1:  # degenerate matrix: pad with tiny deterministic columns
        pad = d - 1 - k
        scores = np.hstack([scores, np.tile(np.linspace(-1, 1, n)[:, None], pad)])
        load = np.hstack([load, np.full((data.n_items, pad), 1e-3)])
    anchors: list[int] = []
    if d >= 2:
        # anchor k: the largest loading on dimension k net of its loadings on the later ones
        for dim in range(d):
            later = np.linalg.norm(load[:, dim + 1 :], axis=1) if dim + 1 < d else 0.0
            score = (load[:, dim] if dim == 0 else np.abs(load[:, dim])) - later
            score[anchors] = -np.inf
            anchors.append(int(np.argmax(score)))
        # rotate so the anchors' loadings are lower triangular with a positive diagonal
        q, r = np.linalg.qr(load[anchors].T)
        sign = np.where(np.diag(r) < 0, -1.0, 1.0)
        q = q * sign[None, :]
        load = load @ q
        scores = scores @ q
    sd = scores.std(axis=0, ddof=1)
    ability = (scores - scores.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    # loadings on the ability scale: dim 0 around 1, others relative to it
    ref = float(np.median(np.abs(load[:, 0]))) or 1.0
    loadings = np.clip(load / ref, -3.0, 3.0)
    loadings[:, 0] = np.clip(loadings[:, 0], 0.1, 3.0)
    for dim, item in enumerate(anchors):
        loadings[item, dim + 1 :] = 0.0
        loadings[item, dim] = max(loadings[item, dim], 0.05)
    p_item = np.clip(np.nan_to_num(p_item, nan=0.5), 0.02, 0.98)
    return Start(
        anchors=np.asarray(anchors, dtype=np.int64),
        ability=ability,
        loadings=loadings,
        intercept=np.log(p_item / (1 - p_item)),
    )


def _layout(n_items: int, n_dims: int, anchors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions (item, extra column) of the free loadings and of the positive diagonal."""
    free = np.ones((n_items, n_dims - 1), dtype=bool)
    diag = []
    for k, item in enumerate(anchors):
        # anchor k: free on dims 1..k-1, positive on dim k (k >= 1), zero on dims k+1..D-1
        # (extra column c holds dim c + 1)
        free[item, :] = False
        if k >= 1:
            free[item, : k - 1] = True
            diag.append((int(item), k - 1))
    return np.argwhere(free), np.asarray(diag, dtype=np.int64).reshape(-1, 2)


def build(
    data: IRTData, config: IRTConfig, *, parameterization: str = "centered", float32: bool = True
) -> Any:
    """Return the :class:`pymc.Model` of the multidimensional 2PL.

    Built from blocks (docs/decisions/0025), each with the parameterization's
    ``centered`` flag (:data:`~.config.PARAMETERIZATIONS_MD`): the abilities,
    :func:`_intercept_block`, :func:`_loading_block` (dimension 0, lognormal),
    :func:`_extra_loading_block` (dimensions 1..D-1) and the likelihood.
    """
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    if parameterization not in PARAMETERIZATIONS:
        raise ConfigurationError(
            f"the 2pl-md model samples parameterization {list(PARAMETERIZATIONS)}, "
            f"got {parameterization!r}"
        )
    n_dims = int(config.n_dims)
    check_dims(data, n_dims)
    dtype = "float32" if float32 else "float64"
    start = start_values(data, n_dims)
    form = PARAMETERIZATIONS_MD[parameterization]
    centered = form.centered
    coords = {
        "llm": data.llms,
        "item": data.items,
        "subtask": data.subtasks,
        "dim": np.arange(n_dims),
        "extra_dim": np.arange(1, n_dims),
    }
    with pytensor.config.change_flags(floatX=dtype), pm.Model(coords=coords) as model:
        if form.ability == "sphere":
            _decoupled_graph(data, config, start, dtype, n_dims)
            return model
        # sampled as one flat vector (llm-major): every free variable is 1-D, which the
        # mean-field ADVI start (per-variable initial sigmas) relies on
        ability = pm.Normal(
            "ability_flat",
            0.0,
            1.0,
            shape=data.n_llms * n_dims,
            initval=_arr(start.ability.reshape(-1), dtype),
        ).reshape((data.n_llms, n_dims))
        e = _intercept_block(data, config, start, dtype, centered=centered)
        disc = _loading_block(data, config, start, dtype, centered=centered)[:, None]
        if n_dims >= 2:
            extra = _extra_loading_block(data, start, dtype, n_dims, centered=centered)
            disc = pt.concatenate([disc, extra], axis=1)
        pm.Potential("loglik", _loglik(data, ability, disc, e, dtype, n_dims))
    return model


def _decoupled_graph(
    data: IRTData, config: IRTConfig, start: Start, dtype: str, n_dims: int
) -> None:
    """The ``"decoupled"`` graph (inside a model context): the 2PL's decoupling per dimension.

    Each ability column is ``m[d] + s[d] * v[d]`` (:func:`_sphere_columns`), and the
    likelihood sees the slopes ``discrimination[:, d] * s[d]`` and the intercepts
    ``intercept + discrimination . m`` (dimension 0's about each item's information
    centre, :func:`~.pymc_model.item_centers`), so that neither the location nor the
    scale of a dimension is a direction NUTS has to travel along; the priors are the
    centered model's, written on the saved scale. Why: docs/decisions/0050.
    """
    import pymc as pm
    import pytensor.tensor as pt

    from .pymc_model import _scaled_log_disc_mean, item_centers

    sub, n_s = data.subtask_codes, len(data.subtasks)
    m, v, log_s = _sphere_columns(data.n_llms, start.ability.T, dtype)
    s = pt.exp(log_s)
    # dimension 0: log(discrimination * s[0]), its subtask mean shifted by log s[0]
    mu_lat, sd_la = _scaled_log_disc_mean(config, n_s, dtype, log_s[0])
    la_init = np.log(start.loadings[:, 0])
    lat = pm.Normal(
        "log_disc_scaled", mu_lat[sub], sd_la[sub], dims="item", initval=_arr(la_init, dtype)
    )
    a_lik = pt.exp(lat)[:, None]
    if n_dims >= 2:
        a_lik = pt.concatenate(
            [a_lik, _scaled_extra_loadings(data, start, dtype, n_dims, s)], axis=1
        )
    disc = a_lik / s[None, :]
    # intercepts the likelihood sees, dimension 0's about the item's information centre
    centers = item_centers(data)
    e_c = pm.Flat(
        "e", dims="item", initval=_arr(start.intercept + start.loadings[:, 0] * centers, dtype)
    )
    e = e_c - a_lik[:, 0] * _arr(centers, dtype)
    mu_d = pm.Normal("intercept_mean", 0.0, config.intercept_mean_sd, dims="subtask")
    sd_d = pm.HalfNormal("intercept_sd", config.intercept_sd_scale, dims="subtask")
    pm.Potential(
        "intercept_prior",
        pm.logp(pm.Normal.dist(mu_d[sub], sd_d[sub]), e - pt.dot(disc, m)).sum(),
    )
    pm.Potential("loglik", _loglik(data, v.T, a_lik, e, dtype, n_dims))


def _sphere_columns(n_l: int, z_init: np.ndarray, dtype: str) -> tuple[Any, Any, Any]:
    """Per dimension, the 2PL's decoupled ability block (model context): ``(m, v, log s)``.

    ``m[d] ~ Normal(0, 1/sqrt(n))``, ``v[d] = u[d] * sqrt(n-1) / |u[d]|`` with a zero-sum
    ``u[d]`` and a tight radius prior, ``s[d]^2 ~ Gamma((n-1)/2, (n-1)/2)``: together
    exactly ``n`` iid standard normal abilities per dimension (docs/decisions/0013).
    ``z_init``: (dim, llm) starting abilities, zero-mean with sd 1 per dimension.
    """
    import pymc as pm
    import pytensor.tensor as pt

    from .pymc_model import radius_log_density

    n_d = z_init.shape[0]
    m = pm.Normal(
        "m",
        0.0,
        1.0 / np.sqrt(n_l),
        dims="dim",
        initval=_arr(np.full(n_d, 0.01 / np.sqrt(n_l)), dtype),
    )
    u = pm.ZeroSumNormal("u", sigma=1.0, dims=("dim", "llm"), initval=_arr(z_init, dtype))
    r = pt.sqrt(pt.sum(u**2, axis=1))
    r0 = float(np.sqrt(n_l - 1.0))
    pm.Potential("radius_prior", pt.sum(radius_log_density(r, n_l)))
    s2 = pm.Gamma(
        "s2", alpha=(n_l - 1) / 2, beta=(n_l - 1) / 2, dims="dim", initval=_arr(np.ones(n_d), dtype)
    )
    return m, u * (r0 / r)[:, None], 0.5 * pt.log(s2)


def _scaled_extra_loadings(data: IRTData, start: Start, dtype: str, n_dims: int, s: Any) -> Any:
    """Loadings on dimensions 1..D-1 times ``s[d]`` (item, D-1), centered (model context).

    Their scale is sampled as ``loading_sd * s[d]`` (``loading_sd_scaled``), with
    ``loading_sd``'s half-normal prior and the Jacobian, so that ``s`` meets only it.
    """
    import pymc as pm
    import pytensor.tensor as pt

    free, diag = _layout(data.n_items, n_dims, start.anchors)
    extra_init = start.loadings[:, 1:]
    sd_init = np.maximum(extra_init.std(axis=0), 0.1)
    tau = pm.HalfFlat("loading_sd_scaled", dims="extra_dim", initval=_arr(sd_init, dtype))
    s_x = s[1:]
    pm.Potential(
        "loading_sd_prior",
        (pm.logp(pm.HalfNormal.dist(LOADING_SD_SCALE), tau / s_x) - pt.log(s_x)).sum(),
    )
    f_init = extra_init[free[:, 0], free[:, 1]]
    g_init = np.maximum(extra_init[diag[:, 0], diag[:, 1]], 0.05)
    f = pm.Normal(
        "loading_free_scaled", 0.0, tau[free[:, 1]], shape=len(free), initval=_arr(f_init, dtype)
    )
    g = pm.HalfNormal(
        "loading_diag_scaled", tau[diag[:, 1]], shape=len(diag), initval=_arr(g_init, dtype)
    )
    extra = pt.zeros((data.n_items, n_dims - 1), dtype=dtype)
    extra = pt.set_subtensor(extra[free[:, 0], free[:, 1]], f)
    return pt.set_subtensor(extra[diag[:, 0], diag[:, 1]], g)


def _arr(x: Any, dtype: str) -> np.ndarray:
    """``x`` as an array of the graph's ``dtype`` (a starting value)."""
    return np.asarray(x, dtype=dtype)


def _intercept_block(
    data: IRTData, config: IRTConfig, start: Start, dtype: str, *, centered: bool
) -> Any:
    """Item intercepts with their subtask mean and sd, centered or not (model context)."""
    import pymc as pm

    sub, n_s = data.subtask_codes, len(data.subtasks)
    e_init = start.intercept
    sub_mean = np.array([e_init[sub == k].mean() for k in range(n_s)]) + 0.01
    mu_d = pm.Normal(
        "intercept_mean",
        0.0,
        config.intercept_mean_sd,
        dims="subtask",
        initval=_arr(sub_mean, dtype),
    )
    sd_d = pm.HalfNormal(
        "intercept_sd",
        config.intercept_sd_scale,
        dims="subtask",
        initval=_arr(np.ones(n_s), dtype),
    )
    if centered:
        return pm.Normal(
            "intercept", mu_d[sub], sd_d[sub], dims="item", initval=_arr(e_init, dtype)
        )
    z_init = e_init - sub_mean[sub] + 0.01
    z_d = pm.Normal("intercept_z", 0.0, 1.0, dims="item", initval=_arr(z_init, dtype))
    return mu_d[sub] + sd_d[sub] * z_d


def _loading_block(
    data: IRTData, config: IRTConfig, start: Start, dtype: str, *, centered: bool
) -> Any:
    """Dimension 0's loadings (lognormal, the 2PL's prior), centered or not (model context)."""
    import pymc as pm
    import pytensor.tensor as pt

    sub, n_s = data.subtask_codes, len(data.subtasks)
    la_init = np.log(start.loadings[:, 0])
    la_mean = np.array([la_init[sub == k].mean() for k in range(n_s)]) + 0.01
    mu_la = pm.Normal(
        "log_disc_mean",
        0.0,
        config.log_disc_mean_sd,
        dims="subtask",
        initval=_arr(la_mean, dtype),
    )
    sd_la = pm.HalfNormal(
        "log_disc_sd",
        config.log_disc_sd_scale,
        dims="subtask",
        initval=_arr(np.full(n_s, 0.3), dtype),
    )
    if centered:
        la = pm.Normal(
            "log_discrimination",
            mu_la[sub],
            sd_la[sub],
            dims="item",
            initval=_arr(la_init, dtype),
        )
    else:
        z_init = (la_init - la_mean[sub]) / 0.3 + 0.01
        z_la = pm.Normal("log_disc_z", 0.0, 1.0, dims="item", initval=_arr(z_init, dtype))
        la = mu_la[sub] + sd_la[sub] * z_la
    return pt.exp(la)


def _extra_loading_block(
    data: IRTData, start: Start, dtype: str, n_dims: int, *, centered: bool
) -> Any:
    """Loadings on dimensions 1..D-1 (item, D-1): anchored, per-dimension scale (model context)."""
    import pymc as pm
    import pytensor.tensor as pt

    free, diag = _layout(data.n_items, n_dims, start.anchors)
    extra_init = start.loadings[:, 1:]
    sd_init = np.maximum(extra_init.std(axis=0), 0.1)
    sd_l = pm.HalfNormal(
        "loading_sd", LOADING_SD_SCALE, dims="extra_dim", initval=_arr(sd_init, dtype)
    )
    f_init = extra_init[free[:, 0], free[:, 1]]
    g_init = np.maximum(extra_init[diag[:, 0], diag[:, 1]], 0.05)
    f_sd = sd_l[free[:, 1]]
    g_sd = sd_l[diag[:, 1]]
    if centered:
        f = pm.Normal("loading_free", 0.0, f_sd, shape=len(free), initval=_arr(f_init, dtype))
        g = pm.HalfNormal("loading_diag", g_sd, shape=len(diag), initval=_arr(g_init, dtype))
    else:
        f = f_sd * pm.Normal(
            "loading_free_z",
            0.0,
            1.0,
            shape=len(free),
            initval=_arr(f_init / sd_init[free[:, 1]], dtype),
        )
        g = g_sd * pm.HalfNormal(
            "loading_diag_z",
            1.0,
            shape=len(diag),
            initval=_arr(g_init / sd_init[diag[:, 1]], dtype),
        )
    extra = pt.zeros((data.n_items, n_dims - 1), dtype=dtype)
    extra = pt.set_subtensor(extra[free[:, 0], free[:, 1]], f)
    return pt.set_subtensor(extra[diag[:, 0], diag[:, 1]], g)


def _loglik(data: IRTData, ability: Any, disc: Any, e: Any, dtype: str, n_dims: int) -> Any:
    """Bernoulli-logit log likelihood of the observed cells (missing cells left out).

    Dense matrices (at least :data:`~bayes_microbench.irt.data.DENSE_MIN_OBSERVED`
    observed) evaluate ``eta = ability @ discrimination' + intercept`` over the
    full matrix with 0/1 observation weights; sparse ones gather the observed
    cells. Both use the shared Bernoulli-logit Op of
    :mod:`bayes_microbench.irt._likelihood`.
    """
    import pytensor.tensor as pt

    from ._likelihood import bernoulli_logit_loglik

    obs = data.observed
    one = np.asarray(1.0, dtype=dtype)
    if data.dense:
        y0 = np.asarray(np.where(obs, data.values, 0.0), dtype=dtype)
        # sum of D outer products rather than a matrix product: no BLAS Op, which
        # PyTensor's C back end (ADVI on small models) may lack
        eta = e[None, :]
        for d in range(n_dims):
            eta = eta + ability[:, d][:, None] * disc[:, d][None, :]
        weight = one if data.complete else np.asarray(obs, dtype=dtype)
        return bernoulli_logit_loglik(eta, y0, weight)
    rows, cols = np.nonzero(obs)
    y = np.asarray(data.values[rows, cols], dtype=dtype)
    eta_k = pt.sum(ability[rows] * disc[cols], axis=1) + e[cols]
    return bernoulli_logit_loglik(eta_k, y, one)


# ------------------------------------------------------------------ output
def to_saved_scale(
    raw: dict[str, np.ndarray],
    data: IRTData,
    config: IRTConfig,
    parameterization: str,
    anchors: np.ndarray,
) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """Map sampled variables (leading dims chain, draw) to the saved parameters.

    Returns ``name -> (dims, values)`` (dims after ``chain, draw``); see the
    module docstring for the list.
    """
    f64 = {k: np.asarray(v, dtype=np.float64) for k, v in raw.items()}
    n_dims = int(config.n_dims)
    sub = data.subtask_codes
    lead = f64["intercept_sd"].shape[:-1]
    if parameterization == "decoupled":
        return _decoupled_saved(f64, data, n_dims, anchors)
    if parameterization == "centered":
        intercept = f64["intercept"]
        la = f64["log_discrimination"]
    else:
        intercept = (
            f64["intercept_mean"][..., sub] + f64["intercept_sd"][..., sub] * f64["intercept_z"]
        )
        la = f64["log_disc_mean"][..., sub] + f64["log_disc_sd"][..., sub] * f64["log_disc_z"]
    disc = np.zeros((*lead, data.n_items, n_dims))
    disc[..., 0] = np.exp(la)
    out: dict[str, tuple[tuple[str, ...], np.ndarray]] = {}
    if n_dims >= 2:
        free, diag = _layout(data.n_items, n_dims, anchors)
        sd_l = f64["loading_sd"]
        if parameterization == "centered":
            f, g = f64["loading_free"], f64["loading_diag"]
        else:
            f = sd_l[..., free[:, 1]] * f64["loading_free_z"]
            g = sd_l[..., diag[:, 1]] * f64["loading_diag_z"]
        disc[..., free[:, 0], free[:, 1] + 1] = f
        disc[..., diag[:, 0], diag[:, 1] + 1] = g
        out["loading_sd"] = (("extra_dim",), sd_l)
    ability = f64["ability_flat"].reshape(*lead, data.n_llms, n_dims)
    return _saved(out, f64, ability, disc, intercept, f64["log_disc_mean"])


def _saved(
    out: dict[str, tuple[tuple[str, ...], np.ndarray]],
    f64: dict[str, np.ndarray],
    ability: np.ndarray,
    disc: np.ndarray,
    intercept: np.ndarray,
    log_disc_mean: np.ndarray,
) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """``out`` completed with the saved parameters every parameterization shares."""
    mdisc = np.sqrt(np.sum(disc**2, axis=-1))
    out["ability"] = (("llm", "dim"), ability)
    out["discrimination"] = (("item", "dim"), disc)
    out["intercept"] = (("item",), intercept)
    out["mdisc"] = (("item",), mdisc)
    out["difficulty"] = (("item",), -intercept / mdisc)
    out["intercept_mean"] = (("subtask",), f64["intercept_mean"])
    out["intercept_sd"] = (("subtask",), f64["intercept_sd"])
    out["log_disc_mean"] = (("subtask",), log_disc_mean)
    out["log_disc_sd"] = (("subtask",), f64["log_disc_sd"])
    return out


def _decoupled_saved(
    f64: dict[str, np.ndarray], data: IRTData, n_dims: int, anchors: np.ndarray
) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """:func:`to_saved_scale` of the ``"decoupled"`` graph's draws (:func:`_decoupled_graph`)."""
    from .pymc_model import _sphere_ability, item_centers

    columns, s_col = _sphere_ability(f64, data.n_llms)  # (..., dim, llm), (..., dim, 1)
    ability = np.swapaxes(columns, -1, -2)  # (..., llm, dim)
    s, m = s_col[..., 0], f64["m"]  # (..., dim)
    lead = s.shape[:-1]
    a_lik = np.zeros((*lead, data.n_items, n_dims))
    a_lik[..., 0] = np.exp(f64["log_disc_scaled"])
    out: dict[str, tuple[tuple[str, ...], np.ndarray]] = {}
    if n_dims >= 2:
        free, diag = _layout(data.n_items, n_dims, anchors)
        a_lik[..., free[:, 0], free[:, 1] + 1] = f64["loading_free_scaled"]
        a_lik[..., diag[:, 0], diag[:, 1] + 1] = f64["loading_diag_scaled"]
        out["loading_sd"] = (("extra_dim",), f64["loading_sd_scaled"] / s[..., 1:])
    disc = a_lik / s[..., None, :]
    e = f64["e"] - a_lik[..., 0] * item_centers(data)
    intercept = e - np.einsum("...id,...d->...i", disc, m)
    log_disc_mean = f64["log_disc_mean_scaled"] - np.log(s[..., :1])
    return _saved(out, f64, ability, disc, intercept, log_disc_mean)


def is_multidim(posterior: Any) -> bool:
    """True when ``posterior`` (a Dataset) holds a multidimensional model (a ``dim`` dim)."""
    disc = posterior["discrimination"] if "discrimination" in posterior else None
    return disc is not None and "dim" in disc.dims


def item_embeddings(posterior: Any) -> xr.DataArray:
    """Posterior-mean loadings of a ``2pl-md`` posterior as item embeddings ``(item, dim)``.

    Parameters
    ----------
    posterior
        The ``posterior`` Dataset of a ``2pl-md`` fit (or a fitted object /
        DataTree holding one), with ``discrimination`` (chain, draw, item, dim).

    Returns
    -------
    xarray.DataArray
        Dims ``(item, dim)``; coordinates are identified by the anchor items
        (see the module docstring), so compare embeddings of different fits by
        rotation-invariant measures.

    Raises
    ------
    ConfigurationError
        The posterior is not multidimensional.
    """
    ds = posterior
    if isinstance(ds, xr.DataTree):
        ds = ds["posterior"].to_dataset() if "posterior" in ds.children else ds.to_dataset()
    elif not isinstance(ds, xr.Dataset):
        ds = ds.posterior
    if not is_multidim(ds):
        raise ConfigurationError(
            "item embeddings need a multidimensional posterior (model '2pl-md', "
            "discrimination with a 'dim' dim); fit IRTModel(responses, '2pl-md')"
        )
    emb = ds["discrimination"].mean(("chain", "draw")).transpose("item", "dim")
    emb.name = "item_embedding"
    emb.attrs["anchors"] = ds.attrs.get("anchors", "")
    return emb

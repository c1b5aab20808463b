"""The PyMC graph of the hierarchical 1PL / 2PL / 3PL, and the map back to the saved scale.

Parameterizations (``PARAMETERIZATIONS``): ``"decoupled"`` (NUTS from 100 llms: centered
items, the abilities as ``m + s * v``, a mean, a scale and a direction on the sphere, so
that the likelihood sees neither collective direction), ``"decoupled-nc"`` (the same
ability block, non-centered items: NUTS below 100 llms for the lognormal 2PL/3PL and for
a weakly informed fixed-floor 3PL), ``"non-centered"`` (the approximations; NUTS
otherwise).
Discrimination priors: lognormal (default) or truncated normal, both sampled as
``log(discrimination * s)``. Saved scale: ``logit P = a (theta - b)``. The graph is a
combination of blocks (ability, discrimination, intercept, guessing, likelihood), each
item block with its parameterization's ``centered`` flag (``config.PARAMETERIZATIONS_1D``).

Why: docs/decisions/0025-irt-graph-blocks-and-one-policy.md (the blocks), docs/decisions/0013-decoupled-parameterization-for-nuts.md (the decoupled form,
the priors' scaled hyperparameters, what was tried and dropped) and
docs/decisions/0014-decoupled-nc-below-100-llms-and-weak-3pl.md (small matrices, the 3PL).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import response_model
from .config import PARAMETERIZATIONS_1D, IRTConfig, check_parameterization
from .data import IRTData

PARAMETERIZATIONS = tuple(PARAMETERIZATIONS_1D)

#: Prior sd of the radius of ``u`` around sqrt(n-1): close to each u's posterior sd.
RADIUS_SD = 0.3


def _fixed_floors(data: IRTData) -> np.ndarray:
    """Each item's fixed 3PL floor, 0 for a 2PL item or a learned floor."""
    return np.nan_to_num(np.asarray(data.guessing_fixed, dtype=np.float64), nan=0.0)


def initial_values(data: IRTData) -> dict[str, np.ndarray]:
    """Data-driven starting values: standardized llm accuracy and item logits.

    An item's logit is that of its proportion correct above its fixed floor
    ``c``, ``(p - c) / (1 - c)`` (the 2PL part of a 3PL item), clipped to [0.02, 0.98].
    """
    obs = data.observed
    with np.errstate(invalid="ignore"):
        acc = np.nanmean(data.values, axis=1)
        p_item = np.nanmean(data.values, axis=0)
    n = data.n_llms
    acc = np.clip(acc, 0.5 / max(obs.sum(axis=1).max(), 1), 1 - 0.5 / max(obs.sum(axis=1).max(), 1))
    score = np.log(acc / (1 - acc))
    score = score - score.mean()
    sd = score.std(ddof=1)
    z = score / sd if sd > 0 else np.linspace(-1, 1, n) - np.linspace(-1, 1, n).mean()
    z = z * np.sqrt(n - 1) / np.sqrt(np.sum(z**2))
    c = _fixed_floors(data)
    p_item = np.clip((p_item - c) / (1 - c), 0.02, 0.98)
    logit_item = np.log(p_item / (1 - p_item))
    return {"z": z, "logit_item": logit_item}


def _information(data: IRTData, init: dict[str, np.ndarray]) -> np.ndarray:
    """Each observed cell's Fisher information about its logit, at the starting values.

    ``P'(eta)**2 / (P (1 - P))``: ``sigmoid'(eta)`` for the 2PL; a fixed 3PL
    floor ``c`` moves it to the llms above the floor. Missing cells get 0.
    """
    floor = _fixed_floors(data)
    eta = init["z"][:, None] + init["logit_item"][None, :]
    s = response_model.prob(eta)
    p = response_model.prob(eta, floor)
    info = np.where(
        floor > 0, ((1.0 - floor) * s * (1.0 - s)) ** 2 / (p * (1.0 - p)), s * (1.0 - s)
    )
    return info * data.observed


def item_centers(data: IRTData, init: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Per item, the information-weighted mean of the starting abilities.

    Writing an item's logit as ``a * (v - c) + e'`` instead of ``a * v + e``
    makes ``a`` and ``e'`` nearly uncorrelated in the posterior when ``c`` is
    where the item's Fisher information (:func:`_information`) sits: for a hard
    item only the strong llms carry information, so its slope and intercept are
    strongly correlated around ``c = 0`` but not around its own centre. For the
    3PL the information is the 3PL's (measured: docs/decisions/0014). ``init``: the
    :func:`initial_values` of ``data`` when already computed.
    """
    init = initial_values(data) if init is None else init
    return _weighted_mean(_information(data, init), init["z"])


def _weighted_mean(w: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Per item (column of ``w``), the mean of ``z`` weighted by ``w``; 0 where all weights are."""
    tot = w.sum(axis=0)
    return np.where(tot > 0, (w * z[:, None]).sum(axis=0) / np.maximum(tot, 1e-12), 0.0)


def slope_sd(data: IRTData) -> np.ndarray:
    """Per item, the sd of its log discrimination that its likelihood alone gives.

    ``1 / sqrt(sum_j info_j * (z_j - c)**2)``: the Fisher information about
    ``log a`` at discrimination 1, the starting abilities ``z`` (standardized)
    and the item's centre ``c`` (:func:`item_centers`). Where it is comparable
    to the spread of the log discriminations (0.35 in the simulator), the
    hierarchical prior shapes each slope and the centered form meets a funnel
    in the subtask sd; far below it, the data pin every slope down.
    """
    init = initial_values(data)
    w, z = _information(data, init), init["z"]
    info = (w * (z[:, None] - _weighted_mean(w, z)[None, :]) ** 2).sum(axis=0)
    return 1.0 / np.sqrt(np.maximum(info, 1e-12))


@dataclass
class _Context:
    """What every block of one graph reads: the data, the configuration, casts and starts."""

    data: IRTData
    config: IRTConfig
    dtype: str
    init: dict[str, np.ndarray]
    zl: np.ndarray  # standardized item logits (spread evenly where all are alike)
    sub_init: np.ndarray  # subtask means of the item logits, nudged off 0

    @property
    def sub(self) -> np.ndarray:
        return self.data.subtask_codes

    @property
    def n_s(self) -> int:
        return len(self.data.subtasks)

    def cast(self, x: Any) -> Any:
        import pytensor.tensor as pt

        return pt.as_tensor_variable(np.asarray(x, dtype=self.dtype))


@dataclass
class _Ability:
    """The ability block's output: ``theta`` as the likelihood sees it, ``m`` and ``log s``."""

    theta: Any
    m: Any  # the collective location
    log_s: Any = None  # the collective log scale (the sphere block of a 2PL/3PL)


@dataclass
class _Discrimination:
    """The discrimination block's output.

    ``lik``: the slopes the likelihood sees (``discrimination * s`` on the sphere);
    ``saved``: on the saved scale; ``typical``: each subtask's typical saved-scale
    slope, which the non-centered intercepts are shifted by (None: their subtask mean).
    """

    lik: Any
    saved: Any
    typical: Any = None


def build(
    data: IRTData,
    config: IRTConfig,
    *,
    parameterization: str = "decoupled",
    float32: bool = True,
) -> Any:
    """Return the :class:`pymc.Model` for ``data`` under ``config``.

    The graph is a combination of blocks (docs/decisions/0025): :func:`_ability_block`,
    :func:`_discrimination_block`, :func:`_intercept_block`, :func:`_guessing_block` and
    :func:`_likelihood_block`; ``parameterization`` (a :class:`~.config.Parameterization`
    of ``PARAMETERIZATIONS_1D``) says which ability block and whether the item blocks
    are centered.
    """
    import pymc as pm
    import pytensor

    if parameterization not in PARAMETERIZATIONS:
        raise ValueError(f"parameterization must be one of {PARAMETERIZATIONS}")
    if parameterization == "decoupled-nc":
        check_parameterization(config.model, config.discrimination_prior, parameterization)
    form = PARAMETERIZATIONS_1D[parameterization]
    dtype = "float32" if float32 else "float64"
    init = initial_values(data)
    logit = init["logit_item"]
    # standardized item logits; spread evenly where every item starts alike (e.g. a
    # 3PL whose items all sit below their floors): a starting value of 0 for every
    # item would give an item-level sd an exactly-0 gradient, which nutpie refuses
    spread = logit.std()
    zl = (logit - logit.mean()) / spread if spread > 0 else np.linspace(-1.0, 1.0, len(logit))
    sub = data.subtask_codes
    # subtask means of the item logits (nonzero starting gradients for nutpie)
    sub_init = np.array(
        [logit[sub == k].mean() + 0.01 for k in range(len(data.subtasks))], dtype=np.float64
    )
    ctx = _Context(data, config, dtype, init, zl, sub_init)
    two_pl = config.model in ("2pl", "3pl")
    coords = {"llm": data.llms, "item": data.items, "subtask": data.subtasks}
    with pytensor.config.change_flags(floatX=dtype), pm.Model(coords=coords) as model:
        ability = _ability_block(ctx, form.ability if two_pl else _one_pl(form.ability))
        disc = _discrimination_block(ctx, ability, centered=form.centered) if two_pl else None
        e = _intercept_block(ctx, ability, disc, centered=form.centered)
        guess = _guessing_block(ctx)
        _likelihood_block(ctx, ability.theta, None if disc is None else disc.lik, e, guess)
    return model


def _one_pl(ability: str) -> str:
    """The 1PL's ability block: it has no slope scale, so the sphere is the location block."""
    return "location" if ability == "sphere" else ability


def _ability_block(ctx: _Context, kind: str) -> _Ability:
    """The abilities (inside a model context): ``"sphere"`` or ``"location"``.

    :func:`_decoupled_ability` with and without the sphere.
    """
    z = ctx.init["z"].astype(ctx.dtype)
    m, v, log_s = _decoupled_ability(ctx.data.n_llms, z, sphere=kind == "sphere")
    return _Ability(v, m, log_s)


def _discrimination_block(ctx: _Context, ability: _Ability, *, centered: bool) -> _Discrimination:
    """The 2PL/3PL slopes and their subtask hyperparameters, centered or not.

    On the sphere (``ability.log_s`` set) they are sampled on the ``discrimination * s``
    scale, so that ``s`` meets only the hyperparameters' priors (:func:`_sphere_slopes`);
    otherwise (the location block, always non-centered) on the saved scale
    (:func:`_plain_slopes`).
    """
    if ability.log_s is not None:
        return _sphere_slopes(ctx, ability.log_s, centered=centered)
    assert not centered, "centered items ride the sphere block"
    return _plain_slopes(ctx)


def _sphere_slopes(ctx: _Context, log_s: Any, *, centered: bool) -> _Discrimination:
    """Slopes ``a_lik = discrimination * s`` of the sphere ability block (model context)."""
    import pymc as pm
    import pytensor.tensor as pt

    config, dtype, sub, n_s = ctx.config, ctx.dtype, ctx.sub, ctx.n_s
    zl_small = (0.05 * ctx.zl).astype(dtype)
    s = pt.exp(log_s)
    if config.discrimination_prior == "truncated-normal":
        if not centered:
            raise ValueError("the truncated-normal prior has no non-centered sphere block")
        # a_lik = discrimination * s ~ TruncatedNormal(mean * s, sd * s, lower=0), with the
        # hyperparameters sampled on that scale too, so that s meets only their priors,
        # and as (kappa = mean / sd^2, log sd): mean and sd lie on a ridge when many
        # items sit near 0 (GPQA: correlation -0.90 between mean and log sd; -0.25
        # between kappa and log sd)
        kappa_l = pm.Flat(
            "disc_kappa_scaled", dims="subtask", initval=np.full(n_s, 0.8, dtype=dtype)
        )
        log_sd_l = pm.Flat(
            "log_disc_sd_scaled", dims="subtask", initval=np.full(n_s, 0.01, dtype=dtype)
        )
        sd_l = pt.exp(log_sd_l)
        mu_l = kappa_l * sd_l**2
        pm.Potential(
            "disc_hyper_prior",
            (
                pm.logp(pm.Normal.dist(config.disc_mean_mean, config.disc_mean_sd), mu_l / s)
                + pm.logp(pm.HalfNormal.dist(config.disc_sd_scale), sd_l / s)
                # Jacobian of (kappa_l, log sd_l) -> (mean, sd)
                + 3 * log_sd_l
                - 2 * log_s
            ).sum(),
        )
        lat = pm.Flat("log_disc_scaled", dims="item", initval=zl_small - 0.5)
        a_lik = _truncated_normal_discrimination(lat, mu_l, sd_l, sub)
        return _Discrimination(a_lik, a_lik / s)
    mu_lat, sd_la = _scaled_log_disc_mean(config, n_s, dtype, log_s)
    if centered:
        lat = pm.Normal(
            "log_disc_scaled", mu_lat[sub], sd_la[sub], dims="item", initval=0.01 + zl_small
        )
        a_lik = pt.exp(lat)
        return _Discrimination(a_lik, a_lik / s)
    # the likelihood sees discrimination * s = exp(mu_lat + sd * z): s meets only mu_lat's prior
    z_la = pm.Normal("log_disc_z", 0.0, 1.0, dims="item", initval=zl_small)
    a_lik = pt.exp(mu_lat[sub] + sd_la[sub] * z_la)
    return _Discrimination(a_lik, a_lik * pt.exp(-log_s), pt.exp(mu_lat - log_s))


def _plain_slopes(ctx: _Context) -> _Discrimination:
    """Non-centered slopes on the saved scale, lognormal or truncated-normal (model context)."""
    import pymc as pm
    import pytensor.tensor as pt

    config, sub = ctx.config, ctx.sub
    zl_small = (0.05 * ctx.zl).astype(ctx.dtype)
    if config.discrimination_prior == "truncated-normal":
        mu_a = pm.Normal("disc_mean", config.disc_mean_mean, config.disc_mean_sd, dims="subtask")
        sd_a = pm.HalfNormal("disc_sd", config.disc_sd_scale, dims="subtask")
        # the truncated normal's inverse CDF of a standard normal z
        z_a = pm.Normal("disc_z", 0.0, 1.0, dims="item", initval=zl_small)
        a = _truncated_normal_quantile(pt, z_a, mu_a[sub], sd_a[sub])
        # the subtask's typical slope: its mean (any function of the items works)
        return _Discrimination(a, a, pt.dot(ctx.cast(_subtask_average(sub, ctx.n_s)), a))
    mu_la = pm.Normal("log_disc_mean", 0.0, config.log_disc_mean_sd, dims="subtask")
    sd_la = pm.HalfNormal("log_disc_sd", config.log_disc_sd_scale, dims="subtask")
    z_la = pm.Normal("log_disc_z", 0.0, 1.0, dims="item", initval=zl_small)
    a = pt.exp(mu_la[sub] + sd_la[sub] * z_la)
    return _Discrimination(a, a, pt.exp(mu_la))


def _intercept_block(
    ctx: _Context,
    ability: _Ability,
    disc: _Discrimination | None,
    *,
    centered: bool,
) -> Any:
    """The item intercepts the likelihood sees, and their subtask hyperparameters.

    Non-centered: :func:`_shifted_intercepts`. Centered with a decoupled ability block:
    each item's intercept about its information-weighted centre (:func:`item_centers`;
    the 1PL: its mean shifted by ``m``). ``disc`` None: the 1PL (slopes 1).
    """
    import pymc as pm

    config, dtype, sub = ctx.config, ctx.dtype, ctx.sub
    sd_d = pm.HalfNormal("intercept_sd", config.intercept_sd_scale, dims="subtask")
    e_init = ctx.init["logit_item"].astype(dtype)
    m = ability.m
    if not centered:
        a = None if disc is None else disc.saved
        typical: Any = 1.0 if disc is None else disc.typical
        return _shifted_intercepts(
            config, m, a, typical, sd_d, sub, ctx.sub_init.astype(dtype), ctx.zl.astype(dtype)
        )
    if disc is None:
        # intercept = e - m, so intercept_mean = mu_e - m carries the configured prior
        mu_e = pm.Flat("intercept_mean_shifted", dims="subtask", initval=ctx.sub_init.astype(dtype))
        pm.Potential(
            "intercept_mean_prior",
            pm.logp(pm.Normal.dist(0.0, config.intercept_mean_sd), mu_e - m).sum(),
        )
        return pm.Normal("e", mu_e[sub], sd_d[sub], dims="item", initval=e_init)
    mu_d = pm.Normal("intercept_mean", 0.0, config.intercept_mean_sd, dims="subtask")
    # centered slopes ride the sphere block (_discrimination_block)
    centers = item_centers(ctx.data, ctx.init)
    e_c = pm.Flat("e", dims="item", initval=(e_init + centers).astype(dtype))
    e = e_c - disc.lik * ctx.cast(centers)
    pm.Potential(
        "intercept_prior",
        pm.logp(pm.Normal.dist(mu_d[sub], sd_d[sub]), e - disc.saved * m).sum(),
    )
    return e


def _guessing_block(ctx: _Context) -> Any:
    """The 3PL's item floors: fixed ``1 / K`` where known, else learned (Beta); None otherwise."""
    import pymc as pm
    import pytensor.tensor as pt

    config, data = ctx.config, ctx.data
    if config.model != "3pl":
        return None
    fixed = data.guessing_fixed
    learn = np.isnan(fixed)
    if not learn.any():
        return ctx.cast(fixed)
    k = config.guessing_strength
    c_learn = pm.Beta(
        "guessing_learned",
        alpha=config.guessing_mean * k,
        beta=(1 - config.guessing_mean) * k,
        shape=int(learn.sum()),
    )
    return pt.set_subtensor(ctx.cast(np.where(learn, 0.0, fixed))[np.nonzero(learn)[0]], c_learn)


def _likelihood_block(ctx: _Context, theta: Any, a: Any, e: Any, guess: Any) -> None:
    """The observed cells' log likelihood as the ``loglik`` potential (:func:`_loglik`)."""
    import pymc as pm

    pm.Potential("loglik", _loglik(ctx.data, theta, a, e, guess, ctx.cast))


def _decoupled_ability(n_l: int, z_init: np.ndarray, *, sphere: bool) -> tuple[Any, Any, Any]:
    """The decoupled ability block (inside a model context): ``(m, v, log s)``.

    ``m ~ Normal(0, 1/sqrt(n))`` and a zero-sum ``u``. With ``sphere`` (2PL,
    3PL) ``v = u * sqrt(n-1) / |u|`` with a tight radius prior and
    ``s^2 ~ Gamma((n-1)/2, (n-1)/2)``, so that ``ability = m + s * v``;
    without it (1PL) ``v = u``, ``ability = m + u`` and ``log s`` is None.
    """
    import pymc as pm
    import pytensor.tensor as pt

    m = pm.Normal("m", 0.0, 1.0 / np.sqrt(n_l), initval=0.01 / np.sqrt(n_l))
    u = pm.ZeroSumNormal("u", sigma=1.0, dims="llm", initval=z_init)
    if not sphere:
        return m, u, None
    r = pt.sqrt(pt.sum(u**2))
    r0 = float(np.sqrt(n_l - 1.0))
    pm.Potential("radius_prior", radius_log_density(r, n_l))
    s2 = pm.Gamma("s2", alpha=(n_l - 1) / 2, beta=(n_l - 1) / 2, initval=1.0)
    return m, u * (r0 / r), 0.5 * pt.log(s2)


def radius_log_density(r: Any, n_l: int) -> Any:
    """The log density a zero-sum ``u`` of radius ``r`` gets on top of its ZeroSumNormal's.

    It cancels the ZeroSumNormal's radial density (``n_l - 1`` free coordinates) and puts
    a tight Normal(``sqrt(n_l - 1)``, :data:`RADIUS_SD`) on the radius, which enters
    nothing else (docs/decisions/0013).
    """
    import pytensor.tensor as pt

    r0 = float(np.sqrt(n_l - 1.0))
    return r**2 / 2 - (r - r0) ** 2 / (2 * RADIUS_SD**2) - (n_l - 2) * pt.log(r)


def _scaled_log_disc_mean(config: IRTConfig, n_s: int, dtype: str, log_s: Any) -> tuple[Any, Any]:
    """The subtask log-discrimination mean, sampled on the ``discrimination * s`` scale.

    ``log_disc_mean_scaled = log_disc_mean + log s`` (flat, with the configured
    prior on ``log_disc_mean``) and ``log_disc_sd``; inside a model context.
    """
    import pymc as pm

    mu_lat = pm.Flat(
        "log_disc_mean_scaled", dims="subtask", initval=np.full(n_s, 0.01, dtype=dtype)
    )
    pm.Potential(
        "log_disc_mean_prior",
        pm.logp(pm.Normal.dist(0.0, config.log_disc_mean_sd), mu_lat - log_s).sum(),
    )
    return mu_lat, pm.HalfNormal("log_disc_sd", config.log_disc_sd_scale, dims="subtask")


def _shifted_intercepts(
    config: IRTConfig,
    m: Any,
    a: Any,
    a_ref: Any,
    sd_d: Any,
    sub: np.ndarray,
    mean_init: np.ndarray,
    z_init: np.ndarray,
) -> Any:
    """Non-centered item intercepts plus ``a * m``, inside a model context.

    ``intercept_mean + a * m`` enters the likelihood; its subtask mean is sampled
    shifted by ``a_ref * m`` (``a_ref``: the subtask's typical discrimination) so
    that ``m`` nearly drops out. ``a`` None: the 1PL (``a = a_ref = 1``).
    ``to_saved_scale`` undoes the shift with the same ``a_ref``.
    """
    import pymc as pm

    mu_e = pm.Flat("intercept_mean_shifted", dims="subtask", initval=mean_init)
    pm.Potential(
        "intercept_mean_prior",
        pm.logp(pm.Normal.dist(0.0, config.intercept_mean_sd), mu_e - a_ref * m).sum(),
    )
    z_d = pm.Normal("intercept_z", 0.0, 1.0, dims="item", initval=z_init)
    shift = 0.0 if a is None else (a - a_ref[sub]) * m
    return mu_e[sub] + shift + sd_d[sub] * z_d


def _sphere_ability(f64: dict[str, np.ndarray], n_l: int) -> tuple[np.ndarray, np.ndarray]:
    """Saved abilities ``m + s * v`` of :func:`_decoupled_ability`'s draws, and ``s``.

    ``u`` (..., llm); the ``2pl-md``'s per-column block passes ``u`` (..., dim, llm) and
    ``m``, ``s2`` (..., dim), giving abilities (..., dim, llm).
    """
    u = f64["u"]
    v = u * np.sqrt(n_l - 1.0) / np.sqrt(np.sum(u**2, axis=-1, keepdims=True))
    s = np.sqrt(f64["s2"])[..., None]
    return f64["m"][..., None] + s * v, s


def _subtask_average(sub: np.ndarray, n_s: int) -> np.ndarray:
    """(subtask, item) matrix whose product with an item vector is the subtask means."""
    onehot = (sub[None, :] == np.arange(n_s)[:, None]).astype(np.float64)
    return onehot / np.maximum(onehot.sum(axis=1, keepdims=True), 1.0)


def _truncated_normal_discrimination(lat: Any, mu: Any, sd: Any, sub: np.ndarray) -> Any:
    """``exp(lat)``, with ``exp(lat) ~ TruncatedNormal(mu[s], sd[s], lower=0)`` added.

    The density is written out (normal density over its mass above 0) because
    PyMC's truncated-normal log density has a non-finite gradient in float32
    when the upper bound is infinite; ``+ lat`` is the Jacobian of ``exp``.
    """
    import pymc as pm
    import pytensor.tensor as pt
    from pymc.distributions.dist_math import normal_lcdf

    a = pt.exp(lat)
    density = pm.logp(pm.Normal.dist(mu[sub], sd[sub]), a) - normal_lcdf(0.0, 1.0, mu / sd)[sub]
    pm.Potential("discrimination_prior", (density + lat).sum())
    return a


def _truncated_normal_quantile(xp: Any, z: Any, mu: Any, sd: Any) -> Any:
    """``TruncatedNormal(mu, sd, lower=0)`` draw that a standard normal ``z`` maps to.

    With ``alpha = mu / sd`` the draw is ``mu - sd * ndtri(Phi(-z) * Phi(alpha))``
    (the upper-tail probability of the standardized draw is ``Phi(-z)``), written
    with ``erfcinv`` and log-CDFs so that it stays finite for very negative
    ``alpha``. ``xp``: ``pytensor.tensor``, or numpy for the saved-scale map.
    """
    if xp is np:
        from scipy.special import erfcinv, log_ndtr

        maximum = np.maximum
    else:
        from pymc.distributions.dist_math import normal_lcdf

        erfcinv, maximum = xp.erfcinv, xp.maximum

        def log_ndtr(x: Any) -> Any:
            return normal_lcdf(0.0, 1.0, x)

    log_q = log_ndtr(-z) + log_ndtr(mu / sd)
    return maximum(mu + sd * np.sqrt(2.0) * erfcinv(2.0 * xp.exp(log_q)), 1e-12)


def _loglik(data: IRTData, theta: Any, a: Any, e: Any, guess: Any, cast: Any) -> Any:
    """Bernoulli-logit log likelihood of the observed cells (missing cells left out)."""
    import pytensor.tensor as pt

    from ._likelihood import (
        _guessing_terms,
        bernoulli_3pl_loglik,
        bernoulli_logit_2pl_loglik,
        bernoulli_logit_loglik,
    )

    obs = data.observed
    y0 = np.where(obs, data.values, 0.0)
    if data.dense:
        weight = cast(np.asarray(1.0)) if data.complete else cast(obs)
        if a is None:  # 1PL
            return bernoulli_logit_loglik(theta[:, None] + e[None, :], cast(y0), weight)
        if guess is None:
            return bernoulli_logit_2pl_loglik(theta, a, e, cast(y0), weight)
        return bernoulli_3pl_loglik(theta, a, e, guess, cast(y0), weight)
    rows, cols = np.nonzero(obs)
    y = data.values[rows, cols]
    eta_k = theta[rows] * (a[cols] if a is not None else 1.0) + e[cols]
    if guess is None:
        return bernoulli_logit_loglik(eta_k, cast(y), cast(np.asarray(1.0)))
    # the fused 3PL Op's cell formula, differentiated by PyTensor
    return _guessing_terms(pt, eta_k, guess[cols], cast(y), cast(np.asarray(1.0)))[0]


# ------------------------------------------------------------------ output
def to_saved_scale(
    raw: dict[str, np.ndarray], data: IRTData, config: IRTConfig, parameterization: str
) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """Map sampled variables (leading dims chain, draw) to the saved parameters.

    Returns ``name -> (dims, values)`` with ``ability``, ``difficulty``,
    ``discrimination``, ``intercept``, ``guessing`` (3PL) and the subtask-level
    ``intercept_mean``, ``intercept_sd`` and ``disc_mean``, ``disc_sd``
    (``log_disc_mean``, ``log_disc_sd`` under the lognormal discrimination prior).
    """
    two_pl = config.model in ("2pl", "3pl")
    truncated = two_pl and config.discrimination_prior == "truncated-normal"
    f64 = {k: np.asarray(v, dtype=np.float64) for k, v in raw.items()}
    lead = f64["intercept_sd"].shape[:-1]
    n_l, n_i = data.n_llms, data.n_items
    out: dict[str, tuple[tuple[str, ...], np.ndarray]] = {}
    if parameterization == "decoupled-nc":
        sub = data.subtask_codes
        m = f64["m"][..., None]
        ability, s = _sphere_ability(f64, n_l)
        log_disc_mean = f64["log_disc_mean_scaled"] - np.log(s)
        lat = (
            f64["log_disc_mean_scaled"][..., sub] + f64["log_disc_sd"][..., sub] * f64["log_disc_z"]
        )
        a = np.exp(lat) / s
        # undo the model's intercept-mean shift by the subtask's typical discrimination
        f64["intercept_mean"] = f64["intercept_mean_shifted"] - np.exp(log_disc_mean) * m
        intercept = (
            f64["intercept_mean"][..., sub] + f64["intercept_sd"][..., sub] * f64["intercept_z"]
        )
        out["log_disc_mean"] = (("subtask",), log_disc_mean)
        out["log_disc_sd"] = (("subtask",), f64["log_disc_sd"])
    elif parameterization == "decoupled":
        m = f64["m"][..., None]
        u = f64["u"]
        if two_pl:
            ability, s = _sphere_ability(f64, n_l)
            a_lik = np.exp(f64["log_disc_scaled"])
            a = a_lik / s
            intercept = f64["e"] - a_lik * item_centers(data) - a * m
            if truncated:
                sd_l = np.exp(f64["log_disc_sd_scaled"])
                out["disc_mean"] = (("subtask",), f64["disc_kappa_scaled"] * sd_l**2 / s)
                out["disc_sd"] = (("subtask",), sd_l / s)
            else:
                log_disc_mean = f64["log_disc_mean_scaled"] - np.log(s)
                out["log_disc_mean"] = (("subtask",), log_disc_mean)
                out["log_disc_sd"] = (("subtask",), f64["log_disc_sd"])
        else:
            ability = m + u
            a = np.ones((*lead, n_i))
            intercept = f64["e"] - m
            f64["intercept_mean"] = f64["intercept_mean_shifted"] - m
    else:  # "non-centered"
        sub = data.subtask_codes
        if truncated:
            mu, sd = f64["disc_mean"][..., sub], f64["disc_sd"][..., sub]
            a = _truncated_normal_quantile(np, f64["disc_z"], mu, sd)
            out["disc_mean"] = (("subtask",), f64["disc_mean"])
            out["disc_sd"] = (("subtask",), f64["disc_sd"])
        elif two_pl:
            a = np.exp(
                f64["log_disc_mean"][..., sub] + f64["log_disc_sd"][..., sub] * f64["log_disc_z"]
            )
            out["log_disc_mean"] = (("subtask",), f64["log_disc_mean"])
            out["log_disc_sd"] = (("subtask",), f64["log_disc_sd"])
        else:
            a = np.ones((*lead, n_i))
        m = f64["m"][..., None]
        ability = m + f64["u"]
        # the same a_ref as the model's intercept-mean shift (see build)
        if truncated:
            a_ref = a @ _subtask_average(sub, len(data.subtasks)).T
        elif two_pl:
            a_ref = np.exp(f64["log_disc_mean"])
        else:
            a_ref = np.ones_like(f64["intercept_sd"])
        f64["intercept_mean"] = f64["intercept_mean_shifted"] - a_ref * m
        intercept = (
            f64["intercept_mean"][..., sub] + f64["intercept_sd"][..., sub] * f64["intercept_z"]
        )
    out["ability"] = (("llm",), ability)
    out["discrimination"] = (("item",), a)
    out["intercept"] = (("item",), intercept)
    out["difficulty"] = (("item",), -intercept / a)
    out["intercept_mean"] = (("subtask",), f64["intercept_mean"])
    out["intercept_sd"] = (("subtask",), f64["intercept_sd"])
    if config.model == "3pl":
        fixed = data.guessing_fixed
        learn = np.isnan(fixed)
        g = np.broadcast_to(np.where(learn, 0.0, fixed), (*lead, n_i)).copy()
        if learn.any():
            g[..., learn] = f64["guessing_learned"]
        out["guessing"] = (("item",), g)
    return out

"""Configuration of an IRT fit: the model, its priors and the sampler settings.

A configuration is a small frozen dataclass merged over defaults
(``IRTConfig.from_dict(defaults | user)``). Its JSON form and a hash of it are
stored in every saved posterior, so :func:`~bayes_microbench.irt.load_posterior`
can refuse a file made with another configuration.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

import numpy as np

from .._validate import param
from ..exceptions import ConfigurationError

ModelName = Literal["1pl", "2pl", "3pl", "2pl-md"]
Method = Literal["nuts", "advi", "pathfinder", "map", "laplace"]
Backend = Literal["numpyro", "nutpie"]

MODELS: tuple[str, ...] = ("1pl", "2pl", "3pl", "2pl-md")
METHODS: tuple[str, ...] = ("nuts", "advi", "pathfinder", "map", "laplace")
BACKENDS: tuple[str, ...] = ("numpyro", "nutpie")
DISCRIMINATION_PRIORS: tuple[str, ...] = ("truncated-normal", "lognormal")
#: nutpie's mass-matrix adaptations (see ``IRTModel.fit``).
ADAPTATIONS: tuple[str, ...] = ("auto", "draw_diag", "diag", "low_rank")

#: Bump when the saved layout changes incompatibly; files with another major are refused.
FORMAT_VERSION = 2


@dataclass(frozen=True)
class IRTConfig:
    """Model and prior settings of :class:`~bayes_microbench.irt.IRTModel`.

    The model, written in slope-intercept form (the graphs sample it reparameterized)::

        ability[j]                 ~ Normal(0, 1)                 (llm population, fixed)
        intercept_mean[s]          ~ Normal(0, intercept_mean_sd)
        intercept_sd[s]            ~ HalfNormal(intercept_sd_scale)
        intercept[i]               ~ Normal(intercept_mean[s(i)], intercept_sd[s(i)])
        log_disc_mean[s]           ~ Normal(0, log_disc_mean_sd)        (2PL, 3PL)
        log_disc_sd[s]             ~ HalfNormal(log_disc_sd_scale)
        log_discrimination[i]      ~ Normal(log_disc_mean[s(i)], log_disc_sd[s(i)])
        guessing[i]                = 1 / n_options[i] when known (3PL), else
                                     ~ Beta with mean guessing_mean, strength guessing_strength
        logit P*(correct[j, i])    = discrimination[i] * ability[j] + intercept[i]
        P(correct[j, i])           = guessing[i] + (1 - guessing[i]) * P*

    ``discrimination_prior="truncated-normal"`` replaces the lognormal by::

        disc_mean[s]               ~ Normal(disc_mean_mean, disc_mean_sd)
        disc_sd[s]                 ~ HalfNormal(disc_sd_scale)
        discrimination[i]          ~ TruncatedNormal(disc_mean[s(i)], disc_sd[s(i)], lower=0)

    Its density is positive at 0, where the lognormal's vanishes, which suits items
    that do not discriminate. The lognormal stays this configuration's default; the
    default 2PL fit chooses the prior from the data (``policy.data_prior``). Why, and
    what was measured: docs/decisions/0036-default-fit-continues-its-chains.md.

    The saved posterior also holds ``difficulty = -intercept / discrimination``
    so that ``logit P* = discrimination * (ability - difficulty)``.
    """

    model: ModelName = "2pl"
    n_dims: int = 2  # only for "2pl-md"
    intercept_mean_sd: float = 3.0
    intercept_sd_scale: float = 3.0
    discrimination_prior: str = "lognormal"
    disc_mean_mean: float = 1.0
    disc_mean_sd: float = 2.0
    disc_sd_scale: float = 2.0
    log_disc_mean_sd: float = 0.5
    log_disc_sd_scale: float = 0.5
    guessing_mean: float = 0.25
    guessing_strength: float = 20.0
    n_options: int | None = None  # overrides the responses' n_options for every item

    def validate(self) -> IRTConfig:
        if self.model not in MODELS:
            raise ConfigurationError(f"model must be one of {list(MODELS)}, got {self.model!r}")
        for name in (
            "intercept_mean_sd",
            "intercept_sd_scale",
            "disc_mean_sd",
            "disc_sd_scale",
            "log_disc_mean_sd",
            "log_disc_sd_scale",
            "guessing_strength",
        ):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ConfigurationError(f"{name} must be a positive number, got {value!r}")
        if not isinstance(self.disc_mean_mean, (int, float)) or not np.isfinite(
            self.disc_mean_mean
        ):
            raise ConfigurationError(
                f"disc_mean_mean must be a finite number, got {self.disc_mean_mean!r}"
            )
        if self.discrimination_prior not in DISCRIMINATION_PRIORS:
            raise ConfigurationError(
                f"discrimination_prior must be one of {list(DISCRIMINATION_PRIORS)}, "
                f"got {self.discrimination_prior!r}"
            )
        if not 0.0 < float(self.guessing_mean) < 0.5:
            raise ConfigurationError(
                f"guessing_mean must lie in (0, 0.5), got {self.guessing_mean!r}"
            )
        if self.n_options is not None and (
            not isinstance(self.n_options, int) or self.n_options < 2
        ):
            raise ConfigurationError(
                f"n_options must be a whole number >= 2 (K answer options), got {self.n_options!r}"
            )
        if self.model == "2pl-md" and (not isinstance(self.n_dims, int) or self.n_dims < 1):
            raise ConfigurationError(f"n_dims must be a whole number >= 1, got {self.n_dims!r}")
        return self

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None = None) -> IRTConfig:
        """Defaults merged with ``values``; unknown keys are an error that lists the valid ones."""
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigurationError(
                f"unknown IRT configuration key(s) {unknown}; valid keys: {sorted(known)}"
            )
        return replace(cls(), **values).validate()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def hash(self) -> str:
        """A short stable hash of the configuration (stored in saved posteriors)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SamplerConfig:
    """How a posterior was obtained (recorded in the saved file, not part of the model hash)."""

    method: Method = "nuts"
    backend: Backend = "nutpie"
    chains: int = 2
    draws: int = 1000
    tune: int = 1000
    target_accept: float = 0.8
    random_seed: int | None = None
    float32: bool = True

    def validate(self) -> SamplerConfig:
        """Return ``self`` when every setting is valid (:func:`check_fit_settings`)."""
        check_fit_settings(
            method=self.method,
            backend=self.backend,
            chains=self.chains,
            draws=self.draws,
            tune=self.tune,
            target_accept=self.target_accept,
        )
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Parameterization:
    """How a graph samples its blocks: one type for the 1-D models and the ``2pl-md``.

    Attributes
    ----------
    name
        The name a fit takes (``parameterization=``) and records.
    ability
        ``"sphere"``: the decoupled ability block ``m + s * v`` with ``v`` on the sphere
        (the 1PL, which has no slope scale, keeps ``m + u``); ``"location"``: ``m + u``
        with a zero-sum ``u``; ``"plain"``: ``theta ~ Normal(0, 1)`` (the ``2pl-md``'s
        flat vector included).
    centered
        Whether the item blocks (discrimination, intercept) are sampled centered.
    """

    name: str
    ability: Literal["sphere", "location", "plain"]
    centered: bool


#: The 1-D models' parameterizations (docs/decisions/0013, 0014).
PARAMETERIZATIONS_1D: dict[str, Parameterization] = {
    p.name: p
    for p in (
        Parameterization("decoupled", "sphere", True),
        Parameterization("decoupled-nc", "sphere", False),
        Parameterization("non-centered", "location", False),
    )
}
#: The ``2pl-md``'s parameterizations (docs/decisions/0015).
PARAMETERIZATIONS_MD: dict[str, Parameterization] = {
    p.name: p
    for p in (
        Parameterization("decoupled", "sphere", True),
        Parameterization("centered", "plain", True),
        Parameterization("non-centered", "plain", False),
    )
}


def parameterizations(model: str) -> dict[str, Parameterization]:
    """The parameterizations ``model`` is built in, by name."""
    return PARAMETERIZATIONS_MD if model == "2pl-md" else PARAMETERIZATIONS_1D


class SettingError(ConfigurationError):
    """A bad fit setting; ``parameters`` names the settings the message names.

    The message spells them with :func:`~bayes_microbench._validate.param`: ``draws``
    for a caller of the library, ``--draws`` inside the command line.
    """

    def __init__(self, message: str, parameters: Sequence[str]) -> None:
        super().__init__(message)
        self.parameters = tuple(parameters)


def _whole(name: str, value: Any, minimum: int) -> None:
    """Refuse ``value`` unless it is a whole number (not a bool) of at least ``minimum``."""
    integral = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if not integral or value < minimum:
        raise SettingError(
            f"{param(name)} must be a whole number >= {minimum}, got {value!r}", [name]
        )


def check_fit_settings(
    *,
    model: str | None = None,
    discrimination_prior: str = "lognormal",
    method: str | None = None,
    backend: str | None = None,
    chains: Any = None,
    draws: Any = None,
    tune: Any = None,
    target_accept: Any = None,
    parameterization: str | None = None,
    adaptation: str | None = None,
    optimizer_iterations: Any = None,
    draws_budget: Any = None,
) -> None:
    """Refuse a bad fit setting in one line naming it; the one place fit settings are checked.

    Each setting given (not None) is checked: ``method``, ``backend``, ``adaptation``
    against their choices; ``chains``, ``draws`` (>= 1), ``tune`` (>= 0) and
    ``optimizer_iterations`` (>= 1) whole numbers; ``target_accept`` in [0.5, 1);
    ``draws_budget`` (>= ``draws``) only for nutpie's NUTS (its chains are continued);
    ``parameterization`` (``"auto"`` or one of ``model``'s, and ``"decoupled-nc"`` only
    for a lognormal 2PL/3PL; needs ``model``). ``SamplerConfig.validate``,
    ``IRTModel.fit`` and the ``fit`` command call it (the command before reading data).

    Raises
    ------
    SettingError
        The first bad setting, its message naming the parameter (``draws``).
    """
    for name, value, choices in (
        ("method", method, METHODS),
        ("backend", backend, BACKENDS),
        ("adaptation", adaptation, ADAPTATIONS),
    ):
        if value is not None and value not in choices:
            raise SettingError(
                f"{param(name)} must be one of {list(choices)}, got {value!r}", [name]
            )
    for name, value, minimum in (
        ("chains", chains, 1),
        ("draws", draws, 1),
        ("tune", tune, 0),
        ("optimizer_iterations", optimizer_iterations, 1),
        ("draws_budget", draws_budget, 1),
    ):
        if value is not None:
            _whole(name, value, minimum)
    if draws_budget is not None and draws is not None and int(draws_budget) < int(draws):
        raise SettingError(
            f"{param('draws_budget', draws_budget)} must be at least {param('draws', draws)} "
            "(the draws per chain of the first check)",
            ["draws_budget"],
        )
    if draws_budget is not None and (method, backend) != ("nuts", "nutpie"):
        raise SettingError(
            f"{param('draws_budget')} continues nutpie's NUTS chains: it needs "
            f"{param('method', 'nuts')} and {param('backend', 'nutpie')}",
            ["draws_budget"],
        )
    if target_accept is not None:
        try:
            ok = 0.5 <= float(target_accept) < 1.0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise SettingError(
                f"{param('target_accept')} must lie in [0.5, 1), got {target_accept!r}",
                ["target_accept"],
            )
    if parameterization is None or parameterization == "auto":
        return
    if model is None:
        raise ValueError("check_fit_settings: a parameterization is checked against a model")
    names = list(parameterizations(model))
    if model == "2pl-md" and parameterization not in names:
        raise SettingError(
            f"{param('model')} '2pl-md' takes {param('parameterization')} 'auto' or one of "
            f"{names}, got {parameterization!r}",
            ["model", "parameterization"],
        )
    if parameterization not in names:
        raise SettingError(
            f"{param('parameterization')} must be 'auto' or one of {names}, "
            f"got {parameterization!r}",
            ["parameterization"],
        )
    check_parameterization(model, discrimination_prior, parameterization)


def check_parameterization(model: str, discrimination_prior: str, parameterization: str) -> None:
    """Refuse ``"decoupled-nc"`` where the model and prior do not have it (one line).

    Why: the graph builder finds out only after the data are loaded and checked,
    and a command should refuse a bad combination of flags in one line, first.
    """
    if parameterization == "decoupled-nc" and (
        model not in ("2pl", "3pl") or discrimination_prior == "truncated-normal"
    ):
        raise SettingError(
            f"{param('parameterization')} 'decoupled-nc' applies to the 2PL and 3PL with "
            "the lognormal discrimination prior",
            ["parameterization"],
        )

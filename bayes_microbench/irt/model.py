"""``IRTModel``: hierarchical 1PL / 2PL / 3PL / multidimensional 2PL with a lazy lifecycle.

``__init__`` validates the configuration and the data, :meth:`IRTModel.build_model`
builds the PyMC graph once, :meth:`IRTModel.fit` samples (or approximates) and
returns ``self`` with the posterior attached. A fitted instance is not refitted:
make a new one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import xarray as xr

from .._defaults import seed_or_fresh
from ..exceptions import ConfigurationError, ConvergenceWarning
from ..responses import Responses
from .config import ADAPTATIONS, IRTConfig, SamplerConfig, check_fit_settings
from .data import IRTData
from .diagnostics import (
    DRAWS_BUDGET,
    ConvergenceSummary,
    fit_problems,
    fit_verdict,
    more_draws,
    summarize,
    warn_if_unconverged,
)
from .policy import SMALL_MATRIX_HINT

logger = logging.getLogger(__name__)

__all__ = ["ADAPTATIONS", "SMALL_MATRIX_HINT", "IRTModel", "fit_default", "fit_extending_draws"]

#: A default fit starts a remedy refit only while its attempts so far took less wall
#: time than this (seconds): the refits of a large matrix cost many times its first fit.
REFIT_BUDGET_SECONDS = 900.0

#: Draws per chain are continued in steps of this many (a refit rounded to 500: it
#: repeated the warm-up and every draw; continuing costs only the draws added).
EXTENSION_STEP = 250

#: Laplace builds a dense Hessian; above this many unconstrained parameters use ADVI.
LAPLACE_MAX_DIM = 6000
#: L-BFGS-B iteration limits of the optimizer-based methods (scipy's own default for
#: ``map``; the limits ``laplace`` and ``pathfinder`` always had).
OPTIMIZER_ITERATIONS = {"map": 15000, "laplace": 5000, "pathfinder": 1000}


class IRTModel:
    """Hierarchical item response model of an llm x item response matrix.

    Parameters
    ----------
    responses
        The :class:`~bayes_microbench.responses.Responses` to fit.
    model
        ``"1pl"``, ``"2pl"`` (default), ``"3pl"`` or ``"2pl-md"`` (multidimensional
        2PL with ``config={"n_dims": D}``, default 2; see
        :mod:`bayes_microbench.irt.multidim`).
    config
        Extra :class:`IRTConfig` fields (priors, ``n_options``), merged over the
        defaults; an unknown key is a :class:`ConfigurationError`.

    Examples
    --------
    >>> from bayes_microbench import simulate_responses
    >>> from bayes_microbench.irt import IRTModel
    >>> resp = simulate_responses("gpqa", n_llms=40, n_items=50, model="2pl", random_seed=0)
    >>> fit = IRTModel(resp, "2pl").fit(draws=100, tune=100, random_seed=0)  # doctest: +SKIP
    >>> fit.posterior["ability"].dims  # doctest: +SKIP
    ('chain', 'draw', 'llm')
    """

    def __init__(
        self,
        responses: Responses,
        model: str = "2pl",
        *,
        config: IRTConfig | dict[str, Any] | None = None,
    ) -> None:
        if isinstance(config, IRTConfig):
            cfg = (
                config
                if model == config.model
                else IRTConfig.from_dict({**config.to_dict(), "model": model})
            )
        else:
            cfg = IRTConfig.from_dict({**(config or {}), "model": model})
        self.config: IRTConfig = cfg.validate()
        self.responses = responses
        self.data = IRTData.from_responses(responses, self.config)
        if self.is_multidim:
            from .multidim import check_dims

            check_dims(self.data, self.config.n_dims)
        self.idata: xr.DataTree | None = None
        self.sampler: SamplerConfig | None = None
        self.diagnostics: ConvergenceSummary | None = None
        self.wall_seconds: float | None = None
        self.fit_info: dict[str, Any] = {}
        #: the posterior's calibration on its own responses (:meth:`calibrate`), saved with it
        self.calibration: Any = None
        #: the parameterization the fit sampled in ("auto" resolved; see ``fit``)
        self.parameterization: str | None = None
        self._model: Any = None
        self._model_key: tuple[str, bool] | None = None

    # ------------------------------------------------------------ lifecycle
    @property
    def is_multidim(self) -> bool:
        """True for the multidimensional 2PL (``model="2pl-md"``)."""
        return self.config.model == "2pl-md"

    def policy(self, method: str | None = None) -> Any:
        """The sampling policy (:func:`~bayes_microbench.irt.policy.choose`) of a fit.

        ``method`` None: this instance's fit (its method and parameterization) once
        fitted, before that no method. Returns the
        :class:`~bayes_microbench.irt.policy.Policy`.
        """
        from .policy import choose

        if method is None:
            method = self.sampler.method if self.sampler is not None else None
            asked = self.parameterization or "auto"
        else:
            asked = "auto"
        return choose(
            self.data, self.config, method, parameterization=asked, weak=self._weak_slopes
        )

    @functools.cached_property
    def _weak_slopes(self) -> bool:
        """:func:`~bayes_microbench.irt.policy.weak_slopes` of this model, cached (a pass over
        the cells) for :meth:`policy` and :meth:`fit`."""
        from .policy import weak_slopes

        return weak_slopes(self.data, self.config)

    def build_model(self, *, parameterization: str | None = None, float32: bool = True) -> Any:
        """Build (once) and return the :class:`pymc.Model`.

        ``parameterization`` defaults to ``"decoupled"`` (for the ``2pl-md`` too, see
        :mod:`bayes_microbench.irt.multidim`).
        """
        if parameterization is None:
            parameterization = "decoupled"
        key = (parameterization, bool(float32))
        if self._model is None or self._model_key != key:
            if self.is_multidim:
                from . import multidim

                self._model = multidim.build(
                    self.data, self.config, parameterization=parameterization, float32=float32
                )
            else:
                from .pymc_model import build

                self._model = build(
                    self.data, self.config, parameterization=parameterization, float32=float32
                )
            self._model_key = key
        return self._model

    def item_embeddings(self) -> xr.DataArray:
        """Posterior-mean loadings ``(item, dim)`` of a ``2pl-md`` fit (see ``multidim``)."""
        from .multidim import item_embeddings

        return item_embeddings(self.posterior)

    @property
    def is_fitted(self) -> bool:
        return self.idata is not None

    def fit(
        self,
        method: str = "nuts",
        *,
        chains: int = 2,
        draws: int = 1000,
        tune: int = 1000,
        random_seed: int | None = None,
        progressbar: bool = False,
        backend: str = "nutpie",
        target_accept: float = 0.8,
        float32: bool = True,
        parameterization: str = "auto",
        advi_iterations: int = 30000,
        adaptation: str = "auto",
        optimizer_iterations: int | None = None,
        draws_budget: int | None = None,
    ) -> IRTModel:
        """Fit the model; return ``self`` with :attr:`idata` and :attr:`posterior` attached.

        Parameters
        ----------
        method
            ``"nuts"`` (MCMC, the reference), or a fast approximation:
            ``"advi"`` (mean-field ADVI), ``"pathfinder"`` (single-path
            Pathfinder), ``"laplace"`` (Gaussian at the mode in the
            unconstrained space) or ``"map"`` (the mode only: one draw, no
            uncertainty).
        chains, draws, tune
            NUTS settings; approximations use ``draws`` (times ``chains``) draws.
        random_seed
            Seed for the sampler and the approximations (same seed, same numbers).
            ``None`` draws a fresh seed from the OS's entropy, logged at INFO and
            recorded in :attr:`sampler` (saved with the posterior) and
            ``fit_info["random_seed"]``, so the fit can be repeated.
        progressbar
            Show the sampler's progress bar.
        backend
            NUTS implementation: ``"nutpie"`` (default; JAX-compiled log density) or
            ``"numpyro"`` (``pm.sample(nuts_sampler="numpyro")``).
        target_accept
            NUTS target acceptance rate.
        float32
            Evaluate the likelihood in single precision (default; twice as fast,
            and ample for Bernoulli log likelihoods).
        parameterization
            ``"auto"`` (default): ``"decoupled"`` (centered; for a ``2pl-md`` each
            ability column decoupled, docs/decisions/0050) for NUTS on 100 or
            more llms; below that ``"decoupled-nc"`` for NUTS of a lognormal
            2PL/3PL, else ``"non-centered"`` (always for the approximations).
            NUTS of a lognormal 3PL with
            :func:`~bayes_microbench.irt.policy.weak_slopes` takes
            ``"decoupled-nc"`` at any size;
            see :mod:`bayes_microbench.irt.pymc_model`.
        advi_iterations
            Optimization steps of ADVI.
        optimizer_iterations
            Iteration limit of the L-BFGS-B optimizer behind ``"map"``,
            ``"laplace"`` and ``"pathfinder"`` (default per
            method: :data:`OPTIMIZER_ITERATIONS`); stopping at it, or at an abnormal
            line search, makes the fit unconverged (:attr:`converged` False).
        adaptation
            nutpie's mass-matrix adaptation: ``"auto"`` (default):
            ``"draw_diag"`` with the ``"decoupled"`` parameterization, else
            ``"diag"``. ``"draw_diag"`` is the diagonal of the draws' variances
            (as in Stan and PyMC), ``"diag"`` nutpie's own (draw and gradient
            variances), ``"low_rank"`` nutpie's low-rank correction. Why
            ``"draw_diag"`` for the decoupled form, and what ``"low_rank"`` cost:
            docs/decisions/0013-decoupled-parameterization-for-nuts.md.
        draws_budget
            NUTS with nutpie: check convergence at ``draws`` per chain and, while the
            draws so far miss only R-hat or ESS (:func:`~bayes_microbench.irt.diagnostics.more_draws`),
            continue the same chains to the draws it asks for, up to ``draws_budget`` per
            chain. Each check is recorded in ``fit_info["attempts"]`` (its draws per chain,
            wall seconds so far and diagnostics) and ``fit_info["draws_tried"]``. ``None``
            (default): exactly ``draws``. Why continue rather than refit:
            docs/decisions/0036-default-fit-continues-its-chains.md.

        Raises
        ------
        ConfigurationError
            Bad settings, or the instance is already fitted.
        """
        if self.is_fitted:
            raise ConfigurationError(
                "this IRTModel is already fitted; create a new IRTModel to fit again"
            )
        check_fit_settings(
            model=self.config.model,
            discrimination_prior=self.config.discrimination_prior,
            method=method,
            backend=backend,
            chains=chains,
            draws=draws,
            tune=tune,
            target_accept=target_accept,
            parameterization=parameterization,
            adaptation=adaptation,
            optimizer_iterations=optimizer_iterations,
            draws_budget=draws_budget,
        )
        seed = int(seed_or_fresh(random_seed, "IRTModel.fit"))
        # the settings merged over the defaults once; every _fit_* method reads them here
        sampler = SamplerConfig(
            method=method,  # type: ignore[arg-type]
            backend=backend,  # type: ignore[arg-type]
            chains=int(chains),
            draws=int(draws),
            tune=int(tune),
            target_accept=target_accept,
            random_seed=seed,
            float32=float32,
        ).validate()
        if method in ("map", "laplace", "pathfinder"):
            float32 = False  # optimizers need double precision (the record keeps the request)
        from .policy import choose

        policy = choose(
            self.data,
            self.config,
            method,
            parameterization=parameterization,
            adaptation=adaptation,
            weak=self._weak_slopes,
        )
        parameterization, adaptation = policy.parameterization, policy.adaptation
        if method == "nuts" and chains < 2:
            logger.warning("one chain: R-hat cannot detect non-convergence; use chains >= 2")
        if method == "nuts" and backend == "numpyro":
            _prepare_jax_devices(chains)
        maxiter = int(
            OPTIMIZER_ITERATIONS.get(method, 1)
            if optimizer_iterations is None
            else optimizer_iterations
        )
        import pytensor

        with pytensor.config.change_flags(floatX="float32" if float32 else "float64"):
            model = self.build_model(parameterization=parameterization, float32=float32)
            start = time.perf_counter()
            if method == "nuts":
                extension = self._extension(parameterization, draws_budget, start)
                raw, sample_stats = self._fit_nuts(
                    model, sampler, progressbar, adaptation, extension
                )
            elif method == "advi":
                raw, sample_stats = self._fit_advi(model, sampler, progressbar, advi_iterations)
            else:
                raw, sample_stats = self._fit_optimizer(model, sampler, maxiter)
        self.wall_seconds = time.perf_counter() - start
        self.parameterization = parameterization
        if method == "nuts" and draws_budget is not None:  # the draws the chains reached
            sampler = dataclasses.replace(sampler, draws=int(next(iter(raw.values())).shape[1]))
            self.fit_info["draws_budget"] = int(draws_budget)
        self.sampler = sampler
        self.idata = self._assemble(raw, sample_stats, parameterization)
        self.fit_info["random_seed"] = seed
        self.fit_info["random_seed_drawn"] = random_seed is None
        self.fit_info["parameterization"] = parameterization
        if "attempts" in self.fit_info:
            self.fit_info["draws_tried"] = [a["draws"] for a in self.fit_info["attempts"]]
        if method == "nuts":
            self._report_nuts()
        elif method != "advi":  # ADVI warns on its own (irt.approx.advi)
            self._report_optimizer(method)
        logger.info("%s fit of %s took %.1f s", method, self.config.model, self.wall_seconds)
        return self

    def _fit_nuts(
        self,
        model: Any,
        sampler: SamplerConfig,
        progressbar: bool,
        adaptation: str,
        extension: Any = None,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
        """NUTS draws and sample stats of ``model`` (:func:`_run_nuts`)."""
        assert sampler.random_seed is not None
        return _run_nuts(
            model,
            sampler,
            sampler.random_seed,
            progressbar=progressbar,
            backend=sampler.backend,
            adaptation=adaptation,
            extension=extension,
        )

    def _extension(self, parameterization: str, budget: int | None, start: float) -> Any:
        """The checkpoints of a NUTS fit that continues its chains up to ``budget`` draws.

        At each checkpoint the draws so far are put on the saved scale and summarized
        as :meth:`_report_nuts` does, recorded in ``fit_info["attempts"]``, and
        :func:`more_draws` (steps of :data:`EXTENSION_STEP`) says how far to continue.
        ``None`` when there is no budget.
        """
        self.fit_info.pop("attempts", None)
        if budget is None:
            return None
        from ._chains import Extension

        attempts: list[dict[str, Any]] = []
        self.fit_info["attempts"] = attempts

        def decide(raw: dict[str, np.ndarray], stats: dict[str, np.ndarray]) -> int | None:
            draws = int(next(iter(raw.values())).shape[1])
            tree = self._assemble(raw, stats, parameterization)
            d = summarize(tree["posterior"].to_dataset(), tree["sample_stats"].to_dataset())
            attempts.append(
                {
                    "draws": draws,
                    "wall_seconds": round(time.perf_counter() - start, 3),
                    "max_rhat": d.max_rhat,
                    "min_ess_bulk": d.min_ess_bulk,
                    "min_ess_tail": d.min_ess_tail,
                    "divergences": d.divergences,
                    "problems": list(d.problems),
                    "continued": True,
                }
            )
            nxt = more_draws(d, draws, budget, step=EXTENSION_STEP)
            if nxt is not None and nxt <= draws:  # more_draws always asks for more; be sure
                nxt = None
            if nxt is not None:
                logger.info(
                    "%d draws per chain missed %s; continuing the chains to %d (budget %d)",
                    draws,
                    d.reason(),
                    nxt,
                    budget,
                )
            return nxt

        return Extension(int(budget), decide)

    def _fit_advi(
        self, model: Any, sampler: SamplerConfig, progressbar: bool, iterations: int
    ) -> tuple[dict[str, np.ndarray], None]:
        """Mean-field ADVI draws of ``model``; its optimizer's record in :attr:`fit_info`."""
        assert sampler.random_seed is not None
        raw, self.fit_info = _run_advi(
            model, sampler, sampler.random_seed, progressbar=progressbar, iterations=iterations
        )
        return raw, None

    def _fit_optimizer(
        self, model: Any, sampler: SamplerConfig, maxiter: int
    ) -> tuple[dict[str, np.ndarray], None]:
        """MAP, Laplace or Pathfinder draws of ``model`` (L-BFGS-B up to ``maxiter`` steps)."""
        seed, n_draws = sampler.random_seed, sampler.draws * sampler.chains
        assert seed is not None
        if sampler.method == "map":
            raw, self.fit_info = _run_map(model, seed, maxiter)
        elif sampler.method == "laplace":
            from .approx import laplace

            raw, self.fit_info = laplace(
                model, draws=n_draws, random_seed=seed, max_dim=LAPLACE_MAX_DIM, maxiter=maxiter
            )
        else:
            from .approx import pathfinder

            raw, self.fit_info = pathfinder(model, draws=n_draws, random_seed=seed, maxiter=maxiter)
        return raw, None

    def _report_nuts(self) -> None:
        """Attach the NUTS diagnostics; warn, naming the policy's remedy, when they fail."""
        from .policy import remedy_text

        assert self.idata is not None
        self.diagnostics = summarize(self.posterior, self.idata["sample_stats"].to_dataset())
        warn_if_unconverged(self.diagnostics, hint=remedy_text(self.policy()), stacklevel=4)

    def _report_optimizer(self, method: str) -> None:
        """Warn when the optimizer behind ``method`` stopped short (``converged`` False)."""
        if self.fit_info.get("converged") is False:
            warnings.warn(
                f"the {method} fit did not converge: the optimizer stopped with "
                f"{self.fit_info.get('optimizer_message', 'no message')!r}; the estimate may "
                "be off: raise optimizer_iterations, or use method='nuts'",
                ConvergenceWarning,
                stacklevel=3,
            )

    # --------------------------------------------------------------- results
    @property
    def posterior(self) -> xr.Dataset:
        """The posterior (dims chain, draw and llm / item / subtask) as a Dataset."""
        if self.idata is None:
            raise ConfigurationError("the model is not fitted yet; call fit() first")
        return self.idata["posterior"].to_dataset()

    @property
    def converged(self) -> bool | None:
        """NUTS: the diagnostics' verdict; approximations: the optimizer's (ADVI: its schedule).

        ``None`` only before fitting. Why: an optimizer that stopped short (L-BFGS-B's
        ABNORMAL line search, the iteration limit) is as unusable as an unmixed chain.
        """
        return fit_verdict(self.diagnostics, self.fit_info)

    def convergence_problems(self) -> list[str]:
        """What failed, one phrase each (empty when converged)."""
        return fit_problems(self.diagnostics, self.fit_info)

    def _assemble(
        self, raw: dict[str, np.ndarray], sample_stats: dict[str, np.ndarray] | None, param: str
    ) -> xr.DataTree:
        coords: dict[str, Any] = {
            "llm": self.data.llms,
            "item": self.data.items,
            "subtask": self.data.subtasks,
            "item_subtask": ("item", self.data.item_subtask),
        }
        post_attrs = {"ability_population": "normal(0,1)"}
        if self.is_multidim:
            from . import multidim

            n_dims = self.config.n_dims
            anchors = multidim.start_values(self.data, n_dims).anchors
            saved = multidim.to_saved_scale(raw, self.data, self.config, param, anchors)
            coords["dim"] = np.arange(n_dims)
            if n_dims >= 2:
                coords["extra_dim"] = np.arange(1, n_dims)
            post_attrs = {
                "ability_population": f"normal(0,I_{n_dims})",
                "anchors": json.dumps([str(self.data.items[k]) for k in anchors]),
                "n_dims": str(n_dims),
            }
        else:
            from .pymc_model import to_saved_scale

            saved = to_saved_scale(raw, self.data, self.config, param)
        first = next(iter(saved.values()))[1]
        n_chain, n_draw = first.shape[:2]
        coords["chain"] = np.arange(n_chain)
        coords["draw"] = np.arange(n_draw)
        post = xr.Dataset(
            {name: (("chain", "draw", *dims), vals) for name, (dims, vals) in saved.items()},
            coords=coords,
        )
        post.attrs.update(post_attrs)
        groups: dict[str, xr.Dataset] = {"posterior": post}
        if sample_stats:
            groups["sample_stats"] = xr.Dataset(
                {k: (("chain", "draw"), np.asarray(v)) for k, v in sample_stats.items()},
                coords={"chain": coords["chain"], "draw": coords["draw"]},
            )
        groups["observed_data"] = xr.Dataset(
            {"correct": (("llm", "item"), self.data.values.astype(np.float32))},
            coords={
                "llm": self.data.llms,
                "item": self.data.items,
                "item_subtask": ("item", self.data.item_subtask),
            },
        )
        return xr.DataTree.from_dict(groups)

    def calibrate(self, *, random_seed: int | None = 0) -> Any:
        """Estimate the posterior's calibration on the responses it was fitted on; keep it.

        See :func:`bayes_microbench.irt.calibration.calibrate_fitted`; :meth:`save`
        stores it and ``score`` applies it by default. Returns the ``Misfit``.
        """
        from .calibration import calibrate_fitted

        if self.idata is None or self.responses is None:
            raise ConfigurationError("the model is not fitted yet; call fit() first")
        self.calibration = calibrate_fitted(self, self.responses, random_seed=random_seed)
        return self.calibration

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, responses: Responses | None = None) -> IRTModel:
        """Read a fit written by :meth:`save` back as a fitted ``IRTModel``, hash-checked.

        Parameters
        ----------
        path
            A ``.nc`` file :meth:`save` wrote (not items-only: those hold no responses).
        responses
            The responses it was fitted on; by default rebuilt from the file's
            ``observed_data`` (give them for a 3PL whose floors came from per-item
            ``n_options``, which the file does not keep). Refused where they differ
            from the file's.

        Returns
        -------
        IRTModel
            With its posterior, sampler, diagnostics, ``fit_info`` and calibration, ready
            for :meth:`save`, :meth:`calibrate` and the checks; :meth:`fit` refuses it.

        Why: what :meth:`save` wrote comes back as the same class it came from, checked
        (configuration and calibration hashes) by :func:`~bayes_microbench.irt.io.load_posterior`.
        """
        from ..exceptions import IncompatibleArtifactError
        from .io import load_posterior

        fitted = load_posterior(path)
        if fitted.items_only or "observed_data" not in fitted.idata.children:
            raise IncompatibleArtifactError(
                f"{path}: an items-only posterior holds no responses or abilities, so it "
                "cannot be an IRTModel again; read it with load_posterior (score, mdad and "
                "plan take it as it is)"
            )
        obs = fitted.idata["observed_data"].to_dataset()
        correct = np.asarray(obs["correct"].to_numpy(), dtype=np.float64)
        llms = [str(x) for x in obs["llm"].to_numpy()]
        items = [str(x) for x in obs["item"].to_numpy()]
        if responses is None:
            responses = Responses.from_arrays(
                correct,
                llms,
                items,
                subtask=[str(x) for x in obs["item_subtask"].to_numpy()],
                benchmark=str(fitted.idata.attrs.get("benchmark") or "benchmark"),
            )
        model = cls(responses, fitted.config.model, config=fitted.config)
        same = (
            list(model.data.llms) == llms
            and list(model.data.items) == items
            and np.array_equal(model.data.values, correct, equal_nan=True)
        )
        if not same:
            raise IncompatibleArtifactError(
                f"{path}: the responses given are not the ones it was fitted on (llms, items "
                "or cells differ); pass the responses of the fit, or none"
            )
        model.idata = fitted.idata
        model.sampler = fitted.sampler
        model.diagnostics = fitted.diagnostics
        model.fit_info = dict(fitted.fit_info)
        model.calibration = fitted.calibration
        model.wall_seconds = fitted.wall_seconds
        model.parameterization = model.fit_info.get("parameterization")
        return model

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        items_only: bool = False,
        thin: int = 1,
        compact: bool = False,
    ) -> Any:
        """Write the fit to NetCDF (see :func:`bayes_microbench.irt.io.save_posterior`)."""
        from .io import save_posterior

        return save_posterior(self, path, items_only=items_only, thin=thin, compact=compact)

    def __repr__(self) -> str:
        state = "fitted" if self.is_fitted else "not fitted"
        return (
            f"IRTModel({self.config.model}, {self.data.n_llms} llms x {self.data.n_items} items, "
            f"{state})"
        )


# ------------------------------------------------------------------ samplers
def fit_extending_draws(
    responses: Responses,
    model: str,
    config: dict[str, Any] | None = None,
    *,
    draws: int = 1000,
    budget: int = DRAWS_BUDGET,
    **fit_kwargs: Any,
) -> IRTModel:
    """NUTS; where the draws miss only R-hat or ESS, more draws per chain, up to ``budget``.

    With nutpie (the default back end) the chains are continued from where they
    stopped (:meth:`IRTModel.fit`'s ``draws_budget``); with numpyro the model is
    refitted with the draws :func:`~bayes_microbench.irt.diagnostics.more_draws` asks for.

    Parameters
    ----------
    responses, model, config
        As for :class:`IRTModel`.
    draws
        Draws per chain at the first check.
    budget
        The most draws per chain (:data:`~bayes_microbench.irt.diagnostics.DRAWS_BUDGET`).
    **fit_kwargs
        Passed to :meth:`IRTModel.fit` (``chains``, ``tune``, ``random_seed`` ...);
        ``random_seed=None`` draws one fresh seed for every attempt (logged, and
        recorded in ``fit_info``).

    Returns
    -------
    IRTModel
        The fit; ``fit_info["draws_tried"]`` lists the draws per chain of each check
        (or refit), ``fit_info["attempts"]`` their diagnostics and
        ``fit_info["wall_seconds_all"]`` the total wall time.
        Its :class:`ConvergenceWarning`, if it did not converge, is raised once.

    Why: whether 1000 draws suffice depends on the data (see
    :func:`~bayes_microbench.irt.diagnostics.more_draws`); a default fit should
    find out, within a stated budget, instead of failing on a near miss.
    """
    drawn = fit_kwargs.get("random_seed") is None
    fit_kwargs["random_seed"] = seed_or_fresh(fit_kwargs.get("random_seed"), "fit_extending_draws")
    if fit_kwargs.get("backend", "nutpie") == "nutpie":
        fit = IRTModel(responses, model, config=config)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            fit.fit("nuts", draws=draws, draws_budget=max(budget, draws), **fit_kwargs)
        fit.fit_info["wall_seconds_all"] = round(float(fit.wall_seconds or 0.0), 3)
    else:
        fit, caught = _refit_with_more_draws(responses, model, config, draws, budget, fit_kwargs)
    fit.fit_info["random_seed_drawn"] = drawn
    for w in caught:  # the last attempt's warnings, said once
        warnings.warn(w.message, w.category, stacklevel=2)
    return fit


def _refit_with_more_draws(
    responses: Responses,
    model: str,
    config: dict[str, Any] | None,
    draws: int,
    budget: int,
    fit_kwargs: dict[str, Any],
) -> tuple[IRTModel, list[Any]]:
    """:func:`fit_extending_draws` for a back end whose chains cannot be continued: refits."""
    tried: list[int] = []
    attempts: list[dict[str, Any]] = []
    wall = 0.0
    while True:
        with _data_notes_said_once(not tried):
            fit = IRTModel(responses, model, config=config)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            fit.fit("nuts", draws=draws, **fit_kwargs)
        tried.append(draws)
        wall += float(fit.wall_seconds or 0.0)
        if fit.diagnostics is not None:
            d = fit.diagnostics
            attempts.append(
                {
                    "draws": draws,
                    "wall_seconds": round(float(fit.wall_seconds or 0.0), 3),
                    "max_rhat": d.max_rhat,
                    "min_ess_bulk": d.min_ess_bulk,
                    "min_ess_tail": d.min_ess_tail,
                    "divergences": d.divergences,
                    "problems": list(d.problems),
                }
            )
        nxt = None if fit.diagnostics is None else more_draws(fit.diagnostics, draws, budget)
        if nxt is None:
            break
        assert fit.diagnostics is not None
        logger.info(
            "the fit of %d draws per chain missed %s; refitting with %d (budget %d)",
            draws,
            fit.diagnostics.reason(),
            nxt,
            budget,
        )
        draws = nxt
    fit.fit_info["draws_tried"] = tried
    fit.fit_info["attempts"] = attempts
    fit.fit_info["wall_seconds_all"] = round(wall, 3)
    return fit, list(caught)


@contextlib.contextmanager
def _data_notes_said_once(first: bool) -> Iterator[None]:
    """Drop the data's notes (``irt.data`` warnings) of every fit but the first of a loop.

    Why: each refit rebuilds the model from the same responses, and its notes
    (all-correct llms, ...) would be printed again with each attempt.
    """
    if first:
        yield
        return
    quiet = logging.Filter("never")  # a filter whose name matches no record: drops all
    data_logger = logging.getLogger("bayes_microbench.irt.data")
    data_logger.addFilter(quiet)
    try:
        yield
    finally:
        data_logger.removeFilter(quiet)


def fit_default(
    responses: Responses,
    model: str,
    config: dict[str, Any] | None = None,
    *,
    draws: int = 1000,
    budget: int = DRAWS_BUDGET,
    refit_seconds: float = REFIT_BUDGET_SECONDS,
    **fit_kwargs: Any,
) -> IRTModel:
    """The default NUTS fit: the data's prior, :func:`fit_extending_draws`, the remedies.

    Where the caller left both the parameterization (``"auto"``) and the
    discrimination prior to the defaults, a 2PL starts from the prior the data choose
    (:func:`~bayes_microbench.irt.policy.data_prior`, recorded in
    ``fit_info["prior_choice"]``); where that fit has not converged, the refits of
    :func:`~bayes_microbench.irt.policy.remedy_refits` (after a data-chosen truncated
    normal: :func:`~bayes_microbench.irt.policy.lognormal_refits`) run in order, each
    extending its draws the same way, until one converges; a refit starts only while
    the attempts so far took less than ``refit_seconds`` of wall time.

    Parameters
    ----------
    responses, model, config, draws, budget, **fit_kwargs
        As for :func:`fit_extending_draws`.
    refit_seconds
        Wall-time budget (seconds) after which no further refit starts.

    Returns
    -------
    IRTModel
        The first converged fit, else the best unconverged one (no divergences
        first, then the lowest max R-hat). ``fit_info["refits"]`` lists every fit
        tried (its settings and verdict, or why it was skipped) and
        ``fit_info["wall_seconds_all"]`` their total wall time. The kept fit's
        :class:`ConvergenceWarning`, if any, is raised once.

    Why: below 100 llms no single parameterization converged on every real matrix,
    but on each one something did (docs/decisions/0032-default-fit-tries-its-remedies.md);
    a default fit should find it instead of naming it in an error.
    """
    from .policy import WEAK_ITEM_SHARE, lognormal_refits, prior_choice, remedy_refits

    drawn = fit_kwargs.get("random_seed") is None
    fit_kwargs["random_seed"] = seed_or_fresh(fit_kwargs.get("random_seed"), "fit_default")
    asked = fit_kwargs.get("parameterization", "auto")
    defaults = asked == "auto" and "discrimination_prior" not in (config or {})
    choice = prior_choice(responses.values, model, config, asked)
    first: dict[str, str] = {}
    if choice is not None and choice["prior"] != "lognormal":
        first = {"discrimination_prior": choice["prior"]}
        logger.info(
            "%.0f%% of the items are answered no more often by the llms that do better "
            "on the others (at least %.0f%%): the fit starts from the %s discrimination "
            "prior",
            100 * choice["weak_item_share"],
            100 * WEAK_ITEM_SHARE,
            choice["prior"],
        )

    def one(cfg: dict[str, Any] | None, kwargs: dict[str, Any]) -> tuple[IRTModel, list[Any]]:
        with _data_notes_said_once(not refits), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            fit = fit_extending_draws(responses, model, cfg, draws=draws, budget=budget, **kwargs)
        return fit, list(caught)

    def record(fit: IRTModel, settings: dict[str, str]) -> dict[str, Any]:
        d = fit.diagnostics
        return {
            "settings": settings,
            "parameterization": fit.parameterization,
            "converged": bool(fit.converged),
            "max_rhat": None if d is None else d.max_rhat,
            "min_ess_bulk": None if d is None else d.min_ess_bulk,
            "min_ess_tail": None if d is None else d.min_ess_tail,
            "divergences": None if d is None else d.divergences,
            "problems": [] if d is None else list(d.problems),
            "draws_tried": fit.fit_info.get("draws_tried", []),
            "wall_seconds": fit.fit_info.get("wall_seconds_all"),
        }

    refits: list[dict[str, Any]] = []
    best, best_warnings = one({**(config or {}), **first} or None, dict(fit_kwargs))
    refits.append(record(best, first))
    wall = float(best.fit_info.get("wall_seconds_all") or 0.0)
    if not defaults or best.diagnostics is None:
        rungs = []
    elif first:
        rungs = lognormal_refits(best.data.n_llms)
    else:
        rungs = remedy_refits(best.policy("nuts"))
    for settings in rungs if not best.converged else []:
        if wall >= refit_seconds:
            refits.append(
                {
                    "settings": settings,
                    "skipped": f"{wall:.0f} s spent, budget {refit_seconds:.0f} s",
                }
            )
            continue
        cfg = dict(config or {})
        kwargs = dict(fit_kwargs)
        if "discrimination_prior" in settings:
            cfg["discrimination_prior"] = settings["discrimination_prior"]
        if "parameterization" in settings:
            kwargs["parameterization"] = settings["parameterization"]
        logger.info("the default fit did not converge; refitting with %s", settings)
        fit, caught = one(cfg, kwargs)
        wall += float(fit.fit_info.get("wall_seconds_all") or 0.0)
        refits.append(record(fit, settings))
        if fit.converged or _fewer_problems(fit, best):
            best, best_warnings = fit, caught
        if fit.converged:
            break
    best.fit_info["refits"] = refits
    if choice is not None:
        best.fit_info["prior_choice"] = choice
    best.fit_info["wall_seconds_all"] = round(wall, 3)
    best.fit_info["random_seed_drawn"] = drawn
    for w in best_warnings:
        warnings.warn(w.message, w.category, stacklevel=2)
    return best


def _fewer_problems(fit: IRTModel, than: IRTModel) -> bool:
    """Whether an unconverged ``fit`` is better than ``than``: no divergences, then a lower R-hat."""
    a, b = fit.diagnostics, than.diagnostics
    if a is None or b is None:
        return False
    return (a.divergences > 0, a.max_rhat) < (b.divergences > 0, b.max_rhat)


def _prepare_jax_devices(chains: int) -> None:
    """Let JAX run NUTS chains in parallel on CPU (only possible before JAX starts)."""
    if "jax" in sys.modules:
        return
    want = min(chains, os.cpu_count() or 1)
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags and want > 1:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={want}".strip()


def _jax_chain_method(chains: int) -> str:
    import jax

    return "parallel" if jax.local_device_count() >= chains else "sequential"


def _run_nuts(
    model: Any,
    sampler: SamplerConfig,
    seed: int,
    *,
    progressbar: bool,
    backend: str,
    adaptation: str = "diag",
    extension: Any = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    from ._chains import draws_and_stats, nutpie_draws, nutpie_in_workers, worker_count

    if backend == "numpyro":
        import jax
        import pymc as pm

        jax.config.update("jax_enable_x64", not sampler.float32)
        with warnings.catch_warnings():
            # float32 sampling: JAX notes that int64/float64 constants become 32-bit
            warnings.filterwarnings("ignore", message="Explicitly requested dtype")
            tree = _numpyro_sample(pm, model, sampler, seed, progressbar)
        return draws_and_stats(tree, model)
    settings: dict[str, Any] = dict(
        draws=sampler.draws,
        tune=sampler.tune,
        target_accept=sampler.target_accept,
        adaptation=adaptation,
        progressbar=progressbar,
        extension=extension,
    )
    workers = worker_count(sampler.chains)
    if workers > 1:
        import pytensor

        return nutpie_in_workers(
            model,
            workers=workers,
            chains=sampler.chains,
            seed=seed,
            floatx=str(pytensor.config.floatX),
            **settings,
        )
    return nutpie_draws(model, chains=sampler.chains, cores=sampler.chains, seed=seed, **settings)


def _numpyro_sample(
    pm: Any, model: Any, sampler: SamplerConfig, seed: int, progressbar: bool
) -> Any:
    return pm.sample(
        draws=sampler.draws,
        tune=sampler.tune,
        chains=sampler.chains,
        random_seed=seed,
        nuts_sampler="numpyro",
        progressbar=progressbar,
        quiet=not progressbar,
        model=model,
        compute_convergence_checks=False,
        nuts={
            "target_accept": sampler.target_accept,
            "chain_method": _jax_chain_method(sampler.chains),
        },
    )


def _run_advi(
    model: Any, sampler: SamplerConfig, seed: int, *, progressbar: bool, iterations: int
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from .approx import advi

    flat, info = advi(
        model,
        draws=sampler.draws * sampler.chains,
        random_seed=seed,
        max_iterations=iterations,
        progressbar=progressbar,
    )
    raw = {
        name: vals.reshape(sampler.chains, sampler.draws, *vals.shape[2:])
        for name, vals in flat.items()
    }
    return raw, info


def _run_map(model: Any, seed: int, maxiter: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The posterior mode by L-BFGS-B, with the optimizer's own verdict in ``converged``."""
    import pymc as pm

    with warnings.catch_warnings():
        # the optimizer's failure is recorded in the fit info and reported by the caller
        warnings.filterwarnings("ignore", message="The optimizer did not converge")
        idata = pm.find_MAP(
            model=model,
            progressbar=False,
            random_seed=seed,
            jitter=False,
            return_inferencedata=True,
            maxiter=maxiter,
        )
    post = idata["posterior"]
    raw = {rv.name: np.asarray(post[rv.name].values) for rv in model.free_RVs}
    result = idata["optimizer_result"]
    info = {
        "note": "MAP point estimate: one draw, no posterior uncertainty",
        "converged": bool(result["success"].values),
        "optimizer_message": str(result["message"].values),
        "optimizer_iterations": int(result["nit"].values) if "nit" in result else -1,
    }
    return raw, info

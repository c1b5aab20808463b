"""The posterior layer: item-parameter draws as arrays, and the one way in to them.

Owns :class:`ItemDraws` (the draws of a 1-D or ``2pl-md`` item posterior on the
saved scale, with their P(correct) from :mod:`bayes_microbench.response_model`),
:func:`open_posterior` / :func:`item_draws` (one validated entry from a posterior
file, a fitted model, a DataTree or a Dataset; a file is always read by
:func:`~bayes_microbench.irt.load_posterior`, hash-checked), and the draw-count
floors of an interval (why: docs/decisions/0001-few-draw-intervals.md; the layer:
docs/decisions/0022-posterior-layer-and-response-model.md).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr

from . import response_model
from ._validate import check_positive_int, param, preview, step
from .exceptions import ConvergenceWarning, UserInputError

if TYPE_CHECKING:
    from .misfit import Misfit

#: Default number of posterior draws used (evenly thinned across chains).
DEFAULT_MAX_DRAWS = 1000
#: Fewest posterior draws an interval read from a saved posterior may rest on: below
#: it the interval is too narrow by more than its Monte Carlo error (a MAP posterior has
#: 1 draw). Why 100: docs/decisions/0001-few-draw-intervals.md.
MIN_INTERVAL_DRAWS = 100
#: The same floor for a posterior built in memory (a library caller's own draws): at 20
#: draws a 90% bound is still noisy but no longer a pair of draws' accident.
MIN_MEMORY_DRAWS = 20


class FewDrawsError(UserInputError):
    """An interval asked of too few posterior draws (see :meth:`ItemDraws.check_interval_draws`)."""


@dataclass(frozen=True)
class ItemDraws:
    """Posterior draws of the item parameters as plain arrays.

    ``discrimination``, ``difficulty`` and ``guessing`` have shape
    ``(n_chains * n_draws, n_items)``; ``chain`` and ``draw`` give the
    labels of each flattened draw. For a ``2pl-md`` posterior ``loadings``
    holds the loadings ``(n_draws, n_items, D)``, ``discrimination`` their
    norms and ``difficulty`` the multidimensional difficulty, so that
    ``logit P = loadings_i . ability - discrimination_i * difficulty_i``.
    """

    items: np.ndarray
    subtask: np.ndarray
    discrimination: np.ndarray
    difficulty: np.ndarray
    guessing: np.ndarray
    chain: np.ndarray
    draw: np.ndarray
    loadings: np.ndarray | None = None
    #: draws in the posterior before thinning, where it came from, and the fewest draws
    #: an interval may rest on (see :meth:`check_interval_draws`)
    n_available: int = 0
    source: str = "posterior"
    min_interval_draws: int = MIN_MEMORY_DRAWS

    @property
    def n_dims(self) -> int:
        """Ability dimensions: 1, or ``D`` for a ``2pl-md`` posterior."""
        return 1 if self.loadings is None else int(self.loadings.shape[2])

    @property
    def n_draws(self) -> int:
        return int(self.difficulty.shape[0])

    @property
    def n_items(self) -> int:
        return int(self.difficulty.shape[1])

    def check_interval_draws(self, min_draws: int | None = None) -> None:
        """Refuse an interval that would rest on fewer than ``min_draws`` posterior draws.

        ``min_draws`` defaults to the posterior's own requirement: a posterior
        read from a file by :func:`read_posterior` (what the commands read)
        needs :data:`MIN_INTERVAL_DRAWS`; one built in memory needs
        :data:`MIN_MEMORY_DRAWS`. Why: the quantiles of a few
        draws are Monte Carlo noise, and those of one draw a point, which would
        read as certainty. A point-estimate posterior (``fit --method map``)
        is refused, not flagged: it has no posterior uncertainty to show.

        Raises
        ------
        FewDrawsError
            One line saying how many draws there are, why that is too few and
            what to do.
        """
        need = self.min_interval_draws if min_draws is None else int(min_draws)
        need = max(need, 2)
        if self.n_draws >= need:
            return
        total = max(self.n_available, self.n_draws)
        if total < need:
            kind = " (a MAP point estimate: no posterior uncertainty)" if total == 1 else ""
            nuts = step("bayes-microbench fit --method nuts", "IRTModel.fit(method='nuts')")
            raise FewDrawsError(
                f"{self.source}: has {total} posterior draw(s){kind}; an interval needs at "
                f"least {need}: fit a posterior with draws ({nuts}, or method 'laplace' / "
                "'advi' for a quick approximate one)"
            )
        raise FewDrawsError(
            f"{param('max_draws')}: only {self.n_draws} of the {total} posterior draws of "
            f"{self.source} are used; an interval from fewer than {need} draws is Monte Carlo "
            f"noise (a single draw gives a point): use {param('max_draws', need)} or more"
        )

    def index_of(self, items: Sequence[str], where: str = "responses") -> np.ndarray:
        """Positions of ``items`` in the posterior; one error naming every unknown id."""
        pos = pd.Index(self.items).get_indexer(pd.Index([str(i) for i in items]))
        if (pos < 0).any():
            unknown = [str(items[k]) for k in np.nonzero(pos < 0)[0]]
            raise UserInputError(
                f"{where}: {len(unknown)} item id(s) not in the posterior: {preview(unknown)} "
                f"(the posterior has {self.n_items} items, e.g. {preview(self.items.tolist(), 2)}); "
                "score only items the model was fitted on, or fit a posterior that includes them"
            )
        return pos

    def select_draws(self, which: slice | list[int] | np.ndarray) -> ItemDraws:
        """The same items restricted to the draws ``which`` (a slice or positions)."""
        return ItemDraws(
            items=self.items,
            subtask=self.subtask,
            discrimination=self.discrimination[which],
            difficulty=self.difficulty[which],
            guessing=self.guessing[which],
            chain=self.chain[which],
            draw=self.draw[which],
            loadings=None if self.loadings is None else self.loadings[which],
            n_available=self.n_available,
            source=self.source,
            min_interval_draws=self.min_interval_draws,
        )

    def subset(self, positions: np.ndarray) -> ItemDraws:
        """The same draws restricted to the items at ``positions``."""
        return ItemDraws(
            items=self.items[positions],
            subtask=self.subtask[positions],
            discrimination=self.discrimination[:, positions],
            difficulty=self.difficulty[:, positions],
            guessing=self.guessing[:, positions],
            chain=self.chain,
            draw=self.draw,
            loadings=None if self.loadings is None else self.loadings[:, positions],
            n_available=self.n_available,
            source=self.source,
            min_interval_draws=self.min_interval_draws,
        )

    def mean(self) -> ItemDraws:
        """A single pseudo-draw holding the posterior means (for fast point summaries).

        The discrimination (or loadings) and the intercept are averaged, and the
        difficulty is the one that gives that intercept. Why: the difficulty,
        ``-intercept / discrimination``, is heavy-tailed where the discrimination
        is near 0, and the logit at its mean can sit far from every draw's
        (docs/decisions/0045-the-widening-about-the-shift.md).
        """
        discrimination = self.discrimination.mean(axis=0, keepdims=True)
        tiny = np.finfo(np.float64).tiny
        safe = np.where(np.abs(discrimination) > tiny, discrimination, tiny)
        return ItemDraws(
            items=self.items,
            subtask=self.subtask,
            discrimination=discrimination,
            difficulty=-self.intercept.mean(axis=0, keepdims=True) / safe,
            guessing=self.guessing.mean(axis=0, keepdims=True),
            chain=self.chain[:1],
            draw=self.draw[:1],
            loadings=None if self.loadings is None else self.loadings.mean(axis=0, keepdims=True),
            n_available=self.n_available,
            source=self.source,
            min_interval_draws=self.min_interval_draws,
        )

    @property
    def intercept(self) -> np.ndarray:
        """``-discrimination * difficulty``: the logit at ability 0, ``(n_draws, n_items)``."""
        return -(self.discrimination * self.difficulty)

    def logit(self, ability: np.ndarray, dtype: type = np.float64) -> np.ndarray:
        """``logit P(correct)`` above the floor: ``(n_draws, K, n_items)``.

        ``ability``: ``(n_draws, K)``, or ``(n_draws, K, D)`` for a ``2pl-md``
        posterior (``(n_draws or 1, K, D)`` and a shared grid both broadcast).
        Computed by :func:`bayes_microbench.response_model.logit` (``logit_md``).
        """
        if self.loadings is None:
            return response_model.logit(
                ability[:, :, None],
                self.discrimination[:, None, :],
                self.difficulty[:, None, :],
                dtype=dtype,
            )
        # the intercept in dtype from its factors, as the 1-D logit computes its terms
        icpt: np.ndarray = -(self.discrimination.astype(dtype) * self.difficulty.astype(dtype))
        return response_model.logit_md(ability, self.loadings, icpt, dtype=dtype)

    def prob(self, ability: np.ndarray, dtype: type = np.float64) -> np.ndarray:
        """P(correct) with ``ability`` of shape ``(n_draws, K)`` (``(n_draws, K, D)`` for
        a ``2pl-md`` posterior): returns ``(n_draws, K, n_items)``
        (:func:`bayes_microbench.response_model.prob`)."""
        return response_model.prob(
            self.logit(ability, dtype), self.guessing[:, None, :], dtype=dtype
        )


def open_posterior(source: Any) -> tuple[xr.Dataset, Misfit | None]:
    """The ``posterior`` Dataset of ``source`` and the calibration it carries.

    Parameters
    ----------
    source
        A saved posterior file (a path: read by :func:`read_posterior_file`,
        hash-checked), a fitted model (an :class:`~bayes_microbench.irt.IRTModel`
        or :class:`~bayes_microbench.irt.FittedIRT`: anything with ``.posterior``),
        a DataTree with a ``posterior`` group, or the ``posterior`` Dataset itself.

    Returns
    -------
    (posterior, calibration)
        The Dataset, and the :class:`~bayes_microbench.misfit.Misfit` a file or a
        fit carries (``None`` for a bare Dataset or DataTree, whose calibration
        nothing has checked). Why one entry: every reader gets the same checks.
    """
    if isinstance(source, (str, os.PathLike)):
        return read_posterior_file(source)
    if isinstance(source, xr.Dataset):
        return source, None
    if isinstance(source, xr.DataTree):
        node = source["posterior"] if "posterior" in source.children else source
        return node.to_dataset(), None
    inner = getattr(source, "posterior", None)
    if inner is not None:
        return open_posterior(inner)[0], getattr(source, "calibration", None)
    raise UserInputError(
        "expected a posterior (a .nc file, a fitted model, an xarray Dataset or a DataTree "
        f"with a 'posterior' group), got {type(source).__name__}"
    )


def read_posterior(path: str | os.PathLike[str]) -> xr.Dataset:
    """The ``posterior`` group of a saved posterior file (see :func:`read_posterior_file`)."""
    return read_posterior_file(path)[0]


def read_posterior_file(path: str | os.PathLike[str]) -> tuple[xr.Dataset, Misfit | None]:
    """The ``posterior`` group of a saved IRT posterior file: the one loader of files.

    The commands (``score``, ``mdad``, ``plan``, ``select --posterior``, ``adapt``)
    and :func:`item_draws` of a path read here, through
    :func:`~bayes_microbench.irt.load_posterior` (format version, configuration
    and calibration hashes checked). A saved fit that did not converge (NUTS
    diagnostics or the optimizer's status, as stored by ``fit
    --allow-unconverged``) raises one :class:`ConvergenceWarning` naming the file
    and the failed checks; the returned Dataset carries the file's name and its
    interval requirement (:data:`MIN_INTERVAL_DRAWS`, see
    :meth:`ItemDraws.check_interval_draws`) in its attrs.

    Returns
    -------
    (posterior, calibration)
        The ``posterior`` Dataset and the :class:`~bayes_microbench.misfit.Misfit`
        saved with it by ``fit`` (``None`` for a file without one).

    Raises
    ------
    UserInputError
        A folder, a missing file, or one ``load_posterior`` refuses (damaged,
        edited, another format), in one line.
    """
    p = Path(path)
    from .irt import load_posterior

    fitted = load_posterior(p)  # refuses a folder or a missing file in one line
    if fitted.converged is False:
        warnings.warn(
            f"{p}: this posterior's fit did not converge "
            f"({'; '.join(fitted.convergence_problems())}); its numbers may be wrong: "
            "refit it until it converges (more tuning steps and draws, or NUTS)",
            ConvergenceWarning,
            stacklevel=2,
        )
    ds = fitted.posterior.copy()
    ds.attrs["source_file"] = str(p)
    ds.attrs["min_interval_draws"] = MIN_INTERVAL_DRAWS
    return ds, fitted.calibration


def item_draws(
    posterior: Any,
    *,
    max_draws: int | None = DEFAULT_MAX_DRAWS,
    where: str = "posterior",
    multidim: bool = False,
) -> ItemDraws:
    """Extract the item-parameter draws of a posterior as arrays.

    Parameters
    ----------
    posterior
        The ``posterior`` Dataset (dims ``chain``, ``draw``, ``item``) with
        ``difficulty``, ``discrimination`` (absent means 1: a 1PL) and
        optionally ``guessing`` (dims ``item`` or ``chain, draw, item``); or
        anything :func:`open_posterior` reads (a file, hash-checked; a fitted
        model; a DataTree).
    max_draws
        Keep at most this many draws, evenly thinned within each chain
        (deterministic); ``None`` keeps all.
    where
        Names the posterior in error messages.
    multidim
        Accept a ``2pl-md`` posterior (scoring and design do; a caller that
        needs a 1-D ability leaves it False and refuses one).

    Returns
    -------
    ItemDraws
        Flattened over (chain, draw); why arrays: every consumer is numpy.
    """
    ds = open_posterior(posterior)[0]
    n_dims = 0
    if "discrimination" in ds and "dim" in ds["discrimination"].dims:
        n_dims = int(ds.sizes["dim"])
        if not multidim:
            one_d = step("bayes-microbench fit --model 2pl", "IRTModel(responses, '2pl')")
            raise UserInputError(
                f"{where}: a multidimensional 2PL posterior ('2pl-md', {n_dims} ability "
                f"dims); this step works on a 1-D ability: fit a 1-D model ({one_d}) for it "
                "(scoring and design accept it)"
            )
        if "intercept" not in ds:
            raise UserInputError(
                f"{where}: a '2pl-md' posterior without 'intercept'; refit it with this package"
            )
    if "difficulty" not in ds:
        raise UserInputError(
            f"{where}: no 'difficulty' variable; expected an IRT posterior with "
            f"difficulty/discrimination (chain, draw, item), got variables {preview(list(ds.data_vars))}"
        )
    diff = ds["difficulty"]
    for dim in ("chain", "draw", "item"):
        if dim not in diff.dims:
            raise UserInputError(
                f"{where}: 'difficulty' lacks the {dim!r} dim (has {diff.dims}); "
                "expected dims (chain, draw, item)"
            )
    n_chain, n_draw = int(ds.sizes["chain"]), int(ds.sizes["draw"])
    n_available = n_chain * n_draw
    if max_draws is not None:
        max_draws = check_positive_int(max_draws, "max_draws")
        per_chain = max(1, max_draws // n_chain)
        if per_chain < n_draw:
            keep = np.unique(np.linspace(0, n_draw - 1, per_chain).round().astype(int))
            ds = ds.isel(draw=keep)
            n_draw = len(keep)

    def grab(name: str, default: float) -> np.ndarray:
        if name not in ds:
            return np.full((n_chain * n_draw, ds.sizes["item"]), default)
        var = ds[name]
        var = var.broadcast_like(ds["difficulty"]).transpose("chain", "draw", "item")
        return np.asarray(var.to_numpy(), dtype=np.float64).reshape(n_chain * n_draw, -1)

    c = grab("guessing", 0.0)
    loadings: np.ndarray | None = None
    if n_dims:
        disc = ds["discrimination"].transpose("chain", "draw", "item", "dim")
        loadings = np.asarray(disc.to_numpy(), dtype=np.float64).reshape(
            n_chain * n_draw, -1, n_dims
        )
        # a non-finite loading makes its norm non-finite: the check below names the item
        a = np.sqrt((loadings**2).sum(axis=2))
        # the saved difficulty is -intercept / |loadings|: rebuild it from the intercept
        # so that the logit holds exactly (a draw whose loadings are all 0, which the
        # log-normal first loading rules out, would get difficulty 0 and lose its intercept)
        with np.errstate(divide="ignore", invalid="ignore"):
            b = np.where(a > 0, -grab("intercept", 0.0) / a, 0.0)
    else:
        a = grab("discrimination", 1.0)
        b = grab("difficulty", 0.0)
    bad = ~np.isfinite(a).all(axis=0) | ~np.isfinite(b).all(axis=0) | ~np.isfinite(c).all(axis=0)
    if bad.any():
        raise UserInputError(
            f"{where}: non-finite item parameters for items "
            f"{preview(ds['item'].to_numpy()[bad].tolist())}; refit the posterior"
        )
    items = np.asarray([str(i) for i in ds["item"].to_numpy()], dtype=object)
    sub_name = next(
        (n for n in ("subtask", "item_subtask") if n in ds.coords and ds[n].dims == ("item",)),
        None,
    )
    if sub_name is not None:
        subtask = np.asarray([str(s) for s in ds[sub_name].to_numpy()], dtype=object)
    else:
        subtask = np.full(len(items), "benchmark", dtype=object)
    chain = np.repeat(ds["chain"].to_numpy(), n_draw)
    draw = np.tile(ds["draw"].to_numpy(), n_chain)
    return ItemDraws(
        items,
        subtask,
        a,
        b,
        c,
        chain,
        draw,
        loadings,
        n_available=n_available,
        source=str(ds.attrs.get("source_file", where)),
        min_interval_draws=int(ds.attrs.get("min_interval_draws", MIN_MEMORY_DRAWS)),
    )

"""Split-conformal calibration of the IRT predictive of an llm's unobserved items.

:class:`Misfit` and :func:`estimate_misfit`: on the llms a posterior was fitted
on, item-split cross-validation learns a piecewise-linear centre and scale in the
IRT prediction and the empirical distribution of the standardized residuals;
``score(misfit=...)`` draws from it (intervals valid for new llms exchangeable with
the training llms). Why: on real benchmarks the IRT predictive is overconfident and
biased (on GPQA the true accuracy on the unobserved items varies only ~0.3-0.4 times
as much as the 2PL's prediction across llms, and not linearly;
docs/decisions/0002-calibration-saved-with-the-posterior.md; the subset widening:
docs/decisions/0010-subset-aware-score-intervals.md). ``fit`` saves one
with the posterior (:mod:`bayes_microbench.irt.calibration`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ._validate import check_positive_int, preview
from .ability import CHUNK_CELLS, ability_posterior_samples, scoring_grid
from .exceptions import UserInputError
from .population import Population
from .posterior import ItemDraws, item_draws
from .responses import Responses

logger = logging.getLogger(__name__)

#: Fewest unobserved items a :class:`Misfit` is estimated at (each split leaves at least
#: this many), and so applied at: nearer the whole benchmark the IRT predictive is kept,
#: since a continuous recalibrated rate over 1-9 items misses the lattice of the count.
MIN_CALIBRATED_UNOBSERVED = 10
#: Probability levels at which a :class:`Misfit` stores its standardized residual quantiles.
_LEVELS = np.linspace(0.0, 1.0, 401)
#: Fewest fitted llms a subset's own calibration (:meth:`Misfit.for_subset`) is estimated
#: from; with fewer, its single split's centre and quantiles are too noisy and the
#: random-subset calibration (widened for the subset) is used.
MIN_SUBSET_LLMS = 100
#: Most fitted llms a calibration carries for :meth:`Misfit.for_subset` (a seeded sample).
MAX_SUBSET_LLMS = 1000
#: Posterior draws (evenly thinned) :meth:`Misfit.for_subset` estimates from: as many as
#: ``fit``'s saved calibration uses (``irt.calibration.CALIBRATION_DRAWS``).
SUBSET_DRAWS = 200


@dataclass(frozen=True)
class Misfit:
    """Empirical recalibration of the IRT predictive of an llm's accuracy on its unobserved items.

    Estimated by :func:`estimate_misfit` on the llms the posterior was fitted
    on, by item-split cross-validation; no held-out llm is needed. With ``m``
    the IRT-predicted accuracy of an llm on its unobserved items (the
    posterior-predictive mean of ``mean_i p_i(ability)``) and ``t`` its
    actual accuracy there, the recalibrated predictive of ``t`` is::

        centre(m) + beta * (r - rho(m)) + scale(m) * R          (clipped to [0, 1])

    where ``centre`` is the least-squares regression of ``t`` on ``m``
    (piecewise linear: values at ``knots``, linear in between, held constant
    beyond the training range of ``m``), ``r`` the llm's observed residual (its
    accuracy on the observed items minus the IRT prediction there), ``rho``
    its regression on ``m`` (``residual_centre``, the same basis) and ``beta``
    (``observed_weight``) the regression of what ``centre`` leaves of ``t`` on
    what ``rho`` leaves of ``r``: together the least-squares regression of ``t``
    on ``m`` and ``r``. ``scale(m)**2`` is the piecewise-linear regression of
    the squared residuals on ``m``, and ``R`` is drawn from the EMPIRICAL
    distribution of the standardized cross-validation residuals
    ``(t - centre(m)) / scale(m)`` (``quantiles`` at probability ``levels``,
    Weibull plotting positions ``k / (cases + 1)``). The equal-tailed
    interval at any probability is then a split-conformal interval with a
    locally scaled score: it covers the accuracy of a new llm exchangeable
    with the training llms at the stated rate, whatever the shape of the
    misfit (heavy tails, skew), and needs no Gaussian assumption. The
    piecewise-linear centre captures a non-linear relation between the IRT
    prediction and the truth (on GPQA the 2PL under-predicts both ends of the
    accuracy range and over-predicts the middle; a straight line cannot).

    The model holding exactly means ``centre(m) = m`` and a residual spread
    equal to the IRT predictive's own; ``excess_sd`` (a diagnostic, not used
    for scoring) is the llm-level deviation that the IRT predictive variance
    does not explain, by moments, and ``linear_slope`` (also a diagnostic)
    the least-squares slope of ``t`` on ``m`` (1 when the model holds; below 1
    when the IRT predictions vary too much across llms). Everything is given per number of observed
    items ``n_observed`` and interpolated linearly in ``log(n)`` (held
    constant beyond the ends).

    ``beta`` is what the observed items say about the misfit: where the llm
    beats the model on the items it answered it tends to beat it on the rest
    too (a secondary ability the model lacks), and the regression learns how
    far that carries at each size (near 0 for a few items, whose residual is
    mostly noise; toward 1 for many random ones). Written about ``centre``, the
    term can be scaled down for a subset that carries less of the misfit than a
    random one (``carry`` in :meth:`at`) and vanishes at 0, leaving the
    regression on ``m`` alone. A calibration saved before it was added has
    ``observed_weight`` None and uses ``m`` alone.

    With ``item_shifted`` (a calibration estimated with the fitted llms'
    :class:`Population`, as ``fit`` does), ``m`` and ``r`` are taken about the
    IRT prediction shifted by the population's item shift
    (:func:`prediction_shift`), and ``centre``, ``rho`` and ``scale`` are
    functions of the llm's level (its shifted expected accuracy over the whole
    benchmark) instead of ``m``, ``centre`` being the offset added to ``m``:
    ``m + centre(level) + beta * (r - rho(level)) + scale(level) * R``. On a
    random subset the two readings nearly agree; on a selector's subset the
    level still says how strong the llm is while ``m`` says which items are
    left (docs/decisions/0044-the-item-shift.md).
    """

    n_observed: np.ndarray  # (sizes,)
    knots: np.ndarray  # (sizes, knots): increasing IRT-predicted accuracies
    centre: np.ndarray  # (sizes, knots): calibrated mean accuracy at the knots
    variance: np.ndarray  # (sizes, knots): residual variance at the knots
    quantiles: np.ndarray  # (sizes, levels): standardized residual quantiles
    levels: np.ndarray  # (levels,): probabilities of ``quantiles``
    excess_sd: np.ndarray  # (sizes,): diagnostic llm-level deviation sd
    linear_slope: np.ndarray  # (sizes,): diagnostic least-squares slope of t on m
    n_cases: np.ndarray  # (sizes,): (llm, split) cases behind each estimate
    n_llms: int
    n_splits: int
    design: str
    #: the fitted llms as designs see them (``calibrate_fitted`` adds it; None otherwise)
    population: Population | None = None
    #: (sizes,): weight of the observed residual in the centre (None: a calibration from
    #: before it, whose centre uses ``m`` alone)
    observed_weight: np.ndarray | None = None
    #: (sizes, knots): the observed residual's regression on ``m`` (None with ``observed_weight``)
    residual_centre: np.ndarray | None = None
    #: whether ``m`` and ``r`` were shifted by the population's item shift
    #: (:func:`prediction_shift`); score shifts them too only then
    item_shifted: bool = False
    #: responses of (at most :data:`MAX_SUBSET_LLMS` of) the fitted llms, from which
    #: :meth:`for_subset` calibrates a fixed subset on its own (None: not carried)
    training: Responses | None = None

    def _weights(self, n_obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Neighbouring calibrated sizes and the weight of the upper one, linear in log n."""
        x = np.log(np.maximum(np.asarray(n_obs, dtype=np.float64), 1.0))
        grid = np.log(self.n_observed.astype(np.float64))
        pos = np.interp(x, grid, np.arange(len(grid), dtype=np.float64))
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, len(grid) - 1)
        return lo, hi, pos - lo

    def at(
        self,
        n_obs: np.ndarray,
        predicted: np.ndarray,
        observed_residual: np.ndarray | None = None,
        carry: np.ndarray | None = None,
        level: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(centre, scale)`` of the recalibrated predictive for each llm.

        ``n_obs``, ``predicted`` (IRT-predicted accuracy on the unobserved
        items), ``observed_residual`` (accuracy on the observed items minus
        the IRT prediction there; None: the centre in ``m`` alone),
        ``carry`` (the share of the observed-residual term to apply, in
        ``[0, 1]``; None: 1) and ``level`` (the llm's shifted expected
        accuracy on the whole benchmark, :func:`prediction_shift`; needed by
        an ``item_shifted`` calibration, whose knots are levels and whose
        centre is an offset added to ``predicted``) have one entry per llm.
        """
        predicted = np.asarray(predicted, dtype=np.float64)
        if self.item_shifted:
            if level is None:
                raise ValueError("an item-shifted calibration needs each llm's level")
            x = np.asarray(level, dtype=np.float64)
        else:
            x = predicted
        lo, hi, f = self._weights(n_obs)
        cols = np.arange(predicted.shape[-1])

        def between(table: np.ndarray) -> np.ndarray:
            # piecewise linear in x at each size, then linear in log n between sizes
            at_x = np.stack([np.interp(x, k, v) for k, v in zip(self.knots, table, strict=True)])
            return (1 - f) * at_x[lo, cols] + f * at_x[hi, cols]

        centre = between(self.centre)
        if self.item_shifted:
            centre = predicted + centre
        var = between(self.variance)
        if (
            self.observed_weight is not None
            and self.residual_centre is not None
            and observed_residual is not None
        ):
            beta = (1 - f) * self.observed_weight[lo] + f * self.observed_weight[hi]
            rho = between(self.residual_centre)
            r = np.nan_to_num(np.asarray(observed_residual, dtype=np.float64))
            share = 1.0 if carry is None else np.asarray(carry, dtype=np.float64)
            centre = centre + share * beta * (r - rho)
        return centre, np.sqrt(np.maximum(var, 0.0))

    def residual_quantile(self, n_obs: np.ndarray, prob: np.ndarray) -> np.ndarray:
        """Standardized residual quantiles at ``prob`` (``(..., llms)``) for each llm's size."""
        prob = np.asarray(prob, dtype=np.float64)
        lo, hi, f = self._weights(n_obs)
        out = np.zeros(np.broadcast_shapes(prob.shape, lo.shape))
        for k in range(len(self.n_observed)):
            w = np.where(lo == k, 1 - f, 0.0) + np.where(hi == k, f, 0.0)
            if np.any(w > 0):
                out += w * np.interp(prob, self.levels, self.quantiles[k])
        return out

    def apply(
        self,
        hits: np.ndarray,
        expected: np.ndarray,
        n_obs: np.ndarray,
        n_unobs: np.ndarray,
        rng: np.random.Generator,
        extra_variance: np.ndarray | None = None,
        observed_residual: np.ndarray | None = None,
        carry: np.ndarray | None = None,
        level: np.ndarray | None = None,
    ) -> np.ndarray:
        """Recalibrated draws of the number correct on the unobserved items ``(draws, llms)``.

        ``expected`` holds the IRT expectation of each draw (sum of ``p_i``);
        ``hits`` holds the IRT Bernoulli draws, kept for llms with fewer than
        :data:`MIN_CALIBRATED_UNOBSERVED` unobserved items (outside the range
        the calibration was estimated on); elsewhere the residual draws already
        carry the Bernoulli noise, the ability uncertainty and the misfit.
        ``extra_variance`` (llms,): variance of the accuracy on the unobserved
        items to add to the calibrated scale (a subset's excess over a random
        one's, :meth:`Population.subset_excess`); a negative one adds nothing
        (the random-subset calibration is never narrowed).
        ``observed_residual`` (llms,): each llm's accuracy on its observed items
        minus the IRT prediction there (:func:`observed_residual`; None: the
        centre in ``m`` alone); ``carry`` (llms,) the share of its term to apply
        (:meth:`Population.residual_carry`; None: all); ``level`` (llms,) as in
        :meth:`at`.
        """
        u = np.maximum(np.asarray(n_unobs, dtype=np.float64), 1.0)
        m = (expected / u).mean(axis=0)
        centre, scale = self.at(n_obs, m, observed_residual, carry, level)
        if extra_variance is not None:
            scale = np.sqrt(scale**2 + np.maximum(np.asarray(extra_variance), 0.0))
        r = self.residual_quantile(n_obs, rng.random(hits.shape))
        new = np.clip(centre + scale * r, 0.0, 1.0) * u
        return np.where(np.asarray(n_unobs) >= MIN_CALIBRATED_UNOBSERVED, new, hits)

    def for_subset(
        self,
        draws: ItemDraws,
        observed: np.ndarray,
        random_seed: int | np.random.Generator | None = 0,
    ) -> Misfit | None:
        """This calibration estimated again on one fixed subset of the benchmark.

        The carried fitted llms are observed on exactly the subset and their
        accuracy on the rest compared with the prediction, as
        :func:`estimate_misfit` does with ``subset=``: centre, observed-residual
        weight, scale and residual quantiles of that design itself.

        Why: the random-subset calibration's scale depends on the size and the
        level only, so an informative subset's interval stays as wide as a random
        one's (docs/decisions/0053-a-shared-subset-calibrated-on-itself.md).

        Parameters
        ----------
        draws
            The benchmark's item draws (the items are the "full benchmark"),
            evenly thinned to :data:`SUBSET_DRAWS`.
        observed
            ``(items,)`` bool over ``draws.items``: the subset.
        random_seed
            Seed of the ability draws.

        Returns
        -------
        Misfit or None
            None when no fitted llms are carried, fewer than
            :data:`MIN_SUBSET_LLMS`, or the subset leaves fewer than
            :data:`MIN_CALIBRATED_UNOBSERVED` items (or has none).
        """
        observed = np.asarray(observed, dtype=bool)
        if (
            self.training is None
            or self.training.n_llms < MIN_SUBSET_LLMS
            or not observed.any()
            or (~observed).sum() < MIN_CALIBRATED_UNOBSERVED
        ):
            return None
        ids = [str(i) for i in draws.items]
        have = pd.Index([str(i) for i in self.training.items])
        if not pd.Index(ids).isin(have).all():
            return None
        training = self.training.select(items=ids)
        if draws.n_draws > SUBSET_DRAWS:
            keep = np.linspace(0, draws.n_draws - 1, SUBSET_DRAWS).round().astype(np.int64)
            draws = draws.select_draws(np.unique(keep))
        try:
            own = estimate_misfit(
                None,
                training,
                subset=[ids[k] for k in np.flatnonzero(observed)],
                draws=draws,
                population=self.population,
                random_seed=random_seed,
                where="subset calibration: the fitted llms' responses",
                verbose=False,
            )
        except UserInputError:  # too few fitted llms answered the subset and the rest
            return None
        if own.item_shifted != self.item_shifted:
            return None
        return dataclasses.replace(own, population=self.population)

    def describe(self) -> str:
        """One line for result attrs and reports."""
        cells = []
        centre, over = (
            ("offset", "shifted levels") if self.item_shifted else ("centre", "IRT predictions")
        )
        for k, n in enumerate(self.n_observed):
            q05, q95 = np.interp([0.05, 0.95], self.levels, self.quantiles[k])
            sd = np.sqrt(np.mean(self.variance[k]))
            cells.append(
                f"n={n}: {centre} {self.centre[k, 0]:.3f}..{self.centre[k, -1]:.3f} over "
                f"{over} {self.knots[k, 0]:.3f}..{self.knots[k, -1]:.3f} (linear "
                f"slope {self.linear_slope[k]:.2f}), residual sd {sd:.3f}, standardized 5%/95% quantiles "
                f"{q05:+.2f}/{q95:+.2f}, excess llm-level sd {self.excess_sd[k]:.3f}"
                + (
                    ""
                    if self.observed_weight is None
                    else f", observed-residual weight {self.observed_weight[k]:.2f}"
                )
            )
        shift = "; about the fitted llms' item shift" if self.item_shifted else ""
        return (
            f"item-split cross-validation recalibration ({self.design}, {self.n_llms} llms x "
            f"{self.n_splits} splits; empirical residual quantiles{shift}): " + "; ".join(cells)
        )

    def to_dataset(self) -> xr.Dataset:
        """The calibration as a Dataset (dims ``n_items``, ``knot``, ``level``), e.g. to save."""
        ds = xr.Dataset(
            {
                "misfit_knots": (("n_items", "knot"), self.knots),
                "misfit_centre": (("n_items", "knot"), self.centre),
                "misfit_variance": (("n_items", "knot"), self.variance),
                "misfit_quantiles": (("n_items", "level"), self.quantiles),
                "misfit_excess_sd": ("n_items", self.excess_sd),
                "misfit_linear_slope": ("n_items", self.linear_slope),
                "misfit_n_cases": ("n_items", self.n_cases),
                **(
                    {}
                    if self.observed_weight is None
                    else {
                        "misfit_observed_weight": ("n_items", self.observed_weight),
                        "misfit_residual_centre": (("n_items", "knot"), self.residual_centre),
                    }
                ),
            },
            coords={"n_items": self.n_observed, "level": self.levels},
            attrs={
                "n_llms": self.n_llms,
                "n_splits": self.n_splits,
                "design": self.design,
                "item_shifted": int(self.item_shifted),
            },
        )
        if self.training is not None:
            values = self.training.values
            ds["misfit_training"] = (
                ("misfit_llm", "misfit_item"),
                np.where(np.isnan(values), -1, values).astype(np.int8),
            )
            ds = ds.assign_coords(
                misfit_llm=self.training.llms.astype(str),
                misfit_item=self.training.items.astype(str),
            )
        if self.population is not None:
            ds = ds.merge(self.population.to_dataset(), combine_attrs="no_conflicts")
        return ds

    @classmethod
    def from_dataset(cls, ds: xr.Dataset) -> Misfit:
        """Inverse of :meth:`to_dataset`."""
        if "misfit_quantiles" not in ds:
            raise UserInputError(
                "misfit: not a saved calibration of this version (no 'misfit_quantiles'; an "
                "older Gaussian misfit file?); re-estimate it with estimate_misfit"
            )
        return cls(
            n_observed=ds["n_items"].to_numpy().astype(np.int64),
            knots=ds["misfit_knots"].to_numpy(),
            centre=ds["misfit_centre"].to_numpy(),
            variance=ds["misfit_variance"].to_numpy(),
            quantiles=ds["misfit_quantiles"].to_numpy(),
            levels=ds["level"].to_numpy(),
            excess_sd=ds["misfit_excess_sd"].to_numpy(),
            linear_slope=ds["misfit_linear_slope"].to_numpy(),
            n_cases=ds["misfit_n_cases"].to_numpy().astype(np.int64),
            n_llms=int(ds.attrs["n_llms"]),
            n_splits=int(ds.attrs["n_splits"]),
            design=str(ds.attrs["design"]),
            population=Population.from_dataset(ds),
            observed_weight=(
                ds["misfit_observed_weight"].to_numpy() if "misfit_observed_weight" in ds else None
            ),
            residual_centre=(
                ds["misfit_residual_centre"].to_numpy() if "misfit_residual_centre" in ds else None
            ),
            item_shifted=bool(int(ds.attrs.get("item_shifted", 0))),
            training=_training_from(ds),
        )


def _training_from(ds: xr.Dataset) -> Responses | None:
    """The fitted llms' responses a saved calibration carries (None: none)."""
    if "misfit_training" not in ds:
        return None
    raw = ds["misfit_training"].to_numpy()
    return Responses.from_arrays(
        np.where(raw < 0, np.nan, raw.astype(np.float64)),
        ds["misfit_llm"].to_numpy().astype(str),
        ds["misfit_item"].to_numpy().astype(str),
        benchmark="fitted llms",
    )


def carried_training(responses: Responses, random_seed: int | None = 0) -> Responses | None:
    """The fitted llms' responses a calibration carries: all, a seeded sample, or none.

    Parameters
    ----------
    responses
        The responses the posterior was fitted on.
    random_seed
        Seed of the sample (only above :data:`MAX_SUBSET_LLMS` llms).

    Returns
    -------
    Responses or None
        At most :data:`MAX_SUBSET_LLMS` llms, in their original order; None
        below :data:`MIN_SUBSET_LLMS` (:meth:`Misfit.for_subset` would not use them).

    Why: :meth:`Misfit.for_subset` needs no more cases than that, and the saved
    posterior stays small.
    """
    if responses.n_llms < MIN_SUBSET_LLMS:
        return None
    if responses.n_llms <= MAX_SUBSET_LLMS:
        return responses
    rng = np.random.default_rng(random_seed)
    keep = np.sort(rng.choice(responses.n_llms, size=MAX_SUBSET_LLMS, replace=False))
    return responses.isel(llm=keep)


def _calibrate(
    t: np.ndarray,
    m: np.ndarray,
    w: np.ndarray,
    q: np.ndarray,
    r: np.ndarray,
    n_knots: int,
    level: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, float, float, np.ndarray]:
    """Centre, variance, residual quantiles, diagnostics, observed-residual weight and centre.

    ``t`` actual accuracy on the unobserved items, ``m`` IRT prediction,
    ``w`` its variance over draws, ``q`` the Bernoulli variance, ``r`` the
    observed residual (one per case). With ``level`` (an item-shifted
    calibration) the knots are levels and the centre is the offset ``t - m``.
    """
    x = m if level is None else level
    target = t if level is None else t - m
    n_k = max(2, min(n_knots + 2, len(t) // 25))
    knots = np.unique(np.quantile(x, np.linspace(0.0, 1.0, n_k)))
    if len(knots) == 1:  # every prediction equal: a constant centre
        knots = np.array([knots[0], knots[0] + 1e-9])
    # tent basis: column j is the piecewise-linear function equal to 1 at knot j, 0 at the others
    basis = np.stack([np.interp(x, knots, e) for e in np.eye(len(knots))], axis=1)
    centre = np.linalg.lstsq(basis, target, rcond=None)[0]
    rho = np.linalg.lstsq(basis, r, rcond=None)[0]
    # the joint regression on (m, r), written about the regression on m alone (Frisch-Waugh)
    left_t, left_r = target - basis @ centre, r - basis @ rho
    beta = float(left_t @ left_r / (left_r @ left_r)) if left_r @ left_r > 0 else 0.0
    resid = left_t - beta * left_r
    mse = float(np.mean(resid**2))
    # residual variance as a function of m, floored so that no case gets a vanishing scale
    variance = np.maximum(np.linalg.lstsq(basis, resid**2, rcond=None)[0], 0.1 * mse)
    variance = np.maximum(variance, 1e-8)
    standardized = resid / np.sqrt(basis @ variance)
    quantiles = np.quantile(standardized, _LEVELS, method="weibull")
    # diagnostic: deviation beyond the IRT predictive variance, with the local slope of centre
    seg = np.diff(centre) / np.diff(knots)
    local = seg[np.clip(np.searchsorted(knots, x, side="right") - 1, 0, len(seg) - 1)]
    if level is not None:  # an offset: the slope in m is 1 plus the offset's (in level ~ m)
        local = 1.0 + local
    excess = float(np.mean(resid**2 - local**2 * w - q))
    mc = m - m.mean()
    linear = float(mc @ (t - t.mean()) / (mc @ mc)) if mc @ mc > 0 else 1.0
    excess_sd = float(np.sqrt(max(excess, 0.0)))
    return knots, centre, variance, quantiles, excess_sd, linear, beta, rho


def observed_residual(correct: np.ndarray, n_obs: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Each llm's accuracy on its observed items minus the IRT prediction there.

    Parameters
    ----------
    correct, n_obs
        ``(llms,)``: correct answers and answered items.
    expected
        ``(draws, llms)``: the sum of ``p_i(ability)`` over the observed items
        under each posterior draw.

    Returns
    -------
    numpy.ndarray
        ``(llms,)``; 0 for an llm with no observed item.

    Why: :class:`Misfit` weighs it into its centre (the misfit the observed
    items show carries over to the rest).
    """
    n = np.asarray(n_obs, dtype=np.float64)
    predicted = np.asarray(expected, dtype=np.float64).mean(axis=0)
    return np.where(n > 0, (np.asarray(correct) - predicted) / np.maximum(n, 1.0), 0.0)


def prediction_shift(
    population: Population | None,
    draws: ItemDraws,
    ability: np.ndarray,
    observed: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each llm's item shift over its unobserved and its observed items, and its level.

    Parameters
    ----------
    population
        The fitted llms' :class:`Population` (None, or one without the item
        shift, or one that does not cover the items: zeros).
    draws
        The benchmark's item draws (their mean gives the plug-in accuracy).
    ability
        Ability draws ``(draws, llms)`` (``(draws, llms, D)``); their mean is
        each llm's plug-in ability.
    observed
        ``(llms, items)`` bool.

    Returns
    -------
    tuple of numpy.ndarray
        ``(llms,)`` mean shifts over the unobserved and over the observed items
        (:meth:`Population.mean_shift` at each llm's expected accuracy), and the
        level: that expected accuracy (plug-in, every item) plus the mean shift
        over every item.

    Why: the model's error, item by item and by accuracy, as the fitted llms show
    it, added to the IRT prediction whatever the subset
    (docs/decisions/0044-the-item-shift.md).
    """
    zeros = np.zeros(observed.shape[0])
    plug = np.asarray(ability, dtype=np.float64).mean(axis=0)
    accuracy = draws.mean().prob(plug[None])[0].mean(axis=-1)
    if population is None or population.item_shift is None:
        return zeros, zeros, accuracy
    positions = population.positions(draws.items)
    if population.n_dims != draws.n_dims or positions is None:
        return zeros, zeros, accuracy
    everything = np.ones_like(observed, dtype=bool)
    return (
        population.mean_shift(accuracy, ~observed, positions),
        population.mean_shift(accuracy, observed, positions),
        accuracy + population.mean_shift(accuracy, everything, positions),
    )


def _unobserved_moments(
    draws: ItemDraws, ability: np.ndarray, unobserved: np.ndarray, observed: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per llm: IRT predictive of its accuracy on its unobserved items, exactly.

    Returns the mean over draws of ``E = mean_i p_i(ability)``, the variance
    of ``E`` over draws (ability and item uncertainty), the mean Bernoulli
    variance ``sum_i p_i (1 - p_i) / U**2``, and ``(draws, llms)`` sums of
    ``p_i`` over the ``observed`` items (for :func:`observed_residual`).
    """
    n_s, n_l = ability.shape[:2]
    u = unobserved.astype(np.float32)
    o = observed.astype(np.float32)
    n_u = np.maximum(unobserved.sum(axis=1), 1).astype(np.float64)
    expect = np.empty((n_s, n_l))
    bern = np.empty((n_s, n_l))
    seen = np.empty((n_s, n_l))
    chunk = max(1, CHUNK_CELLS // max(1, n_l * draws.n_items))
    for start in range(0, n_s, chunk):
        sl = slice(start, min(n_s, start + chunk))
        sub = draws.select_draws(sl)
        p = sub.prob(ability[sl], dtype=np.float32)  # (s, L, I)
        expect[sl] = (p * u[None]).sum(axis=2) / n_u
        bern[sl] = (p * (1 - p) * u[None]).sum(axis=2) / n_u**2
        seen[sl] = (p * o[None]).sum(axis=2)
    return expect.mean(axis=0), expect.var(axis=0), bern.mean(axis=0), seen


def estimate_misfit(
    posterior: Any,
    responses: Responses,
    *,
    sizes: Sequence[int] = (25, 50, 100, 200),
    subset: Sequence[str] | None = None,
    n_splits: int = 2,
    fit: Callable[[Responses], Any] | None = None,
    n_folds: int = 4,
    n_knots: int = 3,
    max_draws: int | None = 200,
    n_grid: int | None = None,
    random_seed: int | np.random.Generator | None = 0,
    draws: ItemDraws | None = None,
    where: str | None = None,
    population: Population | None = None,
    verbose: bool = True,
) -> Misfit:
    """Calibrate the IRT predictive of unobserved items on the training llms, by item-split CV.

    Each llm of ``responses`` (the llms the posterior was fitted on, NOT the
    llms you will score) is observed on a subset of its items, scored with the
    posterior as in :func:`score`, and its actual accuracy ``t`` on the rest
    compared with the IRT prediction ``m`` (the posterior-predictive mean of
    ``mean_i p_i(ability)`` over its unobserved items). For each subset size,
    pooled over llms and splits, :class:`Misfit` stores a piecewise-linear
    regression of ``t`` on ``m`` (knots at the quantiles of ``m``), a
    piecewise-linear regression of the squared residuals on ``m`` (the local
    scale) and the empirical quantiles of the standardized residuals:
    :func:`score` then draws the accuracy on the unobserved items from that
    empirical distribution, so that its intervals are split-conformal
    prediction intervals (coverage at the stated rate for new llms
    exchangeable with the training llms, whatever the shape of the misfit).
    Under the IRT model the centre is close to ``m`` and the spread matches
    the IRT predictive (``excess_sd`` near 0).

    With ``fit=None`` the llms were also used to fit the item parameters, so
    the split is in-sample for the items. Passing ``fit`` (a function from
    responses to a posterior, the same recipe that made ``posterior``)
    cross-fits instead: the llms are cut into ``n_folds`` folds, the item
    posterior is refitted without each fold, and the fold's llms are split
    against that refit (``posterior`` is then only used for its item ids).
    On GPQA with the quick fit both give the same held-out coverage (the
    benchmark report); cross-fitting is the safe choice for a posterior that
    could overfit its llms.

    Parameters
    ----------
    posterior
        The item posterior (see :func:`item_draws`); ignored when ``draws`` is given.
    responses
        Responses of the llms the posterior was fitted on (missing cells allowed).
    sizes
        Numbers of observed items per split (random subsets); each must leave at
        least 10 items unobserved for every llm.
    subset
        Instead of random subsets: the fixed item ids a design observes (e.g. a
        selector's choice), so that the estimate includes that design's
        selection effects; ``sizes`` and ``n_splits`` are then ignored.
    n_splits
        Random splits per llm and size.
    fit, n_folds
        Cross-fitting (see above); ``n_folds`` is ignored without ``fit``.
    n_knots
        Interior knots of the piecewise-linear centre and scale (at the
        quantiles of ``m``; fewer when there are fewer than 25 cases per knot;
        0: straight lines).
    max_draws, n_grid
        As in :func:`score`.
    random_seed
        Seed; the same seed gives the same estimate (given a deterministic ``fit``).
    draws
        Precomputed :class:`ItemDraws` of ``posterior``.
    where
        Names ``responses`` in error messages (e.g. the flag and file they came
        from; default ``"estimate_misfit: responses (BENCHMARK)"``).
    population
        The fitted llms' :class:`Population`: with its item shift, ``m`` and the
        observed residual are taken about the shifted prediction
        (:func:`prediction_shift`), as :func:`score` then does.
    verbose
        Log one line per size (IRT rmse, predictive sd, calibrated residual sd);
        ``False`` for a calibration made on the way to an answer, as ``score`` does.

    Returns
    -------
    Misfit
        Pass it to :func:`score` as ``misfit=``; save it with
        :meth:`Misfit.to_dataset` and load it with :meth:`Misfit.from_dataset`.
    """
    rng = np.random.default_rng(random_seed)
    here = f"estimate_misfit: responses ({responses.benchmark})" if where is None else where
    n_splits = check_positive_int(n_splits, "n_splits")
    if isinstance(n_knots, bool) or not isinstance(n_knots, int | np.integer) or n_knots < 0:
        raise UserInputError(f"estimate_misfit: n_knots must be an integer >= 0, got {n_knots!r}")
    if draws is None:
        draws = item_draws(posterior, max_draws=max_draws, multidim=True)
    item_ids = responses.items.tolist()
    draws = draws.subset(draws.index_of(item_ids, where=here))
    y = np.asarray(responses.values, dtype=np.float64)
    avail = ~np.isnan(y)
    n_avail = avail.sum(axis=1)
    if responses.n_llms < 10:
        raise UserInputError(
            f"{here}: {responses.n_llms} llms; give the responses of at least 10 "
            "llms the posterior was fitted on"
        )
    if subset is not None:
        cols = pd.Index([str(i) for i in item_ids]).get_indexer(pd.Index([str(i) for i in subset]))
        if (cols < 0).any():
            unknown = [str(subset[k]) for k in np.nonzero(cols < 0)[0]]
            raise UserInputError(
                f"{here}: the subset names {len(unknown)} item(s) not in the responses: "
                f"{preview(unknown)}; pass item ids of the benchmark"
            )
        plan: list[tuple[int, np.ndarray | None]] = [(len(cols), cols)]
        design = f"fixed subset of {len(cols)} items"
        n_splits = 1
    else:
        sizes = sorted({check_positive_int(int(n), "sizes") for n in sizes})
        too_big = [n for n in sizes if n > n_avail.min() - MIN_CALIBRATED_UNOBSERVED]
        if too_big:
            raise UserInputError(
                f"{here}: sizes {too_big} leave fewer than 10 unobserved items for "
                f"some llm (fewest observed items per llm: {n_avail.min()}); use smaller sizes"
            )
        plan = [(n, None) for n in sizes]
        design = "random subsets"
    if fit is None:
        folds = [(np.arange(responses.n_llms), draws)]
    else:
        n_folds = check_positive_int(n_folds, "n_folds", minimum=2)
        fold_of = rng.permutation(responses.n_llms) % n_folds
        folds = []
        for k in range(n_folds):
            rows = np.nonzero(fold_of == k)[0]
            refit = fit(responses.isel(llm=np.nonzero(fold_of != k)[0]))
            d = item_draws(
                refit, max_draws=max_draws, where=f"refit without fold {k}", multidim=True
            )
            folds.append((rows, d.subset(d.index_of(item_ids, where=f"refit of fold {k}"))))
        design += f", cross-fitted over {n_folds} folds"
    grid = scoring_grid(n_grid, draws.n_dims)
    shifted = (
        population is not None
        and population.item_shift is not None
        and population.n_dims == draws.n_dims
        and population.positions(draws.items) is not None
    )
    stats: list[list[np.ndarray]] = [[] for _ in plan]
    for rows, fold_draws in folds:
        for j, (n, cols) in enumerate(plan):
            for _ in range(n_splits):
                ok_avail = avail[rows]
                if cols is not None:
                    obs = np.zeros_like(ok_avail)
                    obs[:, cols] = True
                    obs &= ok_avail
                else:
                    key = np.where(ok_avail, rng.random(ok_avail.shape), np.inf)
                    obs = np.zeros_like(ok_avail)
                    np.put_along_axis(obs, np.argsort(key, axis=1)[:, :n], True, axis=1)
                unobs = ok_avail & ~obs
                ok = (obs.sum(axis=1) > 0) & (unobs.sum(axis=1) >= 10)
                y_rows = y[rows][ok]
                ability, _ = ability_posterior_samples(
                    fold_draws, np.where(obs[ok], y_rows, np.nan), grid=grid, random_seed=rng
                )
                m, w, q, seen = _unobserved_moments(fold_draws, ability, unobs[ok], obs[ok])
                t = np.where(unobs[ok], y_rows, 0.0).sum(axis=1) / unobs[ok].sum(axis=1)
                correct = np.where(obs[ok], y_rows, 0.0).sum(axis=1)
                n_seen = obs[ok].sum(axis=1)
                shift_u, shift_o, level = prediction_shift(population, fold_draws, ability, obs[ok])
                m = m + shift_u
                seen = seen + (n_seen * shift_o)[None, :]
                r = observed_residual(correct, n_seen, seen)
                stats[j].append(np.stack([t, m, w, q, r, level]))
    parts = []
    for (n, _), chunks in zip(plan, stats, strict=True):
        t, m, w, q, r, level = np.concatenate(chunks, axis=1)
        if len(t) < 10:
            raise UserInputError(
                f"{here}: only {len(t)} llms have both observed items and at least "
                "10 unobserved ones in the design; give more llms or a smaller subset"
            )
        parts.append((*_calibrate(t, m, w, q, r, n_knots, level if shifted else None), len(t)))
        if not verbose:
            continue
        logger.info(
            "misfit n=%d: IRT rmse %.4f, IRT predictive sd %.4f, calibrated residual sd %.4f, "
            "observed-residual weight %.3f (%d cases)",
            n,
            float(np.sqrt(np.mean((t - m) ** 2))),
            float(np.sqrt(np.mean(w + q))),
            float(np.sqrt(np.mean(parts[-1][2]))),
            parts[-1][6],
            len(t),
        )
    width = max(len(p[0]) for p in parts)

    def pad(values: np.ndarray, knots: np.ndarray) -> np.ndarray:
        # repeat the last knot so that every size has the same number of knots (np.interp
        # treats a repeated end point as the same constant continuation)
        return np.concatenate([values, np.repeat(values[-1], width - len(knots))])

    return Misfit(
        n_observed=np.asarray([n for n, _ in plan], dtype=np.int64),
        knots=np.stack([pad(p[0], p[0]) for p in parts]),
        centre=np.stack([pad(p[1], p[0]) for p in parts]),
        variance=np.stack([pad(p[2], p[0]) for p in parts]),
        quantiles=np.stack([p[3] for p in parts]),
        levels=_LEVELS.copy(),
        excess_sd=np.asarray([p[4] for p in parts]),
        linear_slope=np.asarray([p[5] for p in parts]),
        n_cases=np.asarray([p[8] for p in parts], dtype=np.int64),
        n_llms=responses.n_llms,
        n_splits=n_splits,
        design=design,
        observed_weight=np.asarray([p[6] for p in parts]),
        residual_centre=np.stack([pad(p[7], p[0]) for p in parts]),
        item_shifted=shifted,
    )

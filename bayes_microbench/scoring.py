"""Score new llms against an item posterior: full-benchmark accuracy from any subset.

:func:`score` draws each llm's ability per item draw (:mod:`bayes_microbench.ability`)
and its full-benchmark accuracy as a posterior-predictive quantity::

    accuracy = (observed correct + sum over unobserved items of Bernoulli(p_i(ability))) / N

with an equal-tailed interval (``ci_bound`` dim, attrs ``ci_kind``, ``ci_prob``,
default :data:`DEFAULT_CI_PROB`) beside the subset's Wilson interval; by default
the calibration the posterior carries (:class:`~bayes_microbench.misfit.Misfit`)
replaces the IRT predictive of the unobserved items, widened for each llm's subset
(:func:`subset_widening`). :func:`pairwise_ranking` reads P(A ahead of B) from the
joint draws. On data drawn from the model the plain intervals cover as stated (the
tests check 80-97% of 90% intervals); why calibrated by default on real benchmarks:
docs/decisions/0002 and 0010; measured coverage: ``benchmarks/study_design_calibration.py``,
``benchmarks/study_md_scoring.py`` (a 2-D ``2pl-md`` posterior's plain intervals
covered 85-98% of held-out GPQA llms, the 2PL's 63-90%).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import xarray as xr
from scipy.special import ndtri

from ._defaults import DEFAULT_CI_PROB  # re-exported: scoring.DEFAULT_CI_PROB
from ._validate import check_probability
from .ability import CHUNK_CELLS, ability_posterior_samples, scoring_grid
from .exceptions import UserInputError
from .misfit import Misfit, observed_residual, prediction_shift
from .population import Population
from .posterior import DEFAULT_MAX_DRAWS, ItemDraws, item_draws, open_posterior
from .responses import Responses

#: Most distinct subsets among the llms of one :func:`score` call for each to be calibrated
#: on itself; llms on more (subsets of their own: random, adaptive) all keep the
#: random-subset calibration, widened.
MAX_SHARED_SUBSETS = 4

logger = logging.getLogger(__name__)


def wilson_interval(k: np.ndarray, n: np.ndarray, ci_prob: float) -> np.ndarray:
    """Wilson score interval for ``k`` successes of ``n``: shape ``(..., 2)``."""
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    z = float(ndtri(0.5 + ci_prob / 2.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        denom = 1.0 + z**2 / n
        centre = (p + z**2 / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    return np.stack([np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)], axis=-1)


def _interval(samples: np.ndarray, ci_prob: float, axis: int = 0) -> np.ndarray:
    q = np.quantile(samples, [(1 - ci_prob) / 2, (1 + ci_prob) / 2], axis=axis)
    return np.moveaxis(q, 0, -1)


def score(
    posterior: Any,
    responses: Responses,
    *,
    items: Sequence[str] | None = None,
    ci_prob: float | None = None,
    max_draws: int | None = DEFAULT_MAX_DRAWS,
    n_grid: int | None = None,
    random_seed: int | np.random.Generator | None = 0,
    draws: ItemDraws | None = None,
    misfit: Misfit | Literal["saved"] | None = "saved",
    min_draws: int | None = None,
) -> xr.Dataset:
    """Posterior of each llm's ability and full-benchmark accuracy from its responses.

    Parameters
    ----------
    posterior
        An item posterior: anything :func:`~bayes_microbench.posterior.open_posterior`
        reads (a file, a fitted model, a DataTree, a Dataset); only its calibration
        is read when ``draws`` is given.
    responses
        The llms to score; each llm's observed cells are its evidence (any
        subset of the benchmark, different per llm if need be). Every item id
        must be in the posterior (one error lists those that are not).
    items
        The items that make up the "full benchmark" (default: every item in
        the posterior). Observed responses outside this set are refused.
    ci_prob
        Interval probability (default :data:`DEFAULT_CI_PROB`).
    max_draws
        Posterior draws used (evenly thinned).
    n_grid
        Points of the ability grid on ``[-6, 6]`` (default :data:`N_GRID`);
        for a ``2pl-md`` posterior, points per dimension (default
        :data:`N_GRID_MD`; unused above :data:`MAX_GRID_DIMS` dims, which are
        scored by importance sampling).
    random_seed
        Seed; the same seed gives identical results.
    draws
        Precomputed :class:`ItemDraws` (skips extraction).
    misfit
        A :class:`Misfit` calibration estimated by :func:`estimate_misfit`
        on the llms the posterior was fitted on; the predictive accuracy on the
        unobserved items is then ``centre(m) + scale(m) * R`` (clipped to
        [0, 1]) with ``m`` the llm's IRT-predicted accuracy there and ``R``
        drawn from the calibration's empirical standardized residuals, at each
        llm's number of observed items: a split-conformal interval (the centre
        also weighs the llm's observed residual, and ``fit``'s calibration takes
        ``m`` about the fitted llms' item shift; see :class:`Misfit`). The
        ``ability`` draws are unchanged. ``"saved"`` (default): the
        calibration the posterior carries (a fit, a posterior file, or a file read
        with :func:`~bayes_microbench.irt.load_posterior`, saved by ``fit``), and none
        where it carries none. ``None`` trusts the IRT model exactly (attr
        ``misfit`` says so): on real benchmarks the intervals are then too narrow.
    min_draws
        Fewest posterior draws the intervals may rest on (default: the
        posterior's requirement, :meth:`ItemDraws.check_interval_draws`);
        fewer raise :class:`~bayes_microbench.posterior.FewDrawsError`.

    Returns
    -------
    xarray.Dataset
        ``ability`` and ``accuracy`` (chain, draw, llm): posterior draws
        (``ability`` with a trailing ``dim`` for a ``2pl-md`` posterior);
        ``accuracy_mean``, ``ability_mean`` (llm); ``accuracy_interval``
        (llm, ci_bound); ``binomial_interval`` (llm, ci_bound): the Wilson
        interval of the subset accuracy; ``n_observed``, ``n_correct``,
        ``observed_accuracy`` (llm). Attrs ``ci_prob``, ``n_benchmark_items``,
        ``misfit`` (what correction, if any, was applied).

    Examples
    --------
    >>> from bayes_microbench import simulate_responses
    >>> from bayes_microbench.scoring import score
    >>> from bayes_microbench.testing import posterior_from_truth
    >>> resp, truth = simulate_responses("gpqa", n_llms=5, n_items=60, random_seed=0, return_truth=True)
    >>> post = posterior_from_truth(truth, n_draws=50, noise=0.05, random_seed=0)
    >>> res = score(post, resp.isel(item=slice(0, 20)), random_seed=1)
    >>> res["accuracy_interval"].sel(ci_bound="lower").shape
    (5,)
    """
    ci = DEFAULT_CI_PROB if ci_prob is None else check_probability(ci_prob, "ci_prob")
    if isinstance(misfit, str) and misfit != "saved":
        raise UserInputError(f"misfit must be a Misfit, 'saved' or None, got {misfit!r}")
    carried = None
    if draws is None:
        dataset, carried = open_posterior(posterior)
        draws = item_draws(dataset, max_draws=max_draws, multidim=True)
    elif misfit == "saved" and posterior is not None:
        carried = open_posterior(posterior)[1]
    if isinstance(misfit, str):
        # a file or a fit carries it; a bare Dataset or DataTree (its posterior group) does not
        misfit = carried
    draws.check_interval_draws(min_draws)
    if items is not None:
        draws = draws.subset(draws.index_of(list(items), where="benchmark items"))
    pos = draws.index_of(responses.items.tolist(), where=f"responses ({responses.benchmark})")
    n_bench = draws.n_items
    y = np.full((responses.n_llms, n_bench), np.nan)
    y[:, pos] = responses.values
    observed = ~np.isnan(y)
    used = observed.any(axis=0)
    rng = np.random.default_rng(random_seed)
    ability, _ = ability_posterior_samples(
        draws.subset(np.nonzero(used)[0]),
        y[:, used],
        grid=scoring_grid(n_grid, draws.n_dims),
        random_seed=rng,
    )
    correct_obs = np.nansum(y, axis=1)
    n_obs = observed.sum(axis=1)
    hits, expected, seen = _unobserved_hits(draws, ability, observed, rng)
    n_unobs = n_bench - n_obs
    if misfit is not None:
        level = None
        if misfit.item_shifted:  # the calibration's m and r were taken about the shift
            shift_u, shift_o, level = prediction_shift(misfit.population, draws, ability, observed)
            expected = expected + (n_unobs * shift_u)[None, :]
            seen = seen + (n_obs * shift_o)[None, :]
        residual = observed_residual(correct_obs, n_obs, seen)
        raw, hits = hits, hits.copy()
        # a subset the scored llms share is calibrated on itself (no widening, no carry)
        own = np.zeros(responses.n_llms, dtype=bool)
        fitted_llms = 0
        groups = shared_subsets(observed)
        for rows, mask in groups if len(groups) <= MAX_SHARED_SUBSETS else []:
            sub = misfit.for_subset(draws, mask, random_seed=rng)
            if sub is None:
                continue
            hits[:, rows] = sub.apply(
                raw[:, rows], expected[:, rows], n_obs[rows], n_unobs[rows], rng,
                observed_residual=residual[rows], level=None if level is None else level[rows],
            )  # fmt: skip
            own[rows] = True
            fitted_llms = sub.n_llms
        # the others: the random-subset calibration, widened for each llm's subset
        rest = np.flatnonzero(~own)
        extra = None
        if len(rest):
            extra = subset_widening(
                misfit.population, draws, ability[:, rest], observed[rest], rng,
                about_shift=misfit.item_shifted,
            )  # fmt: skip
            carry = residual_carry(misfit.population, draws, ability[:, rest], observed[rest], rng)
            hits[:, rest] = misfit.apply(
                raw[:, rest], expected[:, rest], n_obs[rest], n_unobs[rest], rng, extra,
                residual[rest], carry, None if level is None else level[rest],
            )  # fmt: skip
        misfit_note = misfit.describe()
        if extra is not None:
            added = np.median(np.sqrt(np.maximum(extra, 0)))
            misfit_note += (
                "; widened for each llm's subset by the saved population's excess residual "
                f"covariance (median sd added {added:.4f})"
            )
        if own.any():
            misfit_note += (
                f"; {int(own.sum())} llm(s) answered a subset shared by the scored llms: "
                f"calibrated on that subset itself, with {fitted_llms} fitted llms (no widening)"
            )
    else:
        misfit_note = (
            "none: no misfit estimate given, the intervals assume the IRT model holds "
            "exactly (on real benchmarks they undercover; see estimate_misfit)"
        )
    accuracy = (hits + correct_obs[None, :]) / n_bench

    n_chain = len(np.unique(draws.chain))
    shape = (n_chain, draws.n_draws // n_chain, responses.n_llms)
    chain_lab = draws.chain.reshape(shape[:2])[:, 0]
    draw_lab = draws.draw.reshape(shape[:2])[0]
    coords: dict[str, Any] = {
        "chain": chain_lab,
        "draw": draw_lab,
        "llm": responses.llms,
        "ci_bound": ["lower", "upper"],
    }
    dim = ("dim",) if ability.ndim == 3 else ()
    if dim:
        coords["dim"] = np.arange(ability.shape[2])
    interval_attrs = {"ci_kind": "eti", "ci_prob": ci}
    with np.errstate(invalid="ignore", divide="ignore"):
        obs_acc = np.where(n_obs > 0, correct_obs / np.maximum(n_obs, 1), np.nan)
    ds = xr.Dataset(
        {
            "ability": (
                ("chain", "draw", "llm", *dim),
                ability.reshape(*shape, *ability.shape[2:]),
            ),
            "accuracy": (("chain", "draw", "llm"), accuracy.reshape(shape)),
            "ability_mean": (("llm", *dim), ability.mean(axis=0)),
            "accuracy_mean": ("llm", accuracy.mean(axis=0)),
            "accuracy_interval": (
                ("llm", "ci_bound"),
                _interval(accuracy, ci),
                interval_attrs,
            ),
            "binomial_interval": (
                ("llm", "ci_bound"),
                wilson_interval(correct_obs, n_obs, ci),
                {"ci_kind": "wilson", "ci_prob": ci},
            ),
            "n_observed": ("llm", n_obs.astype(np.int64)),
            "n_correct": ("llm", correct_obs.astype(np.int64)),
            "observed_accuracy": ("llm", obs_acc),
        },
        coords=coords,
        attrs={
            "ci_prob": ci,
            "n_benchmark_items": n_bench,
            "n_posterior_draws": draws.n_draws,
            "misfit": misfit_note,
        },
    )
    return ds


def plugin_response(mean: ItemDraws, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``P_i`` and ``dP_i/d ability`` at plug-in abilities.

    Parameters
    ----------
    mean
        One draw of item parameters (``ItemDraws.mean()``).
    theta
        ``(L,)`` abilities, or ``(L, D)`` for a ``2pl-md`` posterior.

    Returns
    -------
    tuple of numpy.ndarray
        The probability correct ``(L, N)`` and its slope ``a (P - c)(1 - P) / (1 - c)``,
        ``(L, N)``, or for a ``2pl-md`` posterior its gradient ``a_i P (1 - P)``,
        ``(L, N, D)`` (``a_i`` the item's loadings): what
        :meth:`Population.subset_excess` linearizes in.
    """
    prob = mean.prob(np.asarray(theta, dtype=np.float64)[None])[0]
    c = mean.guessing[0]
    shape = (prob - c) * (1.0 - prob) / (1.0 - c)
    if mean.loadings is None:
        return prob, mean.discrimination[0] * shape
    return prob, shape[:, :, None] * mean.loadings[0][None, :, :]


def subset_widening(
    population: Population | None,
    draws: ItemDraws,
    ability: np.ndarray,
    observed: np.ndarray,
    rng: np.random.Generator,
    *,
    about_shift: bool = False,
) -> np.ndarray | None:
    """Each llm's subset excess misfit variance (see :meth:`Population.subset_excess`).

    Parameters
    ----------
    population
        The saved population (None: no widening).
    draws
        The benchmark's item draws.
    ability
        Ability draws ``(draws, llms)``; their mean is each llm's plug-in ability.
    observed
        ``(llms, items)`` bool: each llm's observed items.
    rng
        Source of the random reference subsets' seed.
    about_shift
        The misfit about the population's item shift (for an item-shifted calibration).

    Returns
    -------
    numpy.ndarray or None
        ``(llms,)`` variance for :meth:`Misfit.apply`'s ``extra_variance``;
        None without a population, when the population's ability dims are not
        the posterior's, or when it does not cover the benchmark items.
    """
    view = _population_view(population, draws, ability)
    if view is None:
        return None
    population, positions, prob, slope = view
    seed = int(rng.integers(2**31))
    return population.subset_excess(
        prob, slope, observed, positions, random_seed=seed, about_shift=about_shift
    )


def residual_carry(
    population: Population | None,
    draws: ItemDraws,
    ability: np.ndarray,
    observed: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Each llm's share of the calibration's observed-residual weight for its subset.

    Parameters
    ----------
    population, draws, ability, observed, rng
        As in :func:`subset_widening`.

    Returns
    -------
    numpy.ndarray
        ``(llms,)`` in ``[0, 1]`` (:meth:`Population.residual_carry`); ones
        where :func:`subset_widening` would not widen (no population, other
        dims, items it does not cover).

    Why: the weight was learned on random subsets; a selector's subset carries
    less of the misfit on the other items (docs/decisions/0043).
    """
    view = _population_view(population, draws, ability)
    if view is None:
        return np.ones(observed.shape[0])
    population, positions, prob, slope = view
    seed = int(rng.integers(2**31))
    return population.residual_carry(prob, slope, observed, positions, random_seed=seed)


def _population_view(
    population: Population | None, draws: ItemDraws, ability: np.ndarray
) -> tuple[Population, np.ndarray, np.ndarray, np.ndarray] | None:
    """The population, the benchmark items' positions in it, and ``P_i``, ``dP_i/da`` at
    the llms' plug-in abilities; None where the population cannot serve these draws.

    Why: :func:`subset_widening` and :func:`residual_carry` linearize at the same point.
    """
    if population is None:
        return None
    if population.n_dims != draws.n_dims:  # e.g. a 1-D population saved beside md draws
        logger.debug(
            "score: the saved population is %d-D, the posterior %d-D; not used",
            population.n_dims,
            draws.n_dims,
        )
        return None
    positions = population.positions(draws.items)
    if positions is None:
        logger.debug("score: the saved population does not cover the benchmark; not used")
        return None
    prob, slope = plugin_response(draws.mean(), ability.mean(axis=0))
    return population, positions, prob, slope


def shared_subsets(observed: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The distinct subsets the scored llms answered, largest groups first.

    Parameters
    ----------
    observed
        ``(llms, items)`` bool.

    Returns
    -------
    list
        ``(llm positions, item mask)`` per distinct subset (ties: first seen first).

    Why: each subset is calibrated on itself once (:meth:`Misfit.for_subset`), however
    many llms share it.
    """
    keys, first, inverse, counts = np.unique(
        np.asarray(observed, dtype=bool), axis=0, return_index=True, return_inverse=True,
        return_counts=True,
    )  # fmt: skip
    order = np.lexsort((first, -counts))
    inverse = np.asarray(inverse).ravel()
    return [(np.flatnonzero(inverse == g), keys[g]) for g in order]


def _unobserved_hits(
    draws: ItemDraws,
    ability: np.ndarray,
    observed: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Number correct on each llm's unobserved items: Bernoulli draws and their expectation.

    All ``(draws, llms)``: the draws, the sum of ``p_i(ability)`` over the
    unobserved items under each draw, and that sum over the observed items
    (for :func:`~bayes_microbench.misfit.observed_residual`).
    """
    n_s, n_l = ability.shape[:2]
    n_i = draws.n_items
    out = np.empty((n_s, n_l))
    expected = np.empty((n_s, n_l))
    seen = np.empty((n_s, n_l))
    chunk = max(1, CHUNK_CELLS // max(1, n_l * n_i))
    unobs = ~observed
    unobs32 = unobs.astype(np.float32)
    for start in range(0, n_s, chunk):
        sl = slice(start, min(n_s, start + chunk))
        sub = draws.select_draws(sl)
        p = sub.prob(ability[sl], dtype=np.float32)  # (s, L, I)
        expected[sl] = (p * unobs32[None]).sum(axis=2)
        seen[sl] = p.sum(axis=2) - expected[sl]
        hits = rng.random(p.shape, dtype=np.float32) < p
        hits &= unobs[None]
        out[sl] = hits.sum(axis=2)
    return out, expected, seen


def pairwise_ranking(scores: xr.Dataset) -> xr.Dataset:
    """Pairwise ranking probabilities after observing llms on their subsets.

    For every ordered pair (A, B) of scored llms:

    ``p_a_better``
        P(A's full-benchmark accuracy > B's | both llms' subset responses),
        from the joint posterior-predictive draws (the same item draw for
        both; an exact tie counts as neither).
    ``p_subset_ranking_correct``
        The probability that the subsets' ranking (the sign of the observed
        subset-accuracy difference) matches the full benchmark's: P(A > B)
        when A scored higher on its subset, P(B > A) when lower, and 0 when
        the subset accuracies tie (as in the study, a tie ranks nobody).

    Returns a Dataset with dims ``llm`` and ``llm_b``.
    """
    acc = scores["accuracy"].stack(sample=("chain", "draw")).transpose("sample", "llm").to_numpy()
    better = (acc[:, :, None] > acc[:, None, :]).mean(axis=0)
    worse = (acc[:, :, None] < acc[:, None, :]).mean(axis=0)
    obs = scores["observed_accuracy"].to_numpy()
    sign = np.sign(obs[:, None] - obs[None, :])
    match = np.where(sign > 0, better, np.where(sign < 0, worse, 0.0))
    llms = scores["llm"].to_numpy()
    return xr.Dataset(
        {
            "p_a_better": (("llm", "llm_b"), better),
            "p_subset_ranking_correct": (("llm", "llm_b"), match),
        },
        coords={"llm": llms, "llm_b": llms},
    )

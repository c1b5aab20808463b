"""Score a new llm against a saved item posterior, from its responses on any subset.

The item posterior (the ``posterior`` group of a fitted IRT model, see
:mod:`bayes_microbench.irt`) holds draws of each item's ``difficulty`` and
``discrimination`` (and ``guessing`` for a 3PL), on the scale::

    P(correct) = guessing + (1 - guessing) * logistic(discrimination * (ability - difficulty))

with the llm population ``ability ~ Normal(0, 1)`` fixed by identification.
A multidimensional 2PL posterior (``2pl-md``, ``D`` ability dims) is scored
the same way on a ``D``-dimensional product grid (prior ``Normal(0, I_D)``,
``logit P = loadings_i . ability + intercept_i``) for ``D`` up to
:data:`MAX_GRID_DIMS`, and by importance sampling above (the grid would grow as
``N_GRID_MD ** D``); ``ability`` then carries a ``dim`` dim. Design and
the Bayesian selectors need a 1-D ability: :func:`item_draws` refuses a
``2pl-md`` posterior for them with one line.

For a new llm with responses ``y`` on a subset ``O`` of the items, for every
posterior draw ``s`` of the item parameters we compute the conditional
posterior of its ability on a fixed quadrature grid (prior ``Normal(0, 1)``
times the likelihood of ``y`` under draw ``s``, normalized), and draw one
ability from it (a grid cell by its probability, then uniformly inside the
cell). The new llm's responses are treated as not updating the item
parameters (the usual "scoring against a calibrated item bank"); the item
uncertainty enters through the mixture over draws.

Its **full-benchmark accuracy** is then a posterior-predictive quantity::

    accuracy = (observed correct + sum over unobserved items of Bernoulli(p_i(ability))) / N

so an llm observed on every item has a known accuracy, and the interval
widens as fewer items are observed. Intervals are equal-tailed and carry a
``ci_bound`` dim with coords ``lower`` / ``upper`` and attrs ``ci_kind`` and
``ci_prob`` (default :data:`DEFAULT_CI_PROB`). Beside it, the frequentist
Wilson interval of the subset accuracy (what one would report without a
model) is returned for comparison.

Everything is vectorized over draws, grid points and llms (chunked over draws
to bound memory); no Python loop runs per draw or per llm.

Calibration. On data drawn from the model the intervals cover as stated (the
tests check 80-97% for 90% intervals). On real benchmarks the IRT predictive of
the unobserved items is overconfident and biased: on GPQA the item-split
cross-validation of :func:`estimate_misfit` finds the true accuracy on the
unobserved items varying only ~0.3-0.4 times as much as the IRT prediction
across llms, and not even linearly (the 2PL under-predicts llms at both ends
of the accuracy range and over-predicts the middle). :func:`estimate_misfit`,
run on the llms the posterior was fitted on (``estimate_misfit(posterior,
training_responses, fit=...)``), learns a piecewise-linear centre and scale in
the IRT prediction and the empirical distribution of the standardized
residuals; ``score(..., misfit=...)`` then draws from it, which makes the
intervals split-conformal prediction intervals (valid for new llms
exchangeable with the training llms, without a Gaussian assumption). For an
informatively chosen subset estimate it on that subset (``subset=``). The
measured held-out coverage before and after is in the benchmark report
(``benchmarks/study_design_calibration.py``). Without ``misfit`` the result's
``misfit`` attr says the model is trusted as is. A 2-D ``2pl-md`` posterior
misfits GPQA far less: its plain intervals covered 85-98% of held-out llms
where the 2PL's covered 63-90% (``benchmarks/study_md_scoring.py``;
``models/gpqa-2pl-md.nc``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import xarray as xr
from scipy.special import ndtri

from . import response_model
from ._validate import check_positive_int, check_probability, preview
from .exceptions import UserInputError
from .population import Population
from .posterior import DEFAULT_MAX_DRAWS, ItemDraws, item_draws, open_posterior
from .responses import Responses

logger = logging.getLogger(__name__)

#: The default probability of every credible / confidence interval of this
#: package's design and scoring tools (one place; pass ``ci_prob=`` to change it).
DEFAULT_CI_PROB = 0.9
#: Ability quadrature grid: ``N_GRID`` points evenly spaced on ``[-GRID_LIMIT, GRID_LIMIT]``.
GRID_LIMIT = 6.0
N_GRID = 161
#: Points per dimension of the product grid that scores a ``2pl-md`` posterior
#: (``N_GRID_MD ** D`` points on ``[-GRID_LIMIT, GRID_LIMIT] ** D``). Measured by
#: hand on a simulated md posterior with a dead second dimension, 80 items observed:
#: the ability draws' sd is 3% above the 1-D grid's (41 points: 7.5%, 81: 1.7%),
#: and scoring 60 llms on 25 items with 1000 draws took 4.3 s (41 points: 2.2 s, 81: 7.7 s).
N_GRID_MD = 61
#: Ability dimensions up to which scoring integrates on a product grid (it grows
#: as ``N_GRID_MD ** D``); a ``2pl-md`` posterior with more is scored by
#: importance sampling (:func:`_importance_samples`).
MAX_GRID_DIMS = 2
#: Proposal points per llm of the importance sampler (``2pl-md``, ``D`` > 2; a
#: power of 2: each llm's points are a block of one scrambled Sobol sequence). At
#: ``D`` = 2 against the grid (by hand, 30 llms, 400 draws, 30-60 items, 3 seeds):
#: the conditional posterior means' rms error was 0.003-0.005 with 256 Sobol points,
#: 0.006-0.008 with 128, and 0.022-0.027 with 512 independent draws (posterior sd
#: about 0.55); the time grows in proportion to the points. By hand, 100 llms and
#: 1000 draws at ``D`` = 3 took 13 s on 25 observed items and 47 s on 100 (the 2-D
#: grid: 4.7 and 7.1 s).
N_IS_POINTS = 256
#: The importance sampler's proposal: a multivariate t with this many degrees of
#: freedom around each llm's posterior mode (under the posterior-mean item
#: parameters), its scale the Laplace covariance's times ``IS_INFLATE``, so that the
#: conditional posteriors of every item draw sit well inside it.
IS_DF = 5.0
IS_INFLATE = 1.5
#: Fewest unobserved items a :class:`Misfit` is estimated at (each split leaves at least
#: this many), and so applied at: nearer the whole benchmark the IRT predictive is kept,
#: since a continuous recalibrated rate over 1-9 items misses the lattice of the count.
MIN_CALIBRATED_UNOBSERVED = 10
_CHUNK_CELLS = 6_000_000  # draws x grid x items per chunk (about 48 MB of float64)
#: Probability levels at which a :class:`Misfit` stores its standardized residual quantiles.
_LEVELS = np.linspace(0.0, 1.0, 401)


def ability_grid(n_grid: int | None = None, limit: float = GRID_LIMIT, dims: int = 1) -> np.ndarray:
    """The fixed quadrature grid over ability.

    ``n_grid`` points (default :data:`N_GRID`) on ``[-limit, limit]``, shape
    ``(n_grid,)``; with ``dims`` > 1 the product grid of ``n_grid`` points per
    dimension (default :data:`N_GRID_MD`), shape ``(n_grid**dims, dims)``.
    """
    n = (N_GRID if dims == 1 else N_GRID_MD) if n_grid is None else n_grid
    axis = np.linspace(-limit, limit, check_positive_int(n, "n_grid", minimum=11))
    if dims == 1:
        return axis
    mesh = np.meshgrid(*([axis] * dims), indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1)


def _log_probs(draws: ItemDraws, grid: np.ndarray, sl: slice) -> tuple[np.ndarray, np.ndarray]:
    """log P(correct) and log P(wrong) on the grid for draws ``sl``: (s, G, I) each, float32."""
    eta = draws.select_draws(sl).logit(grid[None], np.float32)
    return response_model.log_prob(eta, draws.guessing[sl, None, :], dtype=np.float32)


def ability_posterior_samples(
    draws: ItemDraws,
    correct: np.ndarray,
    *,
    grid: np.ndarray | None = None,
    random_seed: int | np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One ability draw per item draw, for each llm, given its responses.

    Parameters
    ----------
    draws
        Item draws for the items the responses refer to (column order).
    correct
        ``(n_llms, n_items)`` array of 1 / 0 / NaN (NaN: not observed).
    grid
        Ability grid (default :func:`ability_grid` with ``draws.n_dims``
        dims): evenly spaced, ``(G,)``, or ``(G, D)`` for a ``2pl-md``
        posterior (a product grid with the same spacing in every dim).
        ``None`` with more than :data:`MAX_GRID_DIMS` dims: importance
        sampling instead (:func:`_importance_samples`).
    random_seed
        Seed for the draws inside the grid posterior.

    Returns
    -------
    ability : ndarray, shape (n_draws, n_llms), or (n_draws, n_llms, D)
    posterior_mean : ndarray, the same shape
        The conditional posterior mean of ability under each draw.
    """
    rng = np.random.default_rng(random_seed)
    multi = draws.loadings is not None
    y = np.asarray(correct, dtype=np.float64)
    if y.ndim != 2 or y.shape[1] != draws.n_items:
        raise ValueError("correct must be (n_llms, n_items) matching the item draws")
    if grid is None and draws.n_dims > MAX_GRID_DIMS:
        return _importance_samples(draws, y, rng)
    if grid is None:
        grid = ability_grid(dims=draws.n_dims)
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != (2 if multi else 1) or (multi and grid.shape[1] != draws.n_dims):
        raise ValueError(f"grid must be {'(G, D)' if multi else '(G,)'} for these item draws")
    observed = ~np.isnan(y)
    y_right = np.where(observed, y, 0.0)
    y_wrong = observed.astype(np.float64) - y_right
    y_right32 = y_right.astype(np.float32)  # (L, I)
    y_wrong32 = y_wrong.astype(np.float32)
    n_items = draws.n_items
    n_s, n_l, n_g = draws.n_draws, y.shape[0], len(grid)
    dims = grid.shape[1:]  # () or (D,)
    log_prior = (-0.5 * (grid**2).reshape(n_g, -1).sum(axis=1)).astype(np.float32)
    axis = np.unique(grid if not multi else grid[:, 0])
    step = axis[1] - axis[0]
    uniforms = rng.random((n_l, n_s), dtype=np.float32)
    jitter = rng.random((n_s, n_l, *dims)) - 0.5
    out = np.empty((n_s, n_l, *dims))
    post_mean = np.empty((n_s, n_l, *dims))
    chunk = max(1, _CHUNK_CELLS // max(1, n_g * max(n_items, n_l)))
    for start in range(0, n_s, chunk):  # chunks bound memory; each chunk is vectorized
        sl = slice(start, min(n_s, start + chunk))
        log_right, log_wrong = _log_probs(draws, grid, sl)
        n_c = log_right.shape[0]
        # (L, I) @ (I, s*G): plain 2-D BLAS products (stacked matmul is far slower),
        # laid out (L, s, G) so that every grid operation runs on the contiguous last axis
        logpost = (
            y_right32 @ log_right.reshape(-1, n_items).T
            + y_wrong32 @ log_wrong.reshape(-1, n_items).T
        ).reshape(n_l, n_c, n_g)
        logpost += log_prior
        logpost -= logpost.max(axis=2, keepdims=True)
        w = np.exp(logpost, out=logpost)
        w /= w.sum(axis=2, keepdims=True)
        post_mean[sl] = np.swapaxes(w @ grid.astype(np.float32), 0, 1)
        cdf = np.cumsum(w, axis=2, out=w)
        idx = np.minimum((cdf < uniforms[:, sl, None]).sum(axis=2), n_g - 1)  # (L, s)
        out[sl] = grid[idx.T] + step * jitter[sl]
    return out, post_mean


def _scoring_grid(n_grid: int | None, dims: int) -> np.ndarray | None:
    """The ability grid scoring uses, or None above :data:`MAX_GRID_DIMS` dims."""
    return None if dims > MAX_GRID_DIMS else ability_grid(n_grid, dims=dims)


def _laplace(
    draws: ItemDraws, y_right: np.ndarray, n_obs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each llm's ability posterior mode and the Cholesky factor of its covariance.

    Under the posterior-mean loadings and intercepts of a ``2pl-md`` posterior
    (the log posterior is concave: Newton's method from 0 converges) and the
    prior ``Normal(0, I_D)``: ``(L, D)`` and ``(L, D, D)``.
    """
    assert draws.loadings is not None
    lam = draws.loadings.mean(axis=0)  # (I, D)
    icpt = draws.intercept.mean(axis=0)  # (I,)
    n_l, n_d = y_right.shape[0], lam.shape[1]
    theta = np.zeros((n_l, n_d))
    eye = np.eye(n_d)
    for _ in range(100):
        p = response_model.prob(response_model.logit_md(theta, lam, icpt))
        grad = (y_right - n_obs * p) @ lam - theta
        hess = np.einsum("li,id,ie->lde", n_obs * p * (1 - p), lam, lam) + eye
        step = np.linalg.solve(hess, grad[..., None])[..., 0]
        # a cap keeps the first steps of an all-correct llm from overshooting
        step *= np.minimum(1.0, 2.0 / np.maximum(np.abs(step).max(axis=1), 1e-12))[:, None]
        theta += step
        if np.abs(step).max() < 1e-8:
            break
    return theta, np.linalg.cholesky(np.linalg.inv(hess))


def _importance_samples(
    draws: ItemDraws, y: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ability_posterior_samples` of a ``2pl-md`` posterior by importance sampling.

    Per llm, :data:`N_IS_POINTS` abilities are placed once by a multivariate
    t (:data:`IS_DF` degrees of freedom) around its :func:`_laplace` mode,
    scaled by :data:`IS_INFLATE`, from a block of a scrambled Sobol sequence
    (randomized quasi-Monte Carlo: far more even than independent draws, see
    :data:`N_IS_POINTS`); for each item draw they are weighted by
    prior x likelihood / proposal and one is drawn by its weight (and the
    weighted mean is the conditional posterior mean). Vectorized over draws,
    points and llms, chunked over draws. Logs a warning when the weights of
    the median (llm, draw) pair have an effective sample size under 50. ``y``:
    the ``(n_llms, n_items)`` responses, checked by the caller.
    """
    assert draws.loadings is not None
    observed = ~np.isnan(y)
    y_right = np.where(observed, y, 0.0)
    n_obs = observed.astype(np.float64)
    n_s, n_l, n_d, n_k = draws.n_draws, y.shape[0], draws.n_dims, N_IS_POINTS
    mode, chol = _laplace(draws, y_right, n_obs)
    # the first n_l * n_k points of a scrambled Sobol sequence in D + 1 dims; each
    # llm's block of n_k (a power of 2) is itself evenly spread. D normal coordinates
    # and a chi-square radius make the multivariate t
    from scipy.special import chdtri
    from scipy.stats import qmc

    m = max(1, int(np.ceil(np.log2(n_l * n_k))))
    q = qmc.Sobol(d=n_d + 1, scramble=True, rng=rng).random_base2(m)[: n_l * n_k]
    q = np.clip(q, 1e-12, 1.0 - 1e-12).reshape(n_l, n_k, n_d + 1)
    u = ndtri(q[..., :n_d]) * np.sqrt(IS_DF / chdtri(IS_DF, 1.0 - q[..., n_d:]))
    points = mode[:, None, :] + IS_INFLATE * np.einsum("lde,lke->lkd", chol, u)  # (L, K, D)
    # log prior - log proposal (up to a constant per llm, which the weights drop)
    log_base = -0.5 * (points**2).sum(axis=2) + 0.5 * (IS_DF + n_d) * np.log1p(
        (u**2).sum(axis=2) / IS_DF
    )
    # the likelihood sum_i y_i eta_i - n_i softplus(eta_i); its linear part needs no cells
    icpt = draws.intercept  # (S, I)
    linear_load = np.einsum("li,sid->sld", y_right, draws.loadings)  # (S, L, D)
    linear_icpt = icpt @ y_right.T  # (S, L)
    # each llm's own observed items (llms may see different subsets), padded to the
    # largest count with weight 0: (L, J) positions and weights
    n_max = max(1, int(observed.sum(axis=1).max()))
    order = np.argsort(~observed, axis=1, kind="stable")[:, :n_max]
    weight = np.take_along_axis(observed, order, axis=1).astype(np.float32)  # (L, J)
    lam32 = draws.loadings.astype(np.float32)
    icpt32 = icpt.astype(np.float32)
    pts32 = points.astype(np.float32)  # (L, K, D)
    out = np.empty((n_s, n_l, n_d))
    post_mean = np.empty((n_s, n_l, n_d))
    ess = np.empty((n_s, n_l))
    uniforms = rng.random((n_s, n_l))
    chunk = max(1, _CHUNK_CELLS // max(1, n_l * n_k * n_max))
    for start in range(0, n_s, chunk):
        sl = slice(start, min(n_s, start + chunk))
        # eta: (s, L, K, J) over each llm's observed items; softplus summed over them
        lam_g = np.swapaxes(lam32[sl][:, order], 2, 3)  # (s, L, D, J)
        eta = np.matmul(pts32[None], lam_g) + icpt32[sl][:, order][:, :, None, :]
        soft = np.einsum("slkj,lj->slk", response_model.softplus(eta), weight)
        loglik = (
            np.einsum("lkd,sld->slk", points, linear_load[sl]) + linear_icpt[sl][:, :, None] - soft
        )
        logw = loglik + log_base[None]
        logw -= logw.max(axis=2, keepdims=True)
        w = np.exp(logw)
        w /= w.sum(axis=2, keepdims=True)
        ess[sl] = 1.0 / (w**2).sum(axis=2)
        post_mean[sl] = np.einsum("slk,lkd->sld", w, points)
        idx = np.minimum((np.cumsum(w, axis=2) < uniforms[sl, :, None]).sum(axis=2), n_k - 1)
        out[sl] = points[np.arange(n_l)[None, :], idx]
    median_ess = float(np.median(ess))
    if median_ess < 50:
        logger.warning(
            "importance sampling of %d-D abilities: the median effective sample size of "
            "the weights is %.0f of %d points; the ability draws are coarse",
            n_d,
            median_ess,
            n_k,
        )
    return out, post_mean


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
        llm's number of observed items: a split-conformal interval. The
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
    >>> from bayes_microbench.scoring import posterior_from_truth, score
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
        grid=_scoring_grid(n_grid, draws.n_dims),
        random_seed=rng,
    )
    correct_obs = np.nansum(y, axis=1)
    n_obs = observed.sum(axis=1)
    hits, expected = _unobserved_hits(draws, ability, observed, rng)
    n_unobs = n_bench - n_obs
    if misfit is not None:
        extra = subset_widening(misfit.population, draws, ability, observed, rng)
        hits = misfit.apply(hits, expected, n_obs, n_unobs, rng, extra)
        misfit_note = misfit.describe()
        if extra is not None:
            misfit_note += (
                "; widened for each llm's subset by the saved population's excess residual "
                f"covariance (median sd added {np.median(np.sqrt(np.maximum(extra, 0))):.4f})"
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


def subset_widening(
    population: Population | None,
    draws: ItemDraws,
    ability: np.ndarray,
    observed: np.ndarray,
    rng: np.random.Generator,
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

    Returns
    -------
    numpy.ndarray or None
        ``(llms,)`` variance for :meth:`Misfit.apply`'s ``extra_variance``;
        None without a population, for a ``2pl-md`` posterior, or when the
        population does not cover the benchmark items.
    """
    if population is None or draws.n_dims != 1:
        return None
    positions = population.positions(draws.items)
    if positions is None:
        logger.debug("score: the saved population does not cover the benchmark; no widening")
        return None
    mean = draws.mean()
    prob = mean.prob(ability.mean(axis=0)[None, :])[0]  # (L, N) at the plug-in abilities
    c = mean.guessing[0]
    slope = mean.discrimination[0] * (prob - c) * (1.0 - prob) / (1.0 - c)  # dP/d ability
    seed = int(rng.integers(2**31))
    return population.subset_excess(prob, slope, observed, positions, random_seed=seed)


def _unobserved_hits(
    draws: ItemDraws,
    ability: np.ndarray,
    observed: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Number correct on each llm's unobserved items: Bernoulli draws and their expectation.

    Both ``(draws, llms)``: the draws, and the sum of ``p_i(ability)`` over the
    unobserved items under each draw.
    """
    n_s, n_l = ability.shape[:2]
    n_i = draws.n_items
    out = np.empty((n_s, n_l))
    expected = np.empty((n_s, n_l))
    chunk = max(1, _CHUNK_CELLS // max(1, n_l * n_i))
    unobs = ~observed
    unobs32 = unobs.astype(np.float32)
    for start in range(0, n_s, chunk):
        sl = slice(start, min(n_s, start + chunk))
        sub = draws.select_draws(sl)
        p = sub.prob(ability[sl], dtype=np.float32)  # (s, L, I)
        expected[sl] = (p * unobs32[None]).sum(axis=2)
        hits = rng.random(p.shape, dtype=np.float32) < p
        hits &= unobs[None]
        out[sl] = hits.sum(axis=2)
    return out, expected


@dataclass(frozen=True)
class Misfit:
    """Empirical recalibration of the IRT predictive of an llm's accuracy on its unobserved items.

    Estimated by :func:`estimate_misfit` on the llms the posterior was fitted
    on, by item-split cross-validation; no held-out llm is needed. With ``m``
    the IRT-predicted accuracy of an llm on its unobserved items (the
    posterior-predictive mean of ``mean_i p_i(ability)``) and ``t`` its
    actual accuracy there, the recalibrated predictive of ``t`` is::

        centre(m) + scale(m) * R          (clipped to [0, 1])

    where ``centre`` is the least-squares regression of ``t`` on ``m`` and
    ``scale(m)**2`` that of the squared residuals, both piecewise linear in
    ``m`` (values at ``knots``, linear in between, held constant beyond the
    training range of ``m``), and ``R`` is drawn from the EMPIRICAL
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

    def _weights(self, n_obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Neighbouring calibrated sizes and the weight of the upper one, linear in log n."""
        x = np.log(np.maximum(np.asarray(n_obs, dtype=np.float64), 1.0))
        grid = np.log(self.n_observed.astype(np.float64))
        pos = np.interp(x, grid, np.arange(len(grid), dtype=np.float64))
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, len(grid) - 1)
        return lo, hi, pos - lo

    def at(self, n_obs: np.ndarray, predicted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(centre, scale)`` of the recalibrated predictive for each llm.

        ``n_obs`` and ``predicted`` (IRT-predicted accuracy on the unobserved
        items) have one entry per llm.
        """
        predicted = np.asarray(predicted, dtype=np.float64)
        lo, hi, f = self._weights(n_obs)
        c = np.stack(
            [np.interp(predicted, k, v) for k, v in zip(self.knots, self.centre, strict=True)]
        )
        v = np.stack(
            [np.interp(predicted, k, s) for k, s in zip(self.knots, self.variance, strict=True)]
        )
        cols = np.arange(predicted.shape[-1])
        centre = (1 - f) * c[lo, cols] + f * c[hi, cols]
        var = (1 - f) * v[lo, cols] + f * v[hi, cols]
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
        """
        u = np.maximum(np.asarray(n_unobs, dtype=np.float64), 1.0)
        centre, scale = self.at(n_obs, (expected / u).mean(axis=0))
        if extra_variance is not None:
            scale = np.sqrt(scale**2 + np.maximum(np.asarray(extra_variance), 0.0))
        r = self.residual_quantile(n_obs, rng.random(hits.shape))
        new = np.clip(centre + scale * r, 0.0, 1.0) * u
        return np.where(np.asarray(n_unobs) >= MIN_CALIBRATED_UNOBSERVED, new, hits)

    def describe(self) -> str:
        """One line for result attrs and reports."""
        cells = []
        for k, n in enumerate(self.n_observed):
            q05, q95 = np.interp([0.05, 0.95], self.levels, self.quantiles[k])
            sd = np.sqrt(np.mean(self.variance[k]))
            cells.append(
                f"n={n}: centre {self.centre[k, 0]:.3f}..{self.centre[k, -1]:.3f} over IRT "
                f"predictions {self.knots[k, 0]:.3f}..{self.knots[k, -1]:.3f} (linear "
                f"slope {self.linear_slope[k]:.2f}), residual sd {sd:.3f}, standardized 5%/95% quantiles "
                f"{q05:+.2f}/{q95:+.2f}, excess llm-level sd {self.excess_sd[k]:.3f}"
            )
        return (
            f"item-split cross-validation recalibration ({self.design}, {self.n_llms} llms x "
            f"{self.n_splits} splits; empirical residual quantiles): " + "; ".join(cells)
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
            },
            coords={"n_items": self.n_observed, "level": self.levels},
            attrs={"n_llms": self.n_llms, "n_splits": self.n_splits, "design": self.design},
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
        )


def _calibrate(
    t: np.ndarray, m: np.ndarray, w: np.ndarray, q: np.ndarray, n_knots: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, float]:
    """Piecewise-linear centre and variance, standardized residual quantiles, diagnostics.

    ``t`` actual accuracy on the unobserved items, ``m`` IRT prediction,
    ``w`` its variance over draws, ``q`` the Bernoulli variance (one per case).
    """
    n_k = max(2, min(n_knots + 2, len(t) // 25))
    knots = np.unique(np.quantile(m, np.linspace(0.0, 1.0, n_k)))
    if len(knots) == 1:  # every prediction equal: a constant centre
        knots = np.array([knots[0], knots[0] + 1e-9])
    # tent basis: column j is the piecewise-linear function equal to 1 at knot j, 0 at the others
    basis = np.stack([np.interp(m, knots, e) for e in np.eye(len(knots))], axis=1)
    centre = np.linalg.lstsq(basis, t, rcond=None)[0]
    resid = t - basis @ centre
    mse = float(np.mean(resid**2))
    # residual variance as a function of m, floored so that no case gets a vanishing scale
    variance = np.maximum(np.linalg.lstsq(basis, resid**2, rcond=None)[0], 0.1 * mse)
    variance = np.maximum(variance, 1e-8)
    standardized = resid / np.sqrt(basis @ variance)
    quantiles = np.quantile(standardized, _LEVELS, method="weibull")
    # diagnostic: deviation beyond the IRT predictive variance, with the local slope of centre
    seg = np.diff(centre) / np.diff(knots)
    local = seg[np.clip(np.searchsorted(knots, m, side="right") - 1, 0, len(seg) - 1)]
    excess = float(np.mean(resid**2 - local**2 * w - q))
    mc = m - m.mean()
    linear = float(mc @ (t - t.mean()) / (mc @ mc)) if mc @ mc > 0 else 1.0
    return knots, centre, variance, quantiles, float(np.sqrt(max(excess, 0.0))), linear


def _unobserved_moments(
    draws: ItemDraws, ability: np.ndarray, unobserved: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per llm: IRT predictive of its accuracy on its unobserved items, exactly.

    Returns the mean over draws of ``E = mean_i p_i(ability)``, the variance
    of ``E`` over draws (ability and item uncertainty) and the mean Bernoulli
    variance ``sum_i p_i (1 - p_i) / U**2``.
    """
    n_s, n_l = ability.shape[:2]
    u = unobserved.astype(np.float32)
    n_u = np.maximum(unobserved.sum(axis=1), 1).astype(np.float64)
    expect = np.empty((n_s, n_l))
    bern = np.empty((n_s, n_l))
    chunk = max(1, _CHUNK_CELLS // max(1, n_l * draws.n_items))
    for start in range(0, n_s, chunk):
        sl = slice(start, min(n_s, start + chunk))
        sub = draws.select_draws(sl)
        p = sub.prob(ability[sl], dtype=np.float32)  # (s, L, I)
        expect[sl] = (p * u[None]).sum(axis=2) / n_u
        bern[sl] = (p * (1 - p) * u[None]).sum(axis=2) / n_u**2
    return expect.mean(axis=0), expect.var(axis=0), bern.mean(axis=0)


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
    grid = _scoring_grid(n_grid, draws.n_dims)
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
                m, w, q = _unobserved_moments(fold_draws, ability, unobs[ok])
                t = np.where(unobs[ok], y_rows, 0.0).sum(axis=1) / unobs[ok].sum(axis=1)
                stats[j].append(np.stack([t, m, w, q]))
    parts = []
    for (n, _), chunks in zip(plan, stats, strict=True):
        t, m, w, q = np.concatenate(chunks, axis=1)
        if len(t) < 10:
            raise UserInputError(
                f"{here}: only {len(t)} llms have both observed items and at least "
                "10 unobserved ones in the design; give more llms or a smaller subset"
            )
        parts.append((*_calibrate(t, m, w, q, n_knots), len(t)))
        logger.info(
            "misfit n=%d: IRT rmse %.4f, IRT predictive sd %.4f, calibrated residual sd %.4f (%d cases)",
            n,
            float(np.sqrt(np.mean((t - m) ** 2))),
            float(np.sqrt(np.mean(w + q))),
            float(np.sqrt(np.mean(parts[-1][2]))),
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
        n_cases=np.asarray([p[6] for p in parts], dtype=np.int64),
        n_llms=responses.n_llms,
        n_splits=n_splits,
        design=design,
    )


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


def posterior_from_truth(
    truth: Any,
    *,
    n_chains: int = 2,
    n_draws: int = 100,
    noise: float = 0.05,
    subtask: Sequence[str] | np.ndarray | None = None,
    random_seed: int | np.random.Generator | None = None,
) -> xr.Dataset:
    """A synthetic item posterior around a simulation's true item parameters.

    Draws are ``truth + Normal(0, noise)`` (discrimination on the log scale),
    with the truth's guessing floor as a constant; ``subtask`` labels the
    items (e.g. ``responses.item_subtask``). Tests and studies use it to check
    the design and scoring math independently of MCMC.
    """
    rng = np.random.default_rng(random_seed)
    n_i = len(truth.difficulty)
    shape = (n_chains, n_draws, n_i)
    b = truth.difficulty.to_numpy()[None, None, :] + noise * rng.standard_normal(shape)
    a = truth.discrimination.to_numpy()[None, None, :] * np.exp(noise * rng.standard_normal(shape))
    c = np.broadcast_to(truth.guessing.to_numpy()[None, None, :], shape)
    items = truth.difficulty.index.to_numpy()
    labels = np.asarray(
        np.full(n_i, truth.config.benchmark) if subtask is None else list(subtask), dtype=object
    )
    return xr.Dataset(
        {
            "difficulty": (("chain", "draw", "item"), b),
            "discrimination": (("chain", "draw", "item"), a),
            "guessing": (("chain", "draw", "item"), np.array(c)),
        },
        coords={
            "chain": np.arange(n_chains),
            "draw": np.arange(n_draws),
            "item": items,
            "subtask": ("item", labels),
        },
        attrs={"ability_population": "normal(0,1)"},
    )

"""Score a new llm against a saved item posterior, from its responses on any subset.

The item posterior (the ``posterior`` group of a fitted IRT model, see
:mod:`bayes_microbench.irt`) holds draws of each item's ``difficulty`` and
``discrimination`` (and ``guessing`` for a 3PL), on the scale::

    P(correct) = guessing + (1 - guessing) * logistic(discrimination * (ability - difficulty))

with the llm population ``ability ~ Normal(0, 1)`` fixed by identification.

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
tests check 80-97% for 90% intervals). On real GPQA with a 2PL posterior fitted
without the scored llms (``benchmarks/study_design_calibration.py``) they cover
as stated for random 25-item subsets but undercover for larger subsets and
for informatively chosen ones (the unobserved items' predictions assume the
IRT model's local independence, which real benchmarks violate); the point
estimates are still more accurate than the subset mean. Read the benchmark
report before relying on the intervals of a real benchmark.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from scipy.special import ndtri

from ._validate import check_positive_int, check_probability, preview
from .exceptions import UserInputError
from .responses import Responses

logger = logging.getLogger(__name__)

#: The default probability of every credible / confidence interval of this
#: package's design and scoring tools (one place; pass ``ci_prob=`` to change it).
DEFAULT_CI_PROB = 0.9
#: Default number of posterior draws used (evenly thinned across chains).
DEFAULT_MAX_DRAWS = 1000
#: Ability quadrature grid: ``N_GRID`` points evenly spaced on ``[-GRID_LIMIT, GRID_LIMIT]``.
GRID_LIMIT = 6.0
N_GRID = 161
_CHUNK_CELLS = 6_000_000  # draws x grid x items per chunk (about 48 MB of float64)


@dataclass(frozen=True)
class ItemDraws:
    """Posterior draws of the item parameters as plain arrays.

    ``discrimination``, ``difficulty`` and ``guessing`` have shape
    ``(n_chains * n_draws, n_items)``; ``chain`` and ``draw`` give the
    labels of each flattened draw.
    """

    items: np.ndarray
    subtask: np.ndarray
    discrimination: np.ndarray
    difficulty: np.ndarray
    guessing: np.ndarray
    chain: np.ndarray
    draw: np.ndarray

    @property
    def n_draws(self) -> int:
        return int(self.difficulty.shape[0])

    @property
    def n_items(self) -> int:
        return int(self.difficulty.shape[1])

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
        )

    def mean(self) -> ItemDraws:
        """A single pseudo-draw holding the posterior means (for fast point summaries)."""
        return ItemDraws(
            items=self.items,
            subtask=self.subtask,
            discrimination=self.discrimination.mean(axis=0, keepdims=True),
            difficulty=self.difficulty.mean(axis=0, keepdims=True),
            guessing=self.guessing.mean(axis=0, keepdims=True),
            chain=self.chain[:1],
            draw=self.draw[:1],
        )

    def prob(self, ability: np.ndarray, dtype: type = np.float64) -> np.ndarray:
        """P(correct) with ``ability`` of shape ``(n_draws, K)``: returns ``(n_draws, K, n_items)``."""
        a: np.ndarray = self.discrimination[:, None, :].astype(dtype)
        eta = a * (ability[:, :, None].astype(dtype) - self.difficulty[:, None, :].astype(dtype))
        c: np.ndarray = self.guessing[:, None, :].astype(dtype)
        # logistic via tanh: one transcendental per cell, stable for any eta
        return c + (1 - c) * (0.5 + 0.5 * np.tanh(0.5 * eta))


def _as_dataset(posterior: Any) -> xr.Dataset:
    if isinstance(posterior, xr.Dataset):
        return posterior
    if isinstance(posterior, xr.DataTree):
        node = posterior["posterior"] if "posterior" in posterior.children else posterior
        return node.to_dataset()
    inner = getattr(posterior, "posterior", None)
    if inner is not None:
        return _as_dataset(inner)
    raise UserInputError(
        f"expected a posterior (xarray Dataset or DataTree with a 'posterior' group), "
        f"got {type(posterior).__name__}"
    )


def read_posterior(path: str) -> xr.Dataset:
    """The ``posterior`` group of a saved IRT posterior file (validated by the IRT engine)."""
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise UserInputError(f"{p}: no such posterior file; fit one with 'bayes-microbench fit'")
    from .irt import load_posterior

    try:
        return _as_dataset(load_posterior(p).posterior)
    except ImportError:
        # the engine reads with h5netcdf, which needs h5py; without it, read the
        # same NetCDF-4 file with xarray's default engine (netCDF4)
        logger.info("h5netcdf backend unavailable; reading %s with the default engine", p)
    try:
        tree = xr.open_datatree(p)
        tree.load()
        tree.close()
    except (OSError, ValueError) as err:
        raise UserInputError(f"{p}: not a readable NetCDF posterior ({err})") from None
    if "posterior" not in tree.children:
        raise UserInputError(f"{p}: no posterior group; fit one with 'bayes-microbench fit'")
    return _as_dataset(tree)


def item_draws(
    posterior: Any,
    *,
    max_draws: int | None = DEFAULT_MAX_DRAWS,
    where: str = "posterior",
) -> ItemDraws:
    """Extract the item-parameter draws of a posterior as arrays.

    Parameters
    ----------
    posterior
        The ``posterior`` Dataset (dims ``chain``, ``draw``, ``item``) with
        ``difficulty``, ``discrimination`` (absent means 1: a 1PL) and
        optionally ``guessing`` (dims ``item`` or ``chain, draw, item``); or a
        DataTree / fitted model holding one.
    max_draws
        Keep at most this many draws, evenly thinned within each chain
        (deterministic); ``None`` keeps all.
    where
        Names the posterior in error messages.
    """
    ds = _as_dataset(posterior)
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

    b = grab("difficulty", 0.0)
    a = grab("discrimination", 1.0)
    c = grab("guessing", 0.0)
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
    return ItemDraws(items, subtask, a, b, c, chain, draw)


def ability_grid(n_grid: int = N_GRID, limit: float = GRID_LIMIT) -> np.ndarray:
    """The fixed quadrature grid over ability."""
    return np.linspace(-limit, limit, check_positive_int(n_grid, "n_grid", minimum=11))


def _log_probs(draws: ItemDraws, grid: np.ndarray, sl: slice) -> tuple[np.ndarray, np.ndarray]:
    """log P(correct) and log P(wrong) on the grid for draws ``sl``: (s, G, I) each, float32."""
    a = draws.discrimination[sl, None, :].astype(np.float32)
    eta = a * (grid.astype(np.float32)[None, :, None] - draws.difficulty[sl, None, :])
    eta = eta.astype(np.float32, copy=False)
    c = draws.guessing[sl, None, :].astype(np.float32)
    # log logistic(eta) = min(eta, 0) - log1p(exp(-|eta|)): one exp and one log1p per cell
    log_sig = np.minimum(eta, 0) - np.log1p(np.exp(-np.abs(eta)))
    log_sig_neg = log_sig - eta  # log logistic(-eta)
    if not np.any(c):
        return log_sig, log_sig_neg
    # log(1 - p) = log(1 - c) + log logistic(-eta) keeps precision where p is near 1
    log_wrong = np.log1p(-np.minimum(c, np.float32(1 - 1e-6))) + log_sig_neg
    log_right = np.log(c + (1 - c) * np.exp(log_sig))
    return log_right, log_wrong


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
        Ability grid (default :func:`ability_grid`).
    random_seed
        Seed for the draws inside the grid posterior.

    Returns
    -------
    ability : ndarray, shape (n_draws, n_llms)
    posterior_mean : ndarray, shape (n_draws, n_llms)
        The conditional posterior mean of ability under each draw.
    """
    rng = np.random.default_rng(random_seed)
    grid = ability_grid() if grid is None else np.asarray(grid, dtype=np.float64)
    y = np.asarray(correct, dtype=np.float64)
    if y.ndim != 2 or y.shape[1] != draws.n_items:
        raise ValueError("correct must be (n_llms, n_items) matching the item draws")
    observed = ~np.isnan(y)
    y_right = np.where(observed, y, 0.0)
    y_wrong = observed.astype(np.float64) - y_right
    y_right32 = y_right.astype(np.float32)  # (L, I)
    y_wrong32 = y_wrong.astype(np.float32)
    n_items = draws.n_items
    n_s, n_l, n_g = draws.n_draws, y.shape[0], len(grid)
    log_prior = (-0.5 * grid**2).astype(np.float32)
    step = grid[1] - grid[0]
    uniforms = rng.random((n_l, n_s), dtype=np.float32)
    jitter = rng.random((n_s, n_l)) - 0.5
    out = np.empty((n_s, n_l))
    post_mean = np.empty((n_s, n_l))
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
        post_mean[sl] = (w @ grid.astype(np.float32)).T
        cdf = np.cumsum(w, axis=2, out=w)
        idx = np.minimum((cdf < uniforms[:, sl, None]).sum(axis=2), n_g - 1)  # (L, s)
        out[sl] = grid[idx.T] + step * jitter[sl]
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
    n_grid: int = N_GRID,
    random_seed: int | np.random.Generator | None = 0,
    draws: ItemDraws | None = None,
) -> xr.Dataset:
    """Posterior of each llm's ability and full-benchmark accuracy from its responses.

    Parameters
    ----------
    posterior
        An item posterior (see :func:`item_draws`); ignored when ``draws`` is given.
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
        Points of the ability grid on ``[-6, 6]``.
    random_seed
        Seed; the same seed gives identical results.
    draws
        Precomputed :class:`ItemDraws` (skips extraction).

    Returns
    -------
    xarray.Dataset
        ``ability`` and ``accuracy`` (chain, draw, llm): posterior draws;
        ``accuracy_mean``, ``ability_mean`` (llm); ``accuracy_interval``
        (llm, ci_bound); ``binomial_interval`` (llm, ci_bound): the Wilson
        interval of the subset accuracy; ``n_observed``, ``n_correct``,
        ``observed_accuracy`` (llm). Attrs ``ci_prob``, ``n_benchmark_items``.

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
    if draws is None:
        draws = item_draws(posterior, max_draws=max_draws)
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
        grid=ability_grid(n_grid),
        random_seed=rng,
    )
    correct_obs = np.nansum(y, axis=1)
    n_obs = observed.sum(axis=1)
    accuracy = _predictive_accuracy(draws, ability, observed, correct_obs, rng)

    n_chain = len(np.unique(draws.chain))
    shape = (n_chain, draws.n_draws // n_chain, responses.n_llms)
    chain_lab = draws.chain.reshape(shape[:2])[:, 0]
    draw_lab = draws.draw.reshape(shape[:2])[0]
    coords = {
        "chain": chain_lab,
        "draw": draw_lab,
        "llm": responses.llms,
        "ci_bound": ["lower", "upper"],
    }
    interval_attrs = {"ci_kind": "eti", "ci_prob": ci}
    with np.errstate(invalid="ignore", divide="ignore"):
        obs_acc = np.where(n_obs > 0, correct_obs / np.maximum(n_obs, 1), np.nan)
    ds = xr.Dataset(
        {
            "ability": (("chain", "draw", "llm"), ability.reshape(shape)),
            "accuracy": (("chain", "draw", "llm"), accuracy.reshape(shape)),
            "ability_mean": ("llm", ability.mean(axis=0)),
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
        attrs={"ci_prob": ci, "n_benchmark_items": n_bench, "n_posterior_draws": draws.n_draws},
    )
    return ds


def _predictive_accuracy(
    draws: ItemDraws,
    ability: np.ndarray,
    observed: np.ndarray,
    correct_obs: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """(observed correct + Bernoulli draws on unobserved items) / N, per draw and llm."""
    n_s, n_l = ability.shape
    n_i = draws.n_items
    out = np.empty((n_s, n_l))
    chunk = max(1, _CHUNK_CELLS // max(1, n_l * n_i))
    unobs = ~observed
    for start in range(0, n_s, chunk):
        sl = slice(start, min(n_s, start + chunk))
        sub = ItemDraws(
            draws.items,
            draws.subtask,
            draws.discrimination[sl],
            draws.difficulty[sl],
            draws.guessing[sl],
            draws.chain[sl],
            draws.draw[sl],
        )
        p = sub.prob(ability[sl], dtype=np.float32)  # (s, L, I)
        hits = rng.random(p.shape, dtype=np.float32) < p
        hits &= unobs[None]
        out[sl] = hits.sum(axis=2)
    return (out + correct_obs[None, :]) / n_i


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

"""The ability posterior of new llms against item draws: one ability draw per item draw.

For each posterior draw of the item parameters, an llm's ability posterior given
its responses (prior ``Normal(0, 1)``, or ``Normal(0, I_D)`` for a ``2pl-md``
posterior) on a fixed quadrature grid (a product grid up to :data:`MAX_GRID_DIMS`
dims), or by importance sampling above; one ability is drawn from it. The item
parameters are not updated by the new llm (scoring against a calibrated item
bank); their uncertainty enters through the mixture over draws. Vectorized over
draws, grid points and llms, chunked over draws. Used by ``scoring``, ``misfit``,
``population``, ``adaptive`` and the Bayesian selectors
(docs/decisions/0022-posterior-layer-and-response-model.md).
"""

from __future__ import annotations

import logging

import numpy as np
from scipy.special import ndtri

from . import response_model
from ._validate import check_positive_int
from .posterior import ItemDraws

logger = logging.getLogger(__name__)

#: Ability quadrature grid: ``N_GRID`` points evenly spaced on ``[-GRID_LIMIT, GRID_LIMIT]``.
GRID_LIMIT = 6.0
N_GRID = 161
#: Points per dimension of the product grid that scores a ``2pl-md`` posterior
#: (``N_GRID_MD ** D`` points on ``[-GRID_LIMIT, GRID_LIMIT] ** D``). Why 61:
#: docs/decisions/0024-md-scoring-grid-and-sobol-points.md.
N_GRID_MD = 61
#: Ability dimensions up to which scoring integrates on a product grid (it grows
#: as ``N_GRID_MD ** D``); a ``2pl-md`` posterior with more is scored by
#: importance sampling (:func:`_importance_samples`).
MAX_GRID_DIMS = 2
#: Proposal points per llm of the importance sampler (``2pl-md``, ``D`` > 2; a
#: power of 2: each llm's points are a block of one scrambled Sobol sequence). Why
#: 256: docs/decisions/0024-md-scoring-grid-and-sobol-points.md.
N_IS_POINTS = 256
#: The importance sampler's proposal: a multivariate t with this many degrees of
#: freedom around each llm's posterior mode (under the posterior-mean item
#: parameters), its scale the Laplace covariance's times ``IS_INFLATE``, so that the
#: conditional posteriors of every item draw sit well inside it.
IS_DF = 5.0
IS_INFLATE = 1.5
#: Draws x grid x items per chunk of the vectorized loops (about 48 MB of float64);
#: ``scoring`` and ``misfit`` chunk their P(correct) arrays by it too.
CHUNK_CELLS = 6_000_000


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
    chunk = max(1, CHUNK_CELLS // max(1, n_g * max(n_items, n_l)))
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


def scoring_grid(n_grid: int | None, dims: int) -> np.ndarray | None:
    """The ability grid scoring uses (:func:`ability_grid`), or None above :data:`MAX_GRID_DIMS` dims.

    ``n_grid``: points per dim (default by dims); ``dims``: the posterior's ability dims.
    None selects importance sampling in :func:`ability_posterior_samples`.
    """
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
    chunk = max(1, CHUNK_CELLS // max(1, n_l * n_k * n_max))
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

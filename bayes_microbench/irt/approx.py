"""Fast posterior approximations in the unconstrained space: Laplace and Pathfinder.

Both work on the model's log density (with Jacobians) over the raveled
unconstrained parameters, and return draws of the free variables on their
constrained scale (leading dims chain=1, draw).

``laplace``
    Gaussian at the mode: L-BFGS to the mode, dense Hessian by central
    differences of the gradient, draws from ``N(mode, H^-1)``. Cost grows as
    the square of the number of parameters; refused above ``max_dim``.
``pathfinder``
    Single-path Pathfinder (Zhang, Carpenter, Gelman and Vehtari, JMLR 2022):
    along the L-BFGS path to the mode, each iterate defines a Gaussian with the
    L-BFGS inverse-Hessian estimate (compact form, scalar initial matrix) as
    covariance (compact form over the last ``history`` pairs, on top of a
    diagonal initial matrix updated along the whole path); the one with the
    highest Monte Carlo ELBO is kept.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..exceptions import ConfigurationError

logger = logging.getLogger(__name__)


class _Density:
    """Negative log density and gradient over the raveled unconstrained vector."""

    def __init__(self, model: Any, random_seed: int) -> None:
        from pymc.blocking import DictToArrayBijection

        value_vars = model.continuous_value_vars
        if len(value_vars) != len(model.value_vars):
            raise ConfigurationError("approximations need a model with continuous variables only")
        point = model.initial_point(random_seed=random_seed)
        self.start = {v.name: np.asarray(point[v.name]) for v in value_vars}
        raveled = DictToArrayBijection.map(self.start)
        self.x0 = np.asarray(raveled.data, dtype=np.float64)
        self.info = raveled.point_map_info
        self.dtype = model.logp().dtype
        self._fn = model.logp_dlogp_function(ravel_inputs=True, initial_point=point)
        outs = [rv for rv in model.free_RVs]
        self.names = [rv.name for rv in outs]
        self._constrain = model.compile_fn(
            model.replace_rvs_by_values(outs),
            inputs=value_vars,
            on_unused_input="ignore",
            point_fn=False,
        )
        self.n_evals = 0

    @property
    def dim(self) -> int:
        return int(self.x0.size)

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        self.n_evals += 1
        lp, grad = self._fn(np.asarray(x, dtype=self.dtype))
        lp = float(lp)
        if not np.isfinite(lp):
            return np.inf, np.zeros_like(x)
        return -lp, -np.asarray(grad, dtype=np.float64)

    def logp(self, x: np.ndarray) -> float:
        value, _ = self(x)
        return -value

    def constrained(self, xs: np.ndarray) -> dict[str, np.ndarray]:
        """Map rows of unconstrained vectors to the free variables (leading dims 1, n)."""
        per: dict[str, list[np.ndarray]] = {n: [] for n in self.names}
        for x in xs:
            args = []
            last = 0
            for _name, shape, size, _dtype in self.info:
                args.append(np.asarray(x[last : last + size], dtype=self.dtype).reshape(shape))
                last += size
            for name, val in zip(self.names, self._constrain(*args), strict=True):
                per[name].append(np.asarray(val))
        return {n: np.stack(v)[None, ...] for n, v in per.items()}


def _lbfgs(density: _Density, x0: np.ndarray, maxiter: int) -> tuple[list[np.ndarray], Any]:
    from scipy.optimize import minimize

    path = [x0.copy()]
    res = minimize(
        density,
        x0,
        jac=True,
        method="L-BFGS-B",
        callback=lambda intermediate_result: path.append(np.array(intermediate_result.x)),
        options={"maxiter": maxiter, "maxcor": 6, "gtol": 1e-6},
    )
    return path, res


def laplace(
    model: Any, *, draws: int, random_seed: int, max_dim: int = 6000, maxiter: int = 5000
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Laplace approximation at the mode of the unconstrained posterior."""
    density = _Density(model, random_seed)
    if density.dim > max_dim:
        raise ConfigurationError(
            f"method 'laplace' builds a dense {density.dim} x {density.dim} Hessian; above "
            f"{max_dim} parameters use method='advi' or 'pathfinder'"
        )
    _, res = _lbfgs(density, density.x0, maxiter)
    mode = np.asarray(res.x)
    d = density.dim
    hess = np.empty((d, d))
    for k in range(d):
        h = 1e-4 * max(1.0, abs(mode[k]))
        step = np.zeros(d)
        step[k] = h
        hess[:, k] = (density(mode + step)[1] - density(mode - step)[1]) / (2 * h)
    hess = 0.5 * (hess + hess.T)
    eigval, eigvec = np.linalg.eigh(hess)
    n_bad = int(np.sum(eigval <= 0.0))
    if n_bad:
        raise ConfigurationError(
            f"laplace: the Hessian at the mode has {n_bad} non-positive eigenvalue(s) (the mode is "
            "not a proper maximum, e.g. a collapsing hierarchical scale); use method='advi' or 'nuts'"
        )
    rng = np.random.default_rng(random_seed)
    z = rng.standard_normal((draws, d))
    xs = mode + (z / np.sqrt(eigval)) @ eigvec.T
    info = {
        "optimizer_converged": bool(res.success),
        "optimizer_iterations": int(res.nit),
        "n_params": d,
        "min_hessian_eigenvalue": float(eigval[0]),
        "logp_evaluations": density.n_evals,
    }
    return density.constrained(xs), info


def _diag_update(alpha: np.ndarray, s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Diagonal inverse-Hessian update along one (s, y) pair (Pathfinder's ``form_diag``)."""
    a = float(y @ (alpha * y))
    b = float(y @ s)
    c = float(s @ (s / alpha))
    inv = a / (b * alpha) + y**2 / b - a * s**2 / (b * c * alpha**2)
    new = 1.0 / inv
    ok = np.isfinite(new) & (new > 0)
    return np.where(ok, new, alpha)


def _lbfgs_gaussian(
    x: np.ndarray, g: np.ndarray, alpha: np.ndarray, s_hist: np.ndarray, y_hist: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Mean and factors of the L-BFGS inverse-Hessian Gaussian at ``x`` (or None).

    Covariance ``diag(alpha) + W M W'`` (the compact L-BFGS form with a
    diagonal initial matrix), factored through a thin QR so that sampling and
    its log density cost O(D m).
    """
    m = s_hist.shape[1]
    sy = s_hist.T @ y_hist
    r = np.triu(sy)
    try:
        r_inv = np.linalg.solve(r, np.eye(m))
    except np.linalg.LinAlgError:
        return None
    dg = np.diag(np.diag(sy))
    ay = alpha[:, None] * y_hist
    top_left = r_inv.T @ (dg + y_hist.T @ ay) @ r_inv
    mid = np.block([[top_left, -r_inv.T], [-r_inv, np.zeros((m, m))]])
    w = np.hstack([s_hist, ay])
    hg = alpha * g + w @ (mid @ (w.T @ g))
    mean = x - hg
    sqrt_a = np.sqrt(alpha)
    q, rw = np.linalg.qr(w / sqrt_a[:, None])
    core = np.eye(2 * m) + rw @ mid @ rw.T
    core = 0.5 * (core + core.T)
    try:
        chol = np.linalg.cholesky(core)
    except np.linalg.LinAlgError:
        return None
    return mean, sqrt_a, q, chol


def _sample_gaussian(
    rng: np.random.Generator,
    n: int,
    mean: np.ndarray,
    sqrt_a: np.ndarray,
    q: np.ndarray,
    chol: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    d = mean.size
    u = rng.standard_normal((n, d))
    u_par = u @ q
    u_perp = u - u_par @ q.T
    xs = mean + sqrt_a * (u_par @ chol.T @ q.T + u_perp)
    log_det = float(np.sum(np.log(sqrt_a))) + float(np.sum(np.log(np.abs(np.diag(chol)))))
    log_q = -0.5 * np.sum(u**2, axis=1) - 0.5 * d * np.log(2 * np.pi) - log_det
    return xs, log_q


def pathfinder(
    model: Any,
    *,
    draws: int,
    random_seed: int,
    history: int = 6,
    maxiter: int = 1000,
    elbo_draws: int = 20,
    max_candidates: int = 40,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Single-path Pathfinder (see the module docstring)."""
    density = _Density(model, random_seed)
    rng = np.random.default_rng(random_seed)
    path, res = _lbfgs(density, density.x0, maxiter)
    xs = np.array(path)
    grads = np.array([density(x)[1] for x in xs])
    candidates = np.arange(1, len(xs))
    if len(candidates) > max_candidates:
        candidates = np.unique(np.linspace(1, len(xs) - 1, max_candidates).round().astype(int))
    # diagonal of the initial inverse Hessian, updated along the whole path
    alphas = [np.ones(density.dim)]
    for j in range(1, len(xs)):
        s_k, y_k = xs[j] - xs[j - 1], grads[j] - grads[j - 1]
        ok = s_k @ y_k > 1e-12 * (y_k @ y_k)
        alphas.append(_diag_update(alphas[-1], s_k, y_k) if ok else alphas[-1])
    best: tuple[float, Any] | None = None
    for k in candidates:
        s_all = np.diff(xs[: k + 1], axis=0)
        y_all = np.diff(grads[: k + 1], axis=0)
        keep = np.einsum("ij,ij->i", s_all, y_all) > 1e-12 * np.einsum("ij,ij->i", y_all, y_all)
        s_all, y_all = s_all[keep][-history:], y_all[keep][-history:]
        if len(s_all) == 0:
            continue
        gauss = _lbfgs_gaussian(xs[k], grads[k], alphas[k], s_all.T, y_all.T)
        if gauss is None:
            continue
        sample, log_q = _sample_gaussian(rng, elbo_draws, *gauss)
        log_p = np.array([density.logp(x) for x in sample])
        elbo = float(np.mean(log_p - log_q)) if np.all(np.isfinite(log_p)) else -np.inf
        if best is None or elbo > best[0]:
            best = (elbo, (k, gauss))
    if best is None or not np.isfinite(best[0]):
        raise ConfigurationError(
            "pathfinder found no usable Gaussian along the optimization path; use method='advi'"
        )
    elbo, (k, gauss) = best
    sample, _ = _sample_gaussian(rng, draws, *gauss)
    info = {
        "elbo": elbo,
        "chosen_iteration": int(k),
        "path_length": len(xs),
        "optimizer_converged": bool(res.success),
        "logp_evaluations": density.n_evals,
    }
    return density.constrained(sample), info

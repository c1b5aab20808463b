"""Fast posterior approximations in the unconstrained space: ADVI, Laplace and Pathfinder.

All work on the model's log density (with Jacobians) over the raveled
unconstrained parameters, and return draws of the free variables on their
constrained scale (leading dims chain=1, draw).

``advi``
    Mean-field ADVI (PyMC's ``pm.fit``) with Adam, started at the model's
    data-driven initial point with a small standard deviation, a
    reduce-on-plateau step size (halved whenever the windowed loss stops
    improving by more than its noise or by more than :data:`ADVI_TOLERANCE`
    nats per parameter, :data:`ADVI_HALVINGS` times) and
    Polyak averaging of the variational parameters over a last window. It
    stops when that schedule completes (``converged=True``) or at
    ``max_iterations`` (``converged=False``, warned). Large models run on the
    JAX back end, whose fused likelihood is about twice as fast per iteration
    as the C back end on a dense 450 x 12000 matrix.

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

from ..exceptions import ConfigurationError, ConvergenceWarning

logger = logging.getLogger(__name__)

#: Adam's initial step size in ADVI.
ADVI_LEARNING_RATE = 0.02
#: Initial standard deviation of every mean-field factor (unconstrained scale).
ADVI_START_SIGMA = 0.1
#: Iterations per loss window (plateau test, final averaging).
ADVI_WINDOW = 50
#: A window that improves the loss by less than this many nats per parameter is a plateau
#: (as is one that improves it by less than twice its Monte Carlo standard error).
ADVI_TOLERANCE = 0.01
#: Step-size halvings before the final averaging window.
ADVI_HALVINGS = 3
#: ADVI runs on the JAX back end from this many unconstrained parameters (float32 models).
ADVI_JAX_MIN_DIM = 2000


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
        self.last: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def dim(self) -> int:
        return int(self.x0.size)

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        self.n_evals += 1
        lp, grad = self._fn(np.asarray(x, dtype=self.dtype))
        lp = float(lp)
        if not np.isfinite(lp):
            out = (np.inf, np.zeros_like(x))
        else:
            out = (-lp, -np.asarray(grad, dtype=np.float64))
        self.last = (np.array(x, dtype=np.float64), out[1])
        return out

    def gradient(self, x: np.ndarray) -> np.ndarray:
        """Gradient of the negative log density at ``x`` (reusing the last evaluation)."""
        if self.last is not None and np.array_equal(self.last[0], x):
            return self.last[1]
        return self(x)[1]

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


def _lbfgs(
    density: _Density, x0: np.ndarray, maxiter: int
) -> tuple[list[np.ndarray], list[np.ndarray], Any]:
    """L-BFGS to the mode; the iterates and their gradients (reused, not recomputed)."""
    from scipy.optimize import minimize

    path = [x0.copy()]
    grads = [density.gradient(x0)]

    def record(intermediate_result: Any) -> None:
        x = np.array(intermediate_result.x)
        path.append(x)
        grads.append(density.gradient(x))

    res = minimize(
        density,
        x0,
        jac=True,
        method="L-BFGS-B",
        callback=record,
        options={"maxiter": maxiter, "maxcor": 6, "gtol": 1e-6},
    )
    return path, grads, res


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
    _, _, res = _lbfgs(density, density.x0, maxiter)
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
        "converged": bool(res.success),
        "optimizer_message": str(res.message),
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
    path, path_grads, res = _lbfgs(density, density.x0, maxiter)
    xs = np.array(path)
    grads = np.array(path_grads)
    candidates = np.arange(1, len(xs))
    if len(candidates) > max_candidates:
        candidates = np.unique(np.linspace(1, len(xs) - 1, max_candidates).round().astype(int))
    # the compact form needs 2 * pairs <= dimension (a thin QR of the D x 2m factor)
    n_pairs = max(1, min(history, density.dim // 2))
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
        s_all, y_all = s_all[keep][-n_pairs:], y_all[keep][-n_pairs:]
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
        "converged": bool(res.success),
        "optimizer_message": str(res.message),
        "logp_evaluations": density.n_evals,
    }
    return density.constrained(sample), info


class _PlateauSchedule:
    """ADVI callback: halve the step size at each loss plateau, then average the iterates.

    Every ``window`` iterations the mean loss of the last window is compared
    with the previous one; an improvement smaller than twice its standard
    error, or than ``tolerance`` (nats), is a plateau. After ``halvings`` halvings, the variational
    parameters are averaged over one more window and the fit stops.
    """

    def __init__(
        self, learning_rate: Any, window: int, halvings: int, tolerance: float = 0.0
    ) -> None:
        self.learning_rate = learning_rate
        self.tolerance = tolerance
        self.window = window
        self.halvings = halvings
        self.n_halved = 0
        self.previous: tuple[float, float] | None = None
        self.averaging = False
        self.sums: list[np.ndarray] | None = None
        self.n_averaged = 0
        self.converged = False
        self.plateaus: list[int] = []

    def __call__(self, approx: Any, losses: np.ndarray, i: int) -> None:
        if self.averaging:
            values = [np.asarray(p.get_value(), dtype=np.float64) for p in approx.params]
            if self.sums is None:
                self.sums = values
            else:
                self.sums = [a + b for a, b in zip(self.sums, values, strict=True)]
            self.n_averaged += 1
            if self.n_averaged >= self.window:
                self.converged = True
                raise StopIteration(f"ADVI converged at iteration {i}")
            return
        if i % self.window or len(losses) < self.window:
            return
        last = np.asarray(losses[-self.window :], dtype=np.float64)
        last = last[np.isfinite(last)]
        if last.size < 2:
            return
        current = (float(last.mean()), float(last.var(ddof=1)) / last.size)
        if self.previous is not None:
            gain = self.previous[0] - current[0]
            if gain < max(2.0 * np.sqrt(self.previous[1] + current[1]), self.tolerance):
                self.plateaus.append(i)
                if self.n_halved >= self.halvings:
                    self.averaging = True
                else:
                    self.n_halved += 1
                    lr = self.learning_rate
                    lr.set_value(np.asarray(lr.get_value() / 2, dtype=lr.dtype))
        self.previous = current

    def finish(self, approx: Any) -> None:
        """Set the variational parameters to their average over the last window."""
        if self.sums is None or self.n_averaged == 0:
            return
        for p, total in zip(approx.params, self.sums, strict=True):
            p.set_value(np.asarray(total / self.n_averaged, dtype=p.dtype))


def _adam(learning_rate: Any) -> Any:
    """Adam whose step size is a shared variable, updates cast to each parameter's dtype."""
    import pymc as pm
    import pytensor.tensor as pt

    def optimizer(grads: Any, params: Any) -> dict[Any, Any]:
        updates = pm.adam(grads, params, learning_rate=learning_rate)
        return {var: pt.cast(new, var.dtype) for var, new in updates.items()}

    return optimizer


def advi(
    model: Any,
    *,
    draws: int,
    random_seed: int,
    max_iterations: int = 30000,
    progressbar: bool = False,
    learning_rate: float = ADVI_LEARNING_RATE,
    start_sigma: float = ADVI_START_SIGMA,
    window: int = ADVI_WINDOW,
    halvings: int = ADVI_HALVINGS,
    tolerance: float = ADVI_TOLERANCE,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Mean-field ADVI with a plateau schedule (see the module docstring).

    Parameters
    ----------
    model
        The :class:`pymc.Model` (continuous free variables only).
    draws
        Number of draws from the fitted approximation.
    random_seed
        Seed of the optimization and of the draws.
    max_iterations
        Iteration cap; reaching it before the schedule completes returns the
        current approximation with ``converged=False`` and a
        :class:`~bayes_microbench.exceptions.ConvergenceWarning`.
    progressbar
        Show PyMC's progress bar.
    learning_rate, start_sigma, window, halvings, tolerance
        Adam's initial step size, the initial standard deviation of every
        factor, the iterations per loss window, the number of step-size
        halvings before the final averaging window, and the plateau threshold
        in nats per unconstrained parameter and window.

    Returns
    -------
    draws, info
        Draws of the free variables (leading dims ``1, draws``) and a dict
        with ``iterations``, ``converged``, ``final_loss``, ``backend`` and the
        iterations at which plateaus were detected.
    """
    import warnings

    import pymc as pm
    import pytensor

    point = model.initial_point(random_seed=random_seed)
    dim = int(sum(np.asarray(point[v.name]).size for v in model.value_vars))
    # the parameters' precision (the log density may upcast a few scalar terms)
    dtype = str(np.result_type(*[np.asarray(point[v.name]).dtype for v in model.value_vars]))
    backend = "jax" if dim >= ADVI_JAX_MIN_DIM and dtype == "float32" else "c"
    lr = pytensor.shared(np.asarray(learning_rate, dtype=dtype), name="advi_learning_rate")
    schedule = _PlateauSchedule(lr, window, halvings, tolerance=tolerance * dim)
    sigma = {v.name: np.full(np.size(point[v.name]), start_sigma) for v in model.value_vars}
    with model, warnings.catch_warnings():
        # float32 on JAX: int64 / float64 constants are cast to 32 bits
        warnings.filterwarnings("ignore", message="Explicitly requested dtype")
        approx = pm.fit(
            n=max_iterations,
            method="advi",
            random_seed=random_seed,
            progressbar=progressbar,
            backend=backend,
            start_sigma=sigma,
            obj_optimizer=_adam(lr),
            callbacks=[schedule],
        )
        schedule.finish(approx)
        tree = approx.sample(draws, random_seed=random_seed + 1)
    hist = np.asarray(approx.hist)
    info: dict[str, Any] = {
        "iterations": len(hist),
        "converged": bool(schedule.converged),
        "final_loss": float(np.mean(hist[-window:])) if len(hist) else float("nan"),
        "backend": backend,
        "plateaus_at": ",".join(str(k) for k in schedule.plateaus),
    }
    if not schedule.converged:
        msg = (
            f"ADVI stopped at max_iterations={max_iterations} before its loss settled "
            f"({schedule.n_halved} of {halvings} step-size halvings); the approximation may "
            "be off: raise advi_iterations or use method='nuts'"
        )
        logger.warning(msg)
        warnings.warn(msg, ConvergenceWarning, stacklevel=3)
    post = tree["posterior"]
    out = {rv.name: np.asarray(post[rv.name].values) for rv in model.free_RVs}
    return out, info

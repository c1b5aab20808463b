"""Convergence summary of a fit: R-hat, bulk and tail ESS, divergences, BFMI."""

from __future__ import annotations

import logging
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..exceptions import ConvergenceWarning

logger = logging.getLogger(__name__)

#: Thresholds a converged NUTS fit must meet.
MAX_RHAT = 1.01
MIN_ESS_BULK = 400.0
MIN_ESS_TAIL = 400.0
MIN_BFMI = 0.3
#: Draws per chain a default NUTS fit may grow to when it misses only R-hat or ESS.
DRAWS_BUDGET = 4000
#: Above this R-hat the chains sit in different places: more draws will not mix them.
MAX_EXTENDABLE_RHAT = 1.05

#: Saved parameters the diagnostics cover.
CHECKED = (
    "ability",
    "difficulty",
    "discrimination",
    "intercept",
    "guessing",
    "intercept_mean",
    "intercept_sd",
    "disc_mean",
    "disc_sd",
    "log_disc_mean",
    "log_disc_sd",
    "loading_sd",
)


@dataclass(frozen=True)
class ConvergenceSummary:
    """Worst-case diagnostics over every checked parameter of a NUTS fit."""

    max_rhat: float
    min_ess_bulk: float
    min_ess_tail: float
    divergences: int
    min_bfmi: float
    mean_tree_size: float
    worst_rhat: str
    worst_ess_bulk: str
    n_draws: int
    n_chains: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out

    def reason(self) -> str:
        """One line naming every failed threshold (empty when converged)."""
        return "; ".join(self.problems)


def _worst(ds: Any, reducer: str) -> tuple[float, str]:
    best_val = np.inf if reducer == "min" else -np.inf
    best_name = ""
    for name, da in ds.data_vars.items():
        values = np.asarray(da.values, dtype=np.float64)
        if values.size == 0:
            continue
        finite = np.where(np.isfinite(values), values, np.inf if reducer == "min" else -np.inf)
        idx = int(np.argmin(finite) if reducer == "min" else np.argmax(finite))
        val = float(finite.reshape(-1)[idx])
        if (reducer == "min" and val < best_val) or (reducer == "max" and val > best_val):
            best_val = val
            label = name
            if da.ndim:
                # name every coordinate of the worst element (2-D for the 2pl-md loadings)
                pos = np.unravel_index(idx, values.shape)
                parts = [
                    str(da[dim].values[k]) if dim in da.coords else str(k)
                    for dim, k in zip(da.dims, pos, strict=True)
                ]
                label = f"{name}[{', '.join(parts)}]"
            best_name = label
    return best_val, best_name


# ---------------------------------------------------------------- rank diagnostics
#
# Rank-normalized split R-hat and bulk / tail ESS (Vehtari, Gelman, Simpson,
# Carpenter and Buerkner 2021) for many parameters at once. The definitions are
# ArviZ's (``azstats.rhat()``, ``azstats.ess(method="bulk" | "tail")``, tested
# equal to them), computed on a (parameter, chain, draw) array in a few numpy
# passes instead of one Python call per parameter, with ranks in numpy
# (:func:`_average_ranks`) rather than ``scipy.stats.rankdata``. Why: every fit's
# summary several times faster (measured: "Measurements" in
# docs/decisions/0006-default-fit-draws-and-checked-parameters.md).


def _split_chains(x: np.ndarray) -> np.ndarray:
    """(p, chain, draw) -> (p, 2 chain, draw // 2): first halves, then last halves."""
    half = x.shape[2] // 2
    return np.concatenate([x[:, :, :half], x[:, :, x.shape[2] - half :]], axis=1)


def _average_ranks(flat: np.ndarray) -> np.ndarray:
    """1-based ranks along axis 1, ties sharing their average rank.

    What ``scipy.stats.rankdata(method="average", axis=1)`` returns, without
    importing ``scipy.stats`` (about 1 s, which every NUTS fit would otherwise
    spend once on its summary). Rows without ties (nearly every parameter of a
    continuous posterior) take the plain inverse permutation.
    """
    rows, n = flat.shape
    order = np.argsort(flat, axis=1)
    ordered = np.take_along_axis(flat, order, axis=1)
    starts = np.ones(flat.shape, dtype=bool)  # first position of a run of equal values
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    rank_of_position = np.broadcast_to(np.arange(1.0, n + 1.0), flat.shape).copy()
    tied = ~starts.all(axis=1)
    if tied.any():
        st = starts[tied]
        ends = np.ones(st.shape, dtype=bool)  # last position of a run
        ends[:, :-1] = st[:, 1:]
        pos = np.broadcast_to(np.arange(n), st.shape)
        first = np.maximum.accumulate(np.where(st, pos, 0), axis=1)
        last = np.minimum.accumulate(np.where(ends, pos, n - 1)[:, ::-1], axis=1)[:, ::-1]
        rank_of_position[tied] = (first + last) / 2.0 + 1.0
    ranks = np.empty(flat.shape, dtype=np.float64)
    ranks[np.arange(rows)[:, None], order] = rank_of_position
    return ranks


def _z_scale(x: np.ndarray) -> np.ndarray:
    """Normal scores of each parameter's average ranks over all its draws (Blom's offset)."""
    from scipy import special

    flat = x.reshape(x.shape[0], -1)
    ranks = _average_ranks(flat)
    return special.ndtri((ranks - 0.375) / (flat.shape[1] + 0.25)).reshape(x.shape)


def _rhat(x: np.ndarray) -> np.ndarray:
    """Potential scale reduction of each parameter of a (p, chain, draw) array."""
    n = x.shape[2]
    between = n * np.var(x.mean(axis=2), axis=1, ddof=1)
    within = np.mean(np.var(x, axis=2, ddof=1), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt((between / within + n - 1) / n)


def _ess(x: np.ndarray) -> np.ndarray:
    """Effective sample size of each parameter of a (p, chain, draw) array.

    Autocorrelations pooled over chains, truncated by Geyer's initial positive
    sequence and made monotone (initial monotone sequence), as in ArviZ.
    """
    from scipy.fft import irfft, next_fast_len, rfft

    x = np.asarray(x, dtype=np.float64)
    p, m, n = x.shape
    size = m * n
    centred = x - x.mean(axis=2, keepdims=True)
    nfft = next_fast_len(2 * n)
    spec = rfft(centred, n=nfft, axis=2)
    acov = irfft(spec * np.conjugate(spec), n=nfft, axis=2)[:, :, :n] / n
    mean_var = acov[:, :, 0].mean(axis=1) * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if m > 1:
        var_plus = var_plus + np.var(x.mean(axis=2), axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (mean_var[:, None] - acov.mean(axis=1)) / var_plus[:, None]
    rho[:, 0] = 1.0
    # pair sums P_k = rho[2k] + rho[2k + 1], k = 0..kmax; the sequence stops at the
    # first P_k <= 0 (k_stop), or at kmax
    kmax = (n - 3) // 2
    ess = np.full(p, np.nan)
    if kmax < 0:
        k_stop = np.zeros(p, dtype=np.int64)
        pairs = np.ones((p, 1))
    else:
        pairs = rho[:, 0 : 2 * kmax + 1 : 2] + rho[:, 1 : 2 * kmax + 2 : 2]
        nonpos = pairs <= 0
        k_stop = np.where(nonpos.any(axis=1), np.argmax(nonpos, axis=1), kmax)
    rows = np.arange(p)
    monotone = np.minimum.accumulate(pairs, axis=1)
    before = np.arange(pairs.shape[1])[None, :] < k_stop[:, None]
    body = np.where(before, monotone, 0.0).sum(axis=1)
    last = rho[rows, 2 * k_stop]
    kept = (pairs[rows, np.minimum(k_stop, pairs.shape[1] - 1)] >= 0) | (last > 0)
    last = np.where(k_stop == 0, 1.0, np.where(kept, last, 0.0))
    tau = np.maximum(-1.0 + 2.0 * body + last, 1.0 / np.log10(size))
    ok = np.isfinite(rho).all(axis=1)
    ess[ok] = size / tau[ok]
    constant = (x.max(axis=(1, 2)) - x.min(axis=(1, 2))) < np.finfo(np.float64).resolution
    ess[constant] = size
    return ess


def rank_diagnostics(
    values: np.ndarray, *, tail_prob: float | None = None
) -> dict[str, np.ndarray]:
    """Rank-normalized split R-hat, bulk ESS and tail ESS of (p, chain, draw) draws.

    ``tail_prob``: the tail ESS is the smaller ESS of the indicators
    ``draw <= quantile(q)`` for ``q = 1 - tail_prob`` and ``tail_prob`` (ArviZ's
    ``stats.ci_prob`` when ``None``). A parameter with a non-finite draw gets NaN
    everywhere; R-hat needs 2 chains (NaN otherwise), everything needs 4 draws.
    """
    x = np.asarray(values, dtype=np.float64)
    p, chains, draws = x.shape
    nan = np.full(p, np.nan)
    out = {"rhat": nan.copy(), "ess_bulk": nan.copy(), "ess_tail": nan.copy()}
    finite = np.isfinite(x).all(axis=(1, 2))
    if draws < 4 or not finite.any():
        return out
    if tail_prob is None:
        from arviz_base import rcParams

        tail_prob = float(rcParams["stats.ci_prob"])
    xf = x[finite]
    split = _split_chains(xf)
    z_split = _z_scale(split)
    if chains >= 2:
        folded = np.abs(split - np.median(split.reshape(len(xf), -1), axis=1)[:, None, None])
        out["rhat"][finite] = np.maximum(_rhat(z_split), _rhat(_z_scale(folded)))
    out["ess_bulk"][finite] = _ess(z_split)
    flat = xf.reshape(len(xf), -1)
    tails = [
        _ess(_split_chains((xf <= np.quantile(flat, q, axis=1)[:, None, None]).astype(np.float64)))
        for q in sorted((tail_prob, 1.0 - tail_prob))
    ]
    out["ess_tail"][finite] = np.minimum(*tails)
    return out


def summarize(posterior: Any, sample_stats: Any | None) -> ConvergenceSummary:
    """Compute the :class:`ConvergenceSummary` of a posterior ``xarray.Dataset``."""
    import xarray as xr

    names = [v for v in CHECKED if v in posterior.data_vars]
    ds = posterior[names]
    # constant parameters (fixed guessing, 1PL discrimination) have no R-hat
    varying = [v for v in names if float(ds[v].std(("chain", "draw")).max()) > 0]
    ds = ds[varying]
    found: dict[str, dict[str, Any]] = {"rhat": {}, "ess_bulk": {}, "ess_tail": {}}
    for name in varying:
        da = ds[name].transpose("chain", "draw", ...)
        template = da.isel(chain=0, draw=0, drop=True)
        values = np.asarray(da.values, dtype=np.float64).reshape((*da.shape[:2], -1))
        for key, per_param in rank_diagnostics(np.moveaxis(values, 2, 0)).items():
            found[key][name] = template.copy(data=per_param.reshape(template.shape))
    rhat, ess_bulk, ess_tail = (xr.Dataset(found[k]) for k in ("rhat", "ess_bulk", "ess_tail"))
    # elements fixed by construction (the 2pl-md anchors' zero loadings) are constant:
    # their R-hat / ESS are undefined and left out; any other non-finite value counts
    # as a failure (R-hat inf, ESS 0)
    constant = ds.std(("chain", "draw")) == 0
    rhat = rhat.where(constant | np.isfinite(rhat), np.inf)
    ess_bulk = ess_bulk.where(constant | np.isfinite(ess_bulk), 0.0)
    ess_tail = ess_tail.where(constant | np.isfinite(ess_tail), 0.0)
    rhat, ess_bulk, ess_tail = (x.where(~constant) for x in (rhat, ess_bulk, ess_tail))
    max_rhat, worst_rhat = _worst(rhat, "max")
    min_bulk, worst_bulk = _worst(ess_bulk, "min")
    min_tail, _ = _worst(ess_tail, "min")
    divergences = 0
    min_bfmi = float("nan")
    tree = float("nan")
    if sample_stats is not None:
        if "diverging" in sample_stats:
            divergences = int(np.asarray(sample_stats["diverging"].values).sum())
        if "energy" in sample_stats:
            energy = np.asarray(sample_stats["energy"].values, dtype=np.float64)
            num = np.mean(np.diff(energy, axis=1) ** 2, axis=1)
            den = np.var(energy, axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                min_bfmi = float(np.min(num / den))
        for key in ("n_steps", "tree_size"):
            if key in sample_stats:
                tree = float(np.asarray(sample_stats[key].values).mean())
                break
    problems = []
    if not max_rhat <= MAX_RHAT:
        problems.append(f"R-hat {max_rhat:.3f} > {MAX_RHAT} ({worst_rhat})")
    if not min_bulk >= MIN_ESS_BULK:
        problems.append(f"bulk ESS {min_bulk:.0f} < {MIN_ESS_BULK:.0f} ({worst_bulk})")
    if not min_tail >= MIN_ESS_TAIL:
        problems.append(f"tail ESS {min_tail:.0f} < {MIN_ESS_TAIL:.0f}")
    if divergences:
        problems.append(f"{divergences} divergent transition(s)")
    if np.isfinite(min_bfmi) and min_bfmi < MIN_BFMI:
        problems.append(f"BFMI {min_bfmi:.2f} < {MIN_BFMI}")
    return ConvergenceSummary(
        max_rhat=max_rhat,
        min_ess_bulk=min_bulk,
        min_ess_tail=min_tail,
        divergences=divergences,
        min_bfmi=min_bfmi,
        mean_tree_size=tree,
        worst_rhat=worst_rhat,
        worst_ess_bulk=worst_bulk,
        n_draws=int(posterior.sizes["draw"]),
        n_chains=int(posterior.sizes["chain"]),
        problems=problems,
    )


def warn_if_unconverged(
    summary: ConvergenceSummary, *, hint: str = "", stacklevel: int = 3
) -> None:
    """Log the diagnostics and raise a :class:`ConvergenceWarning` when a threshold fails.

    ``hint``: a remedy known for this model and data, appended to the warning.
    """
    logger.info(
        "diagnostics: max R-hat %.4f, min bulk ESS %.0f, min tail ESS %.0f, %d divergences, "
        "min BFMI %.2f, mean tree size %.1f",
        summary.max_rhat,
        summary.min_ess_bulk,
        summary.min_ess_tail,
        summary.divergences,
        summary.min_bfmi,
        summary.mean_tree_size,
    )
    if not summary.ok:
        warnings.warn(
            f"the fit did not converge: {summary.reason()}; run longer (more tune/draws) or "
            "inspect the named parameters" + (f"; {hint}" if hint else ""),
            ConvergenceWarning,
            stacklevel=stacklevel,
        )


def fit_verdict(summary: ConvergenceSummary | None, fit_info: dict[str, Any]) -> bool | None:
    """Whether a fit converged: NUTS by its diagnostics, an approximation by its optimizer.

    ``None`` where neither is recorded (before fitting, or an artifact older than
    the optimizer flag). Why: an optimizer that stopped short (L-BFGS-B's ABNORMAL
    line search, the iteration limit) is as unusable as an unmixed chain.
    """
    if summary is not None:
        return summary.ok
    flag = fit_info.get("converged")
    return None if flag is None else bool(flag)


def fit_problems(summary: ConvergenceSummary | None, fit_info: dict[str, Any]) -> list[str]:
    """What failed in a fit, one phrase each (empty when it converged)."""
    if summary is not None:
        return list(summary.problems)
    if fit_info.get("converged") is False:
        return [f"optimizer: {fit_info.get('optimizer_message', 'did not converge')}"]
    return []


def more_draws(
    summary: ConvergenceSummary, draws: int, budget: int = DRAWS_BUDGET, *, step: int = 500
) -> int | None:
    """Draws per chain that should meet the thresholds a fit of ``draws`` missed, or None.

    Only a fit that misses R-hat or ESS alone is extended: divergences, a low
    BFMI or an R-hat above :data:`MAX_EXTENDABLE_RHAT` are not cured by more
    draws. ESS grows about linearly with the draws, so the draws are scaled by
    the shortfall of the lower ESS (with a 20% margin); the excess ``R-hat - 1`` of
    chains that mix shrinks about as ``1 / draws`` (its between-chain part is an
    average over the draws), so an R-hat miss scales them by its excess over
    ``MAX_RHAT - 1`` (with a 20% margin, at most doubling); rounded up to ``step``
    and capped at ``budget``.

    Parameters
    ----------
    summary
        The convergence summary of the fit.
    draws
        Its draws per chain.
    budget
        The most draws per chain to try.
    step
        Round the draws up to a multiple of this (500 for a refit; the chains that
        continue use :data:`~bayes_microbench.irt.model.EXTENSION_STEP`).

    Returns
    -------
    The next draws per chain, or None where the fit converged, cannot be
    mended by more draws, or the budget is spent.

    Why: R-hat and ESS near their thresholds on a real matrix are a question
    of chain length, which the data, not the user, should decide.
    """
    if summary.ok or summary.divergences or draws >= budget:
        return None
    if np.isfinite(summary.min_bfmi) and summary.min_bfmi < MIN_BFMI:
        return None
    if not np.isfinite(summary.max_rhat) or summary.max_rhat > MAX_EXTENDABLE_RHAT:
        return None
    ess = max(1.0, min(summary.min_ess_bulk, summary.min_ess_tail))
    factor = max(1.2 * max(MIN_ESS_BULK, MIN_ESS_TAIL) / ess, 1.0)
    if summary.max_rhat > MAX_RHAT:
        factor = max(factor, min(2.0, 1.2 * (summary.max_rhat - 1.0) / (MAX_RHAT - 1.0)))
    return int(min(budget, -(-int(draws * factor) // step) * step))

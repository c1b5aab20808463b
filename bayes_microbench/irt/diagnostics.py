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


def summarize(posterior: Any, sample_stats: Any | None) -> ConvergenceSummary:
    """Compute the :class:`ConvergenceSummary` of a posterior ``xarray.Dataset``."""
    import arviz_stats  # noqa: F401  (registers the .azstats accessor)

    names = [v for v in CHECKED if v in posterior.data_vars]
    ds = posterior[names]
    # constant parameters (fixed guessing, 1PL discrimination) have no R-hat
    varying = [v for v in names if float(ds[v].std(("chain", "draw")).max()) > 0]
    ds = ds[varying]
    # elements fixed by construction (the 2pl-md anchors' zero loadings) are constant:
    # their R-hat / ESS are undefined and left out; any other non-finite value counts
    # as a failure (R-hat inf, ESS 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        rhat = ds.azstats.rhat()
        ess_bulk = ds.azstats.ess(method="bulk")
        ess_tail = ds.azstats.ess(method="tail")
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


def warn_if_unconverged(summary: ConvergenceSummary, *, stacklevel: int = 3) -> None:
    """Log the diagnostics and raise a :class:`ConvergenceWarning` when a threshold fails."""
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
            "inspect the named parameters",
            ConvergenceWarning,
            stacklevel=stacklevel,
        )

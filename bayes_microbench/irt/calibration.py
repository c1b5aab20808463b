"""The calibration a fitted posterior carries: its misfit on the responses it was fitted on.

Why: on real benchmarks the plain IRT predictive of the unobserved items is
overconfident; :func:`bayes_microbench.misfit.estimate_misfit` recalibrates it
(split-conformal intervals). Computing it when the posterior is fitted and
saving it in the ``.nc`` makes the calibrated interval the default answer. It is
in-sample for the item parameters (``estimate_misfit`` with ``fit=None``); why,
and its cost: docs/decisions/0002-calibration-saved-with-the-posterior.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np
import xarray as xr

from ..exceptions import ConfigurationError
from ..population import estimate_population
from ..responses import Responses

#: Subset sizes the calibration is estimated at (those that leave 10 items unobserved).
CALIBRATION_SIZES = (25, 50, 100, 200)
#: Posterior draws used to estimate it (``estimate_misfit``'s default).
CALIBRATION_DRAWS = 200
#: Name of the group that holds it in a saved posterior.
GROUP = "calibration"
#: (llm, split) cases per size the calibration aims at: fewer llms are split more often.
CALIBRATION_CASES = 500
#: Fewest and most random splits per llm and size.
CALIBRATION_SPLITS = (2, 8)


def calibration_splits(n_llms: int) -> int:
    """Random item splits per llm and size: enough for :data:`CALIBRATION_CASES` cases.

    Why: each size's centre, scale and residual quantiles are estimated from its
    cases alone, and two splits of a few dozen llms leave them noisy
    (docs/decisions/0047-more-splits-for-few-llms.md).
    """
    low, high = CALIBRATION_SPLITS
    return int(np.clip(-(-CALIBRATION_CASES // max(n_llms, 1)), low, high))


def calibration_sizes(responses: Responses) -> list[int]:
    """The sizes of :data:`CALIBRATION_SIZES` that leave every llm 10 unobserved items.

    When none does, half of the fewest items any llm answered (at most that count
    minus 10); empty when an llm answered 11 items or fewer.
    """
    n_min = int(np.asarray(responses.observed).sum(axis=1).min())
    sizes = [n for n in CALIBRATION_SIZES if n <= n_min - 10]
    if not sizes and n_min - 10 >= 1:
        sizes = [max(1, min(n_min // 2, n_min - 10))]
    return sizes


def calibrate_fitted(
    fit: Any, responses: Responses, *, random_seed: int | None = 0, max_draws: int | None = None
) -> Any:
    """The :class:`~bayes_microbench.misfit.Misfit` of a fitted posterior on its own llms.

    Parameters
    ----------
    fit
        A fitted ``IRTModel`` (or anything with a ``posterior``), 1-D or ``2pl-md``.
    responses
        The responses it was fitted on (at least 10 llms).
    random_seed
        Seed of the item splits; the same seed gives the same calibration.
    max_draws
        Posterior draws used (default :data:`CALIBRATION_DRAWS`).

    Returns
    -------
    Misfit
        Saved by :func:`bayes_microbench.irt.io.save_posterior` when given as
        ``calibration=``; ``score`` applies it by default. It carries the
        fitted llms' :class:`~bayes_microbench.population.Population` (D-dim
        abilities for a ``2pl-md`` posterior), which ``mdad`` and ``plan``
        integrate over by default.
    """
    import pandas as pd

    from ..misfit import carried_training, estimate_misfit

    posterior = getattr(fit, "posterior", fit)
    # the items the posterior kept (the engine drops items no llm answered)
    keep = pd.Index([str(i) for i in posterior["item"].values])
    cols = np.nonzero(pd.Index([str(i) for i in responses.items]).isin(keep))[0]
    if len(cols) < responses.n_items:
        responses = responses.isel(item=cols)
    sizes = calibration_sizes(responses)
    if responses.n_llms < 10 or not sizes:
        raise ConfigurationError(
            f"calibration needs at least 10 llms each with at least 12 answered items "
            f"(got {responses.n_llms} llms, fewest answered "
            f"{int(np.asarray(responses.observed).sum(axis=1).min())})"
        )
    # a 2pl-md posterior's population has D-dim abilities (docs/decisions/0030); its item
    # shift enters the calibration (docs/decisions/0044)
    population = estimate_population(posterior, responses, random_seed=random_seed)
    misfit = estimate_misfit(
        posterior,
        responses,
        sizes=sizes,
        n_splits=calibration_splits(responses.n_llms),
        max_draws=CALIBRATION_DRAWS if max_draws is None else max_draws,
        random_seed=random_seed,
        where="calibration of the fitted posterior: responses",
        population=population,
    )
    # the fitted llms travel with it, so that score can calibrate a shared subset on itself
    training = carried_training(responses, random_seed)
    return dataclasses.replace(misfit, population=population, training=training)


def calibration_hash(ds: xr.Dataset) -> str:
    """SHA-256 over a calibration group's values and attrs (stored beside it, checked on load)."""
    h = hashlib.sha256()
    for name in sorted(ds.variables, key=str):
        raw = np.asarray(ds[name].values)
        h.update(str(name).encode())
        if raw.dtype.kind in "OUS":  # item ids
            h.update("\x00".join(str(v) for v in raw.ravel()).encode())
        else:
            h.update(np.ascontiguousarray(raw, dtype=np.float64).tobytes())
    for key in sorted(ds.attrs):
        if key != "calibration_hash":
            h.update(f"{key}={ds.attrs[key]}".encode())
    return h.hexdigest()[:16]

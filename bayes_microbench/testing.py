"""Test and study helpers: synthetic item posteriors around a simulation's truth.

:func:`posterior_from_truth` checks the design and scoring math without MCMC
(docs/decisions/0022-posterior-layer-and-response-model.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr


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

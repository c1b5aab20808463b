"""Shared fixtures. Real data lives in ../shared/data and is never copied here."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def shared_path(relative: str) -> Path:
    """Path to a file in ../shared/data, skipping the test when it is absent."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(
            f"../shared/data/{relative} is not present (real data lives beside the checkout)"
        )
    return path


def write_posterior(path: Path, post, **attrs) -> Path:
    """Save a posterior Dataset as ``fit`` would (a 3PL, floors 1/4), with extra root ``attrs``."""
    import xarray as xr

    from bayes_microbench.irt.config import FORMAT_VERSION, IRTConfig

    cfg = IRTConfig.from_dict({"model": "3pl", "n_options": 4})
    tree = xr.DataTree.from_dict({"posterior": post})
    tree.attrs.update(
        config_json=cfg.to_json(), config_hash=cfg.hash(), format_version=FORMAT_VERSION, **attrs
    )
    tree.to_netcdf(path)
    return path


@pytest.fixture
def gpqa_path() -> Path:
    return shared_path("open-llm-leaderboard-v2/gpqa.csv")


def require_accelerators(*names: str) -> None:
    """Skip the test, saying why, where one of the NUTS accelerators ``names`` is not active.

    Outside the tested jax/jaxlib/nutpie range, or with ``BAYES_MICROBENCH_ACCELERATE``
    off, the plain path runs and a test of the accelerator itself has nothing to test.
    """
    from bayes_microbench.irt import _accelerators

    state = _accelerators.status()
    off = {n: state[n] for n in names if state[n] != "active"}
    if off:
        pytest.skip("not active here: " + "; ".join(f"{n}: {why}" for n, why in off.items()))


def excess_of_each_grown(population, prob, slope, seen, candidates, **kwargs):
    """:meth:`Population.subset_excess` recomputed for ``seen + {c}``, each candidate ``c``:
    the slow reference :meth:`Population.excess_if_added` is checked against."""
    import numpy as np

    out = np.empty(len(candidates))
    for k, c in enumerate(candidates):
        grown = seen.copy()
        grown[c] = True
        out[k] = population.subset_excess(prob[None], slope[None], grown[None], **kwargs)[0]
    return out

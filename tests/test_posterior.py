"""The posterior layer's one way in: a file, a fitted model, a DataTree or a Dataset."""

from __future__ import annotations

import types

import numpy as np
import pytest
import xarray as xr

from bayes_microbench import simulate_responses
from bayes_microbench.exceptions import IncompatibleArtifactError
from bayes_microbench.posterior import (
    MIN_INTERVAL_DRAWS,
    MIN_MEMORY_DRAWS,
    item_draws,
    open_posterior,
)
from bayes_microbench.testing import posterior_from_truth

from .conftest import write_posterior


@pytest.fixture(scope="module")
def post():
    _, truth = simulate_responses("gpqa", n_llms=5, n_items=40, random_seed=0, return_truth=True)
    return posterior_from_truth(truth, n_draws=60, random_seed=0)


def test_every_source_gives_the_same_draws(post, tmp_path):
    path = write_posterior(tmp_path / "p.nc", post)
    fitted = types.SimpleNamespace(posterior=post, calibration="saved calibration")
    tree = xr.DataTree.from_dict({"posterior": post})
    want = item_draws(post)
    for source in (str(path), path, fitted, tree):
        got = item_draws(source)
        np.testing.assert_array_equal(got.difficulty, want.difficulty)
        np.testing.assert_array_equal(got.items, want.items)
    # a file is read as the commands read it: its name and the saved-posterior floor
    from_file = item_draws(path)
    assert from_file.source == str(path) and from_file.min_interval_draws == MIN_INTERVAL_DRAWS
    assert want.min_interval_draws == MIN_MEMORY_DRAWS
    # only a file or a fit carries a calibration; a bare DataTree or Dataset does not
    assert open_posterior(fitted)[1] == "saved calibration"
    assert open_posterior(tree)[1] is None and open_posterior(post)[1] is None
    assert open_posterior(path)[1] is None


def test_a_file_is_always_hash_checked(post, tmp_path):
    path = write_posterior(tmp_path / "edited.nc", post)
    tree = xr.open_datatree(path)
    tree.load()
    tree.close()
    tree.attrs["config_hash"] = "0" * 16  # an edited file
    tree.to_netcdf(tmp_path / "bad.nc")
    with pytest.raises(IncompatibleArtifactError, match="does not match its stored hash"):
        item_draws(tmp_path / "bad.nc")


def test_an_unknown_source_is_one_user_error():
    from bayes_microbench import UserInputError

    with pytest.raises(UserInputError, match=r"expected a posterior \(a \.nc file, a fitted model"):
        item_draws(42)


def test_the_mean_draw_keeps_the_mean_intercept_where_the_discrimination_is_near_zero():
    """An item whose discrimination straddles 0 has a heavy-tailed difficulty; the mean
    pseudo-draw keeps the mean discrimination and intercept, so its probability stays near
    the draws' mean probability (the mean difficulty would put it anywhere)."""
    from bayes_microbench.posterior import ItemDraws

    rng = np.random.default_rng(3)
    n_draws = 400
    disc = np.column_stack([rng.normal(0.05, 0.3, n_draws), rng.normal(1.2, 0.1, n_draws)])
    icpt = np.column_stack([rng.normal(-1.0, 0.1, n_draws), rng.normal(0.5, 0.1, n_draws)])
    draws = ItemDraws(
        items=np.array(["flat", "sharp"]),
        subtask=np.array(["x", "x"]),
        discrimination=disc,
        difficulty=-icpt / disc,
        guessing=np.zeros_like(disc),
        chain=np.zeros(n_draws, dtype=int),
        draw=np.arange(n_draws),
    )
    mean = draws.mean()
    np.testing.assert_allclose(mean.intercept[0], icpt.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(mean.discrimination[0], disc.mean(axis=0), rtol=1e-12)
    theta = np.array([[-1.0, 0.0, 1.5]])
    plug = mean.prob(theta)[0]  # (3, 2)
    averaged = draws.prob(np.broadcast_to(theta, (n_draws, 3))).mean(axis=0)
    assert np.abs(plug - averaged).max() < 0.02, (plug, averaged)
    # the difficulty's own mean is far off for the flat item
    assert abs(np.mean(-icpt[:, 0] / disc[:, 0]) - mean.difficulty[0, 0]) > 1.0

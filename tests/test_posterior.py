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

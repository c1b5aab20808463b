"""A subset the scored llms share is calibrated on itself, from the fitted llms the calibration carries."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from bayes_microbench import simulate_responses
from bayes_microbench.misfit import MIN_SUBSET_LLMS, carried_training, estimate_misfit
from bayes_microbench.posterior import item_draws, read_posterior_file
from bayes_microbench.scoring import score, shared_subsets
from bayes_microbench.testing import posterior_from_truth

from .conftest import write_posterior

N_TRAIN = 150


@pytest.fixture(scope="module")
def world():
    resp, truth = simulate_responses(
        "gpqa", n_llms=N_TRAIN + 100, n_items=80, random_seed=11, return_truth=True
    )
    post = posterior_from_truth(
        truth, n_chains=2, n_draws=60, noise=0.05, subtask=resp.item_subtask, random_seed=0
    )
    train = resp.isel(llm=np.arange(N_TRAIN))
    new = resp.isel(llm=np.arange(N_TRAIN, resp.n_llms))
    misfit = estimate_misfit(post, train, sizes=[10, 25], max_draws=60, random_seed=0)
    carried = dataclasses.replace(misfit, training=carried_training(train))
    # the 20 most discriminating items, and the 20 hardest: subsets no random one resembles
    subset = np.sort(np.argsort(-np.asarray(truth.discrimination))[:20])
    hardest = np.sort(np.argsort(-np.asarray(truth.difficulty))[:20])
    return {
        "post": post,
        "new": new,
        "truth": np.asarray(new.values).mean(axis=1),
        "plain": misfit,
        "carried": carried,
        "subset": subset,
        "hardest": hardest,
        "draws": item_draws(post, max_draws=60),
    }


def test_shared_subsets_groups_llms_by_subset_largest_first():
    a = np.array([1, 1, 0, 0], dtype=bool)
    b = np.array([0, 1, 1, 0], dtype=bool)
    c = np.array([0, 0, 1, 1], dtype=bool)
    observed = np.stack([b, a, a, c, a, b])
    groups = shared_subsets(observed)
    assert [rows.tolist() for rows, _ in groups] == [[1, 2, 4], [0, 5], [3]]
    np.testing.assert_array_equal(groups[0][1], a)
    np.testing.assert_array_equal(groups[2][1], c)


def test_for_subset_calibrates_the_subset_on_every_carried_llm(world, caplog):
    mask = np.zeros(world["draws"].n_items, dtype=bool)
    mask[world["subset"]] = True
    with caplog.at_level(logging.INFO, logger="bayes_microbench.misfit"):
        own = world["carried"].for_subset(world["draws"], mask, random_seed=0)
    assert not caplog.records  # a step on the way to a score, not fit's calibration report
    assert own is not None
    assert own.design == "fixed subset of 20 items"
    assert own.n_observed.tolist() == [20]
    assert own.n_cases.tolist() == [N_TRAIN]
    assert own.population is world["carried"].population


def test_for_subset_declines_without_enough_carried_llms(world):
    mask = np.zeros(world["draws"].n_items, dtype=bool)
    mask[world["subset"]] = True
    assert world["plain"].for_subset(world["draws"], mask) is None
    few = dataclasses.replace(
        world["carried"],
        training=world["carried"].training.isel(llm=np.arange(MIN_SUBSET_LLMS - 1)),
    )
    assert few.for_subset(world["draws"], mask) is None
    almost_all = np.ones_like(mask)
    almost_all[:5] = False  # 5 unobserved items: below the calibrated range
    assert world["carried"].for_subset(world["draws"], almost_all) is None


def _scored(world, misfit, subset):
    res = score(world["post"], world["new"].isel(item=subset), misfit=misfit, random_seed=2)
    bounds = res["accuracy_interval"].to_numpy()
    t = world["truth"]
    covered = (bounds[:, 0] <= t) & (t <= bounds[:, 1])
    return res, covered.mean(), np.mean(bounds[:, 1] - bounds[:, 0])


def test_score_calibrates_a_shared_subset_on_itself(world):
    own, cov_top, _ = _scored(world, world["carried"], world["subset"])
    plain, _, _ = _scored(world, world["plain"], world["subset"])
    assert "calibrated on that subset itself, with 150 fitted llms" in own.attrs["misfit"]
    assert "calibrated on that subset itself" not in plain.attrs["misfit"]
    _, cov_hard, width_hard = _scored(world, world["carried"], world["hardest"])
    _, _, width_hard_plain = _scored(world, world["plain"], world["hardest"])
    # 100 new llms on each subset: near 90%, and the hardest items' own interval is the
    # wider one (their error exceeds a random subset's)
    assert 0.82 <= cov_top <= 0.97
    assert 0.82 <= cov_hard <= 0.97
    assert width_hard > 1.05 * width_hard_plain


def test_llms_on_subsets_of_their_own_keep_the_random_subset_calibration(world):
    from bayes_microbench.scoring import MAX_SHARED_SUBSETS

    rng = np.random.default_rng(5)
    n_llms = MAX_SHARED_SUBSETS + 1
    values = np.asarray(world["new"].values[:n_llms], dtype=np.float64).copy()
    for row in values:  # each llm on its own 20 random items
        row[np.argsort(rng.random(row.size))[20:]] = np.nan
    own = world["new"].isel(llm=np.arange(n_llms))
    from bayes_microbench import Responses

    cols = ~np.isnan(values).all(axis=0)
    mine = Responses.from_arrays(
        values[:, cols], own.llms, own.items[cols], subtask=own.item_subtask[cols]
    )
    res = score(world["post"], mine, misfit=world["carried"], random_seed=0)
    assert "calibrated on that subset itself" not in res.attrs["misfit"]
    two = score(world["post"], mine.isel(llm=[0, 1]), misfit=world["carried"], random_seed=0)
    assert "2 llm(s) answered a subset shared" in two.attrs["misfit"]


def test_carried_llms_travel_with_the_saved_calibration(world, tmp_path):
    from bayes_microbench.irt.io import add_calibration

    path = write_posterior(tmp_path / "cal.nc", world["post"])
    add_calibration(path, world["carried"])
    _, back = read_posterior_file(str(path))
    assert back.training is not None
    np.testing.assert_array_equal(back.training.values, world["carried"].training.values)
    assert back.training.items.tolist() == world["carried"].training.items.tolist()


def test_carried_training_samples_at_most_the_cap():
    resp = simulate_responses("gpqa", n_llms=MIN_SUBSET_LLMS + 30, n_items=20, random_seed=0)
    assert carried_training(resp) is resp
    assert carried_training(resp.isel(llm=np.arange(MIN_SUBSET_LLMS - 1))) is None
    from bayes_microbench import misfit as misfit_module

    cap = misfit_module.MAX_SUBSET_LLMS
    try:
        misfit_module.MAX_SUBSET_LLMS = MIN_SUBSET_LLMS + 12
        sample = carried_training(resp, random_seed=1)
    finally:
        misfit_module.MAX_SUBSET_LLMS = cap
    assert sample is not None
    assert sample.n_llms == MIN_SUBSET_LLMS + 12
    assert set(sample.llms.tolist()) <= set(resp.llms.tolist())
    assert list(sample.llms) == [llm for llm in resp.llms if llm in set(sample.llms)]

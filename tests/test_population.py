"""The fitted llms' population and misfit in the design (bayes_microbench.population)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from bayes_microbench import Responses, UserInputError, simulate_responses
from bayes_microbench import design as D
from bayes_microbench.irt.calibration import calibration_hash
from bayes_microbench.mdad import mdad_from_pairs
from bayes_microbench.misfit import Misfit
from bayes_microbench.population import Population, estimate_population
from bayes_microbench.posterior import item_draws, read_posterior_file
from bayes_microbench.testing import posterior_from_truth

from .conftest import excess_of_each_grown

N_ITEMS = 200
HALF = N_ITEMS // 2


def _world(n_llms: int, seed: int, truth=None):
    """Abilities and item parameters of a simulated 2PL world of ``N_ITEMS`` items.

    ``truth`` None: a new world (``simulate_responses``'s); else new llms (abilities
    drawn from ``seed``) on ``truth``'s items, as a study of new llms would see them.
    Returns (llm ids, item ids, abilities, discriminations, difficulties, truth).
    """
    if truth is None:
        resp, truth = simulate_responses(
            "gpqa", model="2pl", n_llms=n_llms, n_items=N_ITEMS, random_seed=seed, return_truth=True
        )
        llms, t1 = resp.llms, truth.ability.to_numpy()
    else:
        llms = np.array([f"new-{j}" for j in range(n_llms)])
        t1 = np.random.default_rng(seed + 300).standard_normal(n_llms)
    a, b = truth.discrimination.to_numpy(), truth.difficulty.to_numpy()
    return llms, truth.difficulty.index.to_numpy(), t1, a, b, truth


def _two_cluster_world(n_llms: int, seed: int, rho: float = 0.2, truth=None):
    """A 2PL whose first and second halves of the items each follow their own ability.

    Returns the responses, a 1-D posterior at the true item parameters (the
    model a user would fit misses the second ability) and the truth; ``truth``:
    new llms on that world's items (see :func:`_world`).
    """
    llms, items, t1, a, b, truth = _world(n_llms, seed, truth)
    rng = np.random.default_rng(seed + 100)
    t2 = rho * t1 + np.sqrt(1 - rho**2) * rng.standard_normal(n_llms)
    theta = np.where(np.arange(N_ITEMS)[None, :] < HALF, t1[:, None], t2[:, None])
    p = 1.0 / (1.0 + np.exp(-a * (theta - b)))
    y = (rng.random(p.shape) < p).astype(float)
    two = Responses.from_arrays(y, llms, items)
    post = posterior_from_truth(truth, n_chains=2, n_draws=30, noise=0.02, random_seed=seed)
    return two, post, truth


def _floor_world(n_llms: int, seed: int, floor: float = 0.35, truth=None):
    """A 2PL whose second half of the items has a guessing floor the 1-D posterior misses.

    The misfit is a smooth function of the ability (``floor * (1 - P)``): llms of
    close accuracy share it. Returns the responses, a posterior at the true
    (floorless) item parameters and the truth; ``truth``: new llms on that
    world's items (see :func:`_world`).
    """
    llms, items, t, a, b, truth = _world(n_llms, seed, truth)
    rng = np.random.default_rng(seed + 100)
    p = 1.0 / (1.0 + np.exp(-a * (t[:, None] - b)))
    p[:, HALF:] = floor + (1.0 - floor) * p[:, HALF:]
    y = (rng.random(p.shape) < p).astype(float)
    post = posterior_from_truth(truth, n_chains=2, n_draws=30, noise=0.02, random_seed=seed)
    return Responses.from_arrays(y, llms, items), post, truth


def _independent(pop: Population) -> Population:
    """``pop`` without its pair tables: each llm's misfit independent of the other's."""
    return dataclasses.replace(
        pop, pair_accuracy=None, pair_gap=None, pair_cov=None, pair_diag=None, pair_dof=None
    )


def _realized_mdad(y: np.ndarray, sub: np.ndarray) -> float:
    """The study's MDAD of the equal-weight subset ``sub`` over every pair of llms in ``y``."""
    i, j = np.triu_indices(len(y), k=1)
    full = y[i].mean(1) - y[j].mean(1)
    est = y[i][:, sub].mean(1) - y[j][:, sub].mean(1)
    keep = full != 0
    correct = (np.sign(est[keep]) == np.sign(full[keep])).astype(float)
    return mdad_from_pairs(full[keep], correct, n_boot=10, random_seed=0).mdad


def _weights(positions: np.ndarray) -> np.ndarray:
    w = np.zeros((N_ITEMS, 1))
    w[positions, 0] = 1.0 / len(positions)
    return w


@pytest.fixture(scope="module")
def model_world():
    resp, truth = simulate_responses(
        "gpqa", model="2pl", n_llms=400, n_items=N_ITEMS, random_seed=3, return_truth=True
    )
    post = posterior_from_truth(truth, n_chains=2, n_draws=30, noise=0.02, random_seed=3)
    return resp, post, truth


@pytest.fixture(scope="module")
def cluster_world():
    return _two_cluster_world(400, seed=5)


def test_excess_is_near_zero_when_the_model_holds(model_world):
    resp, post, _ = model_world
    pop = estimate_population(post, resp)
    rng = np.random.default_rng(0)
    for n in (25, 50):
        w = _weights(rng.choice(N_ITEMS, n, replace=False))
        # the Bernoulli sd of a 25-50 item estimate's error is 0.05-0.07; the excess ~0
        assert float(np.sqrt(pop.excess_variance(w))[0]) < 0.02
    assert np.isclose(pop.ability.mean(), 0.0, atol=0.15)
    assert np.isclose(pop.ability.std(), 1.0, atol=0.15)


def test_excess_finds_the_ability_the_model_misses(cluster_world):
    resp, post, _ = cluster_world
    pop = estimate_population(post, resp)
    one_cluster = float(pop.excess_variance(_weights(np.arange(50)))[0])
    balanced = float(pop.excess_variance(_weights(np.r_[0:25, HALF : HALF + 25]))[0])
    assert np.sqrt(one_cluster) > 0.03
    assert one_cluster > 5 * balanced


@pytest.mark.long  # 28 s: 1500 new llms' realized MDAD
def test_design_with_the_population_predicts_the_realized_mdad_on_misfit_data(cluster_world):
    resp, post, truth = cluster_world
    pop = estimate_population(post, resp)
    many, _, _ = _two_cluster_world(1500, seed=11, truth=truth)  # new llms, the same items
    sub = np.arange(0, HALF, 2)  # 50 items, all of the first cluster
    y = many.values
    i, j = np.triu_indices(len(y), k=1)
    full = y[i].mean(1) - y[j].mean(1)
    est = y[i][:, sub].mean(1) - y[j][:, sub].mean(1)
    keep = full != 0
    correct = (np.sign(est[keep]) == np.sign(full[keep])).astype(float)
    realized = mdad_from_pairs(full[keep], correct, n_boot=10, random_seed=0).mdad
    design = D.fixed_design([sub], N_ITEMS, "cluster")
    with_pop = float(D.design_curves(post, design, population=pop)["mdad"][0])
    without = float(D.design_curves(post, design, population=None)["mdad"][0])
    # the model alone is optimistic by 2 points here (4.0 against 6.0 measured); with the
    # population's misfit the prediction is 6.0
    assert realized - without >= 1.5, (without, realized)
    assert abs(with_pop - realized) <= 1.0, (with_pop, realized)


def test_study_band_covers_the_mdad_of_studies_under_the_model(model_world):
    _, post, truth = model_world
    resp = simulate_responses("gpqa", model="2pl", n_llms=10, n_items=N_ITEMS, random_seed=3)
    pop = dataclasses.replace(
        _independent(estimate_population(post, resp)),
        ability=np.sort(np.random.default_rng(1).standard_normal(2000)),
        factor=np.zeros((N_ITEMS, 1)),
        diag=np.zeros(N_ITEMS),
    )
    sub = np.arange(0, N_ITEMS, 4)
    res = D.design_curves(
        post, D.fixed_design([sub], N_ITEMS, "s"), population=pop, n_llms=80, random_seed=0
    )
    lo, hi = res["mdad_study_interval"].to_numpy()[0]
    a, b = truth.discrimination.to_numpy(), truth.difficulty.to_numpy()
    rng = np.random.default_rng(2)
    inside = 0
    for _ in range(20):
        theta = rng.standard_normal(80)
        y = (rng.random((80, N_ITEMS)) < 1 / (1 + np.exp(-a * (theta[:, None] - b)))).astype(float)
        i, j = np.triu_indices(80, k=1)
        full = y[i].mean(1) - y[j].mean(1)
        est = y[i][:, sub].mean(1) - y[j][:, sub].mean(1)
        keep = full != 0
        correct = (np.sign(est[keep]) == np.sign(full[keep])).astype(float)
        inside += lo <= mdad_from_pairs(full[keep], correct, n_boot=10, random_seed=0).mdad <= hi
    assert inside >= 15, (inside, lo, hi)
    post_band = res["mdad_interval"].to_numpy()[0]
    assert hi - lo > post_band[1] - post_band[0]  # a finite study adds its own spread


def test_tie_correction_only_for_equal_weights():
    w = np.zeros((10, 2))
    w[:4, 0] = 0.25
    w[:3, 1] = [0.5, 0.3, 0.2]
    np.testing.assert_allclose(D._tie_margins(w), [0.125, 0.0])


def test_bin_midpoints_read_the_curve_half_a_bin_on():
    gaps = np.arange(0.0, 3.01, 0.5)
    out = D.bin_midpoints(gaps[None, :] * 2.0, gaps)
    np.testing.assert_allclose(out[0, :-1], (gaps[:-1] + 0.25) * 2.0)
    assert np.isnan(out[0, -1])


def test_population_travels_with_the_calibration(model_world):
    resp, post, _ = model_world
    pop = estimate_population(post, resp)
    misfit = Misfit(
        n_observed=np.array([25]),
        knots=np.array([[0.2, 0.5, 0.8]]),
        centre=np.array([[0.2, 0.5, 0.8]]),
        variance=np.array([[0.01, 0.01, 0.01]]),
        quantiles=np.array([[-1.6, 0.0, 1.6]]),
        levels=np.array([0.05, 0.5, 0.95]),
        excess_sd=np.array([0.0]),
        linear_slope=np.array([1.0]),
        n_cases=np.array([100]),
        n_llms=400,
        n_splits=2,
        design="random",
        population=pop,
    )
    ds = misfit.to_dataset()
    assert len(calibration_hash(ds)) == 16
    back = Misfit.from_dataset(ds).population
    assert isinstance(back, Population)
    np.testing.assert_allclose(back.ability, pop.ability)
    np.testing.assert_allclose(back.factor, pop.factor, rtol=1e-6, atol=1e-7)
    assert back.n_llms == 400
    assert (
        Misfit.from_dataset(dataclasses.replace(misfit, population=None).to_dataset()).population
        is None
    )


def test_population_refuses_too_few_llms_and_foreign_items(model_world):
    from bayes_microbench import UserInputError

    resp, post, _ = model_world
    with pytest.raises(UserInputError, match="at least 10 fitted llms"):
        estimate_population(post, resp.isel(llm=np.arange(5)))
    pop = estimate_population(post, resp)
    other = dataclasses.replace(pop, items=np.array([f"x{k}" for k in range(N_ITEMS)]))
    with pytest.raises(UserInputError, match="does not cover"):
        D.design_curves(post, sizes=[20], max_draws=20, population=other)


def test_subset_excess_is_zero_without_misfit_and_centred_for_random_subsets(model_world):
    resp, post, _ = model_world
    pop = estimate_population(post, resp)
    none = dataclasses.replace(pop, factor=np.zeros_like(pop.factor), diag=np.zeros_like(pop.diag))
    rng = np.random.default_rng(1)
    prob = rng.uniform(0.2, 0.8, (40, N_ITEMS))
    slope = prob * (1 - prob)
    observed = np.zeros((40, N_ITEMS), dtype=bool)
    for j in range(40):
        observed[j, rng.choice(N_ITEMS, 30, replace=False)] = True
    assert np.all(none.subset_excess(prob, slope, observed) == 0.0)
    # a random subset is one of the random subsets it is compared with: no systematic excess
    clustered = dataclasses.replace(
        pop, factor=np.where(np.arange(N_ITEMS)[:, None] < HALF, 0.1, 0.0)[:, :1]
    )
    delta = clustered.subset_excess(prob, slope, observed, random_seed=2)
    one_cluster = np.zeros_like(observed)
    one_cluster[:, :30] = True
    loaded = clustered.subset_excess(prob, slope, one_cluster, random_seed=2)
    assert abs(delta.mean()) < 0.25 * loaded.mean()
    assert (loaded > 0).all()


def test_score_widens_the_interval_of_a_subset_that_loads_on_one_cluster():
    # the 1-D model misses the second ability; scored on items of the first cluster
    # only, a held-out llm's full accuracy strays by more than a random subset's would
    from bayes_microbench.misfit import estimate_misfit
    from bayes_microbench.scoring import score

    resp, post, _ = _two_cluster_world(600, seed=7)
    train, held = resp.isel(llm=np.arange(400)), resp.isel(llm=np.arange(400, 600))
    misfit = estimate_misfit(post, train, sizes=(25, 50), n_splits=1, random_seed=0)
    misfit = dataclasses.replace(misfit, population=estimate_population(post, train))
    truth = np.nanmean(held.values, axis=1)
    covered, width = {}, {}
    designs = {
        "cluster": np.arange(40),
        "random": np.random.default_rng(7).choice(200, 40, replace=False),
    }
    for design, items in designs.items():
        for name, m in (
            ("plain", dataclasses.replace(misfit, population=None)),
            ("population", misfit),
        ):
            res = score(post, held.isel(item=items), misfit=m, random_seed=3)
            lo, hi = res["accuracy_interval"].values.T
            covered[design, name] = float(np.mean((lo <= truth) & (truth <= hi)))
            width[design, name] = hi - lo
    # the random-subset calibration misses the one-cluster design; the population repairs it
    assert covered["cluster", "population"] >= covered["cluster", "plain"] + 0.08
    assert 0.85 <= covered["cluster", "population"] <= 0.99
    assert width["cluster", "population"].mean() >= 1.3 * width["cluster", "plain"].mean()
    # and leaves a random subset's interval as the calibration made it: the same widths
    # (a few llms widened a little), the same coverage within 10 of the 200 llms
    ratio = width["random", "population"] / width["random", "plain"]
    assert abs(np.median(ratio) - 1) <= 0.03 and ratio.mean() <= 1.05, ratio
    assert abs(covered["random", "population"] - covered["random", "plain"]) <= 0.05
    assert "widened for each llm's subset" in res.attrs["misfit"]


def test_excess_if_added_is_the_subset_excess_of_the_larger_subset(model_world):
    """The O(C k) update equals :meth:`subset_excess` recomputed for each ``S + {c}``, and
    adding an item of the loaded cluster to a subset raises its excess more than an item of
    the other half."""
    resp, post, _ = model_world
    pop = estimate_population(post, resp)
    clustered = dataclasses.replace(
        pop, factor=np.where(np.arange(N_ITEMS)[:, None] < HALF, 0.1, 0.0)[:, :1]
    )
    rng = np.random.default_rng(4)
    prob = rng.uniform(0.2, 0.8, N_ITEMS)
    slope = prob * (1 - prob)
    seen = np.zeros(N_ITEMS, dtype=bool)
    seen[rng.choice(HALF, 20, replace=False)] = True  # asked so far: the loaded half only
    cand = np.nonzero(~seen)[0]
    fast = clustered.excess_if_added(prob, slope, seen, cand, random_seed=9)
    slow = excess_of_each_grown(clustered, prob, slope, seen, cand, random_seed=9)
    np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-15)
    inside = fast[cand < HALF]
    outside = fast[cand >= HALF]
    assert inside.min() > outside.max()
    # nothing left unobserved after the candidate: no excess
    full = np.ones(N_ITEMS, dtype=bool)
    full[7] = False
    assert np.all(clustered.excess_if_added(prob, slope, full, np.array([7])) == 0.0)


def test_residual_carry_follows_where_the_subset_loads(model_world):
    """Misfit on one half of the items only: the residuals of a subset from the other half
    say nothing about it (carry 0); on a subset from the loaded half the ability estimate
    already takes the shift (and carries it to the other half), so the residual left
    must not be added again (carry 0); a random subset's carries as a random one's (near 1)."""
    resp, post, _ = model_world
    pop = estimate_population(post, resp)
    loaded = dataclasses.replace(
        pop,
        factor=np.where(np.arange(N_ITEMS)[:, None] >= HALF, 0.1, 0.0)[:, :1],
        diag=np.zeros(N_ITEMS),
    )
    rng = np.random.default_rng(5)
    prob = np.tile(rng.uniform(0.2, 0.8, N_ITEMS), (4, 1))
    slope = prob * (1 - prob)
    observed = np.zeros((4, N_ITEMS), dtype=bool)
    observed[0, rng.choice(HALF, 40, replace=False)] = True  # the unloaded half only
    observed[1, HALF + rng.choice(HALF, 40, replace=False)] = True  # the loaded half only
    observed[2, rng.choice(N_ITEMS, 40, replace=False)] = True  # random
    carry = loaded.residual_carry(prob, slope, observed, random_seed=3)
    assert carry[0] < 0.05 and carry[1] < 0.05 and carry[2] > 0.6, carry
    assert carry[3] == 1.0  # nothing observed: the calibration's weight as it is
    assert np.all((carry >= 0) & (carry <= 1))
    # a shift shared by every item, discriminations varying: the most informative items'
    # residual is what the ability estimate leaves of it, near nothing (a selector's
    # subset); a random subset's still varies
    shared = dataclasses.replace(loaded, factor=np.full((N_ITEMS, 1), 0.1))
    slope = prob * (1 - prob) * rng.uniform(0.3, 2.5, N_ITEMS)
    info = slope[0] ** 2 / (prob[0] * (1 - prob[0]))
    observed = np.zeros((2, N_ITEMS), dtype=bool)
    observed[0, np.argsort(-info)[:40]] = True
    observed[1, rng.choice(N_ITEMS, 40, replace=False)] = True
    carry = shared.residual_carry(prob[:2], slope[:2], observed, random_seed=3)
    assert carry[0] < 0.1 and carry[1] > 0.6, carry


def test_pair_tables_see_the_misfit_close_llms_share():
    """A misfit that is a function of the ability cancels between llms of close accuracy;
    one from a second ability does not: the pair tables tell the two apart."""
    sub = np.arange(HALF, N_ITEMS, 2)
    resp, post, _ = _floor_world(400, seed=5)
    shared = estimate_population(post, resp)
    close = shared.pair_excess(_weights(sub))[0]  # (groups, bands)
    assert close[:, :3].max() < 0.15 * 2.0 * float(shared.excess_variance(_weights(sub))[0])
    resp, post, _ = _two_cluster_world(400, seed=5)
    own = estimate_population(post, resp)
    close = own.pair_excess(_weights(np.arange(0, HALF, 2)))[0]
    indep = 2.0 * float(own.excess_variance(_weights(np.arange(0, HALF, 2)))[0])
    assert 0.5 * indep < np.median(close[:, :3]) < 1.5 * indep
    # without tables, the pair's excess is two llms' own
    np.testing.assert_allclose(
        _independent(own).pair_excess(_weights(sub))[0, 0, 0],
        2.0 * float(own.excess_variance(_weights(sub))[0]),
    )


@pytest.mark.long
def test_design_predicts_the_mdad_when_close_llms_share_the_misfit():
    """The floor world: the independent-misfit curve overshoots the realized MDAD of new
    llms by more than 10 points; the pair tables' is within 2."""
    resp, post, truth = _floor_world(400, seed=5)
    pop = estimate_population(post, resp)
    many, _, _ = _floor_world(1000, seed=11, truth=truth)
    sub = np.arange(HALF, N_ITEMS, 2)
    realized = _realized_mdad(many.values, sub)
    design = D.fixed_design([sub], N_ITEMS, "floor")
    pairs = float(D.design_curves(post, design, population=pop)["mdad"][0])
    indep = float(D.design_curves(post, design, population=_independent(pop))["mdad"][0])
    assert indep - realized > 10.0, (indep, realized)
    assert abs(pairs - realized) <= 2.0, (pairs, realized)


def test_population_and_misfit_spread_widen_the_band_without_moving_the_curve(cluster_world):
    resp, post, _ = cluster_world
    pop = estimate_population(post, resp)
    draws = item_draws(post)
    design = D.fixed_design([np.arange(50)], N_ITEMS, "cluster")
    gaps = D.DEFAULT_GAPS
    spread = D._spread(pop, draws.n_draws, 0)
    still = D._Spread(
        np.full_like(spread.weights, 1.0 / spread.weights.shape[1]),
        np.full_like(spread.pair_weights, 1.0 / spread.pair_weights.shape[1]),
        np.zeros_like(spread.misfit),
    )
    moving = D._curves(draws, design, gaps, None, population=pop, spread=spread)[:, 0]
    fixed = D._curves(draws, design, gaps, None, population=pop, spread=still)[:, 0]
    at = slice(8, 30)  # 4-15 points, around this design's MDAD
    assert np.abs(moving.mean(0)[at] - fixed.mean(0)[at]).max() < 0.02
    width = lambda c: np.quantile(c, 0.95, axis=0) - np.quantile(c, 0.05, axis=0)  # noqa: E731
    assert (width(moving)[at] > 1.5 * width(fixed)[at]).mean() > 0.8
    res = D.design_curves(post, design, population=pop)
    lo, hi = res["mdad_interval"].to_numpy()[0]
    assert hi > lo  # not a single value: the population's and the misfit's uncertainty


def test_study_band_covers_studies_whose_llms_carry_their_own_misfit(cluster_world):
    """New llms of the cluster world (each its own second ability): the realized MDAD of
    studies of 60 of them lies inside the 90% study band as often as it says."""
    resp, post, truth = cluster_world
    pop = estimate_population(post, resp)
    sub = np.arange(0, HALF, 2)
    res = D.design_curves(
        post, D.fixed_design([sub], N_ITEMS, "c"), population=pop, n_llms=60, random_seed=0
    )
    lo, hi = res["mdad_study_interval"].to_numpy()[0]
    inside = 0
    for seed in range(40):
        y = _two_cluster_world(60, seed=200 + seed, truth=truth)[0].values
        inside += lo <= _realized_mdad(y, sub) <= hi
    # 36 of 40 here; pairs ranked independently of their llms gave [4.0, 7.0] and 32
    assert inside >= 34, (inside, lo, hi)


def test_pair_tables_round_trip_and_old_populations_load(model_world):
    resp, post, _ = model_world
    pop = estimate_population(post, resp)
    assert pop.has_pairs
    back = Population.from_dataset(pop.to_dataset())
    w = _weights(np.arange(0, N_ITEMS, 4))
    np.testing.assert_allclose(back.pair_excess(w), pop.pair_excess(w), rtol=1e-5, atol=1e-9)
    old = pop.to_dataset().drop_vars([v for v in pop.to_dataset() if "pair" in str(v)])
    assert not Population.from_dataset(old).has_pairs
    with pytest.raises(ValueError, match="rank"):
        dataclasses.replace(pop, factor=pop.factor[:, :3]).pair_excess(w)


def test_excess_is_read_at_the_pairs_accuracy_and_gap():
    """Cell values come back at the cells' centres; between them, linear in the gap and
    in the accuracy."""
    pop = Population(
        items=np.array(["a", "b"]),
        ability=np.array([-1.0, 1.0]),
        factor=np.zeros((2, 1)),
        diag=np.zeros(2),
        n_llms=100,
        pair_accuracy=np.array([0.3, 0.7]),
        pair_gap=np.array([[0.01, 0.05], [0.01, 0.05]]),
        pair_cov=np.zeros((2, 2, 1, 1)),
        pair_diag=np.zeros((2, 2, 2)),
        pair_dof=np.full((2, 2), 50.0),
    )
    table = np.array([[[1.0, 3.0], [5.0, 7.0]]])  # (Z=1, groups, bands)
    delta = np.array([0.0, 0.01, 0.03, 0.05, 0.2])
    mid = np.array([[0.3, 0.5, 0.7, 0.9]])  # (s=1, P=4) on the pair path
    out, rel = D._excess_at(table, pop, delta, mid)
    np.testing.assert_allclose(out[0, 0, 0], [1.0, 1.0, 2.0, 3.0, 3.0])
    np.testing.assert_allclose(out[0, 1, 0], [3.0, 3.0, 4.0, 5.0, 5.0])
    np.testing.assert_allclose(out[0, 3, 0], out[0, 2, 0])  # constant past the last group
    np.testing.assert_allclose(rel, np.sqrt(2.0 / 50.0))
    quad_mid = np.full((1, 2, 5, 3), 0.5)  # (s, A, G, K) on the quadrature
    quad, _ = D._excess_at(table, pop, delta, quad_mid)
    np.testing.assert_allclose(quad[0, 1, :, 2, 0], [3.0, 3.0, 4.0, 5.0, 5.0])


def test_mean_shift_interpolates_the_groups_and_round_trips():
    pop = Population(
        items=np.array(["a", "b", "c"]),
        ability=np.zeros(3),
        factor=np.zeros((3, 1)),
        diag=np.zeros(3),
        n_llms=100,
        shift_accuracy=np.array([0.2, 0.6]),
        item_shift=np.array([[0.1, 0.0, -0.2], [-0.1, 0.2, 0.0]]),
    )
    mask = np.array([[True, True, False], [True, False, True], [False, False, False]])
    # accuracy 0.4 sits halfway: shifts (0, 0.1, -0.1); 0.9 takes the last group's
    got = pop.mean_shift(np.array([0.4, 0.9, 0.4]), mask)
    np.testing.assert_allclose(got, [0.05, -0.05, 0.0])
    # positions pick the posterior's items out of the population's
    np.testing.assert_allclose(
        pop.mean_shift(np.array([0.2]), np.array([[True, True]]), np.array([2, 0])), [-0.05]
    )
    back = Population.from_dataset(pop.to_dataset())
    np.testing.assert_allclose(back.item_shift, pop.item_shift)
    np.testing.assert_allclose(back.shift_accuracy, pop.shift_accuracy)
    older = Population.from_dataset(
        pop.to_dataset().drop_vars(["population_item_shift", "population_shift_accuracy"])
    )
    assert older.item_shift is None
    assert np.all(older.mean_shift(np.array([0.4, 0.9, 0.4]), mask) == 0.0)


def test_item_shift_carries_what_the_model_gets_wrong_to_any_subset():
    """A third of the items are answered worse by stronger llms, which the model (its true
    parameters, all discriminations positive) cannot say: the population's item shift finds
    it, and the calibration taken about it scores a subset that leaves those items
    unobserved with a smaller error, keeping coverage; a random subset is not hurt."""
    from bayes_microbench.ability import ability_posterior_samples
    from bayes_microbench.misfit import estimate_misfit
    from bayes_microbench.scoring import score, subset_widening

    _, truth = simulate_responses(
        "mmlu-pro", n_llms=600, n_items=240, random_seed=51, return_truth=True
    )
    rng = np.random.default_rng(13)
    theta = truth.ability.to_numpy()
    a, b, c = (getattr(truth, k).to_numpy() for k in ("discrimination", "difficulty", "guessing"))
    p = c + (1 - c) / (1 + np.exp(-a * (theta[:, None] - b)))
    p[:, 160:] = (0.45 - 0.15 * np.tanh(theta))[:, None] + 0.1 * rng.standard_normal(80)
    vals = (rng.random(p.shape) < np.clip(p, 0.02, 0.98)).astype(float)
    resp = Responses.from_arrays(vals, truth.ability.index, truth.difficulty.index)
    post = posterior_from_truth(truth, n_chains=2, n_draws=50, noise=0.03, random_seed=6)
    train, held = resp.isel(llm=slice(0, 400)), resp.isel(llm=slice(400, 600))
    pop = estimate_population(post, train)
    reversed_shift = pop.item_shift[:, 160:].mean(axis=1)
    assert len(reversed_shift) == 4 and np.all(np.diff(reversed_shift) < 0), reversed_shift
    assert reversed_shift[0] > 0.1 and reversed_shift[-1] < -0.1, reversed_shift

    def calibration(population):
        mf = estimate_misfit(
            post, train, sizes=(30, 80), max_draws=50, random_seed=0, population=population
        )
        return dataclasses.replace(mf, population=pop)

    plain, shifted = calibration(None), calibration(pop)
    assert shifted.item_shifted and not plain.item_shifted
    # the widening of the subset that leaves the reversed items out: about the shift, the
    # group means the shifted centre carries are not counted again as spread
    draws = item_draws(post)
    y = held.values.copy()
    y[:, 80:] = np.nan
    ability, _ = ability_posterior_samples(draws.subset(np.arange(80)), y[:, :80], random_seed=0)
    extra = {
        about: subset_widening(
            pop, draws, ability, ~np.isnan(y), np.random.default_rng(0), about_shift=about
        )
        for about in (False, True)
    }
    assert np.median(extra[True]) < 0.5 * np.median(extra[False]), extra
    real = held.accuracy().to_numpy()
    results = {}
    for design, items in (
        ("fixed", np.arange(80)),
        ("random", np.sort(rng.choice(240, 80, replace=False))),
    ):
        for name, mf in (("plain", plain), ("shifted", shifted)):
            res = score(post, held.isel(item=items), max_draws=100, random_seed=1, misfit=mf)
            lo, hi = res["accuracy_interval"].to_numpy().T
            error = np.abs(res["accuracy_mean"].to_numpy() - real).mean()
            results[design, name] = (error, np.mean((lo <= real) & (real <= hi)))
    # 200 held-out llms: a quarter less error on the subset that misses the reversed items
    assert results["fixed", "shifted"][0] < 0.75 * results["fixed", "plain"][0], results
    assert results["random", "shifted"][0] < 1.05 * results["random", "plain"][0], results
    assert all(cov >= 0.83 for _, cov in results.values()), results


def test_the_misfit_about_the_shift_leaves_out_each_groups_mean():
    """``quadratic(about_shift=True)`` is ``v' (E - S' S / G) v`` (clipped at 0), the
    plain form without the table, and the one-pass look-ahead agrees with it."""
    rng = np.random.default_rng(8)
    n = 12
    pop = Population(
        items=np.array([f"i{k}" for k in range(n)]),
        ability=np.zeros(5),
        factor=rng.normal(0, 0.2, (n, 3)),
        diag=np.full(n, 0.01),
        n_llms=200,
        shift_accuracy=np.array([0.3, 0.5, 0.7]),
        item_shift=rng.normal(0, 0.05, (3, n)),
    )
    v = rng.normal(0, 0.1, (4, n))
    e = pop.factor @ pop.factor.T + np.diag(pop.diag)
    s = pop.item_shift
    want = np.einsum("ai,ij,aj->a", v, e - s.T @ s / 3, v)
    np.testing.assert_allclose(pop.quadratic(v, about_shift=True), np.maximum(want, 0.0))
    np.testing.assert_allclose(pop.quadratic(v), np.einsum("ai,ij,aj->a", v, e, v))
    older = dataclasses.replace(pop, item_shift=None, shift_accuracy=None)
    np.testing.assert_allclose(older.quadratic(v, about_shift=True), pop.quadratic(v))
    pos = np.array([4, 0, 7])
    np.testing.assert_allclose(
        pop.quadratic(v[:, :3], pos, about_shift=True),
        np.maximum(
            np.einsum("ai,ij,aj->a", v[:, :3], (e - s.T @ s / 3)[np.ix_(pos, pos)], v[:, :3]),
            0.0,
        ),
    )
    prob = rng.uniform(0.2, 0.8, n)
    slope = prob * (1 - prob)
    seen = np.zeros(n, dtype=bool)
    seen[[1, 2, 5]] = True
    cand = np.nonzero(~seen)[0]
    fast = pop.excess_if_added(prob, slope, seen, cand, random_seed=9, about_shift=True)
    slow = excess_of_each_grown(pop, prob, slope, seen, cand, random_seed=9, about_shift=True)
    np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-15)


def test_with_misfit_draws_the_shift_and_the_misfit_about_it():
    """Probabilities moved by :meth:`Population.with_misfit` have, across many draws, the
    item shift at the llm's accuracy as their mean and ``E - S'S/G`` (its positive part)
    plus the diagonal as their covariance; clipped to [0, 1]."""
    rng = np.random.default_rng(2)
    n = 5
    factor = np.array([[0.10, 0.00], [0.08, 0.02], [0.00, 0.09], [0.05, 0.05], [0.0, 0.0]])
    shift = np.array([[0.04, -0.02, 0.0, 0.03, -0.05], [-0.04, 0.02, 0.0, -0.03, 0.05]])
    pop = Population(
        items=np.array([f"i{k}" for k in range(n)]),
        ability=np.zeros(3),
        factor=factor,
        diag=np.array([0.001, 0.002, 0.0, 0.001, -0.001]),
        n_llms=100,
        shift_accuracy=np.array([0.4, 0.6]),
        item_shift=shift,
    )
    prob = np.full((40_000, n), 0.5)
    moved = pop.with_misfit(prob, rng)
    assert moved.min() >= 0.0 and moved.max() <= 1.0
    delta = moved - prob
    # accuracy 0.5 sits halfway between the groups: the shift's mean there is 0
    np.testing.assert_allclose(delta.mean(axis=0), 0.0, atol=0.002)
    want = factor @ factor.T - shift.T @ shift / 2
    lam, vec = np.linalg.eigh(want)
    want = (vec * np.maximum(lam, 0.0)) @ vec.T + np.diag(np.maximum(pop.diag, 0.0))
    np.testing.assert_allclose(np.cov(delta.T), want, atol=0.0006)
    # at a group's accuracy its shift is the mean
    low = pop.with_misfit(np.full((40_000, n), 0.4), rng) - 0.4
    np.testing.assert_allclose(low.mean(axis=0), shift[0], atol=0.002)


def test_a_posterior_files_saved_population_reaches_the_library_design():
    """``design_curves`` and ``plan`` of a path read the file's calibration, as the commands do."""
    path = Path(__file__).resolve().parents[1] / "models" / "gpqa-2pl.nc"
    population = read_posterior_file(path)[1].population
    kw = {"sizes": [25], "max_draws": 100, "random_seed": 0}
    by_path = D.design_curves(str(path), **kw)
    assert by_path.attrs["population"] == population.describe()
    given = D.design_curves(str(path), population=population, **kw)
    np.testing.assert_array_equal(by_path["mdad_draws"], given["mdad_draws"])
    raw = D.design_curves(str(path), population=None, **kw)
    assert raw.attrs["population"].startswith("prior Normal(0, 1)")
    first = [str(i) for i in item_draws(str(path), max_draws=100).items[:60]]  # a quick plan
    planned = D.plan(str(path), 5.0, max_draws=100, random_seed=0, items=first)
    assert planned.attrs["population"] == population.describe()


def test_given_draws_with_no_posterior_design_over_the_prior():
    """``design_curves(None, draws=...)`` and ``plan(None, draws=...)``: no file, no saved
    population; a misspelt population name is refused before anything is read."""
    path = Path(__file__).resolve().parents[1] / "models" / "gpqa-2pl.nc"
    draws = item_draws(str(path), max_draws=100)
    first = draws.subset(np.arange(60))
    res = D.design_curves(None, sizes=[25], draws=draws, random_seed=0)
    assert res.attrs["population"].startswith("prior Normal(0, 1)")
    assert D.plan(None, 5.0, draws=first, random_seed=0).attrs["population"].startswith("prior")
    with_file = D.design_curves(str(path), sizes=[25], draws=draws, random_seed=0)
    assert with_file.attrs["population"].startswith("abilities of the 420 fitted llms")
    with pytest.raises(UserInputError, match="population must be"):
        D.design_curves(str(path), sizes=[25], population="Saved")


def test_a_simulated_study_holds_no_llm_twice():
    """Five fitted llms 10+ points apart, a curve at a coin's chance below 5 points and
    sure above: a study of all five has no pair below 5 points, so its MDAD is its
    smallest real gap; drawn with replacement, a repeated llm made a tied pair whose
    coin-flip bin could cross first. A study larger than the population repeats llms."""
    from bayes_microbench.posterior import ItemDraws

    n_draws, n_items = 200, 2000
    difficulty = np.broadcast_to(np.linspace(-3.0, 3.0, n_items), (n_draws, n_items))
    draws = ItemDraws(
        items=np.array([f"i{k}" for k in range(n_items)]),
        subtask=np.full(n_items, "x"),
        discrimination=np.ones((n_draws, n_items)),
        difficulty=difficulty.copy(),
        guessing=np.zeros((n_draws, n_items)),
        chain=np.zeros(n_draws, dtype=int),
        draw=np.arange(n_draws),
    )
    pop = Population(
        items=draws.items,
        ability=np.array([-2.0, -1.0, 0.0, 1.0, 2.0]),
        factor=np.zeros((n_items, 1)),
        diag=np.zeros(n_items),
        n_llms=5,
    )
    gaps = D.DEFAULT_GAPS
    curves = np.broadcast_to(np.where(gaps < 5.0, 0.5, 1.0), (n_draws, 1, len(gaps)))
    study = D.study_mdads(curves, draws, gaps, 0.8, pop, 5, 0)
    assert study.min() >= 8.0, np.sort(study.ravel())[:10]
    larger = D.study_mdads(curves, draws, gaps, 0.8, pop, 8, 0)
    assert (larger < 5.0).mean() > 0.3, (larger < 5.0).mean()

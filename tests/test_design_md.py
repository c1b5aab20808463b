"""Design on multidimensional 2PL posteriors (design.py's pair path, population.py in D dims).

Fast tier: the D-dim population (estimate, round trip through a saved calibration),
the pair path against the 1-D quadrature on a degenerate md posterior, the md
curve against the realized share of correctly ranked pairs of simulated llms,
the selectors through the design, and ``mdad`` / ``plan`` / ``select`` on a tiny
md posterior file.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import xarray as xr

from bayes_microbench import Responses
from bayes_microbench import design as D
from bayes_microbench.cli import main
from bayes_microbench.exceptions import UserInputError
from bayes_microbench.misfit import Misfit
from bayes_microbench.population import Population, estimate_population
from bayes_microbench.posterior import item_draws

from .conftest import excess_of_each_grown, write_posterior

N_LLMS, N_ITEMS = 200, 60


def md_truth(n_items=N_ITEMS, *, zero_extra=False, seed=0):
    """2-D item parameters: dim-0 loadings log-normal, dim-1 Normal(0, 1) (or zero)."""
    rng = np.random.default_rng(seed)
    loadings = np.empty((n_items, 2))
    loadings[:, 0] = np.exp(rng.normal(0.2, 0.3, n_items))
    loadings[:, 1] = 0.0 if zero_extra else rng.normal(0.0, 1.0, n_items)
    return loadings, rng.normal(0.0, 1.0, n_items)


def md_responses(loadings, intercept, n_llms, seed):
    """Responses of ``n_llms`` llms with Normal(0, I_2) abilities; returns (y, abilities)."""
    rng = np.random.default_rng(seed)
    ability = rng.standard_normal((n_llms, loadings.shape[1]))
    p = 1.0 / (1.0 + np.exp(-(ability @ loadings.T + intercept)))
    return (rng.random(p.shape) < p).astype(float), ability


def md_posterior(loadings, intercept, *, n_draws=50, noise=0.03, seed=0, zero_extra=False):
    """A synthetic 2pl-md item posterior (2 chains): the truth plus noise."""
    rng = np.random.default_rng(seed)
    lead = (2, n_draws)
    lam = loadings + noise * rng.standard_normal((*lead, *loadings.shape))
    if zero_extra:
        lam[..., 1] = 0.0
    icpt = intercept + noise * rng.standard_normal((*lead, len(intercept)))
    mdisc = np.sqrt((lam**2).sum(axis=-1))
    return xr.Dataset(
        {
            "discrimination": (("chain", "draw", "item", "dim"), lam),
            "intercept": (("chain", "draw", "item"), icpt),
            "mdisc": (("chain", "draw", "item"), mdisc),
            "difficulty": (("chain", "draw", "item"), -icpt / mdisc),
        },
        coords={"item": [f"q{i}" for i in range(len(intercept))], "dim": [0, 1]},
    )


def as_responses(y):
    n_l, n_i = y.shape
    return Responses.from_arrays(y, [f"l{j}" for j in range(n_l)], [f"q{i}" for i in range(n_i)])


@pytest.fixture(scope="module")
def world():
    loadings, intercept = md_truth()
    y, ability = md_responses(loadings, intercept, N_LLMS, seed=1)
    return as_responses(y), ability, md_posterior(loadings, intercept)


def _misfit(population):
    """A minimal Misfit carrying ``population`` (as test_population builds one)."""
    return Misfit(
        n_observed=np.array([25]),
        knots=np.array([[0.2, 0.5, 0.8]]),
        centre=np.array([[0.2, 0.5, 0.8]]),
        variance=np.array([[0.01, 0.01, 0.01]]),
        quantiles=np.array([[-1.6, 0.0, 1.6]]),
        levels=np.array([0.05, 0.5, 0.95]),
        excess_sd=np.array([0.0]),
        linear_slope=np.array([1.0]),
        n_cases=np.array([100]),
        n_llms=population.n_llms,
        n_splits=2,
        design="random",
        population=population,
    )


# --------------------------------------------------------------- population
def test_md_population_recovers_the_abilities_and_round_trips(world, tmp_path):
    from bayes_microbench.irt.io import add_calibration
    from bayes_microbench.posterior import read_posterior_file

    resp, ability, post = world
    pop = estimate_population(post, resp, random_seed=0)
    assert pop.n_dims == 2 and pop.ability.shape == (N_LLMS, 2) and pop.n_llms == N_LLMS
    # the anchors fix the rotation: each plug-in dim follows its true ability
    for d in range(2):
        assert np.corrcoef(pop.ability[:, d], ability[:, d])[0, 1] > 0.9
    # responses that follow the md model: a random subset's estimate carries ~no excess
    # (its Bernoulli sd is 0.08-0.12 at 15-30 items)
    rng = np.random.default_rng(0)
    for n in (15, 30):
        w = np.zeros((N_ITEMS, 1))
        w[rng.choice(N_ITEMS, n, replace=False), 0] = 1.0 / n
        assert float(np.sqrt(pop.excess_variance(w))[0]) < 0.02
    assert "2-D abilities of the 200 fitted llms" in pop.describe()
    ds = pop.to_dataset()
    assert ds["population_ability"].dims == ("population_llm", "population_dim")
    path = write_posterior(tmp_path / "md.nc", post)
    add_calibration(path, _misfit(pop))
    _, saved = read_posterior_file(path)  # calibration hash checked on load
    back = saved.population
    np.testing.assert_array_equal(back.ability, pop.ability)
    np.testing.assert_allclose(back.factor, pop.factor, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(back.diag, pop.diag, rtol=1e-6, atol=1e-7)
    assert back.n_dims == 2 and back.n_llms == N_LLMS
    # 1-D abilities keep their one-dim layout (the shipped calibrations' format)
    one = Population(pop.items, np.sort(pop.ability[:, 0]), pop.factor, pop.diag, N_LLMS)
    assert one.to_dataset()["population_ability"].dims == ("population_llm",)
    assert "population_dim" not in one.to_dataset().dims
    with pytest.raises(ValueError, match="needs 1-D abilities"):
        pop.nodes(5)


def test_a_population_of_other_dims_is_refused(world):
    resp, _, post = world
    pop = estimate_population(post, resp, random_seed=0)
    flat = Population(pop.items, np.sort(pop.ability[:, 0]), pop.factor, pop.diag, N_LLMS)
    with pytest.raises(UserInputError, match="1-D abilities but the posterior 2-D"):
        D.design_curves(post, sizes=[10], max_draws=20, population=flat)


def test_calibrate_fitted_saves_a_population_for_an_md_posterior(world):
    from bayes_microbench.irt.calibration import calibrate_fitted

    resp, _, post = world
    misfit = calibrate_fitted(post, resp, random_seed=0, max_draws=40)
    assert misfit.population is not None and misfit.population.n_dims == 2
    assert Misfit.from_dataset(misfit.to_dataset()).population.ability.shape == (N_LLMS, 2)


# ------------------------------------------------------- pairs vs quadrature
#: Largest |pair path - 1-D quadrature| allowed on one draw's curve. Measured on this
#: test's posterior: 0.0023 (md, 64 abilities) and 0.0020 (1-D pair path); at 400 items
#: and sizes 10, 50, 200: 0.0031 and 0.0027 (docs/decisions/0030).
PAIR_TOLERANCE = 0.01


def test_pair_path_agrees_with_the_1d_quadrature_on_a_degenerate_md_posterior():
    loadings, intercept = md_truth(80, zero_extra=True, seed=3)
    md = md_posterior(loadings, intercept, noise=0.05, zero_extra=True)
    one = xr.Dataset(
        {"discrimination": md["mdisc"], "difficulty": md["difficulty"]}, coords={"item": md["item"]}
    )
    d_md, d_1 = item_draws(md, multidim=True, max_draws=20), item_draws(one, max_draws=20)
    np.testing.assert_allclose(d_md.prob(np.zeros((1, 1, 2))), d_1.prob(np.zeros((1, 1))))
    design = D.random_design([10, 40], d_1.n_items, d_1.n_draws, 0)
    quad = D._curves(d_1, design, D.DEFAULT_GAPS, None, monotone=False)
    pairs_md = D._curves(d_md, design, D.DEFAULT_GAPS, None, monotone=False)
    pairs_1 = D._curves(d_1, design, D.DEFAULT_GAPS, None, monotone=False, pair_path=True)
    assert np.isfinite(quad).all() and np.isfinite(pairs_md).all()
    assert np.abs(pairs_md - quad).max() < PAIR_TOLERANCE
    assert np.abs(pairs_1 - quad).max() < PAIR_TOLERANCE
    # and the curves are far from flat: the agreement is not that of two constants
    assert quad[:, 0, 0].max() < 0.55 and quad[:, 1, -1].min() > 0.99
    # the MDADs read from both agree within a bin
    a = D.design_curves(one, design, draws=d_1)["mdad"].to_numpy()
    b = D.design_curves(md, design, draws=d_md)["mdad"].to_numpy()
    np.testing.assert_allclose(a, b, atol=0.5)


def test_pair_abilities_are_a_normal_sample_or_the_saved_population(world):
    theta = D.pair_abilities(None, 2)
    assert theta.shape == (D.PAIR_ABILITIES, 2)
    # low discrepancy: closer to Normal(0, I) than a random sample's 1/8 sd of the mean
    np.testing.assert_allclose(theta.mean(axis=0), 0.0, atol=0.08)
    np.testing.assert_allclose(np.cov(theta.T), np.eye(2), atol=0.12)
    assert D.pair_abilities(None, 0).shape == (D.PAIR_ABILITIES,)
    resp, _, post = world
    pop = estimate_population(post, resp, random_seed=0)
    sub = D.pair_abilities(pop, 2)
    assert sub.shape == (D.PAIR_ABILITIES, 2)
    assert (sub[:, None, :] == pop.ability[None, :, :]).all(axis=2).any(axis=1).all()
    np.testing.assert_array_equal(sub, D.pair_abilities(pop, 2))  # fixed seed


# -------------------------------------------- predicted vs realized on md llms
def test_md_curve_matches_the_realized_share_of_correctly_ranked_pairs():
    """A fixed 20-item subset of a 2-D benchmark: the predicted P(correct | gap) against
    the share of pairs of 300 simulated llms it ranks correctly, in 3-point gap bins.

    Tolerance: a bin's share rests on 2500-13500 pairs that share llms; over response
    seeds 21-30 its deviation from the prediction measured at most 0.030, and that of
    the pooled share over the gaps below 15 points at most 0.016: 0.06 and 0.03.
    """
    loadings, intercept = md_truth(100, seed=11)
    post = md_posterior(loadings, intercept, noise=0.02, seed=2)
    subset = [f"q{i}" for i in range(0, 100, 5)]
    res = D.design_curves(post, subset=subset, population=None, max_draws=40)
    curve = res["p_correct_mean"].to_numpy()[0]
    gaps = res["gap"].to_numpy()
    y, _ = md_responses(loadings, intercept, 300, seed=21)
    full = y.mean(axis=1)
    sub = y[:, ::5].mean(axis=1)
    i, j = np.triu_indices(len(full), k=1)
    gap = np.abs(full[i] - full[j]) * 100.0
    keep = (gap > 0) & (gap < 30)
    sign = np.sign(full[i] - full[j])
    correct = (np.sign(sub[i] - sub[j]) == sign)[keep]
    predicted = np.interp(gap[keep], gaps, curve)
    edges = np.arange(0.0, 18.0, 3.0)
    bins = np.digitize(gap[keep], edges)
    checked = 0
    for b in np.unique(bins):
        inside = bins == b
        if inside.sum() < 500:
            continue
        checked += 1
        assert abs(correct[inside].mean() - predicted[inside].mean()) < 0.06, b
    assert checked >= 4
    low = gap[keep] < 15
    assert abs(correct[low].mean() - predicted[low].mean()) < 0.03
    # the subset is far from perfect: the check has something to get wrong
    assert correct[low].mean() < 0.85


# ------------------------------------------------------------ selectors
def test_selectors_through_the_design_on_an_md_posterior(world):
    _, _, post = world
    for name in ("random", "stratified-confidence", "anchor-points", "random-subtask-equal"):
        ids, _, weights, _ = D.select_from_posterior(post, name, 12, random_seed=0)
        assert len(set(ids)) == 12 and np.isclose(weights.sum(), 1.0)
        assert D.select_from_posterior(post, name, 12, random_seed=0)[0] == ids
    source, ability = D.simulate_source(
        item_draws(post, multidim=True), 50, np.random.default_rng(0)
    )
    assert source.shape == (50, N_ITEMS) and ability.shape == (50, 2)
    res = D.design_curves(
        post,
        selector="stratified-confidence",
        sizes=[10],
        n_replicates=2,
        n_source=60,
        max_draws=20,
    )
    assert np.isfinite(res["p_correct_mean"]).all()


def test_both_bayesian_selectors_choose_from_md_draws(world):
    _, _, post = world
    for name in ("bayes-fisher", "bayes-ranking"):
        ids, subtasks, weights, _ = D.select_from_posterior(post, name, 8, random_seed=0)
        again = D.select_from_posterior(post, name, 8, random_seed=0)[0]
        assert len(set(ids)) == 8 and len(subtasks) == 8 and ids == again
        assert np.all(np.asarray(weights) > 0) and np.isclose(np.sum(weights), 1.0)


# ------------------------------------------------------------ the commands
@pytest.fixture(scope="module")
def md_file(world, tmp_path_factory):
    """A saved md posterior (120 draws, as a file must have 100) with its D-dim population."""
    from bayes_microbench.irt.io import add_calibration

    resp, _, _ = world
    loadings, intercept = md_truth()
    post = md_posterior(loadings, intercept, n_draws=60)
    path = write_posterior(tmp_path_factory.mktemp("md") / "md.nc", post)
    add_calibration(path, _misfit(estimate_population(post, resp, random_seed=0)))
    return path


@pytest.mark.long
def test_mdad_and_plan_commands_on_an_md_posterior(md_file, tmp_path, capsys):
    out = tmp_path / "mdad"
    code = main(
        [
            "mdad",
            "--posterior",
            str(md_file),
            "--sizes",
            "10,40",
            "--output",
            str(out),
            "--json",
            "--seed",
            "1",
        ]
    )
    assert code == 0
    rows = json.loads(capsys.readouterr().out)["mdad"]
    assert [r["n_items"] for r in rows] == [10, 40]
    assert 0 < rows[1]["mdad"] < rows[0]["mdad"] <= 30
    assert all(r["mdad_lower"] <= r["mdad"] <= r["mdad_upper"] for r in rows)
    curves = xr.open_dataset(out / "curves.nc")
    assert "2-D abilities of the 200 fitted llms" in curves.attrs["population"]
    code = main(["plan", "--posterior", str(md_file), "--delta", "10", "--json", "--seed", "1"])
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    assert 2 <= plan["n_items"] <= N_ITEMS
    assert plan["n_items_lower"] <= plan["n_items"] <= plan["n_items_upper"]
    table = {r["gap"]: r["n_items"] for r in plan["table"]}
    assert table[10.0] <= table[5.0]  # a larger gap needs no more items
    # --raw-model: the prior's Normal(0, I_2) instead of the saved population
    code = main(
        [
            "mdad",
            "--posterior",
            str(md_file),
            "--sizes",
            "10",
            "--output",
            str(tmp_path / "raw"),
            "--raw-model",
            "--quiet",
        ]
    )
    assert code == 0
    raw = xr.open_dataset(tmp_path / "raw" / "curves.nc")
    assert raw.attrs["population"].startswith("prior Normal(0, I_2)")
    # select --posterior md with a frequentist selector
    subset = tmp_path / "subset.json"
    code = main(
        [
            "select",
            "--posterior",
            str(md_file),
            "--selector",
            "stratified-confidence",
            "--n",
            "10",
            "--output",
            str(subset),
            "--quiet",
        ]
    )
    assert code == 0
    assert len(json.loads(subset.read_text())["item_ids"]) == 10


def test_bad_input_on_an_md_posterior_is_one_line(md_file, tmp_path, capsys):
    cases = [
        (
            [
                "mdad",
                "--posterior",
                str(md_file),
                "--sizes",
                "10,500",
                "--output",
                str(tmp_path / "x"),
            ],
            "larger than the benchmark",
        ),
        (["plan", "--posterior", str(md_file), "--delta", "5", "--max-draws", "20"], "--max-draws"),
        (
            [
                "select",
                "--posterior",
                str(md_file),
                "--selector",
                "bayes-fisher",
                "--n",
                "10",
                "--output",
                str(tmp_path / "s.json"),
            ],
            None,
        ),
    ]
    for argv, needle in cases:
        code = main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        if needle is None and code == 0:  # a Bayesian selector that takes md draws
            continue
        assert code == 2 and len(err) == 1, (argv, err)
        assert needle is None or needle in err[0]
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------- subset widening in D dims
def _masks(rng, count, n_items, size):
    order = np.argsort(rng.random((count, n_items)), axis=1)[:, :size]
    masks = np.zeros((count, n_items), dtype=bool)
    np.put_along_axis(masks, order, True, axis=1)
    return masks


def test_md_error_vectors_reduce_to_the_1d_ones_and_are_rotation_invariant():
    from bayes_microbench.population import _error_vectors, _score_weights

    rng = np.random.default_rng(4)
    prob = rng.uniform(0.2, 0.8, N_ITEMS)
    slope = rng.uniform(0.1, 0.6, N_ITEMS)
    masks = _masks(rng, 5, N_ITEMS, 15)
    w1, info1 = _score_weights(prob, slope)
    one_d = _error_vectors(w1, slope, info1, masks)
    flat = np.stack([slope, np.zeros(N_ITEMS)], axis=1)  # the second dim carries nothing
    w2, info2 = _score_weights(prob, flat)
    np.testing.assert_allclose(info2, info1)
    np.testing.assert_allclose(_error_vectors(w2, flat, info2, masks), one_d, rtol=1e-12)
    # a rotation of the ability space moves every gradient, not the error of the estimate
    grad = rng.normal(0.0, 0.4, (N_ITEMS, 2))
    angle = 0.7
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    w, info = _score_weights(prob, grad)
    v = _error_vectors(w, grad, info, masks)
    wr, infor = _score_weights(prob, grad @ rot)
    np.testing.assert_allclose(_error_vectors(wr, grad @ rot, infor, masks), v, atol=1e-12)
    assert not np.allclose(v, one_d)
    # the unobserved items carry -1/|U| and the observed ones the ability's correction
    np.testing.assert_allclose(v[~masks], -1.0 / (N_ITEMS - 15))


def test_score_widens_an_md_subset_that_loads_on_one_cluster(world):
    from bayes_microbench.scoring import score

    resp, _, post = world
    pop = estimate_population(post, resp)
    # misfit the 2-D model leaves on the first half of the items only
    half = np.arange(N_ITEMS) < N_ITEMS // 2
    clustered = Population(
        items=pop.items,
        ability=pop.ability,
        factor=np.where(half[:, None], 0.3, 0.0),
        diag=np.zeros(N_ITEMS),
        n_llms=pop.n_llms,
    )
    held = resp.isel(llm=np.arange(40))
    with_pop = _misfit(clustered)
    widths = {}
    for design, items in {"cluster": np.arange(12), "random": np.arange(0, N_ITEMS, 5)}.items():
        for name, m in (
            ("none", dataclasses.replace(with_pop, population=None)),
            ("population", with_pop),
        ):
            res = score(post, held.isel(item=items), misfit=m, random_seed=3)
            lo, hi = res["accuracy_interval"].values.T
            widths[design, name] = float(np.median(hi - lo))
            if m.population is not None:
                assert "widened for each llm's subset" in res.attrs["misfit"]
    # the one-cluster subset is widened; a spread-out one of the same size hardly
    assert widths["cluster", "population"] > 1.25 * widths["cluster", "none"]
    assert widths["random", "population"] < 1.02 * widths["random", "none"]


def test_md_excess_if_added_is_the_subset_excess_of_the_larger_subset(world):
    """The D-dim one-pass update equals :meth:`subset_excess` recomputed for each
    ``S + {c}``; items of the loaded cluster raise the excess, the others lower it."""
    resp, _, post = world
    pop = estimate_population(post, resp)
    half = np.arange(N_ITEMS) < N_ITEMS // 2
    clustered = dataclasses.replace(
        pop, factor=np.where(half[:, None], 0.1, 0.0), diag=np.full(N_ITEMS, 0.01)
    )
    rng = np.random.default_rng(4)
    prob = rng.uniform(0.2, 0.8, N_ITEMS)
    grad = (prob * (1 - prob))[:, None] * rng.normal(0.8, 0.5, (N_ITEMS, 2))
    seen = np.zeros(N_ITEMS, dtype=bool)
    seen[rng.choice(N_ITEMS // 2, 10, replace=False)] = True  # the loaded half only
    cand = np.nonzero(~seen)[0]
    fast = clustered.excess_if_added(prob, grad, seen, cand, random_seed=9)
    slow = excess_of_each_grown(clustered, prob, grad, seen, cand, random_seed=9)
    np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-15)
    # adding an item of the loaded cluster raises the excess; one of the other half lowers it
    inside, outside = fast[cand < N_ITEMS // 2], fast[cand >= N_ITEMS // 2]
    assert np.median(inside) > 0 > np.median(outside)
    # about the item shift (an item-shifted calibration's widening) the update holds too
    assert clustered.item_shift is not None
    shifted = clustered.excess_if_added(prob, grad, seen, cand, random_seed=9, about_shift=True)
    slow = excess_of_each_grown(clustered, prob, grad, seen, cand, random_seed=9, about_shift=True)
    np.testing.assert_allclose(shifted, slow, rtol=1e-9, atol=1e-15)

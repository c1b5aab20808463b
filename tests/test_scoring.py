"""Scoring a new llm against an item posterior: exact math on simulated truth, no MCMC."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import xarray as xr

from bayes_microbench import Responses, UserInputError, simulate_responses
from bayes_microbench.misfit import Misfit, estimate_misfit
from bayes_microbench.posterior import item_draws
from bayes_microbench.scoring import pairwise_ranking, score, wilson_interval
from bayes_microbench.testing import posterior_from_truth

from .conftest import write_posterior


@pytest.fixture(scope="module")
def world():
    resp, truth = simulate_responses(
        "gpqa", n_llms=200, n_items=150, random_seed=11, return_truth=True
    )
    post = posterior_from_truth(truth, n_chains=2, n_draws=100, noise=0.03, random_seed=2)
    return resp, truth, post


def _random_subsets(resp: Responses, n: int, seed: int) -> Responses:
    rng = np.random.default_rng(seed)
    vals = resp.values.copy()
    keep = np.argsort(rng.random(vals.shape), axis=1)[:, :n]
    mask = np.ones(vals.shape, dtype=bool)
    np.put_along_axis(mask, keep, False, axis=1)
    vals[mask] = np.nan
    return Responses.from_arrays(vals, resp.llms, resp.items, subtask=resp.item_subtask)


def test_all_items_observed_is_exact_and_narrower_than_a_subset(world):
    resp, _, post = world
    few = resp.isel(llm=slice(0, 10))
    full = score(post, few, random_seed=0)
    np.testing.assert_allclose(full["accuracy_mean"], few.accuracy().to_numpy())
    lo, hi = (
        full["accuracy_interval"].sel(ci_bound="lower"),
        full["accuracy_interval"].sel(ci_bound="upper"),
    )
    obs = few.accuracy().to_numpy()
    assert ((lo <= obs) & (obs <= hi)).all()
    sub = score(post, few.isel(item=slice(0, 20)), random_seed=0)
    width_full = (hi - lo).to_numpy()
    width_sub = sub["accuracy_interval"].diff("ci_bound").squeeze().to_numpy()
    assert (width_full < width_sub).all() and width_sub.min() > 0.02


def test_interval_calibration_on_simulated_llms(world):
    """The realized full accuracy lies in the 90% interval for 80-97% of 200 llms."""
    resp, _, post = world
    res = score(post, _random_subsets(resp, 30, seed=5), ci_prob=0.9, random_seed=1)
    iv = res["accuracy_interval"].to_numpy()
    real = resp.accuracy().to_numpy()
    coverage = ((iv[:, 0] <= real) & (real <= iv[:, 1])).mean()
    assert 0.80 <= coverage <= 0.97, coverage
    # Bayesian intervals borrow strength from the item model: narrower than Wilson's
    wilson = res["binomial_interval"].to_numpy()
    assert (iv[:, 1] - iv[:, 0]).mean() < 0.75 * (wilson[:, 1] - wilson[:, 0]).mean()
    assert res["accuracy_interval"].attrs["ci_prob"] == 0.9


def test_error_shrinks_with_more_items(world):
    resp, _, post = world
    real = resp.accuracy().to_numpy()
    errs = []
    for n in (10, 40, 120):
        res = score(post, _random_subsets(resp, n, seed=n), max_draws=100, random_seed=3)
        errs.append(np.abs(res["accuracy_mean"].to_numpy() - real).mean())
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 0.02


def test_same_seed_same_numbers_and_dims(world):
    resp, _, post = world
    few = resp.isel(llm=slice(0, 5), item=slice(0, 30))
    a = score(post, few, random_seed=4)
    b = score(post, few, random_seed=4)
    xr.testing.assert_identical(a, b)
    assert a["ability"].dims == ("chain", "draw", "llm")
    assert list(a["ci_bound"].to_numpy()) == ["lower", "upper"]


def test_unknown_items_are_listed(world):
    resp, _, post = world
    vals = np.array([[1.0, 0.0, 1.0]])
    bad = Responses.from_arrays(vals, ["x"], [resp.items[0], "nope-1", "nope-2"])
    with pytest.raises(UserInputError, match=r"2 item id\(s\) not in the posterior.*nope-1"):
        score(post, bad)


def test_pairwise_ranking_probabilities(world):
    resp, truth, post = world
    order = np.argsort(truth.expected_accuracy.to_numpy())
    pick = resp.isel(llm=[order[0], order[-1], order[100]], item=slice(0, 60))
    res = pairwise_ranking(score(post, pick, random_seed=0))
    p = res["p_a_better"].to_numpy()
    assert p[1, 0] > 0.8 > 0.2 > p[0, 1]  # the best llm beats the worst on the full benchmark
    assert np.all(p + p.T <= 1.0 + 1e-12)
    # observed on every item, the full-benchmark ranking is known: probability 0 or 1
    known = pairwise_ranking(score(post, resp.isel(llm=[order[0], order[-1]]), random_seed=0))
    acc = resp.isel(llm=[order[0], order[-1]]).accuracy().to_numpy()
    assert known["p_a_better"].to_numpy()[1, 0] == float(acc[1] > acc[0])
    m = res["p_subset_ranking_correct"].to_numpy()
    assert np.all((m >= 0) & (m <= 1))


def test_wilson_matches_closed_form():
    lo, hi = wilson_interval(np.array(5), np.array(20), 0.95)
    assert abs(lo - 0.1119) < 1e-3 and abs(hi - 0.4687) < 1e-3


def test_item_draws_thins_and_validates(world):
    _, _, post = world
    d = item_draws(post, max_draws=50)
    assert d.n_draws == 50 and d.n_items == 150
    with pytest.raises(UserInputError, match="difficulty"):
        item_draws(post.drop_vars("difficulty"))


def test_cli_score_json(world, tmp_path, capsys):
    from bayes_microbench import save_responses
    from bayes_microbench.cli import main

    resp, _, post = world
    p = write_posterior(tmp_path / "post.nc", post)
    save_responses(resp.isel(llm=slice(0, 3), item=slice(0, 25)), tmp_path / "new.csv")
    assert (
        main(
            [
                "score",
                "--posterior",
                str(p),
                "--responses",
                str(tmp_path / "new.csv"),
                "--raw-model",
                "--json",
                "--quiet",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert len(out["llms"]) == 3
    row = out["llms"][0]
    assert set(row) >= {"llm", "accuracy_mean", "accuracy_lower", "accuracy_upper", "n_observed"}
    assert row["accuracy_lower"] <= row["accuracy_mean"] <= row["accuracy_upper"]
    assert row["n_observed"] == 25


def test_cli_score_disagreeing_items_exit_2(world, tmp_path, capsys):
    from bayes_microbench.cli import main

    _, _, post = world
    p = write_posterior(tmp_path / "post.nc", post)
    (tmp_path / "bad.csv").write_text("llm,zz-1,zz-2\nm1,1,0\n")
    args = ["score", "--posterior", str(p), "--raw-model"]
    assert main([*args, "--responses", str(tmp_path / "bad.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "zz-1" in err[0] and "not in the posterior" in err[0]


# ---- misfit: item-split cross-validation recalibration of the predictive


def _irt_p(truth, ability: np.ndarray) -> np.ndarray:
    a = truth.discrimination.to_numpy()
    b = truth.difficulty.to_numpy()
    c = truth.guessing.to_numpy()
    return c + (1 - c) / (1 + np.exp(-a * (ability[:, None] - b)))


@pytest.fixture(scope="module")
def injected():
    """Model data, except that on the items outside a fixed 50-item design every
    llm's probabilities of success are shifted by d ~ Normal(0, 0.08) (one d per
    llm): an llm-level deviation the observed items cannot reveal. Returns the
    responses, the design, the posterior and the realized sd of the deviation in
    expected accuracy on the other items."""
    _, truth = simulate_responses(
        "mmlu-pro", n_llms=500, n_items=150, random_seed=21, return_truth=True
    )
    rng = np.random.default_rng(8)
    p = _irt_p(truth, truth.ability.to_numpy())
    d = 0.08 * rng.standard_normal(p.shape[0])
    design = np.arange(50)
    shifted = p.copy()
    shifted[:, 50:] = np.clip(p[:, 50:] + d[:, None], 0.0, 1.0)
    vals = (rng.random(p.shape) < shifted).astype(float)
    resp = Responses.from_arrays(vals, truth.ability.index, truth.difficulty.index)
    post = posterior_from_truth(truth, n_chains=2, n_draws=50, noise=0.03, random_seed=3)
    true_sd = float(np.std(shifted[:, 50:].mean(axis=1) - p[:, 50:].mean(axis=1)))
    return resp, design, post, true_sd


def test_misfit_is_null_on_data_from_the_model(world):
    resp, _, post = world
    mf = estimate_misfit(post, resp, sizes=(20, 60), n_splits=2, max_draws=50, random_seed=0)
    assert mf.n_observed.tolist() == [20, 60]
    # no extra deviation (bound: 1 accuracy point), a centre close to the IRT prediction
    # and standardized residuals close to Normal(0, 1) (5%/95% quantiles near -/+1.645)
    assert (mf.excess_sd < 0.01).all(), mf.describe()
    assert (np.abs(mf.linear_slope - 1) < 0.2).all(), mf.describe()
    assert np.abs(mf.centre - mf.knots).max() < 0.03, mf.describe()
    q05, q95 = mf.residual_quantile(mf.n_observed, np.array([[0.05], [0.95]]))
    assert np.all(np.abs(q05 + 1.645) < 0.3) and np.all(np.abs(q95 - 1.645) < 0.3), (q05, q95)
    # same seed, same estimate
    again = estimate_misfit(post, resp, sizes=(20, 60), n_splits=2, max_draws=50, random_seed=0)
    np.testing.assert_array_equal(mf.quantiles, again.quantiles)
    np.testing.assert_array_equal(mf.centre, again.centre)


def test_misfit_recovers_an_injected_llm_level_deviation(injected):
    resp, design, post, true_sd = injected
    assert 0.04 < true_sd < 0.12  # the injected deviation is material (4-12 points)
    train = resp.isel(llm=slice(0, 300))
    mf = estimate_misfit(post, train, subset=list(resp.items[design]), max_draws=50, random_seed=0)
    assert mf.design.startswith("fixed subset of 50")
    # the deviation is independent of ability: slope ~ 1 and sd within 25% of the truth
    assert abs(mf.linear_slope[0] - 1) < 0.15, mf.describe()
    assert abs(mf.excess_sd[0] - true_sd) < 0.25 * true_sd, (mf.describe(), true_sd)


def test_score_with_misfit_widens_intervals_and_restores_coverage(injected):
    resp, design, post, _ = injected
    train, held = resp.isel(llm=slice(0, 300)), resp.isel(llm=slice(300, 500))
    mf = estimate_misfit(post, train, subset=list(resp.items[design]), max_draws=50, random_seed=0)
    real = held.accuracy().to_numpy()
    sub = held.isel(item=design)
    plain = score(post, sub, max_draws=100, random_seed=1)
    fixed = score(post, sub, max_draws=100, random_seed=1, misfit=mf)
    assert plain.attrs["misfit"].startswith("none")
    assert "cross-validation" in fixed.attrs["misfit"]

    def coverage(res):
        iv = res["accuracy_interval"].to_numpy()
        return ((iv[:, 0] <= real) & (real <= iv[:, 1])).mean(), (iv[:, 1] - iv[:, 0]).mean()

    cov_plain, w_plain = coverage(plain)
    cov_fixed, w_fixed = coverage(fixed)
    assert cov_plain < 0.75 and 0.82 <= cov_fixed <= 0.97, (cov_plain, cov_fixed)
    assert w_fixed > 1.3 * w_plain
    # llms observed on every item keep their known accuracy
    full = score(post, held.isel(llm=slice(0, 5)), max_draws=50, random_seed=1, misfit=mf)
    np.testing.assert_allclose(full["accuracy_mean"], real[:5])


def _toy_misfit() -> Misfit:
    levels = np.linspace(0, 1, 5)
    return Misfit(
        n_observed=np.array([10, 100]),
        knots=np.array([[0.2, 0.4, 0.6], [0.2, 0.4, 0.6]]),
        centre=np.array([[0.3, 0.4, 0.5], [0.2, 0.4, 0.6]]),
        variance=np.array([[0.01, 0.01, 0.04], [0.0004, 0.0004, 0.0004]]),
        quantiles=np.array([[-3.0, -1.0, 0.0, 1.0, 3.0], [-2.0, -1.0, 0.0, 1.0, 2.0]]),
        levels=levels,
        excess_sd=np.array([0.03, 0.02]),
        linear_slope=np.array([0.5, 0.6]),
        n_cases=np.array([100, 100]),
        n_llms=50,
        n_splits=2,
        design="random subsets",
        observed_weight=np.array([0.1, 0.5]),
        residual_centre=np.array([[0.0, 0.0, 0.0], [0.0, 0.1, 0.1]]),
    )


def test_misfit_roundtrip_and_bad_input(world, tmp_path):
    resp, _, post = world
    mf = _toy_misfit()
    path = tmp_path / "misfit.nc"
    mf.to_dataset().to_netcdf(path)
    back = Misfit.from_dataset(xr.load_dataset(path))
    for name in (
        "n_observed",
        "knots",
        "centre",
        "variance",
        "quantiles",
        "levels",
        "excess_sd",
        "linear_slope",
        "observed_weight",
        "residual_centre",
    ):
        np.testing.assert_array_equal(getattr(back, name), getattr(mf, name))
    assert (back.n_llms, back.n_splits, back.design) == (50, 2, "random subsets")
    # centre and variance: piecewise linear in the prediction, constant beyond the knots;
    # between sizes linear in log n, constant beyond the ends
    n_obs = np.array([5, 10, 10, np.sqrt(1000), 500])
    centre, scale = mf.at(n_obs, np.array([0.3, 0.5, 0.9, 0.4, 0.1]))
    np.testing.assert_allclose(centre, [0.35, 0.45, 0.5, 0.4, 0.2])
    np.testing.assert_allclose(scale, [0.1, np.sqrt(0.025), 0.2, np.sqrt(0.0052), 0.02])
    # the observed residual, less its regression on the prediction, moves the centre by
    # its weight, both interpolated the same way; a carry scales the move
    residual = np.array([0.1, -0.1, 0.0, 0.2, 0.2])
    predicted = np.array([0.3, 0.5, 0.9, 0.4, 0.1])
    moved, _ = mf.at(n_obs, predicted, residual)
    # at sqrt(1000) items: weight 0.3, and the residual's centre half of n=100's 0.1
    np.testing.assert_allclose(moved - centre, [0.01, -0.01, 0.0, 0.3 * (0.2 - 0.05), 0.1])
    half, _ = mf.at(n_obs, predicted, residual, carry=np.full(5, 0.5))
    np.testing.assert_allclose(half - centre, 0.5 * (moved - centre))
    # a calibration saved before the weight existed reads back without it and ignores it
    older = Misfit.from_dataset(
        mf.to_dataset().drop_vars(["misfit_observed_weight", "misfit_residual_centre"])
    )
    assert older.observed_weight is None
    np.testing.assert_allclose(
        older.at(n_obs, np.full(5, 0.4), residual)[0], mf.at(n_obs, np.full(5, 0.4))[0]
    )
    # residual quantiles interpolate in probability, then in log n
    r = mf.residual_quantile(np.array([10, np.sqrt(1000), 100]), np.array([[0.125], [0.5], [1.0]]))
    np.testing.assert_allclose(r, [[-2.0, -1.75, -1.5], [0.0, 0.0, 0.0], [3.0, 2.5, 2.0]])
    with pytest.raises(UserInputError, match="re-estimate"):
        Misfit.from_dataset(xr.Dataset({"misfit_slope": ("n_items", [0.5])}))
    with pytest.raises(UserInputError, match="leave fewer than 10 unobserved"):
        estimate_misfit(post, resp, sizes=(145,), max_draws=10)
    with pytest.raises(UserInputError, match=r"not in the responses.*nope"):
        estimate_misfit(post, resp, subset=["nope"], max_draws=10)
    with pytest.raises(UserInputError, match="n_knots"):
        estimate_misfit(post, resp, sizes=(20,), n_knots=-1, max_draws=10)


@pytest.fixture(scope="module")
def curved():
    """Model data, except that on the items outside a fixed 40-item design each llm's
    probabilities of success move by ``0.1 * (ability**2 - 1)`` (the IRT prediction
    is too low at both ends of the ability range and too high in the middle: a
    curved misfit) plus a heavy-tailed llm-level deviation ``0.02 * t(3)``."""
    _, truth = simulate_responses(
        "mmlu-pro", n_llms=700, n_items=140, random_seed=31, return_truth=True
    )
    rng = np.random.default_rng(9)
    theta = truth.ability.to_numpy()
    p = _irt_p(truth, theta)
    shift = 0.1 * (theta**2 - 1) + 0.02 * rng.standard_t(3, size=len(theta))
    shifted = p.copy()
    shifted[:, 40:] = np.clip(p[:, 40:] + shift[:, None], 0.0, 1.0)
    vals = (rng.random(p.shape) < shifted).astype(float)
    resp = Responses.from_arrays(vals, truth.ability.index, truth.difficulty.index)
    post = posterior_from_truth(truth, n_chains=2, n_draws=50, noise=0.03, random_seed=4)
    return resp, np.arange(40), post, theta


def test_curved_heavy_tailed_misfit_is_calibrated_at_both_ends(curved):
    resp, design, post, theta = curved
    train, held = resp.isel(llm=slice(0, 400)), resp.isel(llm=slice(400, 700))
    real = held.accuracy().to_numpy()
    sub = held.isel(item=design)
    items = list(resp.items[design])
    extreme = np.abs(theta[400:]) > 1.0  # about a third of the llms, at both ends

    def coverage(mf):
        res = score(post, sub, max_draws=100, random_seed=1, misfit=mf)
        iv = res["accuracy_interval"].to_numpy()
        inside = (iv[:, 0] <= real) & (real <= iv[:, 1])
        return inside.mean(), inside[extreme].mean(), (iv[:, 1] - iv[:, 0]).mean()

    plain_all, _, _ = coverage(None)
    curved_mf = estimate_misfit(post, train, subset=items, max_draws=50, random_seed=0)
    line_mf = estimate_misfit(post, train, subset=items, max_draws=50, random_seed=0, n_knots=0)
    cov_all, cov_ends, width = coverage(curved_mf)
    line_all, line_ends, line_width = coverage(line_mf)
    # the centre follows the curve: above the IRT prediction at the ends, below in the middle
    gap = curved_mf.centre[0] - curved_mf.knots[0]
    assert gap[0] > 0.02 and gap[-1] > 0.02 and gap[len(gap) // 2] < 0, curved_mf.describe()
    assert plain_all < 0.7, plain_all
    # 300 held-out llms and a calibration from 400: coverage within about 3 standard errors
    assert 0.8 <= cov_all <= 0.97 and cov_ends >= 0.78, (cov_all, cov_ends)
    # a straight-line centre can only reach coverage with a wider scale (it absorbs the
    # curve as noise): intervals at least 15% wider, and no better at the ends
    assert width < 0.85 * line_width, (width, line_width)
    assert line_ends <= cov_ends + 0.03, (line_ends, cov_ends, line_all)


@pytest.fixture(scope="module")
def shifted():
    """Model data, except that every llm's probabilities of success on every item move
    by d ~ Normal(0, 0.08) (one d per llm): a misfit the ability cannot absorb (it
    moves easy and hard items alike) but that the observed items of a random subset
    reveal."""
    _, truth = simulate_responses(
        "mmlu-pro", n_llms=500, n_items=300, random_seed=41, return_truth=True
    )
    rng = np.random.default_rng(12)
    d = 0.08 * rng.standard_normal(truth.ability.size)
    p = np.clip(_irt_p(truth, truth.ability.to_numpy()) + d[:, None], 0.0, 1.0)
    vals = (rng.random(p.shape) < p).astype(float)
    resp = Responses.from_arrays(vals, truth.ability.index, truth.difficulty.index)
    post = posterior_from_truth(truth, n_chains=2, n_draws=50, noise=0.03, random_seed=5)
    return resp, post


def test_misfit_weighs_the_observed_residual_where_it_carries_over(shifted, world):
    resp, post = shifted
    train, held = resp.isel(llm=slice(0, 300)), resp.isel(llm=slice(300, 500))
    mf = estimate_misfit(post, train, sizes=(20, 100), max_draws=50, random_seed=0)
    assert mf.observed_weight is not None and (mf.observed_weight > 0.3).all(), mf.describe()
    assert "observed-residual weight" in mf.describe()
    # on data from the model the observed items say nothing more than the ability does
    model_resp, _, model_post = world
    null = estimate_misfit(model_post, model_resp, sizes=(20, 60), max_draws=50, random_seed=0)
    assert np.abs(null.observed_weight).max() < 0.2, null.describe()
    real = held.accuracy().to_numpy()
    sub = _random_subsets(held, 100, 3)
    centre_m_only = dataclasses.replace(mf, observed_weight=None)

    def error_and_coverage(calibration):
        res = score(post, sub, max_draws=100, random_seed=1, misfit=calibration)
        iv = res["accuracy_interval"].to_numpy()
        inside = (iv[:, 0] <= real) & (real <= iv[:, 1])
        return np.abs(res["accuracy_mean"].to_numpy() - real).mean(), inside.mean()

    err, cov = error_and_coverage(mf)
    err_m, cov_m = error_and_coverage(centre_m_only)
    # 200 held-out llms: the weighted centre errs less and its interval covers at the
    # stated rate, within about 3 standard errors; the same scale around m alone does not
    assert err < err_m, (err, err_m)
    assert 0.83 <= cov <= 0.97, cov
    assert cov_m < cov, (cov_m, cov)

"""Design curves, Bayesian MDAD, planning and the Bayesian selectors (no MCMC)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayes_microbench import UserInputError, simulate_responses
from bayes_microbench import design as D
from bayes_microbench.posterior import item_draws
from bayes_microbench.selectors import get_selector
from bayes_microbench.testing import posterior_from_truth

from .conftest import write_posterior


@pytest.fixture(scope="module")
def world():
    resp, truth = simulate_responses(
        "gpqa", n_llms=60, n_items=160, random_seed=21, return_truth=True
    )
    post = posterior_from_truth(
        truth, n_chains=2, n_draws=60, noise=0.03, subtask=resp.item_subtask, random_seed=1
    )
    return resp, truth, post


def test_vectorized_equals_per_draw_loop(world):
    _, _, post = world
    draws = item_draws(post, max_draws=4)
    design = D.random_design([8, 40], draws.n_items, draws.n_draws, random_seed=3)
    gaps = np.arange(0.0, 12.5, 1.5)
    vec = D._curves(draws, design, gaps, None)
    ref = D._reference_curves_loop(draws, design, gaps)
    np.testing.assert_allclose(vec, ref, atol=2e-5)


def test_curve_matches_monte_carlo_of_the_definition():
    """Simulate the definition itself: population pairs, realized full gap, subset sign."""
    n_items, n_llms = 150, 2500
    resp, truth = simulate_responses(
        "gpqa", n_llms=n_llms, n_items=n_items, random_seed=8, return_truth=True
    )
    post = posterior_from_truth(truth, n_chains=1, n_draws=1, noise=0.0, random_seed=0)
    rng = np.random.default_rng(0)
    sub = rng.choice(n_items, 25, replace=False)
    gaps = np.arange(0.0, 20.5, 0.5)
    curve = D._curves(item_draws(post), D.fixed_design([sub], n_items, "subset"), gaps, None)[0, 0]
    y = resp.values
    i, j = rng.integers(0, n_llms, (2, 150_000))
    i, j = i[i != j], j[i != j]
    full = (y[i].mean(1) - y[j].mean(1)) * 100
    est = y[i][:, sub].mean(1) - y[j][:, sub].mean(1)
    correct = (np.sign(est) == np.sign(full)) & (full != 0)
    gap = np.abs(full)
    checked = 0
    for lo in range(2, 16, 2):  # bin 0-2 holds exact full ties (always wrong): skip it
        m = (gap >= lo) & (gap < lo + 2)
        if m.sum() < 3000:
            continue
        predicted = np.interp(gap[m], gaps, curve).mean()
        assert abs(correct[m].mean() - predicted) < 0.03, (lo, correct[m].mean(), predicted)
        checked += 1
    assert checked >= 5


def test_p_correct_increases_with_gap_and_size_and_mdad_shrinks(world):
    _, _, post = world
    res = D.design_curves(post, sizes=[10, 40, 150], max_draws=60, random_seed=0)
    mean = res["p_correct_mean"]
    assert (mean.diff("gap") >= 0).all()  # monotone by construction
    assert float(mean.sel(n_items=10, gap=20) - mean.sel(n_items=10, gap=1)) > 0.2
    at5 = mean.sel(gap=5.0).to_numpy()
    assert at5[0] < at5[1] < at5[2]
    mdad = res["mdad"].to_numpy()
    assert mdad[0] > mdad[1] > mdad[2]
    iv = res["mdad_interval"].to_numpy()
    assert (iv[:, 0] <= mdad).all() and (mdad <= iv[:, 1]).all()
    assert res["p_correct_band"].attrs["ci_prob"] == 0.9


def test_same_seed_same_curves(world):
    _, _, post = world
    a = D.design_curves(post, sizes=[20], max_draws=20, random_seed=5)
    b = D.design_curves(post, sizes=[20], max_draws=20, random_seed=5)
    c = D.design_curves(post, sizes=[20], max_draws=20, random_seed=6)
    np.testing.assert_array_equal(a["p_correct"], b["p_correct"])
    assert not np.array_equal(a["p_correct"], c["p_correct"])


def test_fixed_subset_and_bad_inputs(world):
    _, _, post = world
    items = post["item"].to_numpy()
    res = D.design_curves(post, subset=list(items[:30]), max_draws=20)
    assert res["n_items"].to_numpy().tolist() == [30]
    with pytest.raises(UserInputError, match=r"not in the posterior.*ghost"):
        D.design_curves(post, subset=["ghost", items[0]], max_draws=20)
    with pytest.raises(UserInputError, match="larger than the benchmark"):
        D.design_curves(post, sizes=[10, 500], max_draws=20)
    with pytest.raises(UserInputError, match=r"threshold must lie in \(0.5, 1\)"):
        D.design_curves(post, sizes=[10], threshold=0.4, max_draws=20)


def test_plan_needs_more_items_for_smaller_gaps(world):
    _, _, post = world
    res = D.plan(post, 5.0, prob=0.8, table_gaps=(3.0, 10.0), max_draws=30, random_seed=0)
    n = res["n_required"].sel(gap=[3.0, 5.0, 10.0]).to_numpy()
    assert n[0] >= n[1] >= n[2] and n[2] < n[0]
    # the size it reports does reach the probability on the mean curve
    assert float(res["p_correct_at_n"].sel(gap=5.0)) >= 0.8
    lo, hi = res["n_required_interval"].sel(gap=5.0).to_numpy()
    assert lo <= float(res["n_required"].sel(gap=5.0)) <= hi


@pytest.mark.parametrize("name", ["bayes-fisher", "bayes-ranking"])
def test_bayes_selectors_in_the_protocol_interface(world, name):
    resp, _, _ = world
    source = resp.values[:40]
    target = resp.values[40:]
    cls = type(get_selector(name))
    # the simulated items are 4-option 3PL items; the default 2PL has no guessing floor
    prepared = cls(model="3pl", n_options=4).prepare(source, resp.subtask_codes, None, 0)
    sel = prepared.select(20, 0)
    assert len(set(sel.items.tolist())) == 20 and abs(sel.weights.sum() - 1) < 1e-12
    again = cls(model="3pl", n_options=4).prepare(source, resp.subtask_codes, None, 0).select(20, 0)
    np.testing.assert_array_equal(sel.items, again.items)
    est = prepared.estimate(sel, target[:, sel.items])
    true = target.mean(axis=1)
    assert est.shape == (20,) and np.abs(est - true).mean() < 0.06
    # subtask balance: per-subtask counts follow the quotas
    bal = cls(subtask_balance=True)
    s2 = bal.prepare(source, resp.subtask_codes, None, 0).select(30, 0)
    counts = np.bincount(resp.subtask_codes[s2.items], minlength=resp.n_subtasks)
    share = np.bincount(resp.subtask_codes) / resp.n_items
    assert np.abs(counts - 30 * share).max() < 1.0 + 1e-9


def test_selector_design_ranks_better_than_random_at_small_n(world):
    _, _, post = world
    rnd = D.design_curves(post, sizes=[10], max_draws=40, random_seed=0)
    rank = D.design_curves(post, sizes=[10], selector="bayes-ranking", max_draws=40)
    gaps = slice(5.0, 20.0)
    assert float(rank["p_correct_mean"].sel(gap=gaps).mean()) > float(
        rnd["p_correct_mean"].sel(gap=gaps).mean()
    )


def test_cli_mdad_and_plan(world, tmp_path, capsys):
    import json

    from bayes_microbench.cli import main

    _, _, post = world
    p = write_posterior(tmp_path / "post.nc", post)
    out = tmp_path / "out"
    args = ["mdad", "--posterior", str(p), "--sizes", "10,40", "--output", str(out)]
    assert main([*args, "--max-draws", "100", "--quiet"]) == 0
    table = pd.read_csv(out / "mdad.csv")
    assert list(table.columns) == [
        "selector",
        "n_items",
        "mdad",
        "mdad_lower",
        "mdad_upper",
        "ci_prob",
    ]
    assert table["n_items"].tolist() == [10, 40] and (table["selector"] == "random").all()
    assert (out / "curves.csv").exists() and (out / "curves.nc").exists()
    capsys.readouterr()
    subset = tmp_path / "subset.txt"
    subset.write_text("\n".join([*post["item"].to_numpy()[:5], "nope"]) + "\n")
    assert main(["mdad", "--posterior", str(p), "--subset", str(subset), "--output", str(out)]) == 2
    assert main([*args, "--sizes", "10,999"]) == 2
    assert main([*args, "--threshold", "1.2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "nope" in err[0] and "999" in err[1] and "threshold" in err[2]
    assert (
        main(["plan", "--posterior", str(p), "--delta", "5", "--max-draws", "100", "--json"]) == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["n_items"] is not None and [r["gap"] for r in plan["table"]] == [1, 2, 3, 5, 10]

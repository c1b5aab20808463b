"""Adaptive evaluation on ``2pl-md`` posteriors (D = 2): rules, stop, save/load, ``adapt``.

Fast: a synthetic item posterior around a simulated multidimensional 2PL (no
MCMC). The goal rule's expected variance checked against the reweighted joint
draws computed directly; the md ``fisher`` rule against the matrix inverse it
short-cuts; replays reach the accuracy goal and cover the truth; a state
round-trips through JSON and is refused against another posterior; the
``adapt`` command replays an md posterior file, and bad input is one line, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from bayes_microbench.adaptive import (
    AdaptiveState,
    Reference,
    Settings,
    StateMismatchError,
    run_replay,
)
from bayes_microbench.cli import main

from .test_selectors_md import md_dataset, md_truth, respond

N_ITEMS = 120


@pytest.fixture(scope="module")
def sim():
    lam, icpt = md_truth(N_ITEMS, share=0.4, seed=11)
    post = md_dataset(lam, icpt, n_chains=2, n_draws=50, seed=2)
    y = respond(lam, icpt, 6, seed=12)
    items = [str(i) for i in post["item"].to_numpy()]
    return post, y, items


def answers(y, items, k):
    return {it: int(v) for it, v in zip(items, y[k], strict=True)}


def replay(post, y, items, k, **settings):
    s = Settings(**{"width": 0.14, "budget": 80, "minimum": 5, **settings})
    return run_replay(
        lambda av: AdaptiveState(post, settings=s, available=av), answers(y, items, k)
    )


@pytest.mark.long
@pytest.mark.parametrize("rule", ["goal", "fisher"])
def test_md_replay_reaches_the_accuracy_goal_and_covers_the_truth(sim, rule):
    post, y, items = sim
    covered = []
    for k in range(3):
        final, traj = replay(post, y, items, k, rule=rule)
        assert final["stopped"] == "goal"
        assert final["accuracy_upper"] - final["accuracy_lower"] <= 0.14 + 1e-12
        assert final["items_used"] < N_ITEMS
        assert len(final["ability_mean"]) == 2 and len(final["ability_sd"]) == 2
        asked = [i for step in traj for i in step["asked"]]
        assert len(asked) == len(set(asked)) == final["items_used"]
        covered.append(final["accuracy_lower"] <= y[k].mean() <= final["accuracy_upper"])
    assert sum(covered) >= 2, covered  # 90% intervals: 3 of 3 expected, 2 allowed


def test_the_goal_rule_is_the_reweighted_variance_on_md_draws(sim):
    post, y, items = sim
    st = AdaptiveState(post, settings=Settings(width=0.05, budget=100))
    st.record({items[i]: int(y[0, i]) for i in range(0, 30, 3)})
    st.state()
    observed = st._observed()
    cand = np.nonzero(~observed)[0][:15]
    got = st._expected_variance(cand)
    p = st._last_prob.astype(np.float64).copy()  # P(correct) under each joint draw
    p[:, observed] = 0.0
    want = []
    for i in cand:
        rest = np.ones(N_ITEMS, dtype=bool)
        rest[observed] = False
        rest[i] = False
        m, v = p[:, rest].sum(axis=1), (p[:, rest] * (1 - p[:, rest])).sum(axis=1)
        total = 0.0
        for lik in (p[:, i], 1 - p[:, i]):  # a right, then a wrong answer
            w = lik / lik.sum()
            mean = w @ m
            total += lik.mean() * (w @ v + w @ (m - mean) ** 2)
        want.append(total)
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_the_md_fisher_rule_is_the_c_optimal_reduction(sim):
    post, y, items = sim
    st = AdaptiveState(post, settings=Settings(rule="fisher", budget=100))
    st.record({items[i]: int(y[1, i]) for i in range(8)})
    st.state()
    cand = np.arange(20, 60)
    got = st._fisher(cand)
    m = st._mean
    theta = st._ability.mean(axis=0)
    cov = np.cov(st._ability, rowvar=False)
    p = m.prob(theta[None, None, :])[0, 0]
    lam = m.loadings[0]
    unobs = ~st._observed()
    g = (p * (1 - p))[unobs] @ lam[unobs]
    base = g @ cov @ g
    want = [
        base
        - g @ np.linalg.inv(np.linalg.inv(cov) + p[i] * (1 - p[i]) * np.outer(lam[i], lam[i])) @ g
        for i in cand
    ]
    np.testing.assert_allclose(got, want, rtol=1e-8)
    order = st.next_items(5)
    scores = st._fisher(np.array([items.index(i) for i in order]))
    assert (np.diff(scores) <= 1e-12).all()


def test_md_state_round_trips_and_is_refused_against_another_posterior(sim, tmp_path):
    post, y, items = sim
    st = AdaptiveState(
        post,
        settings=Settings(width=0.1, budget=60, goal="rank", rule="goal"),
        reference=Reference("ref", answers(y, items, 5)),
    )
    st.record({items[i]: int(y[2, i]) for i in range(12)})
    path = tmp_path / "state.json"
    st.to_json(str(path))
    back = AdaptiveState.from_json(str(path), post)
    assert back.state() == st.state()
    assert back.next_items(3) == st.next_items(3)
    assert json.loads(path.read_text())["summary"]["ability_mean"] == st.state()["ability_mean"]
    other = post.copy(deep=True)
    other["discrimination"][..., 1] *= -1.0  # the same norms and difficulties, other loadings
    with pytest.raises(StateMismatchError, match="another posterior"):
        AdaptiveState.from_json(str(path), other)


def _write_md(path: Path, post: xr.Dataset) -> Path:
    from bayes_microbench.irt.config import FORMAT_VERSION, IRTConfig

    cfg = IRTConfig.from_dict({"model": "2pl-md", "n_dims": 2})
    tree = xr.DataTree.from_dict({"posterior": post})
    tree.attrs.update(
        config_json=cfg.to_json(), config_hash=cfg.hash(), format_version=FORMAT_VERSION
    )
    tree.to_netcdf(path)
    return path


def test_adapt_command_on_an_md_posterior(sim, tmp_path, capsys):
    post, y, items = sim
    nc = _write_md(tmp_path / "md.nc", post)
    full = tmp_path / "full.csv"
    lines = ["llm," + ",".join(items)] + [
        f"m{k}," + ",".join(str(int(v)) for v in y[k]) for k in range(2)
    ]
    full.write_text("\n".join(lines) + "\n")
    out = tmp_path / "replay.json"
    code = main(
        [
            "adapt",
            "--posterior",
            str(nc),
            "--replay",
            str(full),
            "--width",
            "14",
            "--budget",
            "80",
            "--output",
            str(out),
            "--json",
        ]
    )
    assert code == 0
    rows = json.loads(capsys.readouterr().out)["llms"]
    assert [r["stopped"] for r in rows] == ["goal", "goal"]
    # one step from the prior, then a bad answers file: one line, exit 2
    step = tmp_path / "next.json"
    assert main(["adapt", "--posterior", str(nc), "--output", str(step), "--quiet"]) == 0
    assert json.loads(step.read_text())["action"] == "next"
    capsys.readouterr()
    bad = tmp_path / "bad.csv"
    bad.write_text("llm,q0,nope\nm0,1,0\n")
    code = main(
        [
            "adapt",
            "--posterior",
            str(nc),
            "--responses",
            str(bad),
            "--output",
            str(tmp_path / "x.json"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "not in the posterior" in err[0], err
    assert not (tmp_path / "x.json").exists()


def test_the_md_goal_rule_sees_each_candidates_widening(sim):
    """With a 2-D population the look-ahead is :meth:`Population.excess_if_added` at the
    D-dim plug-in ability (scaled to the number correct), not zero as before."""
    from bayes_microbench.misfit import Misfit
    from bayes_microbench.population import Population
    from bayes_microbench.scoring import plugin_response

    post, y, items = sim
    half = np.arange(N_ITEMS) < N_ITEMS // 2
    pop = Population(
        items=np.array(items),
        ability=np.random.default_rng(0).standard_normal((50, 2)),
        factor=np.where(half[:, None], 0.1, 0.0),
        diag=np.zeros(N_ITEMS),
        n_llms=50,
    )
    misfit = Misfit(
        n_observed=np.array([5]),
        knots=np.array([[0.2, 0.5, 0.8]]),
        centre=np.array([[0.2, 0.5, 0.8]]),
        variance=np.array([[0.0, 0.0, 0.0]]),
        quantiles=np.array([[-1.6, 0.0, 1.6]]),
        levels=np.array([0.05, 0.5, 0.95]),
        excess_sd=np.array([0.0]),
        linear_slope=np.array([1.0]),
        n_cases=np.array([100]),
        n_llms=50,
        n_splits=2,
        design="random",
        population=pop,
    )
    st = AdaptiveState(post, settings=Settings(width=0.05, budget=100), misfit=misfit)
    st.record({items[i]: int(y[0, i]) for i in range(0, 120, 12)})  # spread over both halves
    st.state()
    observed = st._observed()
    cand = np.nonzero(~observed)[0]
    got = st._excess_after(cand)
    prob, grad = plugin_response(st._mean, st._ability.mean(axis=0)[None])
    assert grad.shape == (1, N_ITEMS, 2)
    want = pop.excess_if_added(
        prob[0], grad[0], observed, cand, random_seed=[st.settings.seed, st.n_used]
    )
    rest = N_ITEMS - st.n_used - 1
    np.testing.assert_allclose(got, np.maximum(want, 0.0) * rest**2)
    assert got.max() > 0.0 and np.ptp(got) > 0.0  # the rule sees it, candidate by candidate

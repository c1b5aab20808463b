"""``random_seed=None`` is a fresh seed, logged and recorded, never a silent seed 0.

Why: docs/decisions/0012-a-none-seed-is-fresh-and-recorded.md.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

from bayes_microbench import _defaults, simulate_responses
from bayes_microbench import design as D
from bayes_microbench.testing import posterior_from_truth

SEED_LINE = re.compile(r"random_seed=None drew seed (\d+)")


def _drawn(caplog: pytest.LogCaptureFixture) -> list[int]:
    return [int(m.group(1)) for r in caplog.records if (m := SEED_LINE.search(r.getMessage()))]


def test_fresh_seeds_are_valid_seeds_and_differ():
    seeds = {_defaults.fresh_seed() for _ in range(20)}
    assert len(seeds) > 1 and all(0 <= s <= _defaults.MAX_SEED for s in seeds)
    assert _defaults.seed_or_fresh(7, "x") == 7  # a given seed passes through
    gen = np.random.default_rng(0)
    assert _defaults.seed_or_fresh(gen, "x") is gen


@pytest.mark.long
def test_fit_with_no_seed_draws_records_and_logs_one(caplog):
    from bayes_microbench.irt import IRTModel

    resp = simulate_responses("gpqa", n_llms=12, n_items=10, model="1pl", random_seed=0)
    with caplog.at_level(logging.INFO, logger="bayes_microbench"):
        a = IRTModel(resp, "1pl").fit("laplace", chains=1, draws=20, random_seed=None)
    (seed,) = _drawn(caplog)
    assert a.sampler is not None and a.sampler.random_seed == seed  # saved with the posterior
    assert a.fit_info["random_seed"] == seed and a.fit_info["random_seed_drawn"] is True
    again = IRTModel(resp, "1pl").fit("laplace", chains=1, draws=20, random_seed=seed)
    np.testing.assert_array_equal(a.posterior["ability"].values, again.posterior["ability"].values)
    assert again.fit_info["random_seed_drawn"] is False


def test_fit_extending_draws_draws_one_seed_for_every_attempt(monkeypatch, caplog):
    from bayes_microbench.irt import model as M

    seeds = []

    def fake_fit(self, method, *, draws=1000, random_seed=None, **kwargs):
        seeds.append(random_seed)
        self.diagnostics = None
        self.wall_seconds = 1.0
        self.idata = object()
        return self

    monkeypatch.setattr(M.IRTModel, "fit", fake_fit)
    resp = simulate_responses("gpqa", n_llms=12, n_items=10, random_seed=0)
    with caplog.at_level(logging.INFO, logger="bayes_microbench"):
        fit = M.fit_extending_draws(resp, "2pl", draws=1000)
    assert seeds == _drawn(caplog) and isinstance(seeds[0], int)
    assert fit.fit_info["random_seed_drawn"] is True


@pytest.fixture(scope="module")
def post():
    _, truth = simulate_responses("gpqa", n_llms=40, n_items=80, random_seed=21, return_truth=True)
    return posterior_from_truth(truth, n_chains=2, n_draws=60, noise=0.03, random_seed=1)


@pytest.mark.parametrize("entry", ["design_curves", "plan"])
def test_design_with_no_seed_draws_one_and_logs_it(post, entry, caplog):
    def run(seed):
        if entry == "plan":
            res = D.plan(post, 5.0, table_gaps=(3.0,), max_draws=30, random_seed=seed)
            return res["n_required_interval"].to_numpy()
        return D.design_curves(post, sizes=[10, 20], max_draws=30, random_seed=seed)[
            "p_correct_band"
        ].to_numpy()

    with caplog.at_level(logging.INFO, logger="bayes_microbench"):
        fresh = run(None)
    (seed,) = _drawn(caplog)  # one seed for the whole call, said once
    np.testing.assert_array_equal(fresh, run(seed))


def test_random_design_with_no_seed_is_not_seed_zero(caplog):
    with caplog.at_level(logging.INFO, logger="bayes_microbench"):
        d = D.random_design([5], 50, 4, random_seed=None)
    (seed,) = _drawn(caplog)
    np.testing.assert_array_equal(
        d.weights(np.arange(4)), D.random_design([5], 50, 4, seed).weights(np.arange(4))
    )

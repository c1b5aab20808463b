"""The default NUTS fit's chain length: extended when a fit misses only R-hat or ESS."""

from __future__ import annotations

import warnings

import pytest

from bayes_microbench import simulate_responses
from bayes_microbench.exceptions import ConvergenceWarning
from bayes_microbench.irt import diagnostics as D
from bayes_microbench.irt import model as M


def summary(rhat=1.005, bulk=900.0, tail=900.0, divergences=0, bfmi=0.9):
    problems = []
    if rhat > D.MAX_RHAT:
        problems.append("R-hat")
    if bulk < D.MIN_ESS_BULK or tail < D.MIN_ESS_TAIL:
        problems.append("ESS")
    if divergences:
        problems.append("divergences")
    if bfmi < D.MIN_BFMI:
        problems.append("BFMI")
    return D.ConvergenceSummary(
        max_rhat=rhat, min_ess_bulk=bulk, min_ess_tail=tail, divergences=divergences,
        min_bfmi=bfmi, mean_tree_size=15.0, worst_rhat="x", worst_ess_bulk="y",
        n_draws=1000, n_chains=2, problems=problems,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("kw", "draws", "expected"),
    [
        ({}, 1000, None),  # converged
        ({"tail": 175.0}, 1000, 3000),  # 1.2 * 400 / 175 = 2.74 -> 2740 -> 3000
        ({"bulk": 350.0}, 1000, 1500),  # 1.37 -> 1371 -> 1500
        ({"rhat": 1.011}, 1000, 2000),  # an R-hat miss at least doubles
        ({"rhat": 1.011, "tail": 100.0}, 1000, 4000),  # 4.8x, capped at the budget
        ({"tail": 175.0}, 4000, None),  # the budget is spent
        ({"tail": 175.0, "divergences": 3}, 1000, None),  # divergences: not a length problem
        ({"tail": 175.0, "bfmi": 0.2}, 1000, None),  # poor energy transitions
        ({"rhat": 1.2}, 1000, None),  # chains in different places
    ],
)
def test_more_draws(kw, draws, expected):
    assert D.more_draws(summary(**kw), draws) == expected


def test_fit_extending_draws_refits_until_converged_or_the_budget(monkeypatch):
    """The loop, with a stand-in for NUTS whose ESS is a twentieth of its draws."""
    calls = []

    def fake_fit(self, method, *, draws=1000, **kwargs):
        calls.append(draws)
        self.diagnostics = summary(bulk=draws / 20, tail=draws / 20)
        self.wall_seconds = 1.0
        self.idata = object()
        if not self.diagnostics.ok:
            warnings.warn(f"not converged at {draws}", ConvergenceWarning, stacklevel=2)
        return self

    monkeypatch.setattr(M.IRTModel, "fit", fake_fit)
    resp = simulate_responses("gpqa", n_llms=12, n_items=10, random_seed=0)
    with pytest.warns(ConvergenceWarning, match="not converged at 4000") as said:
        fit = M.fit_extending_draws(resp, "2pl", draws=1000)
    assert calls == [1000, 4000] and fit.fit_info["draws_tried"] == [1000, 4000]
    assert len([w for w in said if w.category is ConvergenceWarning]) == 1  # said once
    assert fit.fit_info["wall_seconds_all"] == 2.0
    calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fit that converges says nothing
        fit = M.fit_extending_draws(resp, "2pl", draws=8000, budget=8000)
    assert calls == [8000] and fit.converged

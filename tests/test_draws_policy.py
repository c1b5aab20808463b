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
    ("kw", "draws", "expected", "step"),
    [
        ({}, 1000, None, 500),  # converged
        ({"tail": 175.0}, 1000, 3000, 500),  # 1.2 * 400 / 175 = 2.74 -> 2740 -> 3000
        ({"bulk": 350.0}, 1000, 1500, 500),  # 1.37 -> 1371 -> 1500
        ({"rhat": 1.0102}, 1000, 1500, 500),  # 1.2 * 0.0102 / 0.01 = 1.22 -> 1224 -> 1500
        ({"rhat": 1.0102}, 1000, 1250, 250),  # continued chains: steps of 250
        ({"rhat": 1.03}, 1000, 2000, 500),  # an R-hat excess grows the draws at most twofold
        ({"rhat": 1.011, "bulk": 200.0}, 1000, 2500, 500),  # the ESS shortfall is larger: 2.4x
        ({"rhat": 1.011, "tail": 100.0}, 1000, 4000, 500),  # 4.8x, capped at the budget
        ({"tail": 175.0}, 4000, None, 500),  # the budget is spent
        ({"tail": 175.0, "divergences": 3}, 1000, None, 500),  # divergences: not a length problem
        ({"tail": 175.0, "bfmi": 0.2}, 1000, None, 500),  # poor energy transitions
        ({"rhat": 1.2}, 1000, None, 500),  # chains in different places
    ],
)
def test_more_draws(kw, draws, expected, step):
    assert D.more_draws(summary(**kw), draws, step=step) == expected


def test_fit_extending_draws_refits_until_converged_or_the_budget(monkeypatch):
    """The numpyro loop, with a stand-in for NUTS whose ESS is a twentieth of its draws."""
    calls = []

    def fake_fit(self, method, *, draws=1000, **kwargs):
        calls.append(draws)
        assert "draws_budget" not in kwargs  # numpyro's chains are refitted, not continued
        self.diagnostics = summary(bulk=draws / 20, tail=draws / 20)
        self.wall_seconds = 1.0
        self.idata = object()
        if not self.diagnostics.ok:
            warnings.warn(f"not converged at {draws}", ConvergenceWarning, stacklevel=2)
        return self

    monkeypatch.setattr(M.IRTModel, "fit", fake_fit)
    resp = simulate_responses("gpqa", n_llms=12, n_items=10, random_seed=0)
    with pytest.warns(ConvergenceWarning, match="not converged at 4000") as said:
        fit = M.fit_extending_draws(resp, "2pl", draws=1000, backend="numpyro")
    assert calls == [1000, 4000] and fit.fit_info["draws_tried"] == [1000, 4000]
    assert len([w for w in said if w.category is ConvergenceWarning]) == 1  # said once
    assert fit.fit_info["wall_seconds_all"] == 2.0
    calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fit that converges says nothing
        fit = M.fit_extending_draws(resp, "2pl", draws=8000, budget=8000, backend="numpyro")
    assert calls == [8000] and fit.converged


def test_fit_extending_draws_continues_nutpies_chains_in_one_fit(monkeypatch):
    calls = []

    def fake_fit(self, method, *, draws=1000, draws_budget=None, **kwargs):
        calls.append((draws, draws_budget))
        self.diagnostics = summary()
        self.wall_seconds = 2.5
        self.idata = object()
        self.fit_info["attempts"] = [{"draws": draws}]
        return self

    monkeypatch.setattr(M.IRTModel, "fit", fake_fit)
    resp = simulate_responses("gpqa", n_llms=12, n_items=10, random_seed=0)
    fit = M.fit_extending_draws(resp, "2pl", draws=1000, budget=3000)
    assert calls == [(1000, 3000)]  # one fit: the chains are continued inside it
    assert fit.fit_info["wall_seconds_all"] == 2.5


def _fake_nuts(monkeypatch, verdicts, calls, share=0.0):
    """A stand-in for NUTS whose diagnostics depend on (parameterization, prior) only;
    the data's share of non-discriminating items is ``share``."""
    from bayes_microbench.irt import policy

    monkeypatch.setattr(policy, "weak_item_share", lambda values: share)

    def fake_fit(self, method, *, draws=1000, parameterization="auto", **kwargs):
        if parameterization == "auto":
            parameterization = self.policy("nuts").parameterization
        key = (parameterization, self.config.discrimination_prior)
        calls.append(key)
        self.diagnostics = summary(**verdicts[key])
        self.parameterization = parameterization
        self.wall_seconds = 1.0
        self.idata = object()
        if not self.diagnostics.ok:
            warnings.warn(f"not converged in {key}", ConvergenceWarning, stacklevel=2)
        return self

    monkeypatch.setattr(M.IRTModel, "fit", fake_fit)


SMALL = ("decoupled-nc", "lognormal"), ("decoupled", "lognormal"), ("decoupled", "truncated-normal")


def test_fit_default_tries_the_remedies_in_order_and_keeps_the_first_converged(monkeypatch):
    calls = []
    verdicts = dict(zip(SMALL, [{"rhat": 1.06}, {"divergences": 98}, {"bulk": 450.0}], strict=True))
    _fake_nuts(monkeypatch, verdicts, calls)
    resp = simulate_responses("gpqa", n_llms=12, n_items=10, random_seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the kept fit converged: nothing is said
        fit = M.fit_default(resp, "2pl", random_seed=3)
    assert calls == list(SMALL)
    assert fit.converged and fit.parameterization == "decoupled"
    assert fit.config.discrimination_prior == "truncated-normal"
    refits = fit.fit_info["refits"]
    assert [r["settings"] for r in refits] == [
        {},
        {"parameterization": "decoupled"},
        {"parameterization": "decoupled", "discrimination_prior": "truncated-normal"},
    ]
    assert [r["converged"] for r in refits] == [False, False, True]
    # each refit keeps what it missed, so a card can say why it was not kept
    assert [r["min_ess_bulk"] for r in refits] == [900.0, 900.0, 450.0]
    assert [r["problems"] for r in refits] == [["R-hat"], ["divergences"], []]
    assert fit.fit_info["wall_seconds_all"] == 3.0
    assert fit.fit_info["random_seed_drawn"] is False


def test_fit_default_keeps_the_best_unconverged_fit_and_warns_once(monkeypatch):
    calls = []
    verdicts = dict(
        zip(SMALL, [{"rhat": 1.06}, {"rhat": 1.02, "divergences": 5}, {"rhat": 1.3}], strict=True)
    )
    _fake_nuts(monkeypatch, verdicts, calls)
    resp = simulate_responses("gpqa", n_llms=12, n_items=10, random_seed=0)
    with pytest.warns(ConvergenceWarning) as said:
        fit = M.fit_default(resp, "2pl", random_seed=3)
    # no divergences beats a lower R-hat with divergences; then the lower R-hat wins
    assert fit.parameterization == "decoupled-nc" and fit.diagnostics.max_rhat == 1.06
    assert [str(w.message) for w in said] == ["not converged in ('decoupled-nc', 'lognormal')"]
    assert len(fit.fit_info["refits"]) == 3


def test_fit_default_refits_only_what_the_caller_left_to_it(monkeypatch):
    calls = []
    verdicts = {k: {"rhat": 1.06} for k in SMALL}
    verdicts[("decoupled", "truncated-normal")] = {"rhat": 1.06}
    _fake_nuts(monkeypatch, verdicts, calls)
    resp = simulate_responses("gpqa", n_llms=12, n_items=10, random_seed=0)
    with pytest.warns(ConvergenceWarning):
        M.fit_default(resp, "2pl", random_seed=0, parameterization="decoupled-nc")
    assert calls == [SMALL[0]]  # a parameterization given: no refit
    calls.clear()
    with pytest.warns(ConvergenceWarning):
        M.fit_default(resp, "2pl", {"discrimination_prior": "truncated-normal"}, random_seed=0)
    assert calls == [("decoupled", "truncated-normal")]  # a prior given: no refit
    calls.clear()
    with pytest.warns(ConvergenceWarning):
        fit = M.fit_default(resp, "2pl", random_seed=0, refit_seconds=0.5)
    assert calls == [SMALL[0]]  # the budget was spent by the first fit
    assert [r.get("skipped", "")[:9] for r in fit.fit_info["refits"][1:]] == ["1 s spent"] * 2


def test_fit_default_from_100_llms_tries_the_truncated_normal_prior(monkeypatch):
    calls = []
    verdicts = {("decoupled", "lognormal"): {"rhat": 1.013, "bulk": 200.0}}
    verdicts[("decoupled", "truncated-normal")] = {}
    _fake_nuts(monkeypatch, verdicts, calls)
    resp = simulate_responses("gpqa", n_llms=120, n_items=10, random_seed=0)
    fit = M.fit_default(resp, "2pl", random_seed=0, budget=1000)
    assert calls == [("decoupled", "lognormal"), ("decoupled", "truncated-normal")]
    assert fit.converged and fit.config.discrimination_prior == "truncated-normal"


def test_refits_text_names_each_refit_in_the_callers_terms():
    from bayes_microbench.irt.policy import refits_text

    refits = [
        {"settings": {}, "max_rhat": 1.06, "divergences": 0},
        {"settings": {"parameterization": "decoupled"}, "max_rhat": 1.021, "divergences": 98},
        {
            "settings": {"discrimination_prior": "truncated-normal"},
            "skipped": "950 s spent, budget 900 s",
        },
    ]
    text = refits_text(refits)
    assert text == (
        "the default fit also tried parameterization='decoupled' (max R-hat 1.021, 98 "
        "divergences); config={'discrimination_prior': 'truncated-normal'} (not tried: 950 s "
        "spent, budget 900 s)"
    )
    assert refits_text(refits[:1]) == ""


def test_fit_cli_names_every_refit_it_tried_in_one_line(monkeypatch, tmp_path, capsys):
    from bayes_microbench import save_responses
    from bayes_microbench.cli import main

    calls = []
    verdicts = dict(
        zip(SMALL, [{"rhat": 1.06}, {"rhat": 1.02, "divergences": 5}, {"rhat": 1.3}], strict=True)
    )
    _fake_nuts(monkeypatch, verdicts, calls)
    path, out = tmp_path / "r.csv", tmp_path / "p.nc"
    save_responses(simulate_responses("gpqa", n_llms=12, n_items=10, random_seed=0), path)
    code = main(["fit", "--responses", str(path), "--output", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 3 and not out.exists() and calls == list(SMALL)
    errors = [x for x in err.splitlines() if "error" in x.split(":")[1]]
    assert len(errors) == 1
    # the data's notes are said once, not once per refit
    assert err.count("llms all wrong") == 1 and err.count("items all wrong") == 1
    assert (
        "the default fit also tried --parameterization decoupled (max R-hat 1.020, 5 "
        "divergences); --parameterization decoupled, --discrimination-prior truncated-normal "
        "(max R-hat 1.300, 0 divergences)"
    ) in errors[0]


def test_fit_default_starts_from_the_prior_the_data_choose(monkeypatch):
    calls = []
    verdicts = {("decoupled", "truncated-normal"): {}}
    _fake_nuts(monkeypatch, verdicts, calls, share=0.44)
    resp = simulate_responses("gpqa", n_llms=120, n_items=10, random_seed=0)
    fit = M.fit_default(resp, "2pl", random_seed=0)
    assert calls == [("decoupled", "truncated-normal")]
    assert fit.fit_info["prior_choice"] == {
        "prior": "truncated-normal",
        "weak_item_share": 0.44,
        "threshold": 0.2,
    }
    assert fit.fit_info["refits"][0]["settings"] == {"discrimination_prior": "truncated-normal"}
    calls.clear()
    fit = M.fit_default(resp, "2pl", {"discrimination_prior": "truncated-normal"}, random_seed=0)
    assert "prior_choice" not in fit.fit_info  # the caller's prior: nothing chosen


@pytest.mark.parametrize(
    ("n_llms", "tried"),
    [
        (120, [("decoupled", "truncated-normal"), ("decoupled", "lognormal")]),
        (
            12,
            [
                ("decoupled", "truncated-normal"),
                ("decoupled-nc", "lognormal"),
                ("decoupled", "lognormal"),
            ],
        ),
    ],
)
def test_a_missed_data_chosen_prior_falls_back_to_the_lognormal(monkeypatch, n_llms, tried):
    calls = []
    verdicts = {k: {"rhat": 1.06} for k in tried}
    _fake_nuts(monkeypatch, verdicts, calls, share=0.3)
    resp = simulate_responses("gpqa", n_llms=n_llms, n_items=10, random_seed=0)
    with pytest.warns(ConvergenceWarning):
        fit = M.fit_default(resp, "2pl", random_seed=0)
    assert calls == tried
    assert [r["settings"].get("discrimination_prior") for r in fit.fit_info["refits"]] == [
        "truncated-normal",
        *["lognormal"] * (len(tried) - 1),
    ]


def test_weak_item_share_counts_items_that_do_not_rise_with_the_rest():
    import numpy as np

    from bayes_microbench.irt.policy import WEAK_ITEM_SHARE, data_prior, weak_item_share

    rng = np.random.default_rng(0)
    ability = rng.normal(size=300)
    good = (ability[:, None] + rng.normal(size=(300, 16)) > 0).astype(float)
    flat = (rng.random((300, 4)) < 0.3).astype(float)  # no discrimination
    backwards = (-ability[:, None] + rng.normal(size=(300, 4)) > 0).astype(float)
    values = np.hstack([good, flat, backwards])
    values[rng.random(values.shape) < 0.1] = np.nan  # missing cells are left out
    share = weak_item_share(values)
    # the 4 backward items, and about half the flat ones; none of the 16 good ones
    assert 4 / 24 <= share <= 8 / 24
    assert weak_item_share(good) == 0.0
    assert data_prior(good, "2pl") == ("lognormal", 0.0)
    # 8 backward items of 24 (a third, above WEAK_ITEM_SHARE); 1 of 17 (below it)
    assert WEAK_ITEM_SHARE == 0.2
    assert data_prior(np.hstack([good, backwards, backwards]), "2pl")[0] == "truncated-normal"
    assert data_prior(np.hstack([good, backwards[:, :1]]), "2pl")[0] == "lognormal"
    assert data_prior(values, "3pl")[0] == "lognormal"  # only the 2PL's prior is chosen
    assert weak_item_share(np.ones((5, 3))) == 0.0  # nothing answered both ways


def test_fit_cli_starts_from_the_datas_prior_unless_one_is_given(monkeypatch, tmp_path, capsys):
    import json

    from bayes_microbench import save_responses
    from bayes_microbench.cli import main

    calls = []
    tried = [("decoupled", "truncated-normal"), *SMALL[:2]]
    _fake_nuts(monkeypatch, {k: {"rhat": 1.06} for k in tried}, calls, share=0.44)
    path, out = tmp_path / "r.csv", tmp_path / "p.nc"
    save_responses(simulate_responses("gpqa", n_llms=12, n_items=10, random_seed=0), path)
    code = main(["fit", "--responses", str(path), "--output", str(out), "--json"])
    printed = capsys.readouterr()
    assert code == 3 and not out.exists() and calls == tried
    choice = json.loads(printed.out)["fit_info"]["prior_choice"]
    assert choice == {"prior": "truncated-normal", "weak_item_share": 0.44, "threshold": 0.2}
    assert "--discrimination-prior lognormal (max R-hat 1.060" in printed.err
    calls.clear()
    args = ["fit", "--responses", str(path), "--output", str(out), "--json"]
    code = main([*args, "--discrimination-prior", "lognormal"])
    printed = capsys.readouterr()
    assert code == 3 and calls == [SMALL[0]]  # the prior given: kept, and no refit
    assert "prior_choice" not in json.loads(printed.out)["fit_info"]

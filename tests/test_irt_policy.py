"""The sampling policy (``irt.policy.choose``) and the one check of fit settings.

No MCMC: the policy is a function of the data, the configuration and the method, and
the settings check a function of the settings; each case is one the model's members
(``auto_parameterization``, ``weak_slopes``, ``truncated_normal_may_help``,
``convergence_hint``) decided before the policy became one function.
"""

from __future__ import annotations

import numpy as np
import pytest

from bayes_microbench import simulate_responses
from bayes_microbench.exceptions import ConfigurationError
from bayes_microbench.irt.config import (
    PARAMETERIZATIONS_1D,
    PARAMETERIZATIONS_MD,
    IRTConfig,
    SamplerConfig,
    SettingError,
    check_fit_settings,
)
from bayes_microbench.irt.data import IRTData
from bayes_microbench.irt.policy import (
    CENTERED_MIN_LLMS,
    SMALL_MATRIX_HINT,
    Policy,
    choose,
    remedy_text,
    weak_slopes,
)
from bayes_microbench.responses import Responses


def _data(resp, model="2pl", **config):
    cfg = IRTConfig.from_dict({**config, "model": model})
    return IRTData.from_responses(resp, cfg), cfg


@pytest.fixture(scope="module")
def big():
    return simulate_responses("gpqa", n_llms=120, n_items=10, model="2pl", random_seed=0)


@pytest.fixture(scope="module")
def small():
    return simulate_responses("gpqa", n_llms=20, n_items=10, model="2pl", random_seed=0)


@pytest.fixture(scope="module")
def hard():
    # the simulator's GPQA preset: accuracy 0.3 over a 0.25 floor, 420 llms
    return simulate_responses("gpqa", random_seed=0)


@pytest.mark.parametrize(
    "which, model, prior, method, want",
    [
        ("big", "2pl", "lognormal", "nuts", "decoupled"),
        ("big", "3pl", "lognormal", "nuts", "decoupled"),  # learned floors: no weak slopes
        ("big", "2pl", "truncated-normal", "nuts", "decoupled"),
        ("big", "1pl", "lognormal", "nuts", "decoupled"),
        ("small", "2pl", "lognormal", "nuts", "decoupled-nc"),
        ("small", "3pl", "lognormal", "nuts", "decoupled-nc"),
        # the truncated normal below 100 llms: centered items (docs/decisions/0036)
        ("small", "2pl", "truncated-normal", "nuts", "decoupled"),
        ("small", "3pl", "truncated-normal", "nuts", "non-centered"),
        ("small", "2pl", "truncated-normal", "advi", "non-centered"),
        ("small", "1pl", "lognormal", "nuts", "non-centered"),
        ("big", "2pl", "lognormal", "advi", "non-centered"),
        ("big", "2pl", "lognormal", "map", "non-centered"),
        ("small", "2pl", "lognormal", "laplace", "non-centered"),
        ("big", "2pl-md", "lognormal", "nuts", "decoupled"),
        ("small", "2pl-md", "lognormal", "nuts", "non-centered"),
        ("big", "2pl-md", "lognormal", "pathfinder", "non-centered"),
    ],
)
def test_auto_parameterization_and_adaptation(request, which, model, prior, method, want):
    resp = request.getfixturevalue(which)
    config = {"discrimination_prior": prior} if model in ("2pl", "3pl") else {}
    data, cfg = _data(resp, model, **config)
    policy = choose(data, cfg, method)
    assert policy.parameterization == want
    assert policy.adaptation == ("draw_diag" if want == "decoupled" else "diag")
    # what the caller asked for is kept; "auto" adaptation follows it
    asked = choose(data, cfg, method, parameterization="non-centered", adaptation="auto")
    assert (asked.parameterization, asked.adaptation) == ("non-centered", "diag")
    kept = choose(data, cfg, method, parameterization="decoupled", adaptation="low_rank")
    assert (kept.parameterization, kept.adaptation) == ("decoupled", "low_rank")


def test_the_truncated_normal_is_the_remedy_only_where_it_was_measured(big, small):
    def remedy(resp, model="2pl", prior="lognormal", method="nuts"):
        data, cfg = _data(resp, model, discrimination_prior=prior)
        return choose(data, cfg, method)

    for case in (remedy(big), remedy(big, model="3pl")):
        assert case.truncated_normal_may_help and case.remedy == "truncated-normal"
    assert not remedy(big, prior="truncated-normal").truncated_normal_may_help
    assert not remedy(big, method="advi").truncated_normal_may_help
    assert not remedy(big, model="1pl").truncated_normal_may_help
    assert remedy(big, method=None).remedy == ""  # before a fit: no method, no remedy
    # below 100 llms it diverged; the small matrix's decoupled-nc fit names the centered items
    below = remedy(small)
    assert not below.truncated_normal_may_help and below.remedy == "centered-items"
    assert small.n_llms < CENTERED_MIN_LLMS <= big.n_llms


def test_weak_3pl_slopes_are_sampled_non_centered_and_name_no_remedy(hard):
    data, cfg = _data(hard, "3pl")
    assert weak_slopes(data, cfg)
    nuts = choose(data, cfg, "nuts")
    assert nuts.weak_slopes and nuts.parameterization == "decoupled-nc"
    assert nuts.remedy == "" and not nuts.truncated_normal_may_help  # 420 llms
    assert choose(data, cfg, "advi").parameterization == "non-centered"
    # the truncated normal and the 2PL keep the centered items; learned floors are not weak
    tn, tn_cfg = _data(hard, "3pl", discrimination_prior="truncated-normal")
    assert choose(tn, tn_cfg, "nuts").parameterization == "decoupled"
    assert choose(*_data(hard, "2pl"), "nuts").parameterization == "decoupled"
    learned = Responses.from_arrays(hard.values, hard.llms, hard.items)
    assert not choose(*_data(learned, "3pl"), "nuts").weak_slopes
    # the caller's knowledge of weak slopes is used as given
    assert choose(data, cfg, "nuts", weak=False).parameterization == "decoupled"


def test_a_floor_misfit_keeps_the_centered_items_and_is_the_remedy(hard):
    values = hard.values.copy()
    values[:, :20] = 0.0  # items below their 1/4 floor beyond chance
    misfit = Responses.from_arrays(values, hard.llms, hard.items, n_options=hard.n_options)
    data, cfg = _data(misfit, "3pl")
    policy = choose(data, cfg, "nuts")
    assert policy.floor_misfit and not policy.weak_slopes
    assert policy.parameterization == "decoupled" and policy.remedy == "floor-misfit"
    assert remedy_text(policy) == policy.floor_misfit
    assert "a 3PL cannot fit them: use the 2PL" in policy.floor_misfit


def test_remedy_text_spells_the_settings_as_the_caller_takes_them(big, small):
    tn = choose(*_data(big), "nuts")
    assert "config={'discrimination_prior': 'truncated-normal'}" in remedy_text(tn)
    flags = remedy_text(tn, lambda name, value: f"--{name.replace('_', '-')} {value}")
    assert "--discrimination-prior truncated-normal samples faster" in flags
    centered = choose(*_data(small), "nuts")
    assert remedy_text(centered) == SMALL_MATRIX_HINT.format(
        centered="parameterization='decoupled'"
    )
    assert remedy_text(choose(*_data(big, "1pl"), "nuts")) == ""


def test_one_parameterization_type_for_both_model_families():
    assert set(PARAMETERIZATIONS_1D) == {"decoupled", "decoupled-nc", "non-centered"}
    assert set(PARAMETERIZATIONS_MD) == {"decoupled", "centered", "non-centered"}
    assert PARAMETERIZATIONS_1D["decoupled"].centered and PARAMETERIZATIONS_MD["centered"].centered
    # the decoupled 2pl-md shares the 1-D models' ability block (docs/decisions/0050)
    assert PARAMETERIZATIONS_MD["decoupled"] == PARAMETERIZATIONS_1D["decoupled"]
    assert not PARAMETERIZATIONS_1D["non-centered"].centered
    assert not PARAMETERIZATIONS_MD["non-centered"].centered


@pytest.mark.parametrize(
    "settings, match",
    [
        ({"method": "hmc"}, r"^method must be one of \['nuts'"),
        ({"backend": "stan"}, r"^backend must be one of"),
        ({"adaptation": "dense"}, r"^adaptation must be one of \['auto'"),
        ({"chains": 0}, r"^chains must be a whole number >= 1, got 0"),
        ({"draws": 2.5}, r"^draws must be a whole number >= 1, got 2.5"),
        ({"draws": True}, r"^draws must be a whole number >= 1, got True"),
        ({"tune": -1}, r"^tune must be a whole number >= 0, got -1"),
        ({"optimizer_iterations": 0}, r"^optimizer_iterations must be a whole number >= 1"),
        ({"target_accept": 1.0}, r"^target_accept must lie in \[0.5, 1\), got 1.0"),
        ({"target_accept": "high"}, r"^target_accept must lie in"),
        ({"model": "2pl", "parameterization": "centred"}, r"^parameterization must be 'auto'"),
        ({"model": "2pl-md", "parameterization": "decoupled-nc"}, r"^model '2pl-md' takes"),
        (
            {"model": "1pl", "parameterization": "decoupled-nc"},
            r"^parameterization 'decoupled-nc' applies to the 2PL and 3PL",
        ),
        (
            {
                "model": "2pl",
                "discrimination_prior": "truncated-normal",
                "parameterization": "decoupled-nc",
            },
            r"'decoupled-nc' applies",
        ),
    ],
)
def test_fit_settings_are_refused_in_one_line_naming_the_parameter(settings, match):
    with pytest.raises(SettingError, match=match) as info:
        check_fit_settings(**settings)
    assert isinstance(info.value, ConfigurationError) and "\n" not in str(info.value)
    named = set(settings) - {"discrimination_prior"}
    assert set(info.value.parameters) <= named | {"parameterization"}
    assert all(not p.startswith("-") for p in info.value.parameters)


def test_good_settings_pass_and_the_sampler_config_uses_the_same_check():
    check_fit_settings(
        model="2pl", method="nuts", backend="nutpie", chains=np.int64(2), draws=1, tune=0,
        target_accept=0.5, parameterization="auto", adaptation="low_rank",
        optimizer_iterations=1,
    )  # fmt: skip
    for p in PARAMETERIZATIONS_1D:
        if p != "decoupled-nc":
            check_fit_settings(model="1pl", parameterization=p)
    with pytest.raises(SettingError, match=r"^draws must be a whole number >= 1, got 0"):
        SamplerConfig(draws=0).validate()
    with pytest.raises(SettingError, match=r"^target_accept must lie in"):
        SamplerConfig(target_accept=0.2).validate()


def test_the_fit_command_prints_the_flags(tmp_path, capsys):
    from bayes_microbench._validate import flag_names
    from bayes_microbench.cli import build_parser, command_flags, main
    from bayes_microbench.io import save_responses

    fit_parser = build_parser()._subparsers._group_actions[0].choices["fit"]  # type: ignore[union-attr]
    flags = command_flags(fit_parser)
    assert (flags["draws"], flags["discrimination_prior"]) == ("--draws", "--discrimination-prior")
    with flag_names(flags), pytest.raises(SettingError) as info:
        check_fit_settings(model="2pl-md", parameterization="decoupled-nc")
    assert str(info.value).startswith("--model '2pl-md' takes --parameterization 'auto'")
    with pytest.raises(SettingError) as info:  # the library's own names outside the CLI
        check_fit_settings(model="2pl-md", parameterization="decoupled-nc")
    assert str(info.value).startswith("model '2pl-md' takes parameterization 'auto'")
    with flag_names(flags):
        hint = remedy_text(Policy("decoupled-nc", "diag", "centered-items", "", False, False))
    assert "--parameterization decoupled" in hint
    resp = simulate_responses("gpqa", n_llms=8, n_items=6, model="2pl", random_seed=0)
    save_responses(resp, tmp_path / "r.csv")
    base = ["fit", "--responses", str(tmp_path / "r.csv"), "--output", str(tmp_path / "p.nc")]
    assert main([*base, "--parameterization", "centred"]) == 2
    err = capsys.readouterr().err
    assert "--parameterization must be 'auto' or one of" in err and "\n" == err[-1]
    assert err.count("\n") == 1 and not (tmp_path / "p.nc").exists()

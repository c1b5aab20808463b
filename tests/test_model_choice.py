"""Model choice by PSIS-LOO (``irt.choice``, ``fit --model auto``, ``check --responses``)."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_microbench import save_responses, simulate_responses
from bayes_microbench.cli import main
from bayes_microbench.exceptions import ConfigurationError
from bayes_microbench.irt.choice import (
    DEFAULT_CANDIDATES,
    SMALL_ELPD,
    choose,
    parse_candidate,
    parse_candidates,
)


def test_candidates_parse_and_bad_ones_are_named():
    assert parse_candidate("2pl-md:3") == ("2pl-md", {"n_dims": 3})
    assert parse_candidate("2pl-md") == ("2pl-md", {"n_dims": 2})
    assert parse_candidate(" 1pl ") == ("1pl", {})
    assert parse_candidates("1pl, 2pl,2pl-md:2") == ["1pl", "2pl", "2pl-md:2"]
    assert parse_candidates() == list(DEFAULT_CANDIDATES)
    for bad, match in (
        ("4pl,2pl", "candidates: '4pl' is not a model"),
        ("2pl-md:0,2pl", "whole number >= 1"),
        ("2pl:2,1pl", "'2pl:2'"),
        ("2pl", "candidates='2pl': give at least two"),
        ("2pl,2pl", "candidates='2pl,2pl': names a model twice"),
    ):
        with pytest.raises(ConfigurationError, match=match):
            parse_candidates(bad)


def _row(name, elpd, dse):
    return {"candidate": name, "elpd_loo": elpd, "dse": dse}


@pytest.mark.parametrize(
    ("rows", "chosen"),
    [
        # far ahead, beyond 2 dse: the richer model
        (
            [_row("2pl-md:2", -100.0, 0.0), _row("2pl", -150.0, 5.0), _row("1pl", -300.0, 9.0)],
            "2pl-md:2",
        ),
        # within SMALL_ELPD: the simpler one
        ([_row("2pl-md:2", -100.0, 0.0), _row("2pl", -100.0 - SMALL_ELPD, 1.0)], "2pl"),
        # 10 ahead but a dse of 6: not clearly better, the simpler one
        ([_row("2pl-md:2", -100.0, 0.0), _row("2pl", -110.0, 6.0)], "2pl"),
        # 10 ahead with a dse of 3: clearly better
        ([_row("2pl-md:2", -100.0, 0.0), _row("2pl", -110.0, 3.0)], "2pl-md:2"),
        # the simplest close one wins over a closer but richer one
        (
            [
                _row("2pl-md:3", -100.0, 0.0),
                _row("2pl-md:2", -101.0, 1.0),
                _row("2pl", -103.0, 1.0),
            ],
            "2pl",
        ),
    ],
)
def test_the_rule_prefers_the_simpler_unless_the_richer_is_clearly_better(rows, chosen):
    order = ["1pl", "2pl", "2pl-md:2", "2pl-md:3"]
    name, why = choose(rows, order)
    assert name == chosen
    assert chosen in why
    assert choose([], order) == ("", "no candidate converged")


@pytest.fixture
def responses_file(tmp_path):
    resp = simulate_responses("gpqa", n_llms=30, n_items=20, model="2pl", random_seed=1)
    path = tmp_path / "r.csv"
    save_responses(resp, path)
    return path


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (
            ["--model", "auto", "--candidates", "2pl"],
            "--candidates 2pl: give at least two",
        ),
        (["--model", "auto", "--candidates", "2pl,5pl"], "'5pl'"),
        (
            ["--model", "2pl", "--candidates", "1pl,2pl"],
            "--candidates applies only to --model auto",
        ),
        (["--model", "2pl", "--store", "cands"], "--store applies only to --model auto"),
        (["--model", "auto", "--store", __file__], "is a file; name a folder"),
        (["--model", "auto", "--method", "map"], "--method map: --model auto compares NUTS"),
        (["--model", "auto", "--parameterization", "decoupled"], "drop --parameterization"),
    ],
)
def test_fit_auto_bad_flags_are_one_line_exit_2(responses_file, tmp_path, capsys, extra, match):
    out = tmp_path / "p.nc"
    code = main(["fit", "--responses", str(responses_file), "--output", str(out), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and match in err
    assert not out.exists()


def test_check_takes_posteriors_or_responses(responses_file, tmp_path, capsys):
    assert main(["check"]) == 2
    assert "either saved POSTERIOR files or --responses" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "a.nc"), "--responses", str(responses_file)]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["check", "--responses", str(responses_file), "--candidates", "9pl,2pl"]) == 2
    assert "'9pl'" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "a.nc"), "--store", str(tmp_path)]) == 2
    assert "--store applies only with --responses" in capsys.readouterr().err


@pytest.mark.long
def test_fit_auto_keeps_the_1pl_on_1pl_data_and_records_why(tmp_path, capsys):
    """Data from a 1PL: the 2PL's extra slopes buy no clear gain in PSIS-LOO, so ``auto``
    keeps the simpler model, and the written posterior records the table and the reason."""
    import json

    from bayes_microbench.irt import load_posterior

    resp = simulate_responses("gpqa", n_llms=60, n_items=40, model="1pl", random_seed=4)
    save_responses(resp, tmp_path / "r.csv")
    out = tmp_path / "auto.nc"
    args = ["fit", "--responses", str(tmp_path / "r.csv"), "--model", "auto", "--json"]
    code = main([*args, "--candidates", "1pl,2pl", "--seed", "2", "--output", str(out)])
    result = json.loads(capsys.readouterr().out)
    report = result["model_choice"]
    rows = {r["candidate"]: r for r in report["rows"]}
    assert set(rows) == {"1pl", "2pl"}
    assert code == 0 and result["model"] == "1pl" and result["converged"], report
    assert report["chosen"] == "1pl" and report["why"].startswith("1pl")
    gain = rows["2pl"]["elpd_loo"] - rows["1pl"]["elpd_loo"]
    assert gain <= max(SMALL_ELPD, 2 * max(rows["1pl"]["dse"], rows["2pl"]["dse"]))
    assert all(np.isfinite(r["se"]) and r["wall_seconds"] > 0 for r in rows.values())
    saved = load_posterior(out)
    assert saved.model == "1pl" and saved.fit_info["model_choice"]["chosen"] == "1pl"
    assert saved.calibration is not None  # what fit saves by default, auto or not


@pytest.mark.long
def test_a_store_resumes_a_stopped_comparison_and_refits_what_changed(tmp_path, monkeypatch):
    """With ``store``, each candidate's fit, LOO and record are written as it finishes; a
    second call on the same responses and settings reads them (no sampling, same table,
    the chosen fit read back), and other settings fit again."""
    import bayes_microbench.irt.choice as choice

    resp = simulate_responses("gpqa", n_llms=24, n_items=12, model="2pl", random_seed=3)
    kw = {"random_seed": 1, "progressbar": False, "draws": 150, "tune": 150}
    first, report = choice.compare_candidates(resp, "1pl,2pl", store=tmp_path, **kw)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "1pl.json", "1pl.loo.nc", "1pl.nc", "2pl.json", "2pl.loo.nc", "2pl.nc"
    ]  # fmt: skip
    assert not any(r["from_store"] for r in report["rows"])

    def no_sampling(*args, **kwargs):
        raise AssertionError("a stored candidate was fitted again")

    monkeypatch.setattr(choice, "_fit_candidate", no_sampling)
    again, resumed = choice.compare_candidates(resp, "1pl,2pl", store=tmp_path, **kw)
    assert all(r["from_store"] for r in resumed["rows"])
    for key in ("candidate", "elpd_loo", "se", "p_loo", "elpd_diff", "dse", "converged"):
        assert [r[key] for r in resumed["rows"]] == [r[key] for r in report["rows"]]
    assert resumed["chosen"] == report["chosen"] and again.config.model == first.config.model
    ours = first.posterior["discrimination"].to_numpy()
    np.testing.assert_allclose(again.posterior["discrimination"].to_numpy(), ours, rtol=1e-6)
    with pytest.raises(AssertionError, match="fitted again"):  # another seed: not reused
        choice.compare_candidates(resp, "1pl,2pl", store=tmp_path, **(kw | {"random_seed": 2}))

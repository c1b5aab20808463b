"""Honest Bayesian numbers: planning, few-draw intervals, unconverged fits, check on a MAP fit.

Tiny posteriors only (``posterior_from_truth`` around a simulation, or a MAP fit of a
small matrix); no NUTS.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayes_microbench import UserInputError, simulate_responses
from bayes_microbench import design as D
from bayes_microbench.exceptions import ConvergenceWarning
from bayes_microbench.posterior import item_draws
from bayes_microbench.testing import posterior_from_truth

from .conftest import write_posterior


@pytest.fixture(scope="module")
def small_world():
    resp, truth = simulate_responses(
        "gpqa", n_llms=40, n_items=60, random_seed=5, return_truth=True
    )
    post = posterior_from_truth(
        truth, n_chains=2, n_draws=10, noise=0.05, subtask=resp.item_subtask, random_seed=2
    )
    return resp, truth, post


# ------------------------------------------------------------------ plan
def test_plan_reports_a_gap_the_population_cannot_produce(small_world):
    """A 100-point gap has no pair in the population: not 0 items, not the 10-point row."""
    _, _, post = small_world
    res = D.plan(post, 100.0, table_gaps=(2.0, 10.0), max_draws=20, random_seed=0)
    assert float(res["producible"].sel(gap=100.0)) == 0.0
    assert np.isnan(float(res["n_required"].sel(gap=100.0)))
    assert not bool(res["reached"].sel(gap=100.0))
    assert float(res["producible"].sel(gap=10.0)) == 1.0
    assert np.isfinite(float(res["n_required"].sel(gap=10.0)))


def test_design_curves_leave_unproduced_gaps_undefined(small_world):
    _, _, post = small_world
    res = D.design_curves(post, sizes=[10], gaps=[5.0, 100.0], max_draws=20)
    assert np.isnan(res["p_correct_mean"].sel(gap=100.0)).all()
    assert np.isfinite(res["p_correct_mean"].sel(gap=5.0)).all()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(delta=st.floats(min_value=0.5, max_value=100.0, allow_nan=False))
def test_plan_rows_do_not_depend_on_delta_and_grow_as_the_gap_shrinks(small_world, delta):
    _, _, post = small_world
    table = (1.0, 2.0, 3.0, 5.0, 10.0, 20.0)
    draws = item_draws(post, max_draws=20)
    ref = D.plan(post, 10.0, table_gaps=table, draws=draws, random_seed=3)
    res = D.plan(post, delta, table_gaps=table, draws=draws, random_seed=3)
    for name in ("n_required", "producible", "p_correct_at_n"):
        np.testing.assert_array_equal(
            res[name].sel(gap=list(table)), ref[name].sel(gap=list(table))
        )
    np.testing.assert_array_equal(
        res["n_required_interval"].sel(gap=list(table)),
        ref["n_required_interval"].sel(gap=list(table)),
    )
    # n is non-decreasing as the gap shrinks, over the producible gaps
    ok = res["producible"].to_numpy() > 0
    n = res["n_required"].to_numpy()[ok]
    n = np.where(np.isfinite(n), n, np.inf)
    assert (np.diff(n) <= 0).all(), dict(zip(res["gap"].to_numpy()[ok], n, strict=True))


# ------------------------------------------------ helpers: posterior files
def _write(path, post, diagnostics=None, fit_info=None):
    """A saved posterior as the engine writes it (attrs, hash), optionally unconverged."""
    import json

    return write_posterior(
        path,
        post,
        diagnostics_json=json.dumps(diagnostics),
        fit_info_json=json.dumps(fit_info or {}),
    )


UNCONVERGED = {
    "max_rhat": 1.88,
    "min_ess_bulk": 3.0,
    "min_ess_tail": 5.0,
    "divergences": 39,
    "min_bfmi": 0.5,
    "mean_tree_size": 7.0,
    "worst_rhat": "difficulty[q3]",
    "worst_ess_bulk": "difficulty[q3]",
    "n_draws": 100,
    "n_chains": 2,
    "problems": ["R-hat 1.880 > 1.01 (difficulty[q3])", "39 divergent transition(s)"],
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Responses, a converged and an unconverged posterior file (200 draws each)."""
    from bayes_microbench import save_responses

    tmp = tmp_path_factory.mktemp("bayes")
    resp, truth = simulate_responses(
        "gpqa", n_llms=30, n_items=50, random_seed=11, return_truth=True
    )
    post = posterior_from_truth(
        truth, n_chains=2, n_draws=100, noise=0.05, subtask=resp.item_subtask, random_seed=1
    )
    save_responses(resp, tmp / "train.csv")
    save_responses(resp.isel(llm=slice(0, 3), item=slice(0, 20)), tmp / "new.csv")
    good = _write(tmp / "good.nc", post)
    bad = _write(tmp / "bad.nc", post, diagnostics=UNCONVERGED)
    return {"dir": tmp, "resp": resp, "post": post, "good": good, "bad": bad}


def _one_error_line(capsys, code, expected):
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("bayes-microbench: error: "), err
    assert "Traceback" not in err[0]
    for word in expected:
        assert word in err[0], err[0]
    return err[0]


# ------------------------------------------------ few-draw intervals
def test_score_refuses_an_interval_from_too_few_draws(files, capsys):
    from bayes_microbench.cli import main

    new = str(files["dir"] / "new.csv")
    code = main(
        [
            "score",
            "--posterior",
            str(files["good"]),
            "--responses",
            new,
            "--raw-model",
            "--max-draws",
            "1",
        ]
    )
    _one_error_line(capsys, code, ["--max-draws", "100"])
    # enough draws: accepted
    assert (
        main(
            [
                "score",
                "--posterior",
                str(files["good"]),
                "--responses",
                new,
                "--raw-model",
                "--json",
            ]
        )
        == 0
    )


@pytest.mark.parametrize("command", ["mdad", "plan"])
def test_design_commands_refuse_an_interval_from_too_few_draws(files, capsys, command):
    from bayes_microbench.cli import main

    args = [command, "--posterior", str(files["good"]), "--max-draws", "10"]
    args += ["--output", str(files["dir"] / "mdad")] if command == "mdad" else ["--delta", "5"]
    _one_error_line(capsys, main(args), ["--max-draws", "100"])
    assert not (files["dir"] / "mdad").exists()


def test_library_refuses_a_single_draw_interval(files):
    from bayes_microbench.posterior import FewDrawsError
    from bayes_microbench.scoring import score

    one = files["post"].isel(chain=[0], draw=[0])
    with pytest.raises(FewDrawsError, match="1 posterior draw"):
        score(one, files["resp"].isel(llm=[0], item=slice(0, 10)))
    with pytest.raises(FewDrawsError):
        D.design_curves(one, sizes=[10])
    with pytest.raises(FewDrawsError):
        D.plan(one, 5.0)


@settings(max_examples=25, deadline=None)
@given(
    n_obs=st.one_of(st.integers(min_value=1, max_value=40), st.just(50)),
    n_draws=st.integers(min_value=1, max_value=40),
    seed=st.integers(min_value=0, max_value=10_000),
)
def test_interval_width_is_zero_only_when_the_answer_is_certain(n_obs, n_draws, seed):
    """Below the draws floor: refused; above it, with at least 10 unasked items, never a point.

    (With one or two unasked items a 90% interval of the discrete accuracy may
    rightly be a point; 50 observed of 50 is the certain case.)
    """
    from bayes_microbench.posterior import MIN_MEMORY_DRAWS, FewDrawsError
    from bayes_microbench.scoring import score

    resp, truth = simulate_responses(
        "gpqa", n_llms=2, n_items=50, random_seed=seed % 7, return_truth=True
    )
    post = posterior_from_truth(truth, n_chains=1, n_draws=n_draws, random_seed=seed)
    rng = np.random.default_rng(seed)
    sub = resp.isel(item=np.sort(rng.choice(50, n_obs, replace=False)))
    if n_draws < MIN_MEMORY_DRAWS:  # a point or noise, refused rather than shown
        with pytest.raises(FewDrawsError):
            score(post, sub, random_seed=seed)
        return
    res = score(post, sub, random_seed=seed)
    width = np.diff(res["accuracy_interval"].to_numpy(), axis=1)[:, 0]
    certain = res["n_observed"].to_numpy() == 50
    assert (width[certain] == 0).all()
    assert (width[~certain] > 0).all(), (width, n_obs, n_draws)


# ------------------------------------------------ unconverged posteriors
@pytest.mark.parametrize(
    "command",
    [
        ["score", "--responses", "NEW", "--raw-model"],
        ["mdad", "--sizes", "10", "--max-draws", "100", "--output", "OUT", "--quiet"],
        ["plan", "--delta", "10", "--max-draws", "100"],
        ["select", "--selector", "bayes-fisher", "--n", "5", "--output", "OUT/s.json"],
    ],
    ids=lambda c: c[0],
)
def test_every_posterior_command_warns_once_about_an_unconverged_fit(files, capsys, command):
    from bayes_microbench.cli import main

    out = files["dir"] / f"out-{command[0]}"
    out.mkdir(exist_ok=True)
    args = [
        str(files["dir"] / "new.csv") if a == "NEW" else a.replace("OUT", str(out)) for a in command
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("always", ConvergenceWarning)  # as outside pytest: printed
        code = main([args[0], "--posterior", str(files["bad"]), *args[1:]])
    assert code == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    conv = [ln for ln in lines if "did not converge" in ln]
    assert len(conv) == 1, lines
    assert conv[0].startswith("bayes-microbench: warning: ")
    assert str(files["bad"]) in conv[0] and "R-hat 1.880" in conv[0] and "39 divergent" in conv[0]
    # a converged posterior: no such line
    code = main([args[0], "--posterior", str(files["good"]), *args[1:]])
    assert code == 0 and "did not converge" not in capsys.readouterr().err


# ------------------------------------------------ messages
def test_posterior_path_messages(files, capsys, tmp_path):
    from bayes_microbench.cli import main

    new = str(files["dir"] / "new.csv")
    code = main(["score", "--posterior", str(tmp_path), "--responses", new])
    _one_error_line(capsys, code, ["is a folder", ".nc"])
    trunc = tmp_path / "trunc.nc"
    trunc.write_bytes(files["good"].read_bytes()[:2000])
    code = main(["score", "--posterior", str(trunc), "--responses", new])
    line = _one_error_line(capsys, code, [str(trunc), "damaged", "fit"])
    assert "(OSError)" not in line.split("damaged")[-1]
    code = main(["check", str(tmp_path)])
    _one_error_line(capsys, code, ["is a folder"])


def test_calibrate_with_errors_name_the_flag_and_its_file(files, capsys, tmp_path):
    from bayes_microbench import save_responses
    from bayes_microbench.cli import main

    new = str(files["dir"] / "new.csv")
    few = tmp_path / "few.csv"
    save_responses(files["resp"].isel(llm=slice(0, 5)), few)
    code = main(
        [
            "score",
            "--posterior",
            str(files["good"]),
            "--responses",
            new,
            "--calibrate-with",
            str(few),
        ]
    )
    _one_error_line(capsys, code, ["--calibrate-with", str(few)])
    code = main(
        ["score", "--posterior", str(files["good"]), "--responses", new, "--calibrate-with",
         str(tmp_path / "ghost.csv")]
    )  # fmt: skip
    _one_error_line(capsys, code, ["--calibrate-with", "ghost.csv"])


def test_design_progress_bar_stays_off_on_a_non_terminal(files, capsys):
    D.design_curves(files["post"], sizes=[10], progressbar=True)
    assert capsys.readouterr().err == ""  # pytest's captured stderr is not a terminal


# ------------------------------------------------ MAP fits: convergence and check
# (a MAP fit through the CLI compiles for 20-35 s on a fresh clone: the long tier)
@pytest.fixture(scope="module")
def map_fit(tmp_path_factory):
    """A MAP fit of a tiny matrix through the CLI, and its JSON report."""
    import contextlib
    import io
    import json

    from bayes_microbench import save_responses
    from bayes_microbench.cli import main

    tmp = tmp_path_factory.mktemp("map")
    resp = simulate_responses("mmlu-pro", n_llms=20, n_items=15, model="2pl", random_seed=4)
    save_responses(resp, tmp / "r.csv")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["fit", "--responses", str(tmp / "r.csv"), "--method", "map", "--json",
                     "--quiet", "--output", str(tmp / "map.nc")])  # fmt: skip
    return {"dir": tmp, "code": code, "report": json.loads(out.getvalue())}


@pytest.mark.long
def test_map_fit_records_the_optimizer_verdict(map_fit):
    assert map_fit["code"] == 0
    assert map_fit["report"]["converged"] is True  # was null: no verdict recorded
    from bayes_microbench.irt.io import load_posterior

    assert load_posterior(map_fit["dir"] / "map.nc").converged is True


@pytest.mark.long
def test_unconverged_map_fit_is_not_written(map_fit, monkeypatch, capsys):
    from bayes_microbench.cli import main
    from bayes_microbench.commands.fit import EXIT_UNCONVERGED
    from bayes_microbench.irt import model as irt_model

    monkeypatch.setitem(irt_model.OPTIMIZER_ITERATIONS, "map", 1)  # stops short
    out = map_fit["dir"] / "short.nc"
    args = ["fit", "--responses", str(map_fit["dir"] / "r.csv"), "--method", "map", "--quiet"]
    code = main([*args, "--output", str(out)])
    err = [ln for ln in capsys.readouterr().err.splitlines() if "converge" in ln]
    assert code == EXIT_UNCONVERGED and not out.exists()
    assert len(err) == 1 and "map fit did not converge" in err[0] and "optimizer" in err[0]
    assert main([*args, "--output", str(out), "--allow-unconverged"]) == 0
    from bayes_microbench.irt.io import load_posterior

    saved = load_posterior(out)
    assert saved.converged is False and saved.convergence_problems()


@pytest.mark.long
def test_check_refuses_ppc_and_loo_of_a_map_fit(map_fit, capsys):
    from bayes_microbench.cli import main

    path = str(map_fit["dir"] / "map.nc")
    _one_error_line(capsys, main(["check", path]), ["MAP point estimate", "--method nuts"])
    _one_error_line(capsys, main(["check", path, path]), ["MAP point estimate"])
    from bayes_microbench.irt.checks import loo
    from bayes_microbench.irt.io import load_posterior

    with pytest.raises(UserInputError, match="PSIS-LOO needs at least 100"):
        loo(load_posterior(path))

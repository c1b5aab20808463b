"""Shipped models by name: ``--posterior NAME``, ``bayes-microbench models``, the models folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bayes_microbench import shipped
from bayes_microbench.cli import main
from bayes_microbench.exceptions import UserInputError

from .conftest import ROOT, write_posterior

MODELS = ROOT / "models"

UNCONVERGED = {
    "max_rhat": 1.5,
    "min_ess_bulk": 4.0,
    "min_ess_tail": 9.0,
    "divergences": 3,
    "min_bfmi": 0.5,
    "mean_tree_size": 7.0,
    "worst_rhat": "intercept[q1]",
    "worst_ess_bulk": "intercept[q1]",
    "n_draws": 100,
    "n_chains": 2,
    "problems": ["R-hat 1.500 > 1.01 (intercept[q1])", "3 divergent transition(s)"],
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A models folder: a converged ``musr-2pl`` (the key ``musr``) and an unconverged ``odd``."""
    from bayes_microbench import simulate_responses
    from bayes_microbench.testing import posterior_from_truth

    out = tmp_path_factory.mktemp("models")
    _, truth = simulate_responses("gpqa", n_llms=20, n_items=12, random_seed=0, return_truth=True)
    post = posterior_from_truth(truth, n_draws=60, random_seed=0)
    write_posterior(out / "musr-2pl.nc", post, benchmark="musr", diagnostics_json="null")
    write_posterior(
        out / "odd.nc",
        post,
        benchmark="odd",
        diagnostics_json=json.dumps(UNCONVERGED),
        fit_info_json="{}",
    )
    (out / "musr-2pl.md").write_text("# card\n")
    return out


@pytest.fixture
def env_folder(folder, monkeypatch) -> Path:
    monkeypatch.setenv(shipped.MODELS_ENV, str(folder))
    return folder


def test_names_resolve_to_files_and_paths_stay_paths(folder, tmp_path):
    assert shipped.resolve_posterior("musr", folder=folder) == str(folder / "musr-2pl.nc")
    assert shipped.resolve_posterior("odd", folder=folder) == str(folder / "odd.nc")
    # a path (existing or not) is the loader's business, never a name
    assert shipped.resolve_posterior("no/such.nc", folder=folder) == "no/such.nc"
    assert shipped.resolve_posterior("missing.nc", folder=folder) == "missing.nc"
    existing = tmp_path / "gpqa"
    existing.write_text("x")
    assert shipped.resolve_posterior(str(existing), folder=folder) == str(existing)
    assert shipped.known_names(folder) == ["musr", "musr-2pl", "odd"]


def test_unknown_name_lists_the_known_ones(folder):
    with pytest.raises(UserInputError, match=r"'gpqq'.*known names: musr, musr-2pl, odd"):
        shipped.resolve_posterior("gpqq", folder=folder)
    with pytest.raises(UserInputError, match=r"holds no \.nc file"):
        shipped.resolve_posterior("gpqa", folder=folder / "empty")


def test_models_folder_env_overrides_the_checkout(monkeypatch, tmp_path):
    monkeypatch.setenv(shipped.MODELS_ENV, str(tmp_path))
    assert shipped.models_dir() == tmp_path
    monkeypatch.delenv(shipped.MODELS_ENV)
    assert shipped.models_dir() == MODELS  # the checkout's (editable install)


def test_cli_unknown_name_is_one_line_exit_2(env_folder, capsys):
    rc = main(["plan", "--posterior", "gpqq", "--delta", "5"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1
    assert "known names: musr, musr-2pl, odd" in err and "--posterior" in err


def test_cli_name_reaches_the_command(env_folder, capsys):
    rc = main(
        [
            "plan",
            "--posterior",
            "musr",
            "--delta",
            "10",
            "--raw-model",
            "--max-draws",
            "100",
            "--json",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert json.loads(out)  # "musr" is no file here: the command read musr-2pl.nc


def test_models_json_lists_each_file(env_folder, capsys):
    assert main(["models", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in res["models"]}
    assert set(rows) == {"musr-2pl", "odd"}
    musr, odd = rows["musr-2pl"], rows["odd"]
    assert musr["aliases"] == ["musr"] and odd["aliases"] == []
    assert (musr["n_items"], musr["draws"]) == (12, 120)
    assert musr["calibrated"] is False and musr["n_llms"] is None
    assert musr["converged"] is None and musr["card"].endswith("musr-2pl.md")
    assert odd["converged"] is False and odd["problems"] == UNCONVERGED["problems"]
    assert musr["file_bytes"] == (env_folder / "musr-2pl.nc").stat().st_size


def test_models_table_marks_the_unconverged(env_folder, capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("odd"))
    assert " NO " in f"{line} "
    assert "unconverged" in out and "odd" in out.splitlines()[-1]


def test_models_without_a_folder_is_exit_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(shipped.MODELS_ENV, str(tmp_path / "none"))
    assert main(["models"]) == 2
    assert "no shipped models" in capsys.readouterr().err


# ------------------------------------------------------- the shipped files themselves
SHIPPED = sorted(MODELS.glob("*.nc"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_each_shipped_model_is_small_carded_and_calibrated(path):
    info = shipped.model_info(path)
    assert info["file_bytes"] <= 10_500_000, "keep models/ small: thin it harder"
    assert info["card"] is not None, f"{path.name} has no model card"
    assert info["calibrated"], f"{path.name} carries no calibration"
    assert info["draws"] >= 100  # score refuses intervals from fewer
    assert info["converged"] is not None  # the card and `models` say which
    card = Path(info["card"]).read_text()
    assert ("NOT converged" in card) == (info["converged"] is False)


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_each_shipped_calibration_carries_a_population_of_the_models_dims(path):
    from bayes_microbench.irt import load_posterior

    art = load_posterior(path)
    population = art.calibration.population
    assert population is not None, f"{path.name}: run build_models --calibrate --only {path.stem}"
    n_dims = art.config.n_dims if art.config.model == "2pl-md" else 1
    assert population.n_llms >= 20 and np.isfinite(population.ability).all()
    assert population.n_dims == n_dims
    # the shared matrices' responses stay out of the repository (docs/decisions/0053)
    assert art.calibration.training is None, f"{path.name} carries the fitted llms' responses"


def test_every_benchmark_key_is_a_build_target():
    from bayes_microbench.irt.build_models import ARTIFACTS, spec_for

    for key, bench in shipped.BENCHMARKS.items():
        spec = spec_for(key)
        assert spec.name == bench.default_model and spec.data == bench.data
    assert all(spec_for(n) is s for n, s in ARTIFACTS.items())


def test_a_wheel_install_has_no_models_folder(monkeypatch, tmp_path):
    """In site-packages a ``models`` folder beside the package is not ours: name lookups say so."""
    site = tmp_path / "site-packages"
    (site / "bayes_microbench").mkdir(parents=True)
    (site / "models").mkdir()  # another distribution's
    monkeypatch.delenv(shipped.MODELS_ENV, raising=False)
    monkeypatch.setattr(shipped, "__file__", str(site / "bayes_microbench" / "shipped.py"))
    assert shipped.models_dir() is None
    with pytest.raises(UserInputError, match=r"no models folder.*BAYES_MICROBENCH_MODELS"):
        shipped.resolve_posterior("gpqa")


CARDED = sorted(MODELS.glob("*.json"))


@pytest.mark.parametrize("facts", CARDED, ids=[p.stem for p in CARDED])
def test_each_card_is_its_facts_rendered_with_the_heldout_runs(facts):
    """A card is exactly what ``build_models --cards`` renders from its facts and the held-out
    study's saved runs: a rerun of the study that was not carried into the cards fails here."""
    from bayes_microbench.irt.build_models import _card_markdown

    card = json.loads(facts.read_text())
    text = facts.with_suffix(".md").read_text()
    assert text == _card_markdown(card), f"rerun build_models --cards ({facts.stem})"
    assert "## Held-out coverage" in text


def test_heldout_section_lists_each_saved_row_or_says_not_measured(tmp_path):
    from bayes_microbench.irt.build_models import _heldout_text

    runs = {
        "runs": [
            {
                "settings": {"benchmark": "arc", "random_seed": 3, "held_out": 200},
                "scores": [
                    {"design": "random", "n": 25, "coverage": 0.8956, "width": 0.1496},
                    {"design": "bayes-fisher", "n": 50, "coverage": 0.86, "width": 0.0859},
                ],
            }
        ]
    }
    path = tmp_path / "heldout.json"
    path.write_text(json.dumps(runs))
    text = _heldout_text("arc", path)
    assert "| 3 | 200 | random | 25 | 0.896 | 15.0 |" in text
    assert "| 3 | 200 | bayes-fisher | 50 | 0.860 | 8.6 |" in text
    assert "Not measured yet" in _heldout_text("winogrande", path)
    assert "Not measured yet" in _heldout_text("arc", tmp_path / "absent.json")
    assert "predate" not in text


def test_heldout_section_says_when_its_runs_predate_the_file(tmp_path):
    from bayes_microbench.irt.build_models import _heldout_text

    run = {
        "settings": {"benchmark": "musr", "random_seed": 0, "held_out": 20},
        "scores": [{"design": "random", "n": 25, "coverage": 0.9, "width": 0.12}],
        "date": "2026-12-02 20:41 UTC",
        "commit": "75b476f",
    }
    path = tmp_path / "heldout.json"
    path.write_text(json.dumps({"runs": [run]}))
    old = _heldout_text("musr", path, built="2026-12-03 15:54 UTC")
    assert "**These runs predate this file** (runs of 2026-12-02 20:41 UTC (commit 75b476f)" in old
    assert "predate" not in _heldout_text("musr", path, built="2026-12-02 20:00 UTC")


def test_a_recalibration_after_the_heldout_runs_is_said_in_the_card():
    """``build_models --calibrate`` changes what the held-out runs measured: a card whose
    calibration is newer than its runs says so, as it does for a rebuilt file."""
    from bayes_microbench.irt.build_models import _card_markdown

    card = json.loads((MODELS / "musr-2pl.json").read_text())
    card["date"] = "2000-01-01 00:00 UTC"  # built before every held-out run
    card.pop("calibration_date", None)
    assert "predate" not in _card_markdown(card)
    card["calibration_date"] = "2999-01-01 00:00 UTC"  # recalibrated after every run
    text = _card_markdown(card)
    assert "**These runs predate this file**" in text
    assert "last recalibrated 2999-01-01 00:00 UTC" in text
    assert "(recalibrated 2999-01-01 00:00 UTC, `build_models --calibrate`)" in text


def _gpqa_run(model, seed):
    """A saved held-out run on GPQA with one score row (``model`` None: a run without one)."""
    row = {"design": "random", "n": 25, "coverage": 0.9, "width": 0.1}
    doc = {"settings": {"benchmark": "gpqa", "random_seed": seed, "held_out": 60}}
    return doc | {"scores": [row]} | ({"model": model} if model else {})


def test_heldout_section_keeps_the_cards_model_and_says_when_its_fit_is_not_default(tmp_path):
    from bayes_microbench.irt.build_models import _heldout_text

    path = tmp_path / "heldout.json"
    path.write_text(json.dumps({"runs": [_gpqa_run(None, 0), _gpqa_run("2pl-md", 7)]}))
    one_d = _heldout_text("gpqa", path)
    assert "| 0 | 60 | random |" in one_d and "| 7 |" not in one_d
    md = _heldout_text("gpqa", path, model="2pl-md")
    assert "| 7 | 60 | random |" in md and "| 0 |" not in md
    tuned = _heldout_text("gpqa", path, default_fit=False)
    assert "not this file's own settings" in tuned
    assert "The default procedure of this benchmark" in tuned
    assert "own settings" not in one_d


def test_refit_table_shows_each_refits_ess_and_a_dash_where_unrecorded():
    from bayes_microbench.irt.build_models import _attempts_text

    def refit(parameterization, converged, **ess):
        return {"settings": {}, "parameterization": parameterization, "draws_tried": [1000],
                "max_rhat": 1.004, "divergences": 0, "converged": converged, **ess}  # fmt: skip

    new = refit("decoupled", False, min_ess_bulk=324.4, min_ess_tail=786.0)
    text = _attempts_text([], [new, refit("centered", True)])
    assert "| min bulk ESS | min tail ESS |" in text
    assert "| 1.0040 | 324 | 786 | 0 | no |" in text
    assert "| 1.0040 | - | - | 0 | yes |" in text


def test_heldout_runs_of_a_3d_md_belong_to_the_3d_card_only(tmp_path):
    from bayes_microbench.irt.build_models import _heldout_text, _run_label

    path = tmp_path / "heldout.json"
    path.write_text(json.dumps({"runs": [_gpqa_run("2pl-md", 7), _gpqa_run("2pl-md:3", 8)]}))
    labels = [_run_label({"model": "2pl-md", "config": {"n_dims": d}}) for d in (2, 3)]
    assert labels == ["2pl-md", "2pl-md:3"]
    assert _run_label({"model": "2pl", "config": {}}) == "2pl"
    two, three = (_heldout_text("gpqa", path, model=label) for label in labels)
    assert "| 7 | 60 | random |" in two and "| 8 |" not in two
    assert "| 8 | 60 | random |" in three and "| 7 |" not in three
    assert "did not converge" not in three


def test_heldout_section_says_when_a_training_fit_did_not_converge(tmp_path):
    from bayes_microbench.irt.build_models import _heldout_text

    row = {"design": "random", "n": 25, "coverage": 0.9, "width": 0.1}
    fits = [{"converged": False, "note": "bulk ESS 332 < 400 (loading_sd[1])"}]
    run = {"settings": {"benchmark": "gpqa", "random_seed": 1, "held_out": 60}}
    path = tmp_path / "heldout.json"
    path.write_text(json.dumps({"runs": [run | {"scores": [row], "fits": fits}]}))
    text = _heldout_text("gpqa", path)
    assert "**A training fit did not converge**" in text
    assert "seed 1 (bulk ESS 332 < 400 (loading_sd[1]))" in text


def test_heldout_section_reports_each_runs_design_check(tmp_path):
    from bayes_microbench.irt.build_models import _heldout_text

    def mdad(predicted, realized, inside):
        return {"predicted": predicted, "realized": realized, "inside": inside}

    row = {"design": "random", "n": 25, "coverage": 0.9, "width": 0.1}
    run = {
        "settings": {"benchmark": "gpqa", "random_seed": 3, "held_out": 60},
        "scores": [row],
        # within 1 point: 2.0 vs 2.5, 4.0 vs 3.0 and a row neither reaches; not 3.5 vs 1.5,
        # nor a row only one of them reaches
        "mdad": [mdad(2.0, 2.5, True), mdad(4.0, 3.0, True), mdad(3.5, 1.5, False),
                 mdad(None, 8.0, False), mdad(None, None, False)],
    }  # fmt: skip
    path = tmp_path / "heldout.json"
    path.write_text(json.dumps({"runs": [run]}))
    assert "seed 3: inside in 2 of 5 rows, within 1 point in 3." in _heldout_text("gpqa", path)
    run.pop("mdad")
    path.write_text(json.dumps({"runs": [run]}))
    assert "Designs, the same runs" not in _heldout_text("gpqa", path)


def test_the_compact_form_only_where_float32_keeps_too_few_draws():
    """float32 thinning for a benchmark of hundreds of items; the compact form (int16, no
    difficulty: 2 x 2 bytes per item and draw) for MMLU-Pro's 12032 items."""
    import numpy as np
    import xarray as xr

    from bayes_microbench.irt.build_models import COMPACT_BELOW, MAX_FILE_BYTES, choose_form

    def post(n_items):
        shape = (2, 1000, n_items)
        dims = ("chain", "draw", "item")
        data = {v: (dims, np.zeros(shape, np.float32)) for v in ("discrimination", "intercept")}
        data["difficulty"] = (dims, np.zeros(shape, np.float32))
        data["ability"] = (("chain", "draw", "llm"), np.zeros((2, 1000, 40), np.float32))
        return xr.Dataset(data)

    thin, compact = choose_form(post(448), 2000, "2pl")
    assert (thin, compact) == (2, False)  # 448 x 3 x 4 bytes: 1000 draws fit in 10 MB
    thin, compact = choose_form(post(12032), 2000, "2pl")
    kept = -(-2000 // thin)
    assert compact and 100 <= kept  # score's minimum
    assert kept * 12032 * 2 * 2 <= 0.95 * MAX_FILE_BYTES  # int16 a and intercept only
    # float32 would have kept 65 draws: under score's minimum of 100
    assert int(0.95 * MAX_FILE_BYTES) // (12032 * 3 * 4) < min(100, COMPACT_BELOW)
    assert choose_form(post(12032), 2000, "2pl-md")[1] is False

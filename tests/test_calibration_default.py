"""Calibration travels with the posterior: saved by fit, applied by score unless --raw-model."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from bayes_microbench import UserInputError, save_responses, simulate_responses
from bayes_microbench.misfit import estimate_misfit
from bayes_microbench.posterior import read_posterior_file
from bayes_microbench.testing import posterior_from_truth

from .conftest import write_posterior


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from bayes_microbench.irt.io import add_calibration

    tmp = tmp_path_factory.mktemp("calib")
    resp, truth = simulate_responses(
        "gpqa", n_llms=40, n_items=60, random_seed=3, return_truth=True
    )
    post = posterior_from_truth(
        truth, n_chains=2, n_draws=60, noise=0.05, subtask=resp.item_subtask, random_seed=0
    )
    misfit = estimate_misfit(post, resp, sizes=[10, 25], max_draws=40, random_seed=0)
    raw = write_posterior(tmp / "raw.nc", post)
    cal = write_posterior(tmp / "cal.nc", post)
    add_calibration(cal, misfit)
    save_responses(resp.isel(llm=slice(0, 4), item=slice(0, 15)), tmp / "new.csv")
    save_responses(resp, tmp / "train.csv")
    return {"dir": tmp, "resp": resp, "post": post, "misfit": misfit, "raw": raw, "cal": cal}


def test_saved_calibration_reads_back_and_old_files_still_load(world):
    _, none = read_posterior_file(str(world["raw"]))
    assert none is None
    _, back = read_posterior_file(str(world["cal"]))
    np.testing.assert_array_equal(back.quantiles, world["misfit"].quantiles)
    np.testing.assert_array_equal(back.knots, world["misfit"].knots)
    assert back.describe() == world["misfit"].describe()


def test_an_edited_calibration_is_refused(world, tmp_path):
    import xarray as xr

    tree = xr.open_datatree(world["cal"])
    tree.load()
    tree.close()
    ds = tree["calibration"].to_dataset()
    ds["misfit_centre"] = ds["misfit_centre"] + 0.1
    tree["calibration"] = xr.DataTree(ds)
    tree.to_netcdf(tmp_path / "edited.nc")
    with pytest.raises(UserInputError, match="calibration does not match its stored hash"):
        read_posterior_file(str(tmp_path / "edited.nc"))


def _score_json(capsys, *args):
    from bayes_microbench.cli import main

    assert main(["score", *args, "--json", "--max-draws", "120"]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def test_score_uses_the_saved_calibration_by_default(world, capsys):
    new = str(world["dir"] / "new.csv")
    cal, _ = _score_json(capsys, "--posterior", str(world["cal"]), "--responses", new)
    raw, _ = _score_json(
        capsys, "--posterior", str(world["cal"]), "--responses", new, "--raw-model"
    )
    assert cal["interval_kind"] == "calibrated" and raw["interval_kind"] == "raw"
    assert "item-split cross-validation" in cal["misfit"] and raw["misfit"].startswith("none")
    bounds = [[(r["accuracy_lower"], r["accuracy_upper"]) for r in d["llms"]] for d in (cal, raw)]
    assert bounds[0] != bounds[1]
    # --calibrate-with still overrides the saved one
    fresh, _ = _score_json(
        capsys, "--posterior", str(world["cal"]), "--responses", new,
        "--calibrate-with", str(world["dir"] / "train.csv"),
    )  # fmt: skip
    assert fresh["interval_kind"] == "calibrated"


def test_score_without_calibration_says_the_interval_is_raw(world, capsys):
    new = str(world["dir"] / "new.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("always", UserWarning)  # printed as outside pytest
        out, err = _score_json(capsys, "--posterior", str(world["raw"]), "--responses", new)
    assert out["interval_kind"] == "raw"
    lines = [ln for ln in err.splitlines() if "calibration" in ln]
    assert len(lines) == 1 and lines[0].startswith("bayes-microbench: warning: ")
    assert "raw model" in lines[0] and "--calibrate-with" in lines[0]


@pytest.mark.long
def test_fit_saves_calibration_by_default(tmp_path, capsys):
    from bayes_microbench.cli import main
    from bayes_microbench.irt.io import load_posterior

    resp = simulate_responses("mmlu-pro", n_llms=30, n_items=40, model="2pl", random_seed=1)
    save_responses(resp, tmp_path / "r.csv")
    out = tmp_path / "p.nc"
    args = ["fit", "--responses", str(tmp_path / "r.csv"), "--method", "laplace"]
    assert main([*args, "--draws", "100", "--json", "--quiet", "--output", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["calibration"]["seconds"] > 0
    saved = load_posterior(out).calibration
    assert saved is not None and saved.n_llms == 30
    assert saved.n_splits == 8  # 30 llms: split often enough for the cases it aims at


def test_few_llms_are_split_more_often_up_to_a_cap():
    from bayes_microbench.irt.calibration import CALIBRATION_CASES, calibration_splits

    assert [calibration_splits(n) for n in (20, 61, 81, 250, 420, 4280)] == [8, 8, 7, 2, 2, 2]
    for n in (72, 100, 167, 249):  # between the caps: the fewest splits reaching the cases
        k = calibration_splits(n)
        assert k * n >= CALIBRATION_CASES > (k - 1) * n


def test_library_score_applies_the_calibration_a_loaded_file_carries(world):
    from bayes_microbench.irt import load_posterior
    from bayes_microbench.scoring import score

    new = world["resp"].isel(llm=slice(0, 4), item=slice(0, 15))
    loaded = load_posterior(world["cal"])
    saved = score(loaded, new, random_seed=0)
    explicit = score(loaded.posterior, new, misfit=world["misfit"], random_seed=0)
    raw = score(loaded, new, misfit=None, random_seed=0)
    assert saved.attrs["misfit"] == explicit.attrs["misfit"] != raw.attrs["misfit"]
    np.testing.assert_array_equal(
        saved["accuracy_interval"].values, explicit["accuracy_interval"].values
    )
    # a bare posterior Dataset carries no calibration: the raw interval, as before
    bare = score(loaded.posterior, new, random_seed=0)
    np.testing.assert_array_equal(bare["accuracy_interval"].values, raw["accuracy_interval"].values)


def test_calibration_keeps_the_irt_predictive_near_the_whole_benchmark(world):
    """With 1-9 unasked items the count's lattice matters: the IRT predictive is kept.

    A continuous recalibrated rate over 2 unasked items gave intervals narrower than one
    item's step that missed every held-out llm's true accuracy (metabench MMLU, n = 100
    of 102 in the held-out validation).
    """
    from bayes_microbench.misfit import MIN_CALIBRATED_UNOBSERVED
    from bayes_microbench.scoring import score

    resp, post, misfit = world["resp"], world["post"], world["misfit"]
    near = resp.isel(llm=slice(0, 6), item=slice(0, 60 - (MIN_CALIBRATED_UNOBSERVED - 1)))
    far = resp.isel(llm=slice(0, 6), item=slice(0, 60 - MIN_CALIBRATED_UNOBSERVED))
    for sub, same in ((near, True), (far, False)):
        cal = score(post, sub, misfit=misfit, random_seed=4)["accuracy"].values
        raw = score(post, sub, misfit=None, random_seed=4)["accuracy"].values
        assert np.array_equal(cal, raw) is same
    # the kept predictive lives on the lattice of the count: k / 60
    counts = score(post, near, misfit=misfit, random_seed=4)["accuracy"].values * 60
    np.testing.assert_allclose(counts, np.round(counts), atol=1e-9)

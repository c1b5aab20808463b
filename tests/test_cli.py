from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bayes_microbench.cli import main

from .conftest import ROOT


def test_info_json(tmp_path, capsys):
    (tmp_path / "b.csv").write_text("llm,x,y\nm1,1,0\nm2,,1\n")
    assert main(["info", str(tmp_path / "b.csv"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_llms"] == 2 and out["n_items"] == 2 and out["n_subtasks"] == 1
    assert out["n_missing"] == 1
    assert abs(out["mean_accuracy"] - 0.75) < 1e-9


def test_user_error_is_one_line_exit_2(tmp_path):
    (tmp_path / "b.csv").write_text("llm,x,y\nm1,1,7\n")
    proc = subprocess.run(
        [sys.executable, "-m", "bayes_microbench", "info", str(tmp_path / "b.csv")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "item 'y'" in lines[0] and "Traceback" not in proc.stderr


def test_bad_flag_exit_2(capsys):
    assert main(["info", "x.csv", "--nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unrecognized arguments" in err[0]


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as stop:
        assert stop.code == 0
    assert "bayes-microbench" in capsys.readouterr().out


@pytest.mark.long
def test_demo_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--output", str(out), "--max-draws", "100", "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "gpqa-2pl.nc" in doc["source"]
    mdad = {(r["selector"], r["n_items"]): r for r in doc["mdad"]}
    assert {s for s, _ in mdad} == {"random", "bayes-fisher", "bayes-ranking"}
    random_curve = [mdad[("random", n)]["mdad"] for n in (10, 25, 50, 100, 200)]
    assert random_curve == sorted(random_curve, reverse=True) and random_curve[0] > random_curve[-1]
    # informative selection beats random at 10 items, by a wide margin on GPQA
    assert mdad[("bayes-ranking", 10)]["mdad"] < 0.5 * mdad[("random", 10)]["mdad"]
    for r in doc["mdad"]:
        assert r["mdad_lower"] <= r["mdad"] <= r["mdad_upper"]
    # 30 simulated llms: a 90% interval should cover most of them (binomial: >= 21 of 30 w.p. > 0.99)
    assert doc["scores_coverage"] >= 0.7
    for name in (
        "mdad.csv",
        "curves.csv",
        "scores.csv",
        "plan.csv",
        "report.md",
        "figures/mdad_vs_n.svg",
    ):
        assert (out / name).exists(), name


def test_frequentist_import_does_not_load_pymc():
    code = "import sys, bayes_microbench, bayes_microbench.cli as c; c.build_parser(); print('pymc' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


@pytest.mark.long
def test_score_calibrate_with_training_responses(tmp_path, capsys, gpqa_path):
    import numpy as np

    from bayes_microbench import load_responses, save_responses

    resp = load_responses(gpqa_path)
    cols = np.sort(np.random.default_rng(0).choice(resp.n_items, 50, replace=False))
    new = save_responses(resp.isel(llm=slice(0, 4), item=cols), tmp_path / "new.csv")[0]
    posterior = str(ROOT / "models" / "gpqa-2pl.nc")
    base = [
        "score",
        "--posterior",
        posterior,
        "--responses",
        str(new),
        "--max-draws",
        "100",
        "--json",
    ]
    assert main([*base, "--raw-model"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*base, "--calibrate-with", str(gpqa_path), "--quiet"]) == 0
    calibrated = json.loads(capsys.readouterr().out)
    assert plain["misfit"].startswith("none") and not calibrated["misfit"].startswith("none")
    for doc in (plain, calibrated):
        assert [r["n_observed"] for r in doc["llms"]] == [50] * 4
        for r in doc["llms"]:
            assert r["accuracy_lower"] <= r["accuracy_mean"] <= r["accuracy_upper"]
    # the recalibration shrinks predictions toward the population (slope < 1 on GPQA)
    spread = [np.std([r["accuracy_mean"] for r in d["llms"]]) for d in (plain, calibrated)]
    assert spread[1] < spread[0]


@pytest.mark.long
def test_score_with_the_shipped_md_posterior(tmp_path, capsys, gpqa_path):
    import numpy as np

    from bayes_microbench import Responses, load_responses, save_responses

    resp = load_responses(gpqa_path)
    rng = np.random.default_rng(0)
    sub = resp.isel(llm=rng.choice(resp.n_llms, 40, replace=False))
    # each llm observed on its own 50 random items
    mask = np.zeros(sub.values.shape, dtype=bool)
    np.put_along_axis(mask, np.argsort(rng.random(mask.shape), axis=1)[:, :50], True, axis=1)
    cols = mask.any(axis=0)
    obs = Responses.from_arrays(
        np.where(mask, sub.values, np.nan)[:, cols],
        sub.llms,
        sub.items[cols],
        subtask=sub.item_subtask[cols],
    )
    new = save_responses(obs, tmp_path / "new.csv")[0]
    posterior = str(ROOT / "models" / "gpqa-2pl-md.nc")
    args = ["score", "--posterior", posterior, "--responses", str(new), "--max-draws", "200"]
    assert main([*args, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["llms"]
    assert [r["n_observed"] for r in rows] == [50] * 40
    truth = np.nanmean(sub.values, axis=1)
    mean = np.array([r["accuracy_mean"] for r in rows])
    lo, hi = (np.array([r[k] for r in rows]) for k in ("accuracy_lower", "accuracy_upper"))
    # these llms were in the fit (in-sample): the intervals cover nearly all of them, and
    # the posterior mean is about twice as close to the full accuracy as the subset's
    assert ((lo <= truth) & (truth <= hi)).mean() >= 0.8
    subset_error = np.abs(np.array([r["observed_accuracy"] for r in rows]) - truth).mean()
    assert np.abs(mean - truth).mean() < 0.7 * subset_error

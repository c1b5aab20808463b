from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from bayes_microbench import save_responses, simulate_responses
from bayes_microbench.cli import main
from bayes_microbench.commands.select import lm_eval_samples

from .conftest import ROOT


def test_select_writes_ids_weights_and_lm_eval_samples(tmp_path, capsys):
    resp = simulate_responses("gpqa", n_llms=30, n_items=40, random_seed=0)
    path = save_responses(resp, tmp_path / "bench.csv")[0]
    out = tmp_path / "subset.json"
    args = [
        "select",
        "--responses",
        str(path),
        "--selector",
        "random",
        "--n",
        "12",
        "--output",
        str(out),
        "--quiet",
    ]
    assert main([*args, "--seed", "3"]) == 0
    doc = json.loads(out.read_text())
    assert doc["n_items"] == 12 and len(set(doc["item_ids"])) == 12
    assert set(doc["item_ids"]) <= set(resp.items.tolist())
    assert np.isclose(sum(i["weight"] for i in doc["items"]), 1.0)
    # simulated ids are "gpqa-like:NN": the lm-evaluation-harness --samples mapping follows
    assert sorted(doc["lm_eval_samples"]["gpqa-like"]) == sorted(
        int(i.split(":")[1]) for i in doc["item_ids"]
    )
    again = tmp_path / "again.json"
    assert main([*args[:-3], "--output", str(again), "--quiet", "--seed", "3"]) == 0
    assert json.loads(again.read_text())["item_ids"] == doc["item_ids"]


def test_select_too_many_items_is_one_line_exit_2(tmp_path, capsys):
    resp = simulate_responses("gpqa", n_llms=10, n_items=20, random_seed=0)
    path = save_responses(resp, tmp_path / "bench.csv")[0]
    out = tmp_path / "subset.json"
    assert main(["select", "--responses", str(path), "--n", "50", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--n: got 50; choose 1 to 20 items" in err[0]
    assert not out.exists()


def test_lm_eval_samples_only_for_task_doc_ids():
    assert lm_eval_samples(["arc:3", "arc:1", "mmlu_x:7"]) == {"arc": [1, 3], "mmlu_x": [7]}
    assert lm_eval_samples(["arc:3", "abc123"]) is None


def test_select_from_posterior_random_bayesian_and_frequentist():
    from bayes_microbench.design import select_from_posterior
    from bayes_microbench.testing import posterior_from_truth

    resp, truth = simulate_responses(
        "gpqa", model="2pl", n_llms=50, n_items=60, random_seed=1, return_truth=True
    )
    post = posterior_from_truth(truth, n_draws=40, random_seed=0)
    for name in ("random", "bayes-fisher", "anchor-points"):
        ids, subtasks, weights, info = select_from_posterior(post, name, 15, random_seed=2)
        assert len(set(ids)) == 15 and set(ids) <= set(resp.items.tolist())
        assert len(subtasks) == 15 and np.isclose(weights.sum(), 1.0) and (weights >= 0).all()
        again = select_from_posterior(post, name, 15, random_seed=2)[0]
        assert again == ids
    assert "simulated from the posterior" in info["source"]
    # bayes-fisher picks informative items: its items' expected Fisher information over the
    # N(0, 1) population (true parameters) beats the average item's
    theta = np.linspace(-4, 4, 161)
    dens = np.exp(-(theta**2) / 2)
    dens /= dens.sum()
    a, b = truth.discrimination.to_numpy(), truth.difficulty.to_numpy()
    p = 1 / (1 + np.exp(-a[:, None] * (theta[None, :] - b[:, None])))
    info = pd.Series((a[:, None] ** 2 * p * (1 - p)) @ dens, index=truth.difficulty.index)
    fisher_ids = select_from_posterior(post, "bayes-fisher", 15, random_seed=2)[0]
    assert info[fisher_ids].mean() > 1.5 * info.mean()


def test_select_json_feeds_mdad_subset(tmp_path, capsys):
    from bayes_microbench.io import read_subset

    resp = simulate_responses("gpqa", n_llms=30, n_items=40, random_seed=0)
    path = save_responses(resp, tmp_path / "bench.csv")[0]
    out = tmp_path / "subset.json"
    assert (
        main(["select", "--responses", str(path), "--n", "7", "--output", str(out), "--quiet"]) == 0
    )
    assert read_subset(str(out)) == json.loads(out.read_text())["item_ids"]
    (tmp_path / "bad.json").write_text('{"items": 3}')
    posterior = str(ROOT / "models" / "gpqa-2pl.nc")
    bad = ["mdad", "--posterior", posterior, "--subset", str(tmp_path / "bad.json")]
    capsys.readouterr()
    assert main([*bad, "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'item_ids' list" in err[0]
    assert not (tmp_path / "o").exists()
    # a CSV subset with an unclosed quote was an internal error (exit 1) through mdad
    (tmp_path / "quote.csv").write_text('item\na,"b\n')
    quote = ["mdad", "--posterior", posterior, "--subset", str(tmp_path / "quote.csv")]
    assert main([*quote, "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "quote.csv" in err[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.long
def test_select_from_a_shipped_model_simulates_with_its_calibration(tmp_path):
    """``select --posterior gpqa`` reads the shipped model's calibration: its llms are
    simulated with the fitted llms' misfit and the estimator is calibrated on them."""
    out = tmp_path / "subset.json"
    args = ["select", "--posterior", "gpqa", "--selector", "bayes-fisher", "--n", "60"]
    assert main([*args, "--output", str(out), "--quiet"]) == 0
    info = json.loads(out.read_text())["info"]
    assert "misfit" in info["source"], info
    assert "calibrated on the source llms" in info["estimator"], info

"""Held-out validation (``bayes_microbench.validate`` and the ``validate`` command)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bayes_microbench import simulate_responses
from bayes_microbench.cli import main
from bayes_microbench.exceptions import UserInputError
from bayes_microbench.io import save_responses
from bayes_microbench.testing import posterior_from_truth
from bayes_microbench.validate import FittedPosterior, validate


@pytest.fixture(scope="module")
def simulated():
    """A 2PL benchmark with its true item parameters (the model holds exactly)."""
    return simulate_responses("gpqa", n_llms=90, n_items=120, random_seed=3, return_truth=True)


def _true_posterior_fit(truth):
    """A validation fit that returns the true item parameters with small noise."""

    def fit(train, seed):
        post = posterior_from_truth(truth, n_draws=100, noise=0.02, random_seed=seed)
        return FittedPosterior(post)

    return fit


def test_validate_tables_and_coverage_under_a_true_model(simulated):
    resp, truth = simulated
    res = validate(
        resp,
        designs=["random", "bayes-fisher"],
        sizes=[20, 40],
        held_out=40,
        n_replicates=3,
        fit=_true_posterior_fit(truth),
        random_seed=0,
    )
    assert list(res.scores[["design", "n"]].itertuples(index=False, name=None)) == [
        ("random", 20),
        ("random", 40),
        ("bayes-fisher", 20),
        ("bayes-fisher", 40),
    ]
    assert (res.scores["interval"] == "raw").all()  # the fake fit saves no calibration
    assert res.scores.loc[res.scores["design"] == "random", "n_scored"].tolist() == [120, 120]
    # with the true items, the 90% intervals cover most held-out llms and shrink with n
    assert res.scores["coverage"].min() >= 0.7
    rnd = res.scores[res.scores["design"] == "random"]
    assert rnd["width"].iloc[1] < rnd["width"].iloc[0]
    # every pair is counted once per subset, and the deciles partition them
    pairs = 40 * 39 // 2
    assert res.mdad.loc[res.mdad["design"] == "random", "n_pairs"].max() <= 3 * pairs
    assert res.ranking["n_pairs"].sum() == res.mdad["n_pairs"].sum()
    assert (res.ranking["predicted"] >= res.ranking["bin_lower"] - 1e-12).all()
    assert (res.ranking["predicted"] <= res.ranking["bin_upper"] + 1e-12).all()
    # the realized share rises with the predicted probability
    busy = res.ranking[res.ranking["n_pairs"] >= 50]
    assert busy["realized"].iloc[-1] > busy["realized"].iloc[0]
    # one study per random subset, one per selector's subset; `inside` is the first's
    studies = res.mdad["realized_studies"].map(len).tolist()
    assert studies == [3, 3, 1, 1], studies
    for _, row in res.mdad.iterrows():
        first = np.inf if row["realized_studies"][0] is None else row["realized_studies"][0]
        assert row["inside"] == (row["study_lower"] <= first <= row["study_upper"])
        assert row["studies_inside"] == sum(
            [
                row["study_lower"] <= (np.inf if r is None else r) <= row["study_upper"]
                for r in row["realized_studies"]
            ]
        )
    # under the true model most single studies land inside their 90% band
    total = res.mdad["studies_inside"].sum()
    assert total >= 6, res.mdad[["design", "n", "realized_studies", "study_lower", "study_upper"]]
    doc = res.to_json()
    json.dumps(doc)  # JSON-ready: no inf, no numpy scalars
    assert doc["settings"]["held_out"] == 40


def test_validate_same_seed_same_tables(simulated):
    resp, truth = simulated
    kw = dict(
        designs=["random"],
        sizes=[30],
        held_out=30,
        n_replicates=2,
        fit=_true_posterior_fit(truth),
        random_seed=5,
    )
    a, b = validate(resp, **kw), validate(resp, **kw)
    assert a.scores.equals(b.scores)
    assert a.mdad.equals(b.mdad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"held_out": 10}, "at least 20 held-out llms"),
        ({"held_out": 80}, "hold out at most 70"),
        ({"sizes": [500]}, "has 120 items"),
        ({"designs": ["nope"]}, "not a registered design"),
        ({"n_dims": 3}, "dimensions apply only to the 2pl-md"),
    ],
)
def test_validate_refuses_bad_settings(simulated, kwargs, message):
    resp, truth = simulated
    with pytest.raises(UserInputError, match=message):
        validate(resp, fit=_true_posterior_fit(truth), **kwargs)


def test_validate_command_bad_input_is_one_line(simulated, tmp_path, capsys):
    resp, _ = simulated
    path = tmp_path / "r.csv"
    save_responses(resp, path)
    out = tmp_path / "v.json"
    code = main(["validate", "--responses", str(path), "--held-out", "5", "--output", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "at least 20 held-out llms" in err[0]
    assert not out.exists()


def test_validate_command_refuses_dims_without_the_md_model(simulated, tmp_path, capsys):
    resp, _ = simulated
    path = tmp_path / "r.csv"
    save_responses(resp, path)
    code = main(["validate", "--responses", str(path), "--dims", "3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "--dims applies only to --model 2pl-md" in err[0]


def test_default_fit_passes_the_dimensions_to_the_default_fit(simulated, monkeypatch):
    """``validate --model 2pl-md --dims 3`` fits the 3-D model, not the default 2-D one."""
    import bayes_microbench.irt.model as M
    from bayes_microbench.validate import default_fit

    seen = []

    def fake_fit_default(train, model, config=None, **kw):
        seen.append((model, config))
        raise RuntimeError("stop here")

    monkeypatch.setattr(M, "fit_default", fake_fit_default)
    resp, _ = simulated
    for n_dims in (3, None):
        with pytest.raises(RuntimeError, match="stop here"):
            default_fit("2pl-md", n_dims)(resp, 0)
    assert seen == [("2pl-md", {"n_dims": 3}), ("2pl-md", None)]


def test_validate_command_prints_each_rows_studies_in_band(
    simulated, tmp_path, capsys, monkeypatch
):
    """The table says how many single studies (a random design's subsets) lie in the band."""
    import bayes_microbench.validate as V

    resp, truth = simulated
    path = tmp_path / "r.csv"
    save_responses(resp, path)
    real = V.validate
    monkeypatch.setattr(
        V, "validate", lambda r, **kw: real(r, fit=_true_posterior_fit(truth), **kw)
    )
    argv = ["validate", "--responses", str(path), "--held-out", "40", "--sizes", "20"]
    code = main([*argv, "--designs", "random,bayes-fisher", "--replicates", "3", "--seed", "0"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert "studies in band" in out[1]
    rows = {line.split()[0]: line.split()[-1] for line in out[2:4]}
    assert rows.keys() == {"random", "bayes-fisher"}
    assert rows["random"].endswith("/3") and rows["bayes-fisher"].endswith("/1"), rows


def test_weighted_estimate_skips_missing_cells():
    from bayes_microbench.validate import _weighted_estimate

    values = np.array([[1.0, 0.0, np.nan], [np.nan, np.nan, np.nan]])
    est = _weighted_estimate(values, np.array([0.5, 0.25, 0.25]))
    assert est[0] == pytest.approx(0.5 / 0.75)
    assert np.isnan(est[1])


def test_heldout_study_labels_its_model_as_the_cards_do():
    """``--model 2pl-md:3`` runs are labelled apart from the 2-D default's runs."""
    import importlib.util

    from .conftest import ROOT

    path = ROOT / "benchmarks" / "study_heldout_validation.py"
    spec = importlib.util.spec_from_file_location("_study_heldout", path)
    assert spec is not None and spec.loader is not None
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    assert study.model_spec("2pl") == ("2pl", "2pl", None)
    assert study.model_spec("2pl-md") == ("2pl-md", "2pl-md", 2)
    assert study.model_spec("2pl-md:2") == ("2pl-md", "2pl-md", 2)
    assert study.model_spec("2pl-md:3") == ("2pl-md:3", "2pl-md", 3)
    with pytest.raises(UserInputError, match="not a model"):
        study.model_spec("4pl")

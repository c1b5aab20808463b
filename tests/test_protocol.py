"""The evaluation protocol: design, pairs, metrics, the grid's outputs, resume, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau

from bayes_microbench import Responses, save_responses, simulate_responses
from bayes_microbench.analytic import pair_counts, prob_first_ahead
from bayes_microbench.cli import main
from bayes_microbench.exceptions import UserInputError
from bayes_microbench.protocol import (
    MDAD_COLUMNS,
    GridConfig,
    design_runs,
    evaluate_grid,
    kendall_tau_b,
    pair_outcomes,
    run_selector_block,
    split_items,
)


@pytest.fixture(scope="module")
def resp() -> Responses:
    sim = simulate_responses("gpqa", n_llms=60, n_items=90, random_seed=11)
    subtask = np.array(["a"] * 50 + ["b"] * 31 + ["c"] * 9)  # odd sizes on purpose
    return Responses.from_arrays(sim.values, sim.llms, sim.items, subtask=subtask)


@pytest.fixture(scope="module")
def resp_file(resp, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "sim.csv"
    save_responses(resp, path)
    return path


def test_split_is_half_of_each_subtask():
    codes = np.array([0] * 7 + [1] * 10 + [2] * 1)
    seen, unseen = split_items(codes, np.random.default_rng(0))
    assert len(np.intersect1d(seen, unseen)) == 0
    assert sorted(np.r_[seen, unseen].tolist()) == list(range(len(codes)))
    assert np.bincount(codes[seen], minlength=3).tolist() == [3, 5, 0]


def test_design_paired_and_independent_of_grid():
    codes = np.zeros(40, dtype=int)
    a = design_runs(30, codes, n_runs=5, n_targets=8, random_seed=3)
    b = design_runs(30, codes, n_runs=3, n_targets=8, random_seed=3)
    for x, y in zip(a, b, strict=False):  # run r does not depend on how many runs there are
        np.testing.assert_array_equal(x.targets, y.targets)
        np.testing.assert_array_equal(x.seen, y.seen)
        np.testing.assert_array_equal(x.source_order, y.source_order)
    for d in a:
        assert len(set(d.targets)) == 8 and not set(d.targets) & set(d.source_order)
        assert len(d.sources(100)) == 22  # capped at what remains
        np.testing.assert_array_equal(d.sources(5), d.sources(10)[:5])  # nested sources
    fixed = design_runs(30, codes, n_runs=2, n_targets=8, random_seed=3, fixed_targets=[1, 2, 3])
    assert all(d.targets.tolist() == [1, 2, 3] and 1 not in d.source_order for d in fixed)


def test_pair_outcomes_conventions():
    est = np.array([[0.5, 0.5, 0.7, np.nan]])
    truth = np.array([[0.4, 0.6, 0.6, 0.1]])
    diff, ok = pair_outcomes(est, truth)
    # pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
    np.testing.assert_allclose(diff[0], [-0.2, -0.2, 0.3, 0.0, 0.5, 0.5])
    # (0,1): estimate tie -> wrong; (1,2): true tie counts positive, estimate negative -> wrong;
    # (0,2) right; NaN estimates -> wrong
    assert ok[0].tolist() == [False, True, False, False, False, False]
    diff, ok = pair_outcomes(np.array([[0.7, 0.5]]), np.array([[0.5, 0.5]]))
    assert ok.tolist() == [[True]]  # zero true difference counts as positive (the study's copysign)


def test_kendall_tau_b_matches_scipy():
    rng = np.random.default_rng(1)
    est = rng.integers(0, 6, (20, 15)).astype(float)  # many ties
    truth = rng.integers(0, 8, (20, 15)).astype(float)
    ours = kendall_tau_b(est, truth)
    ref = [kendalltau(e, t).statistic for e, t in zip(est, truth, strict=True)]
    np.testing.assert_allclose(ours, ref, atol=1e-12)


def test_agreement_increases_and_mdad_decreases_with_n(resp):
    designs = design_runs(resp.n_llms, resp.subtask_codes, n_runs=20, n_targets=20, random_seed=0)
    cells = run_selector_block(resp, designs, "random", 30, [4, 15, 44], random_seed=0)
    agree = [c.metrics["agreement_seen"] for c in cells]
    err = [c.metrics["error_seen"] for c in cells]
    tau = [c.metrics["kendall_tau_seen"] for c in cells]
    assert agree[0] < agree[1] < agree[2]
    assert err[0] > err[1] > err[2]
    assert tau[0] < tau[1] < tau[2]
    # n = all seen items: the estimate is the seen accuracy itself
    full = run_selector_block(resp, designs[:3], "random", 30, [44], random_seed=0)[0]
    assert full.metrics["error_seen"] < 1e-12
    assert full.pairs is not None and full.pairs["seen_correct"][full.pairs["seen_diff"] != 0].all()


def test_monte_carlo_protocol_matches_exact_analytic(resp):
    """Per run, MC share correct minus its exact expectation: mean 0 within 4 standard errors."""
    designs = design_runs(resp.n_llms, resp.subtask_codes, n_runs=60, n_targets=15, random_seed=4)
    n = 8
    cell = run_selector_block(resp, designs, "random", 10, [n], random_seed=4)[0]
    pairs = cell.pairs
    assert pairs is not None
    gaps = []
    for r, d in enumerate(designs):
        x = resp.values[np.ix_(d.targets, d.seen)]
        _, _, oa, ob = pair_counts(x)
        ahead, behind = (
            prob_first_ahead(oa, ob, len(d.seen), n),
            prob_first_ahead(ob, oa, len(d.seen), n),
        )
        seen_diff = pairs.loc[pairs["run"] == r, "seen_diff"].to_numpy()
        expected = np.where(np.copysign(1.0, seen_diff) > 0, ahead, behind)
        mc = pairs.loc[pairs["run"] == r, "seen_correct"].to_numpy()
        gaps.append(mc.mean() - expected.mean())
    gaps_arr = np.array(gaps)
    se = gaps_arr.std(ddof=1) / np.sqrt(len(gaps_arr))
    assert abs(gaps_arr.mean()) < 4 * se
    assert abs(gaps_arr.mean()) < 0.03


def _grid(**kw) -> GridConfig:
    base = dict(
        selectors=("random",), sizes=(5, 20), source_llms=(10, 30), target_llms=12, runs=6, seed=2
    )
    base.update(kw)
    return GridConfig(**base)  # type: ignore[arg-type]


def test_grid_outputs_reproducible_and_independent(resp, tmp_path):
    r1 = evaluate_grid(resp, _grid(), tmp_path / "a")
    r2 = evaluate_grid(resp, _grid(), tmp_path / "b")
    a, b = (tmp_path / "a" / "mdad.csv").read_text(), (tmp_path / "b" / "mdad.csv").read_text()
    assert a == b
    mdad = pd.read_csv(tmp_path / "a" / "mdad.csv")
    assert list(mdad.columns) == MDAD_COLUMNS
    assert set(mdad["selector"]) == {"random", "random-analytic"}
    assert len(mdad) == 2 * 2 * 2 * 2  # (random, analytic) x sizes x sources x splits
    assert r1.metrics is not None and r2.metrics is not None
    pd.testing.assert_frame_equal(r1.metrics, r2.metrics)
    pairs = pd.read_parquet(tmp_path / "a" / "pairs")
    assert len(pairs) == 2 * 2 * 6 * 66  # cells x runs x pairs of 12 targets
    metrics = pd.read_parquet(tmp_path / "a" / "metrics.parquet")
    for col in ("agreement_seen", "kendall_tau_seen", "error_seen", "agreement_unseen"):
        assert col in metrics
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    assert config["design"]["seed"] == 2 and config["grid"]["sizes"] == [5, 20]
    # a cell's numbers do not depend on the rest of the grid
    evaluate_grid(resp, _grid(sizes=(20,), source_llms=(30,)), tmp_path / "c")
    one = pd.read_csv(tmp_path / "c" / "mdad.csv")
    key = ["selector", "n_items", "n_source_llms", "split"]
    merged = one.merge(mdad, on=key, suffixes=("", "_full"))
    assert len(merged) == len(one) == 4
    for col in ("mdad", "mdad_lower", "mdad_upper"):
        np.testing.assert_array_equal(merged[col], merged[f"{col}_full"])


def test_resume_recomputes_only_missing_cells(resp, tmp_path):
    out = tmp_path / "g"
    first = evaluate_grid(resp, _grid(), out)
    assert len(first.computed) == 4 + 4 and not first.reused
    before = (out / "mdad.csv").read_text()
    (out / "cells" / "random__n20__s10.json").unlink()
    again = evaluate_grid(resp, _grid(), out)
    assert again.computed == ["random__n20__s10"]
    assert len(again.reused) == 3
    assert (out / "mdad.csv").read_text() == before
    with pytest.raises(UserInputError, match=r"different configuration.*seed"):
        evaluate_grid(resp, _grid(seed=3), out)


def test_bad_grids_are_user_errors(resp, tmp_path):
    with pytest.raises(UserInputError, match="larger than the 44 seen items"):
        evaluate_grid(resp, _grid(sizes=(5, 45)), tmp_path / "x")
    with pytest.raises(UserInputError, match="unknown selector"):
        evaluate_grid(resp, _grid(selectors=("nope",)), tmp_path / "x")
    with pytest.raises(UserInputError, match="choose 2 to 59 target llms"):
        evaluate_grid(resp, _grid(target_llms=60), tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_target_group(resp, tmp_path):
    groups = tmp_path / "groups.json"
    names = [str(x) for x in resp.llms[:6]]
    groups.write_text(json.dumps({"small": names, "bad": ["nobody"]}))
    evaluate_grid(resp, _grid(target_group=f"{groups}:small", target_llms=50), tmp_path / "t")
    pairs = pd.read_parquet(tmp_path / "t" / "pairs")
    assert set(pairs["llm_a"]) | set(pairs["llm_b"]) == set(names)
    with pytest.raises(UserInputError, match="not in the responses"):
        evaluate_grid(resp, _grid(target_group=f"{groups}:bad"), tmp_path / "u")
    with pytest.raises(UserInputError, match="has no group 'zzz'"):
        evaluate_grid(resp, _grid(target_group=f"{groups}:zzz"), tmp_path / "u")


def test_cli_evaluate_runs_without_pymc(resp_file, tmp_path):
    code = (
        "import sys; from bayes_microbench.cli import main; "
        f"rc = main(['evaluate', '--responses', {str(resp_file)!r}, '--sizes', '5,10', "
        "'--source-llms', '20', '--target-llms', '10', '--runs', '3', '--quiet', "
        f"'--output', {str(tmp_path / 'o')!r}]); "
        "print(rc, 'pymc' in sys.modules, 'pytensor' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "False", "False"], out.stderr
    mdad = pd.read_csv(tmp_path / "o" / "mdad.csv")
    assert list(mdad.columns) == MDAD_COLUMNS and len(mdad) == 8


def test_cli_json_and_exit_2(resp_file, tmp_path, capsys):
    args = ["evaluate", "--responses", str(resp_file), "--runs", "2", "--target-llms", "8"]
    assert (
        main(
            [*args, "--sizes", "5", "--source-llms", "9", "--output", str(tmp_path / "j"), "--json"]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["computed_cells"] == 2 and len(out["mdad"]) == 4
    cases = [
        (["--sizes", "5,100", "--source-llms", "9"], "larger than the 44 seen items"),
        (["--sizes", "5", "--source-llms", "9", "--selectors", "random,bogus"], "unknown selector"),
        (["--sizes", "5,x", "--source-llms", "9"], "not a whole number"),
        (["--sizes", "5", "--source-llms", "9", "--threshold", "1.5"], "--threshold"),
        (["--sizes", "5", "--source-llms", "9", "--target-group", "nofile.json:k"], "no such file"),
        (["--sizes", "5", "--source-llms", "9", "--seed", "5"], "different configuration"),
    ]
    for extra, message in cases:
        assert main([*args, *extra, "--output", str(tmp_path / "j")]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


@pytest.mark.slow
@pytest.mark.shared_data
def test_gpqa_random_overlaps_the_study(tmp_path):
    """Acceptance: our random-selection MDAD intervals overlap the study's at every size."""
    from bayes_microbench import load_responses

    from .conftest import shared_path

    gpqa = load_responses(shared_path("open-llm-leaderboard-v2/gpqa.csv"))
    cfg = GridConfig(
        selectors=("random",), sizes=(10, 25, 50, 100, 200), source_llms=(300,), runs=50, seed=0
    )
    report = evaluate_grid(gpqa, cfg, tmp_path / "gpqa")
    assert report.mdad is not None
    seen = report.mdad[(report.mdad["split"] == "seen") & (report.mdad["selector"] == "random")]
    study = {10: (18.0, 33.0), 25: (10.5, 13.5), 50: (6.5, 8.5), 100: (3.5, 4.5), 200: (1.0, 2.0)}
    for _, row in seen.iterrows():
        lo, hi = study[int(row["n_items"])]
        assert row["reached"] and row["mdad_lower"] <= hi and lo <= row["mdad_upper"], row


def test_a_cells_notes_are_its_own_sizes(resp, monkeypatch):
    """A selector's categorical note at one size is not written into another size's cell."""
    from bayes_microbench import selectors
    from bayes_microbench.selectors.base import Selection, weighted_mean_estimate

    class Prepared:
        def __init__(self, n_seen):
            self.n_seen = n_seen

        def select(self, n, random_seed=None):
            info = {"estimator": "big" if n > 10 else "small", "note": f"{n} items"}
            return Selection(items=np.arange(n), weights=np.full(n, 1 / n), info=info)

        def estimate(self, selection, target):
            return weighted_mean_estimate(selection, target)

    class BySize:
        name = "by-size"

        def prepare(self, source, subtask_codes, confidence=None, random_seed=None):
            return Prepared(source.shape[1])

    monkeypatch.setattr(selectors, "get_selector", lambda name: BySize())
    designs = design_runs(resp.n_llms, resp.subtask_codes, n_runs=3, n_targets=10, random_seed=0)
    small, big = run_selector_block(resp, designs, "by-size", 20, [5, 20], random_seed=0)
    assert small.metrics["notes"] == "estimator: small"
    assert big.metrics["notes"] == "estimator: big"  # the free-text "note" is left out

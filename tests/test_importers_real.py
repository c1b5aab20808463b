"""Importers on what lm-evaluation-harness 0.4.13 and inspect-ai 0.3.285 really write.

The fixtures under tests/fixtures/harness/ are copies of those harnesses' own output,
run offline with their fake models by scripts/make_harness_fixtures.py (its docstring
says how to regenerate them). Expected values are derived here from the run's design
(mockllm's scripted answers, the datasets the script writes) or recomputed from the
logged fields, never from the importer.

The ``harness`` tier reruns the harnesses from the environments in ``BMB_HARNESS_VENV``
(skipping without them) and imports what they write, including a round trip: chosen
items -> the harness evaluates only those -> import -> score.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from bayes_microbench.exceptions import ResponsesError
from bayes_microbench.importers import (
    EmptyLogError,
    HarnessLogError,
    HarnessLogWarning,
    detect_format,
    import_responses,
    read_harness,
)

from .conftest import FIXTURES, ROOT

HARNESS = FIXTURES / "harness"
LM_OUT = HARNESS / "lm_eval" / "out"
MODEL_A_DIR = LM_OUT / "fake__model-a"
JSON_OUT = HARNESS / "lm_eval" / "json_output"
INSPECT = HARNESS / "inspect"
METRICS = "acc,exact_match,mcc"  # the tasks' 0/1 (or pair) metric, first one each logs


def samples_file(folder: Path, task: str) -> Path:
    (path,) = folder.glob(f"samples_{task}_*.jsonl")
    return path


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def softmax_at(lls: list[float], index: int) -> float:
    top = max(lls)
    weights = [math.exp(v - top) for v in lls]
    return weights[index] / sum(weights)


# ---------------------------------------------------------------- inspect
def test_current_eval_logs_are_zstd_and_import():
    # inspect-ai >= 0.3.206 compresses .eval members with zstd (method 93), which
    # Python 3.12's zipfile cannot read
    with zipfile.ZipFile(INSPECT / "choice.eval") as archive:
        assert {info.compress_type for info in archive.infolist()} == {93}
    resp = import_responses("inspect", [INSPECT / "choice.eval"])
    # mockllm answers "ANSWER: A" to even-numbered questions; targets are "ABC"[i % 3]:
    # q0 A (right), q1 B (no letter given), q2 C (answered A), q3 A (no letter)
    items = [f"mini_choice:q{i}" for i in range(4)]
    assert list(resp.llms) == ["mockllm/model"]
    np.testing.assert_array_equal(resp.select(items=items).values, [[1, 0, 0, 0]])
    assert list(resp.select(items=items).n_options) == [3, 3, 3, 3]


def test_several_correct_options_get_no_guessing_floor(caplog):
    # mini_multi: multiple_choice(multiple_correct=True); even samples have targets
    # ["A", "C"], odd ones ["B"] alone; mockllm answers "A" to even questions
    with caplog.at_level(logging.INFO, logger="bayes_microbench.importers"):
        resp = import_responses("inspect", [INSPECT / "multi.eval"])
    items = [f"mini_multi:m{i}" for i in range(4)]
    sub = resp.select(items=items)
    np.testing.assert_array_equal(sub.values, [[0, 0, 0, 0]])
    assert list(sub.n_options) == [0, 4, 0, 4]
    assert "2 sample(s) have several correct options" in caplog.text


def test_two_epochs_need_a_choice_and_each_imports():
    log = INSPECT / "match_epochs.eval"
    with pytest.raises(HarnessLogError, match=r"2 epochs \[1, 2\]; choose one with epoch=N$"):
        import_responses("inspect", [log])
    # target "A": even ids are answered "ANSWER: A", odd ones "mockllm says B"
    for epoch in (1, 2):
        resp = import_responses("inspect", [log], epoch=epoch)
        items = [f"mini_match:{i}" for i in range(1, 5)]
        np.testing.assert_array_equal(resp.select(items=items).values, [[0, 1, 0, 1]])


def test_partial_scores_are_named_as_logged_and_thresholded():
    log = INSPECT / "partial.json"
    # the scorer gives [C, P, I][id % 3]: id 1 P, id 2 I, id 3 C
    with pytest.raises(HarnessLogError, match=r"'mini_partial:1' is 'P' \(partial credit"):
        import_responses("inspect", [log])
    items = [f"mini_partial:{i}" for i in (1, 2, 3)]
    resp = import_responses("inspect", [log], threshold=0.5)
    np.testing.assert_array_equal(resp.select(items=items).values, [[1, 0, 1]])
    resp = import_responses("inspect", [log], threshold=0.75)
    np.testing.assert_array_equal(resp.select(items=items).values, [[0, 0, 1]])
    with pytest.raises(HarnessLogError, match=r"^threshold=1.5 is outside the values"):
        import_responses("inspect", [log], threshold=1.5)
    with pytest.raises(HarnessLogError, match=r"^threshold=-1.0 is outside .* count as correct"):
        import_responses("inspect", [log], threshold=-1)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("unscored.eval", r"unscored.eval: none of its 4 samples is scored .*inspect score"),
        ("header_only.eval", r"header_only.eval: the log holds no samples .*--no-log-samples"),
        ("errored.eval", r"errored.eval: the eval failed \(status 'error': RuntimeError"),
    ],
)
def test_empty_logs_alone_are_one_clear_error(name, message):
    with pytest.raises(EmptyLogError, match=message):
        import_responses("inspect", [INSPECT / name])
    assert "was the eval run with --no-log-samples" not in message


def test_empty_logs_beside_others_are_skipped_with_a_warning(tmp_path):
    for name in ("choice.eval", "unscored.eval", "header_only.eval", "errored.eval"):
        shutil.copy(INSPECT / name, tmp_path / name)
    (tmp_path / "notes.json").write_text('{"not": "a log"}')
    with pytest.warns(HarnessLogWarning) as record:
        resp = import_responses("inspect", [tmp_path])
    said = [str(w.message) for w in record]
    assert len(said) == 4, said
    for name in ("unscored.eval", "header_only.eval", "errored.eval"):
        assert sum(name in s and s.endswith("; skipped") for s in said) == 1, said
    assert sum("notes.json: not an inspect evaluation log" in s for s in said) == 1
    assert resp.n_items == 4 and list(resp.llms) == ["mockllm/model"]


def test_cli_folder_of_only_empty_logs_exits_2_with_one_line(tmp_path):
    for name in ("header_only.eval", "errored.eval"):
        shutil.copy(INSPECT / name, tmp_path / name)
    out = tmp_path / "out" / "m.csv"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bayes_microbench",
            "import",
            "inspect",
            str(tmp_path),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "none of the 2 logs holds results" in lines[0], proc.stderr
    assert not out.parent.exists()


# ---------------------------------------------------------------- lm-eval
def test_lm_eval_run_imports_with_confidence_only_for_single_answer_tasks():
    resp = import_responses("lm-eval", [LM_OUT], metric=METRICS, threshold=0.5)
    assert list(resp.llms) == ["fake/model-a"]  # model_name of the results JSON
    # mini_mc: acc and confidence recomputed from the logged log-likelihoods
    mc = records(samples_file(MODEL_A_DIR, "mini_mc"))
    items = [f"mini_mc:{r['doc_id']}" for r in mc]
    lls = [[float(ll) for ll, _ in r["filtered_resps"]] for r in mc]
    gold = [int(r["target"]) for r in mc]
    correct = [float(int(np.argmax(v)) == g) for v, g in zip(lls, gold, strict=True)]
    sub = resp.select(items=items)
    np.testing.assert_array_equal(sub.values[0], correct)
    expected = [softmax_at(v, g) for v, g in zip(lls, gold, strict=True)]
    np.testing.assert_allclose(sub.confidence[0], expected, rtol=1e-12)
    assert list(sub.n_options) == [4] * len(items)
    # mini_mc2 (several true options; acc is their probability mass): thresholded, and
    # neither a confidence at option 0 nor a 1/4 chance floor
    mc2 = records(samples_file(MODEL_A_DIR, "mini_mc2"))
    items2 = [f"mini_mc2:{r['doc_id']}" for r in mc2]
    sub2 = resp.select(items=items2)
    np.testing.assert_array_equal(sub2.values[0], [float(r["acc"] >= 0.5) for r in mc2])
    assert np.isnan(sub2.confidence).all()
    assert (np.asarray(sub2.n_options) == 0).all()  # 0: unknown
    # mini_pairs: mcc is logged as [gold, pred]; correct where they agree
    pairs = records(samples_file(MODEL_A_DIR, "mini_pairs"))
    sub3 = resp.select(items=[f"mini_pairs:{r['doc_id']}" for r in pairs])
    np.testing.assert_array_equal(
        sub3.values[0], [float(r["mcc"][0] == r["mcc"][1]) for r in pairs]
    )


def test_multi_correct_metric_needs_a_threshold_and_refuses_one_out_of_range():
    first = records(samples_file(MODEL_A_DIR, "mini_mc2"))[0]["acc"]
    with pytest.raises(HarnessLogError, match=rf"'mini_mc2:0' is {first:.6g}, not 0 or 1"):
        import_responses("lm-eval", [MODEL_A_DIR], metric=METRICS)
    with pytest.raises(HarnessLogError, match=r"^threshold=1.5 is outside the values of metric"):
        import_responses("lm-eval", [MODEL_A_DIR], metric=METRICS, threshold=1.5)


@pytest.mark.parametrize("threshold", [1.5, -1.0, 0.5])
def test_threshold_leaves_0_1_metrics_alone_with_a_note(threshold, caplog):
    task = samples_file(MODEL_A_DIR, "mini_mc")
    plain = import_responses("lm-eval", [task])
    with caplog.at_level(logging.INFO, logger="bayes_microbench.importers"):
        thresholded = import_responses("lm-eval", [task], threshold=threshold)
    np.testing.assert_array_equal(thresholded.values, plain.values)
    notes = [r.getMessage() for r in caplog.records if "threshold" in r.getMessage()]
    assert len(notes) == 1 and notes[0].startswith(f"threshold={threshold!r} ignored")
    assert "ignored for the 0/1 metric(s) 'acc' (mini_mc)" in notes[0]


def test_output_path_json_layout_names_both_models():
    # --output_path my_eval.json: my_eval_<ts>.json beside the samples, no model folder
    resp = import_responses("lm-eval", [JSON_OUT])
    assert sorted(resp.llms) == ["fake/model-a", "fake/model-b"]
    for results in JSON_OUT.glob("my_eval_*.json"):
        stamp = results.stem.removeprefix("my_eval_")
        model = json.loads(results.read_text())["model_name"]
        logged = records(JSON_OUT / f"samples_mini_mc_{stamp}.jsonl")
        row = resp.select(llms=[model], items=[f"mini_mc:{r['doc_id']}" for r in logged])
        np.testing.assert_array_equal(row.values[0], [r["acc"] for r in logged])
    assert detect_format([JSON_OUT]) == "lm-eval"


def test_llm_named_after_a_folder_is_warned_and_two_runs_never_merged(tmp_path):
    folder = tmp_path / "org__model-x"
    folder.mkdir()
    shutil.copy(samples_file(MODEL_A_DIR, "mini_mc"), folder)
    with pytest.warns(HarnessLogWarning, match=r"named 'org/model-x' after the folder"):
        resp = import_responses("lm-eval", [folder])
    assert list(resp.llms) == ["org/model-x"]
    # the two models of the --output_path my_eval.json run, without their results files
    for path in JSON_OUT.glob("samples_*.jsonl"):
        shutil.copy(path, folder)
    (folder / samples_file(MODEL_A_DIR, "mini_mc").name).unlink()
    with pytest.raises(HarnessLogError, match=r"two runs of task 'mini_mc' in one folder"):
        import_responses("lm-eval", [folder])


def test_results_json_naming_another_model_than_its_folder_is_warned(tmp_path):
    moved = tmp_path / "org__other"
    shutil.copytree(MODEL_A_DIR, moved)
    with pytest.warns(HarnessLogWarning, match=r"names the model 'fake/model-a', but its folder"):
        resp = import_responses("lm-eval", [samples_file(moved, "mini_mc")])
    assert list(resp.llms) == ["fake/model-a"]


@pytest.mark.parametrize("layout", ["jsonl", "json-lines", "json-list"])
def test_open_llm_leaderboard_download_layouts(tmp_path, layout):
    # a details download: <org>__<model>/samples_leaderboard_<task>_<ts>.jsonl (or .json
    # for the mid-2024 runs), lm-eval sample records, no results JSON beside them
    source = samples_file(MODEL_A_DIR, "mini_mc")
    stamp = source.stem.rsplit("_", 1)[-1]
    folder = tmp_path / "org__model"
    folder.mkdir()
    suffix = ".jsonl" if layout == "jsonl" else ".json"
    target = folder / f"samples_leaderboard_mini_mc_{stamp}{suffix}"
    recs = records(source)
    if layout == "json-list":
        target.write_text(json.dumps(recs))
    else:
        shutil.copy(source, target)
    assert detect_format([tmp_path]) == "oll-details"
    with pytest.warns(HarnessLogWarning, match=r"named after their folders \('org/model'\)"):
        resp = import_responses("auto", [tmp_path])
    assert list(resp.llms) == ["org/model"]
    items = [f"leaderboard_mini_mc:{r['doc_id']}" for r in recs]
    np.testing.assert_array_equal(resp.select(items=items).values[0], [r["acc"] for r in recs])
    assert resp.confidence is not None


def test_messages_read_well(tmp_path):
    with pytest.raises(ResponsesError, match=r"holds no lm-eval samples file \(samples_"):
        import_responses("lm-eval", [tmp_path])
    bad = tmp_path / "log.json"
    bad.write_text('{"eval": "unterminated')
    with pytest.raises(HarnessLogError) as err:
        import_responses("inspect", [bad])
    assert "starting at column" in str(err.value) and "at at" not in str(err.value)


# ---------------------------------------------------------------- real harnesses
def _script():
    spec = importlib.util.spec_from_file_location(
        "make_harness_fixtures", ROOT / "scripts" / "make_harness_fixtures.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _python(module: str) -> Path:
    script = _script()
    python = script.harness_python(module)
    if python is None:
        pytest.skip(
            f"no environment in ${script.ENV_VAR} has {module} (see the top of "
            "scripts/make_harness_fixtures.py to make one)"
        )
    return python


def _flat_posterior(items: list[str]):
    from bayes_microbench.testing import posterior_from_truth

    index = pd.Index(items, name="item")
    truth = SimpleNamespace(
        difficulty=pd.Series(0.0, index=index),
        discrimination=pd.Series(1.0, index=index),
        guessing=pd.Series(0.0, index=index),
        config=SimpleNamespace(benchmark="mini"),
    )
    return posterior_from_truth(truth, n_draws=200, random_seed=0)


def _selected(items: list[str], n: int) -> tuple[object, dict]:
    """A flat posterior over ``items`` and the subset document ``select`` writes for it."""
    from bayes_microbench.commands.select import subset_document
    from bayes_microbench.design import select_from_posterior

    posterior = _flat_posterior(items)
    ids, subtasks, weights, info = select_from_posterior(posterior, "random", n, random_seed=0)
    doc = subset_document(
        selector="random",
        seed=0,
        source="flat",
        item_ids=ids,
        subtasks=subtasks,
        weights=weights,
        info=info,
    )
    return posterior, doc


@pytest.mark.harness
def test_lm_eval_round_trip_of_selected_items(tmp_path):
    from bayes_microbench.scoring import score

    python = _python("lm_eval")
    script = _script()
    tasks = script.write_lm_eval_tasks(tmp_path / "tasks")
    everything = [f"mini_mc:{i}" for i in range(6)] + [f"mini_gen:{i}" for i in range(4)]
    posterior, doc = _selected(everything, 8)
    chosen = doc["lm_eval_samples"]  # what the README passes to lm_eval --samples
    assert set(chosen) == {"mini_mc", "mini_gen"}  # 8 of 10 items: both tasks
    script.run_lm_eval(python, tasks, tmp_path / "out", list(chosen), samples=chosen)
    resp = import_responses("lm-eval", [tmp_path / "out"])
    assert sorted(resp.items) == sorted(doc["item_ids"]) and list(resp.llms) == [script.MODEL_A]
    # mini_gen: the dummy model always answers "lol", the target of even docs
    gen = sorted(i for i in doc["item_ids"] if i.startswith("mini_gen:"))
    expected = [[1 - int(i.split(":")[1]) % 2 for i in gen]]
    np.testing.assert_array_equal(resp.select(items=gen).values, expected)
    result = score(posterior, resp, random_seed=0)
    assert int(result["n_observed"].item()) == 8
    low, high = result["accuracy_interval"].values[0]
    assert 0.0 <= low <= high <= 1.0


@pytest.mark.harness
def test_inspect_round_trip_of_selected_samples(tmp_path):
    from bayes_microbench.scoring import score

    python = _python("inspect_ai")
    script = _script()
    tasks = script.write_inspect_tasks(tmp_path / "tasks")
    posterior, doc = _selected([f"mini_choice:q{i}" for i in range(4)], 2)
    sample_ids = [item.split(":", 1)[1] for item in doc["item_ids"]]  # inspect's --sample-id
    log = script.run_inspect(python, tasks, tmp_path / "logs", "mini_choice", sample_id=sample_ids)
    with zipfile.ZipFile(log) as archive:
        assert 93 in {info.compress_type for info in archive.infolist()}
    resp = import_responses("inspect", [log])
    assert sorted(resp.items) == sorted(doc["item_ids"])
    # mockllm answers "A" to even-numbered questions; the target of q0 is A, of q2 C
    expected = [[1 if item == "mini_choice:q0" else 0 for item in sorted(doc["item_ids"])]]
    np.testing.assert_array_equal(resp.select(items=sorted(doc["item_ids"])).values, expected)
    result = score(posterior, resp, random_seed=0)
    assert int(result["n_observed"].item()) == 2


@pytest.mark.harness
def test_regenerated_fixtures_import_as_the_committed_ones(tmp_path):
    lm_python, inspect_python = _python("lm_eval"), _python("inspect_ai")
    script = _script()
    script.make_fixtures(tmp_path / "harness", lm_python, inspect_python)
    fresh = tmp_path / "harness"
    for fmt, sub, kwargs in [
        ("lm-eval", "lm_eval/out", {"metric": METRICS, "threshold": 0.5}),
        ("lm-eval", "lm_eval/json_output", {}),
        ("inspect", "inspect/choice.eval", {}),
        ("inspect", "inspect/multi.eval", {}),
        ("inspect", "inspect/match_epochs.eval", {"epoch": 1}),
        ("inspect", "inspect/partial.json", {"threshold": 0.5}),
    ]:
        new = read_harness(fmt, [fresh / sub], **kwargs).drop(columns="source")
        old = read_harness(fmt, [HARNESS / sub], **kwargs).drop(columns="source")
        pd.testing.assert_frame_equal(
            new.sort_values(["llm", "item"]).reset_index(drop=True),
            old.sort_values(["llm", "item"]).reset_index(drop=True),
        )

"""Harness importers (lm-eval, Open LLM Leaderboard details, inspect) and the import command.

The fixtures under tests/fixtures/{lm_eval,oll_details,inspect} are written by
tests/fixtures/make_harness_fixtures.py; the expected matrices below are read
off the fixture content by hand (see the comments), not computed by the code.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from bayes_microbench import DroppedDataWarning, UserInputError, load_responses
from bayes_microbench.cli import main
from bayes_microbench.importers import (
    FORMATS,
    HarnessLogError,
    HarnessLogWarning,
    detect_format,
    import_responses,
    read_harness,
)
from bayes_microbench.importers.lm_eval import choice_confidence, model_from_args

from .conftest import FIXTURES

# org__model-c has no results file: its llm is named after the folder, with a warning
# (checked in tests/test_importers_real.py)
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*after the folder:bayes_microbench.importers.HarnessLogWarning"
)

LM_EVAL = FIXTURES / "lm_eval"
LM_OUT = LM_EVAL / "out"
OLL = FIXTURES / "oll_details"
INSPECT = FIXTURES / "inspect"
NAN = math.nan


def softmax_at(lls: list[float], index: int) -> float:
    total = sum(math.exp(v) for v in lls)
    return math.exp(lls[index]) / total


def matrix(resp, llms, items):
    """The responses of ``llms`` on ``items`` (by label) as a float array."""
    return resp.select(llms=llms, items=items).values


def assert_same(actual, expected):
    np.testing.assert_array_equal(np.asarray(actual), np.asarray(expected, dtype=float))


# ---------------------------------------------------------------- lm-eval
ARC = ["arc_mini:0", "arc_mini:1", "arc_mini:2"]
GSM = ["gsm_mini:0", "gsm_mini:1"]
LLMS = ["org/model-a", "org/model-b", "org/model-c"]


def test_lm_eval_matrix_names_and_subtasks():
    resp = import_responses("lm-eval", [LM_OUT], lm_filter="strict-match")
    # llm names: a_run/results_*.json has model_name "org/model-a"; b_run's results
    # file has only config.model_args "pretrained=org/model-b,..."; org__model-c has
    # no results file, so its folder name is used with "__" read as "/".
    assert sorted(resp.llms) == sorted(LLMS)
    assert list(resp.items) == ARC + GSM  # order of first appearance, never line order
    # acc (argmax of the option log-likelihoods == gold) and strict-match exact_match:
    # a: arc lls argmax 0,0,1 vs gold 0,2,1 -> 1,0,1 ; gsm strict 1,0
    # b: argmax 1,2,0(tie) vs gold 0,2,1 -> 0,1,0 ; gsm strict 0,0
    # c: doc 1 not run -> missing ; argmax 0,1 vs gold 0,1 -> 1,1 ; gsm strict 1,1
    expected = [[1, 0, 1, 1, 0], [0, 1, 0, 0, 0], [1, NAN, 1, 1, 1]]
    assert_same(matrix(resp, LLMS, ARC + GSM), expected)
    assert dict(zip(resp.items, resp.item_subtask, strict=True)) == {
        **dict.fromkeys(ARC, "arc_mini"),
        **dict.fromkeys(GSM, "gsm_mini"),
    }
    assert resp.n_missing == 1
    # three options per arc item, unknown (0) for the generative task
    assert list(resp.n_options) == [3, 3, 3, 0, 0]


def test_lm_eval_confidence_is_softmax_mass_on_target():
    resp = import_responses("lm-eval", [LM_OUT], lm_filter="strict-match")
    conf = resp.select(llms=LLMS, items=ARC + GSM).confidence
    # a, doc 0: lls (-1, -2, -3), target "0"
    by_hand = math.exp(-1) / (math.exp(-1) + math.exp(-2) + math.exp(-3))
    assert conf[0, 0] == pytest.approx(by_hand, rel=1e-12)
    assert conf[0, 0] == pytest.approx(0.665241, abs=1e-6)
    # a, doc 2: target logged as the text "Paris", option " Paris" is index 1 of (-2, -1, -2)
    assert conf[0, 2] == pytest.approx(1 / (1 + 2 * math.exp(-1)), rel=1e-12)
    # b, doc 2: all options equally likely
    assert conf[1, 2] == pytest.approx(1 / 3, rel=1e-12)
    # b, doc 1: target "2" of (-2, -2, -1)
    assert conf[1, 1] == pytest.approx(softmax_at([-2, -2, -1], 2), rel=1e-12)
    # missing cell and generative items have no confidence
    assert np.isnan(conf[2, 1])
    assert np.isnan(conf[:, 3:]).all()
    assert ((conf[~np.isnan(conf)] >= 0) & (conf[~np.isnan(conf)] <= 1)).all()


def test_choice_confidence_edge_cases():
    rec = {"target": "1", "filtered_resps": [["-1000.0", "False"], ["-1001.0", "False"]]}
    conf, n = choice_confidence(rec)
    assert n == 2 and conf == pytest.approx(1 / (1 + math.e), rel=1e-12)  # stable for big lls
    # a generative sample: no options
    assert choice_confidence({"target": "4", "filtered_resps": ["4"]})[1] == 0
    # a target that is no option: options counted, confidence unknown
    conf, n = choice_confidence(
        {"target": "7", "filtered_resps": [["-1", "True"], ["-2", "False"]]}
    )
    assert n == 2 and math.isnan(conf)
    # acc_mutual_info logs twice as many requests as options: neither is given
    rec["metrics"] = ["acc", "acc_mutual_info"]
    assert choice_confidence(rec)[1] == 0


def test_lm_eval_filter_choice_and_error():
    flexible = import_responses("lm-eval", [LM_OUT], lm_filter="flexible-extract")
    # flexible-extract exact_match: a 1,1 ; b 0,1 ; c 1,1
    assert_same(matrix(flexible, LLMS, GSM), [[1, 1], [0, 1], [1, 1]])
    with pytest.raises(
        HarnessLogError, match=r"several filters .*strict-match.*; choose one with lm_filter$"
    ):
        import_responses("lm-eval", [LM_OUT])
    with pytest.raises(HarnessLogError, match=r"no filter 'nope'"):
        import_responses("lm-eval", [LM_OUT], lm_filter="nope")


def test_lm_eval_metric_choice():
    resp = import_responses(
        "lm-eval", [LM_OUT], lm_filter="strict-match", metric="acc_norm,exact_match"
    )
    # acc_norm as logged in the fixture: a 1,0,1 ; b 1,1,0 ; c 1,-,1 ; gsm falls back to exact_match
    assert_same(matrix(resp, LLMS, ARC), [[1, 0, 1], [1, 1, 0], [1, NAN, 1]])
    assert_same(matrix(resp, LLMS, GSM), [[1, 0], [0, 0], [1, 1]])
    with pytest.raises(HarnessLogError, match=r"task 'gsm_mini' has no metric 'acc_norm'"):
        import_responses("lm-eval", [LM_OUT], lm_filter="strict-match", metric="acc_norm")
    with pytest.raises(HarnessLogError, match=r"no metric 'f1'.*\['acc', 'acc_norm'\]"):
        import_responses("lm-eval", [LM_OUT / "a_run"], metric="f1")


def test_lm_eval_llm_name_sources():
    frame = read_harness(
        "lm-eval", [LM_OUT / "b_run", LM_OUT / "org__model-c"], lm_filter="strict-match"
    )
    assert set(frame["llm"]) == {"org/model-b", "org/model-c"}
    assert (
        model_from_args("pretrained=EleutherAI/pythia-160m,dtype=float32")
        == "EleutherAI/pythia-160m"
    )
    assert model_from_args("pretrained=base/m,peft=me/adapter") == "me/adapter"
    assert model_from_args({"model": "gpt-4o-mini"}) == "gpt-4o-mini"
    assert model_from_args("dtype=float32") is None


def test_lm_eval_identical_rerun_is_merged():
    once = import_responses("lm-eval", [LM_OUT], lm_filter="strict-match")
    twice = import_responses("lm-eval", [LM_OUT, LM_EVAL / "rerun"], lm_filter="strict-match")
    assert_same(matrix(twice, LLMS, ARC + GSM), matrix(once, LLMS, ARC + GSM))
    np.testing.assert_allclose(
        twice.select(llms=LLMS).confidence, once.select(llms=LLMS).confidence, equal_nan=True
    )


def _edit_line(path: Path, line: int, edit) -> None:
    lines = path.read_text().splitlines()
    lines[line - 1] = edit(lines[line - 1])
    path.write_text("\n".join(lines) + "\n")


def test_lm_eval_conflicting_duplicate_names_llm_item_values_files(tmp_path):
    rerun = tmp_path / "a_run2"
    shutil.copytree(LM_EVAL / "rerun" / "a_run2", rerun)
    samples = next(rerun.glob("samples_*.jsonl"))

    def flip(text: str) -> str:
        rec = json.loads(text)
        rec["acc"] = 1.0 - rec["acc"]
        return json.dumps(rec)

    _edit_line(samples, 2, flip)  # doc 1 of org/model-a: acc 0 -> 1
    with pytest.raises(HarnessLogError) as err:
        import_responses("lm-eval", [LM_OUT, rerun], lm_filter="strict-match")
    msg = str(err.value)
    assert "conflicting duplicate results for llm 'org/model-a', item 'arc_mini:1'" in msg
    assert "0 in " in msg and "1 in " in msg
    assert str(samples) in msg and "samples_arc_mini_2024-06-01T10-00-00.123456.jsonl" in msg
    assert "line 2" in msg


def test_lm_eval_malformed_line_names_file_and_line(tmp_path):
    run = tmp_path / "a_run"
    shutil.copytree(LM_OUT / "a_run", run)
    samples = next(run.glob("samples_arc_mini_*.jsonl"))
    _edit_line(samples, 3, lambda text: text[:40])
    with pytest.raises(HarnessLogError, match=rf"{samples.name}, line 3: not valid JSON"):
        import_responses("lm-eval", [run], lm_filter="strict-match")


def test_lm_eval_non_binary_metric_needs_threshold(tmp_path):
    run = tmp_path / "m"
    run.mkdir()
    recs = [
        {"doc_id": 0, "doc_hash": "h0", "metrics": ["f1"], "f1": 0.75},
        {"doc_id": 1, "doc_hash": "h1", "metrics": ["f1"], "f1": 0.25},
    ]
    path = run / "samples_squad_mini_2024-01-01T00-00-00.000001.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(HarnessLogError, match=r"choose one of \['f1'\] with metric$"):
        import_responses("lm-eval", [run])
    with pytest.raises(
        HarnessLogError, match=r"metric 'f1' for llm 'm', item 'squad_mini:0' is 0.75"
    ):
        import_responses("lm-eval", [run], metric="f1")
    resp = import_responses("lm-eval", [run], metric="f1", threshold=0.5)
    assert_same(resp.values, [[1, 0]])
    assert list(resp.llms) == ["m"]  # no results file: the folder name


def test_lm_eval_doc_id_with_different_documents_is_refused(tmp_path):
    runs = tmp_path / "out"
    shutil.copytree(LM_OUT, runs)
    samples = next((runs / "b_run").glob("samples_arc_mini_*.jsonl"))

    def other_doc(text: str) -> str:
        rec = json.loads(text)
        rec["doc_hash"] = "0" * 64
        return json.dumps(rec)

    _edit_line(samples, 1, other_doc)
    with pytest.raises(HarnessLogError, match=r"item 'arc_mini:0' has a different document hash"):
        import_responses("lm-eval", [runs], lm_filter="strict-match")
    # keyed by document hash, the changed document is an item of its own
    resp = import_responses("lm-eval", [runs], lm_filter="strict-match", item_key="doc_hash")
    assert resp.n_items == 6
    assert f"arc_mini:{'0' * 64}" in set(resp.items)


# ---------------------------------------------------------------- oll details
GPQA = ["leaderboard_gpqa_mini:0", "leaderboard_gpqa_mini:1", "leaderboard_gpqa_mini:2"]
MATH = ["leaderboard_math_mini:0", "leaderboard_math_mini:1"]


def test_oll_details_matrix_and_confidence():
    resp = import_responses("oll-details", [OLL])
    # llm and task from the file name (model a) and from the folder above latest/0000.parquet (b)
    assert sorted(resp.llms) == ["org/model-a", "org/model-b"]
    # acc_norm (the only correctness column of the gpqa files), gold (A),(C),(B):
    # a: argmax 0,2,0 -> 1,1,0 ; b: argmax 1,0(tie),1 -> 0,0,1 ; math exact_match a 1,0 ; b 1,1
    expected = [[1, 1, 0, 1, 0], [0, 0, 1, 1, 1]]
    assert_same(matrix(resp, ["org/model-a", "org/model-b"], GPQA + MATH), expected)
    sub = resp.select(llms=["org/model-a", "org/model-b"], items=GPQA + MATH)
    assert list(sub.item_subtask) == ["leaderboard_gpqa_mini"] * 3 + ["leaderboard_math_mini"] * 2
    assert list(sub.n_options) == [4, 4, 4, 0, 0]
    conf = sub.confidence
    # a, doc 0: target "(A)" matched to the option " (A)"; lls (-1, -2, -3, -4)
    assert conf[0, 0] == pytest.approx(softmax_at([-1, -2, -3, -4], 0), rel=1e-12)
    assert conf[0, 0] == pytest.approx(0.643914, abs=1e-6)
    assert conf[1, 1] == pytest.approx(0.25, rel=1e-12)  # b, doc 1: four equal lls
    assert np.isnan(conf[:, 3:]).all()


def test_oll_details_name_from_path_required(tmp_path):
    bad = tmp_path / "details.parquet"
    shutil.copy(OLL / "org__model-a__leaderboard_gpqa_mini.parquet", bad)
    with pytest.raises(HarnessLogError, match=r"cannot tell the llm and task"):
        import_responses("oll-details", [bad])
    # the lm-eval samples naming inside a model folder works too
    folder = tmp_path / "org__model-z"
    folder.mkdir()
    shutil.copy(bad, folder / "samples_leaderboard_gpqa_mini_2024-06-26T16-16-37.062311.parquet")
    with pytest.warns(
        HarnessLogWarning, match=r"^1 llm\(s\) named after their folders \('org/model-z'\)"
    ):
        resp = import_responses("oll-details", [folder])
    assert list(resp.llms) == ["org/model-z"] and list(resp.items) == GPQA


def test_oll_details_samples_take_their_llm_from_a_results_json_beside_them(tmp_path):
    # the download layout with lm-eval's results JSON beside the samples: the harness's
    # name wins over the folder's, and no warning (filterwarnings turns one into an error)
    src = OLL / "org__model-a__leaderboard_gpqa_mini.parquet"
    folder = tmp_path / "renamed__folder"
    folder.mkdir()
    stamp = "2024-06-26T16-16-37.062311"
    shutil.copy(src, folder / f"samples_leaderboard_gpqa_mini_{stamp}.parquet")
    (folder / f"results_{stamp}.json").write_text(
        json.dumps({"results": {"leaderboard_gpqa_mini": {}}, "model_name": "org/model-a"})
    )
    resp = import_responses("oll-details", [folder])
    assert list(resp.llms) == ["org/model-a"] and list(resp.items) == GPQA
    # two results files naming two models: which one wrote the samples is unknowable
    (folder / "results_2024-07-01T00-00-00.json").write_text(
        json.dumps({"results": {}, "model_name": "org/model-b"})
    )
    with pytest.raises(HarnessLogError, match=r"name several models \(org/model-a, org/model-b\)"):
        import_responses("oll-details", [folder])


def test_oll_details_one_warning_for_many_folder_names(tmp_path):
    src = OLL / "org__model-a__leaderboard_gpqa_mini.parquet"
    for k in range(5):
        folder = tmp_path / f"org__m{k}"
        folder.mkdir()
        shutil.copy(src, folder / "samples_leaderboard_gpqa_mini_2024-06-26T16-16-37.parquet")
    with pytest.warns(HarnessLogWarning) as record:
        resp = import_responses("oll-details", [tmp_path])
    messages = [str(w.message) for w in record if issubclass(w.category, HarnessLogWarning)]
    assert messages == [
        "5 llm(s) named after their folders ('org/m0', 'org/m1', 'org/m2' and 2 more): no "
        "lm-eval results JSON beside their samples files names the model, as in the details "
        "downloads; a folder's name is its llm's"
    ]
    assert list(resp.llms) == [f"org/m{k}" for k in range(5)]


def test_oll_details_rows_with_different_numbers_of_options(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    def row(doc_id, options, target, lls):
        return {
            "doc_id": doc_id,
            "doc_hash": f"h{doc_id}",
            "target": target,
            "arguments": {
                f"gen_args_{i}": {"arg_0": "ctx", "arg_1": f" {o}"} for i, o in enumerate(options)
            },
            "filtered_resps": [[str(v), "False"] for v in lls],
            "acc_norm": 1.0,
        }

    # one table for both rows: the struct gets the union of fields, gen_args_2 is null in row 0
    table = pa.Table.from_pylist(
        [
            row(0, ["True", "False"], "False", [-2.0, -1.0]),
            row(1, ["x", "y", "z"], "z", [-1, -1, -1]),
        ]
    )
    assert table.to_pylist()[0]["arguments"]["gen_args_2"] is None
    path = tmp_path / "org__m__leaderboard_bbh_mini.parquet"
    pq.write_table(table, path)
    resp = import_responses("oll-details", [path])
    assert list(resp.n_options) == [2, 3]
    conf = resp.confidence[0]
    assert conf[0] == pytest.approx(softmax_at([-2.0, -1.0], 1), rel=1e-12)
    assert conf[1] == pytest.approx(1 / 3, rel=1e-12)


def test_oll_details_not_parquet(tmp_path):
    bad = tmp_path / "org__m__leaderboard_x.parquet"
    bad.write_text("not parquet")
    with pytest.raises(HarnessLogError, match=r"not a readable Parquet file"):
        import_responses("oll-details", [bad])


# ---------------------------------------------------------------- inspect
MMLU = ["mmlu_mini:1", "mmlu_mini:2", "mmlu_mini:3"]


def test_inspect_json_and_eval_logs():
    # gsm_mini sample q3 errored for the only llm that ran gsm_mini: no result at all
    with pytest.warns(DroppedDataWarning, match=r"gsm_mini:q3"):
        resp = import_responses("inspect", [INSPECT])
    assert sorted(resp.llms) == ["anthropic/claude-y", "openai/gpt-x"]
    # gpt-x (JSON log): C, I, C ; claude-y (.eval zip): I, C, C ; gsm: gpt-x C, I
    llms = ["openai/gpt-x", "anthropic/claude-y"]
    expected = [[1, 0, 1, 1, 0], [0, 1, 1, NAN, NAN]]
    assert_same(matrix(resp, llms, [*MMLU, "gsm_mini:q1", "gsm_mini:q2"]), expected)
    assert resp.confidence is None
    sub = resp.select(items=[*MMLU, "gsm_mini:q1"])
    assert list(sub.n_options) == [4, 4, 4, 0]
    assert list(sub.item_subtask) == ["mmlu_mini"] * 3 + ["gsm_mini"]


def _log(name: str) -> dict:
    return json.loads((INSPECT / name).read_text())


def _write(tmp_path: Path, log: dict, name: str = "log.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(log))
    return path


def test_inspect_epochs(tmp_path):
    log = _log("2024-07-01T10-00-00_mmlu-mini_AbC.json")
    second = [dict(s, epoch=2) for s in log["samples"]]
    second[0]["scores"] = {"choice": {"value": "I"}}
    log["samples"] = log["samples"] + second
    path = _write(tmp_path, log)
    with pytest.raises(HarnessLogError, match=r"2 epochs \[1, 2\]; choose one with epoch=N$"):
        import_responses("inspect", [path])
    assert_same(import_responses("inspect", [path], epoch=2).values, [[0, 0, 1]])
    assert_same(import_responses("inspect", [path], epoch=1).values, [[1, 0, 1]])
    with pytest.raises(HarnessLogError, match=r"no samples for epoch 3"):
        import_responses("inspect", [path], epoch=3)


def test_inspect_scorer_choice_dict_values_and_partial(tmp_path):
    log = _log("2024-07-01T10-00-00_mmlu-mini_AbC.json")
    values = [
        ("C", {"acc": 1, "f": 0.5}, "P"),
        ("I", {"acc": 0, "f": 1.0}, "I"),
        ("C", {"acc": 1, "f": 0}, "C"),
    ]
    for sample, (choice, multi, partial) in zip(log["samples"], values, strict=True):
        sample["scores"] = {
            "choice": {"value": choice},
            "multi": {"value": multi},
            "judge": {"value": partial},
        }
    path = _write(tmp_path, log)
    with pytest.raises(HarnessLogError, match=r"several scorers \['choice', 'multi', 'judge'\]"):
        import_responses("inspect", [path])
    assert_same(import_responses("inspect", [path], metric="choice").values, [[1, 0, 1]])
    with pytest.raises(
        HarnessLogError, match=r"several values \['acc', 'f'\]; choose one with metric=multi.KEY$"
    ):
        import_responses("inspect", [path], metric="multi")
    assert_same(import_responses("inspect", [path], metric="multi.acc").values, [[1, 0, 1]])
    # "P" (partial credit, 0.5) is not binary without a threshold; the message says "P"
    with pytest.raises(
        HarnessLogError, match=r"metric 'judge' .* is 'P' \(partial credit, read as 0.5\)"
    ):
        import_responses("inspect", [path], metric="judge")
    assert_same(
        import_responses("inspect", [path], metric="judge", threshold=0.5).values, [[1, 0, 1]]
    )
    with pytest.raises(HarnessLogError, match=r"no scorer 'nope'"):
        import_responses("inspect", [path], metric="nope")


def test_inspect_conflicting_logs(tmp_path):
    log = _log("2024-07-01T10-00-00_mmlu-mini_AbC.json")
    log["samples"][1]["scores"]["choice"]["value"] = "C"
    other = _write(tmp_path, log, "rerun.json")
    with pytest.raises(HarnessLogError) as err:
        import_responses("inspect", [INSPECT / "2024-07-01T10-00-00_mmlu-mini_AbC.json", other])
    msg = str(err.value)
    assert "llm 'openai/gpt-x', item 'mmlu_mini:2'" in msg and "rerun.json" in msg


def test_inspect_bad_files(tmp_path):
    not_log = _write(tmp_path, {"hello": 1}, "other.json")
    with pytest.raises(HarnessLogError, match=r"other.json: not an inspect evaluation log"):
        import_responses("inspect", [not_log])
    broken = tmp_path / "broken.eval"
    broken.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(HarnessLogError, match=r"broken.eval: not a readable .eval log"):
        import_responses("inspect", [broken])
    no_samples = _log("2024-07-01T10-00-00_mmlu-mini_AbC.json")
    no_samples["samples"] = []
    with pytest.raises(HarnessLogError, match=r"holds no samples"):
        import_responses("inspect", [_write(tmp_path, no_samples, "empty.json")])
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"eval": {"model": "m",\n  "task": }')
    with pytest.raises(HarnessLogError, match=r"bad.json, line 2: not valid JSON"):
        import_responses("inspect", [bad_json])
    # an archive without an eval header
    odd = tmp_path / "odd.eval"
    with zipfile.ZipFile(odd, "w") as archive:
        archive.writestr("something.json", "{}")
    with pytest.raises(HarnessLogError, match=r"odd.eval: no eval header"):
        import_responses("inspect", [odd])


def test_inspect_eval_with_unreadable_compression(tmp_path):
    # members marked zstd (method 93) are read with zstandard (real zstd logs:
    # tests/test_importers_real.py); stored bytes marked so are not zstd data
    log = tmp_path / "z.eval"
    with zipfile.ZipFile(log, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("header.json", json.dumps({"eval": {"model": "m", "task": "t"}}))
        archive.writestr("samples/1_epoch_1.json", json.dumps({"id": 1, "epoch": 1}))
    data = bytearray(log.read_bytes())
    at = data.find(b"PK\x01\x02")  # central directory entries: method at offset 10
    while at != -1:
        data[at + 10 : at + 12] = (93).to_bytes(2, "little")
        at = data.find(b"PK\x01\x02", at + 4)
    log.write_bytes(bytes(data))
    with pytest.raises(HarnessLogError, match=r"z.eval: member .* is not valid zstd data"):
        import_responses("inspect", [log])


# ---------------------------------------------------------------- shared
def test_unknown_format_and_inapplicable_options():
    with pytest.raises(
        UserInputError, match=r"unknown format 'helm'; choose one of \['auto', 'lm-eval'"
    ):
        import_responses("helm", [LM_OUT])
    assert FORMATS == ("auto", "lm-eval", "oll-details", "inspect")
    with pytest.raises(UserInputError, match=r"^epoch does not apply to lm-eval"):
        import_responses("lm-eval", [LM_OUT], epoch=1)
    with pytest.raises(UserInputError, match=r"^lm_filter does not apply to inspect"):
        import_responses("inspect", [INSPECT], lm_filter="none")
    with pytest.raises(UserInputError, match=r"^item_key must be one of"):
        import_responses("lm-eval", [LM_OUT], item_key="line")


def test_empty_folder_and_missing_path(tmp_path):
    (tmp_path / "empty").mkdir()
    for fmt in ("lm-eval", "oll-details", "inspect"):
        with pytest.raises(UserInputError, match=r"empty: holds no"):
            import_responses(fmt, [tmp_path / "empty"])
    with pytest.raises(UserInputError, match=r"auto: found no harness logs"):
        import_responses("auto", [tmp_path / "empty"])
    with pytest.raises(UserInputError, match=r"nowhere: no such file or folder"):
        import_responses("lm-eval", [tmp_path / "nowhere"])
    stray = tmp_path / "notes.txt"
    stray.write_text("x")
    with pytest.raises(UserInputError, match=r"notes.txt: not an lm-eval samples file"):
        import_responses("lm-eval", [stray])


def test_auto_detection():
    assert detect_format([LM_EVAL]) == "lm-eval"  # its results_*.json are not inspect logs
    assert detect_format([OLL]) == "oll-details"
    assert detect_format([INSPECT]) == "inspect"
    with pytest.raises(UserInputError, match=r"several formats: lm-eval .* inspect"):
        detect_format([LM_OUT, INSPECT])
    resp = import_responses("auto", [OLL])
    assert resp.n_llms == 2 and resp.n_items == 5


# ---------------------------------------------------------------- CLI
def test_cli_import_writes_files_that_load_back(tmp_path, capsys):
    out = tmp_path / "runs.csv"
    code = main(
        [
            "import",
            "lm-eval",
            str(LM_OUT),
            "--filter",
            "strict-match",
            "--output",
            str(out),
            "--json",
            "--quiet",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n_llms"] == 3 and summary["n_items"] == 5 and summary["n_missing"] == 1
    assert summary["format"] == "lm-eval" and summary["n_files"] == 6
    assert summary["written"] == [
        str(out),
        str(tmp_path / "runs.items.csv"),
        str(tmp_path / "runs.confidence.csv"),
    ]
    loaded = load_responses(out)
    direct = import_responses("lm-eval", [LM_OUT], lm_filter="strict-match")
    assert list(loaded.llms) == list(direct.llms) and list(loaded.items) == list(direct.items)
    assert_same(loaded.values, direct.values)
    assert list(loaded.item_subtask) == list(direct.item_subtask)
    assert list(loaded.n_options) == list(direct.n_options)
    np.testing.assert_allclose(loaded.confidence, direct.confidence, rtol=1e-12, equal_nan=True)


def test_cli_import_summary_line_and_stale_confidence(tmp_path, capsys):
    out = tmp_path / "ins.csv"
    stale = tmp_path / "ins.confidence.csv"
    stale.write_text("llm,old\nx,0.5\n")
    logs = [str(p) for p in sorted(INSPECT.glob("*mmlu-mini*"))]  # a .json and an .eval log
    assert main(["import", "auto", *logs, "-o", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"wrote {out} (+ ins.items.csv): 2 llms x 3 items")
    assert "from 2 inspect file(s)" in line
    assert not stale.exists()  # it would not match the new matrix
    assert load_responses(out).n_items == 3


def test_cli_bad_input_exit_2_one_line_nothing_written(tmp_path):
    rerun = tmp_path / "a_run2"
    shutil.copytree(LM_EVAL / "rerun" / "a_run2", rerun)
    samples = next(rerun.glob("samples_*.jsonl"))

    def flip(text: str) -> str:
        rec = json.loads(text)
        rec["acc"] = 1.0 - rec["acc"]
        return json.dumps(rec)

    _edit_line(samples, 1, flip)
    out = tmp_path / "res" / "m.csv"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bayes_microbench",
            "import",
            "lm-eval",
            str(LM_OUT),
            str(rerun),
            "--filter",
            "strict-match",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "conflicting duplicate results for llm 'org/model-a', item 'arc_mini:0'" in lines[0]
    assert "Traceback" not in proc.stderr
    assert not out.parent.exists() or not any(out.parent.iterdir())


def test_cli_bad_output_and_format(tmp_path, capsys):
    assert main(["import", "lm-eval", str(LM_OUT), "--output", str(tmp_path / "x.txt")]) == 2
    assert "must end in .csv" in capsys.readouterr().err
    assert main(["import", "nope", str(LM_OUT), "--output", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown format 'nope'" in err[0]
    assert not list(tmp_path.iterdir())

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayes_microbench import (
    DroppedDataWarning,
    Responses,
    ResponsesError,
    load_responses,
    save_responses,
)


def small() -> Responses:
    values = np.array([[1, 0, np.nan, 1], [0, 0, 1, 1], [1, 1, 1, np.nan]], dtype=float)
    return Responses.from_arrays(
        values,
        ["a", "b", "c"],
        ["q1", "q2", "q3", "q4"],
        subtask=["s1", "s1", "s2", "s2"],
        confidence=np.full(values.shape, 0.5),
        n_options=[4, 4, 0, 2],
    )


def test_accessors_and_missing_kept():
    r = small()
    assert r.n_llms == 3 and r.n_items == 4 and r.n_subtasks == 2
    assert r.n_missing == 2
    assert list(r.subtasks) == ["s1", "s2"]
    assert list(r.subtask_codes) == [0, 0, 1, 1]
    np.testing.assert_allclose(r.accuracy().to_numpy(), [2 / 3, 0.5, 1.0])
    np.testing.assert_allclose(r.item_proportion_correct().to_numpy(), [2 / 3, 1 / 3, 1.0, 1.0])
    # confidence of a missing cell is missing too
    assert np.isnan(r.confidence[0, 2])
    assert r.summary()["n_missing"] == 2


def test_select_by_labels_and_unknown_label():
    r = small()
    sub = r.select(llms=["c", "a"], items=["q4", "q1"])
    assert list(sub.llms) == ["c", "a"] and list(sub.items) == ["q4", "q1"]
    np.testing.assert_array_equal(sub.values, [[np.nan, 1.0], [1.0, 1.0]])
    with pytest.raises(ResponsesError, match=r"item ids not in responses: \['zz'\]"):
        r.select(items=["q1", "zz"])


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_round_trip(tmp_path, suffix):
    r = small()
    paths = save_responses(r, tmp_path / f"bench{suffix}")
    back = load_responses(paths[0])
    np.testing.assert_array_equal(back.values, r.values)
    assert list(back.llms) == list(r.llms) and list(back.items) == list(r.items)
    assert list(back.item_subtask) == list(r.item_subtask)
    np.testing.assert_array_equal(back.confidence, r.confidence)
    np.testing.assert_array_equal(back.n_options, r.n_options)


def test_wide_csv_items_file_picked_up_and_overridden(tmp_path):
    (tmp_path / "b.csv").write_text("llm,x,y\nm1,1,0\nm2,,1\n")
    (tmp_path / "b.items.csv").write_text("item,subtask\ny,t2\nx,t1\n")
    r = load_responses(tmp_path / "b.csv")
    assert list(r.item_subtask) == ["t1", "t2"]
    assert np.isnan(r.values[1, 0])
    (tmp_path / "other.csv").write_text("item,subtask\nx,u\ny,u\n")
    assert list(load_responses(tmp_path / "b.csv", tmp_path / "other.csv").item_subtask) == [
        "u",
        "u",
    ]


def test_long_csv_missing_rows_are_missing(tmp_path):
    (tmp_path / "l.csv").write_text("llm,item,correct,subtask\nm1,x,1,t\nm1,y,0,t\nm2,x,0,t\n")
    r = load_responses(tmp_path / "l.csv")
    assert r.values.shape == (2, 2)
    assert np.isnan(r.values[1, 1])


BAD_WIDE = [
    ("llm,x,y\nm1,1,2\n", r"value for llm 'm1', item 'y' is 2; expected 1, 0 or empty"),
    ("llm,x,y\nm1,1,yes\n", r"value for llm 'm1', item 'y' is 'yes'; expected 1, 0 or empty"),
    ("llm,x,y\nm1,1,0\nm1,0,0\n", r"duplicate llms \['m1'\]"),
    ("llm,x,x\nm1,1,0\n", r"duplicate item ids"),
    ("llm\n", r"empty"),
    ("model,x\nm1,1\n", r"first column must be 'llm'"),
]


@pytest.mark.parametrize(("text", "message"), BAD_WIDE)
def test_bad_wide_input_is_named(tmp_path, text, message):
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(ResponsesError, match=message):
        load_responses(tmp_path / "bad.csv")


def test_items_file_must_match_columns(tmp_path):
    (tmp_path / "b.csv").write_text("llm,x,y\nm1,1,0\n")
    (tmp_path / "b.items.csv").write_text("item,subtask\nx,t\nz,t\n")
    with pytest.raises(
        ResponsesError, match=r"missing from the items file \['y'\].*not in the matrix \['z'\]"
    ):
        load_responses(tmp_path / "b.csv")


def test_confidence_outside_unit_interval(tmp_path):
    (tmp_path / "b.csv").write_text("llm,x,y\nm1,1,0\n")
    (tmp_path / "b.confidence.csv").write_text("llm,x,y\nm1,0.9,1.5\n")
    with pytest.raises(ResponsesError, match=r"confidence for llm 'm1', item 'y' is 1\.5"):
        load_responses(tmp_path / "b.csv")


def test_long_conflicting_duplicates(tmp_path):
    (tmp_path / "l.csv").write_text("llm,item,correct\nm1,x,1\nm1,x,0\n")
    with pytest.raises(
        ResponsesError, match=r"conflicting duplicate results for llm 'm1', item 'x'"
    ):
        load_responses(tmp_path / "l.csv")
    (tmp_path / "ok.csv").write_text("llm,item,correct\nm1,x,1\nm1,x,1\nm1,y,0\n")
    assert load_responses(tmp_path / "ok.csv").values.tolist() == [[1.0, 0.0]]


def test_empty_llms_and_items_dropped_with_named_warning(tmp_path):
    (tmp_path / "b.csv").write_text("llm,x,y,z\nm1,1,0,\nm2,,,\nm3,0,1,\n")
    with pytest.warns(DroppedDataWarning, match=r"llms \['m2'\] and items \['z'\]"):
        r = load_responses(tmp_path / "b.csv")
    assert list(r.llms) == ["m1", "m3"] and list(r.items) == ["x", "y"]
    with pytest.raises(ResponsesError, match="no observed response"):
        load_responses(tmp_path / "b.csv", on_empty="raise")


def test_all_missing_matrix_refused(tmp_path):
    (tmp_path / "b.csv").write_text("llm,x\nm1,\n")
    with pytest.raises(ResponsesError, match="no observed cell"):
        load_responses(tmp_path / "b.csv")


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    r = small()

    def boom(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", boom)
    with pytest.raises(OSError):
        save_responses(r, tmp_path / "out.csv")
    assert list(tmp_path.iterdir()) == []


def test_written_files_have_ordinary_permissions(tmp_path):
    import os

    paths = save_responses(small(), tmp_path / "out.csv")
    umask = os.umask(0)
    os.umask(umask)
    assert all((p.stat().st_mode & 0o777) == (0o666 & ~umask) for p in paths)

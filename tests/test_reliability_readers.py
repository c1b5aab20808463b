"""The response and subset readers refuse malformed files in one line, and read valid ones right.

Deterministic cases for each defect (short / long rows, blank or repeated headers, one set
of missing and correct spellings for every layout, companions, subset files, each dropped
llm said once), then property-based tests: any generated file either loads a valid
:class:`Responses` equal to what an independent reading of the file says, or raises a
one-line :class:`UserInputError`; through the CLI, exit 0 or one stderr line and exit 2.
"""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from bayes_microbench import (
    DroppedDataWarning,
    Responses,
    ResponsesError,
    UserInputError,
    load_responses,
    save_responses,
)
from bayes_microbench.cli import main
from bayes_microbench.io import read_subset

from .conftest import ROOT, SHARED_DATA

# the package's documented spellings (responses.py module docstring), written out here
# independently of the implementation
MISSING = ["", "NA", "na", "N/A", "n/a", "NaN", "nan", "NAN", "null", "NULL", "None", " NA "]
CORRECT = {"1": 1.0, "0": 0.0, "1.0": 1.0, "0.0": 0.0, " 1 ": 1.0, "true": 1.0, "False": 0.0}
CORRECT |= {"TRUE": 1.0, "false": 0.0}
JUNK = ["yes", "2", "-1", "inf", "0.5", "1 1", "t", "NA NA", "nil", "1,0", "#", "\ufeff1"]

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and "\r" not in text, repr(text)
    return text


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


# ----------------------------------------------------------- malformed wide CSVs
MALFORMED_WIDE = [
    # a short row was padded with missing cells
    ("llm,x,y\nm1,1\nm2,0,1\n", r"short\.csv: line 2: 2 cells, but the header \(line 1\) has 3"),
    # an extra field on every row was read as an index: "duplicate llms ['1', '0']"
    ("llm,x,y\nm1,1,0,1\nm2,0,1,0\n", r"short\.csv: line 2: 4 cells, but the header"),
    # a blank header became an item 'Unnamed: 1'
    ("llm,,y\nm1,1,0\n", r"short\.csv: line 1: column 2 of the header is blank"),
    ("llm,x,\nm1,1,0\n", r"short\.csv: line 1: column 3 of the header is blank"),
    ("llm,x,NA\nm1,1,0\n", r"column 3 of the header is blank \('NA' reads as missing\)"),
    ("llm,x,x\nm1,1,0\n", r"duplicate item ids \['x'\] \('x' heads columns 2, 3\)"),
    ("llm,x\n,1\nm2,0\n", r"short\.csv: line 2: blank llm in column 1"),
    ("llm,x\nm1,1\nm2,0\nm1,1\n", r"duplicate llms \['m1'\] \(lines 2 and 4\)"),
    ('llm,x,y\nm1,"1,0\nm2,0,1\n', r"short\.csv: line 2: not readable as CSV"),
    ('llm,x\nm1,"1"0\n', r"short\.csv: line 2: not readable as CSV"),
    ("llm,x\nm1,1\x00\n", r"binary data"),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED_WIDE)
def test_malformed_wide_csv_is_named_in_one_line(tmp_path, text, message):
    path = write(tmp_path / "short.csv", text)
    with pytest.raises(ResponsesError, match=message) as err:
        load_responses(path)
    one_line(err.value)
    assert "duplicate llms ['1', '0']" not in str(err.value)


def test_undecodable_file_is_named(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("llm,caf\xe9\nm1,1\n".encode("latin-1"))
    with pytest.raises(
        ResponsesError, match=r"latin\.csv: line 1: not UTF-8 text \(byte 0xe9 at offset 7\)"
    ):
        load_responses(path)


def test_bom_crlf_and_blank_lines_are_read(tmp_path):
    path = tmp_path / "b.csv"
    path.write_bytes("\ufeffllm,x,y\r\nm1,1,0\r\n\r\nm2,,1\r\n\r\n".encode())
    r = load_responses(path)
    assert list(r.llms) == ["m1", "m2"] and list(r.items) == ["x", "y"]
    np.testing.assert_array_equal(r.values, [[1.0, 0.0], [np.nan, 1.0]])


# ------------------------------------------- one set of spellings for every layout
def quoted(cell: str) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([cell])
    return buf.getvalue()


def wide_text(cell: str) -> str:
    return f"llm,x,y\nm1,{quoted(cell)},1\nm2,0,1\n"


def long_text(cell: str) -> str:
    return f"llm,item,correct\nm1,x,{quoted(cell)}\nm1,y,1\nm2,x,0\nm2,y,1\n"


@pytest.mark.parametrize("cell", MISSING)
def test_missing_spellings_are_missing_in_wide_long_and_parquet(tmp_path, cell):
    wide = load_responses(write(tmp_path / "w.csv", wide_text(cell)))
    long = load_responses(write(tmp_path / "l.csv", long_text(cell)))
    pd.read_csv(io.StringIO(long_text("0")), dtype=str).assign(
        correct=[cell, "1", "0", "1"]
    ).to_parquet(tmp_path / "l.parquet")
    parquet = load_responses(tmp_path / "l.parquet")
    expected = [[np.nan, 1.0], [0.0, 1.0]]
    for r in (wide, long, parquet):
        np.testing.assert_array_equal(r.values, expected)


@pytest.mark.parametrize(("cell", "value"), sorted(CORRECT.items()))
def test_correct_spellings_are_the_same_in_wide_and_long(tmp_path, cell, value):
    wide = load_responses(write(tmp_path / "w.csv", wide_text(cell)))
    long = load_responses(write(tmp_path / "l.csv", long_text(cell)))
    for r in (wide, long):
        np.testing.assert_array_equal(r.values, [[value, 1.0], [0.0, 1.0]])


@pytest.mark.parametrize("cell", JUNK)
def test_junk_is_refused_in_wide_and_long_naming_llm_item_and_value(tmp_path, cell):
    with pytest.raises(ResponsesError, match=r"w\.csv: value for llm 'm1', item 'x' is ") as w:
        load_responses(write(tmp_path / "w.csv", wide_text(cell)))
    with pytest.raises(ResponsesError, match=r"l\.csv: line 2: correct for llm 'm1', item 'x'"):
        load_responses(write(tmp_path / "l.csv", long_text(cell)))
    assert "expected 1, 0 or empty" in one_line(w.value)


def test_boolean_parquet_column_reads_as_one_and_zero(tmp_path):
    frame = pd.DataFrame({"llm": ["a", "a", "b"], "item": ["x", "y", "x"]})
    frame.assign(correct=[True, False, True]).to_parquet(tmp_path / "b.parquet")
    np.testing.assert_array_equal(
        load_responses(tmp_path / "b.parquet").values, [[1.0, 0.0], [1.0, np.nan]]
    )


def test_long_blank_llm_is_named_by_line(tmp_path):
    path = write(tmp_path / "l.csv", "llm,item,correct\nm1,x,1\n\nNA,y,0\n")
    with pytest.raises(ResponsesError, match=r"l\.csv: line 4: blank llm \('NA'\)"):
        load_responses(path)


# --------------------------------------------------------------------- companions
COMPANION_CASES = [
    ("confidence", "llm,x,y\nm1,0.5\n", r"b\.confidence\.csv: line 2: 2 cells"),
    ("confidence", "llm,x,y\nm1,0.5,0.1\nm1,0.2,0.3\n", r"duplicate llms \['m1'\] \(lines 2"),
    ("confidence", "llm,x,y\nzz,0.5,0.1\n", r"rows for llms not in the matrix \['zz'\]"),
    ("confidence", "llm,x,y\nm1,high,0.1\n", r"confidence for llm 'm1', item 'x' is 'high'"),
    ("items", "item,subtask\nx,s\ny\n", r"b\.items\.csv: line 3: 1 cells"),
    ("items", "item,subtask\nx,s\ny,null\n", r"b\.items\.csv: line 3: item 'y' has no subtask"),
    ("items", "item,subtask\nx,s\nx,s\n", r"b\.items\.csv: duplicate item ids \['x'\]"),
    ("items", "item,subtask,n_options\nx,s,4\ny,s,four\n", r"line 3: n_options is 'four'"),
    ("items", "item,subtask,n_options\nx,s,1e400\ny,s,4\n", r"line 2: n_options is '1e400'"),
]


@pytest.mark.parametrize(("kind", "text", "message"), COMPANION_CASES)
def test_malformed_companion_is_named(tmp_path, kind, text, message):
    write(tmp_path / "b.csv", "llm,x,y\nm1,1,0\nm2,0,1\n")
    write(tmp_path / f"b.{kind}.csv", text)
    with pytest.raises(ResponsesError, match=message) as err:
        load_responses(tmp_path / "b.csv")
    one_line(err.value)


def test_companions_use_the_same_missing_spellings(tmp_path):
    write(tmp_path / "b.csv", "llm,x,y\nm1,1,0\nm2,0,1\n")
    write(tmp_path / "b.confidence.csv", "llm,x,y\nm1,0.75,NA\n")
    write(tmp_path / "b.items.csv", "item,subtask,n_options\nx,s,4\ny,t,N/A\n")
    r = load_responses(tmp_path / "b.csv")
    np.testing.assert_array_equal(r.confidence, [[0.75, np.nan], [np.nan, np.nan]])
    assert r.n_options.tolist() == [4, 0]
    assert r.item_subtask.tolist() == ["s", "t"]


def test_save_refuses_item_ids_the_wide_header_cannot_hold(tmp_path):
    r = Responses.from_arrays(np.ones((2, 2)), ["a", "b"], ["item", "correct"])
    with pytest.raises(ResponsesError, match=r"write a \.parquet instead"):
        save_responses(r, tmp_path / "r.csv")
    assert list(tmp_path.iterdir()) == []
    back = load_responses(save_responses(r, tmp_path / "r.parquet")[0])
    np.testing.assert_array_equal(back.values, r.values)


def test_carriage_return_in_a_label_reads_back(tmp_path):
    # the csv writer leaves a lone "\r" unquoted; unquoted, the reader ends the row there
    r = Responses.from_arrays([[1.0, 0.0]], ["a\rb"], ["x\ry", "z"], subtask=["s\r", "t"])
    back = load_responses(save_responses(r, tmp_path / "r.csv")[0])
    assert back.llms.tolist() == ["a\rb"] and back.items.tolist() == ["x\ry", "z"]
    assert back.item_subtask.tolist() == ["s\r", "t"]


def test_real_matrices_still_load():
    files = sorted(p for p in SHARED_DATA.glob("**/*.csv") if p.name.count(".") == 1)
    if not files:
        pytest.skip("../shared/data is not present (real data lives beside the checkout)")
    for path in files:
        r = load_responses(path)
        assert r.n_llms > 1 and r.n_items > 1


# -------------------------------------------------------------------- subset files
def select_document(ids: list[str]) -> dict:
    from bayes_microbench.commands.select import subset_document

    return subset_document(
        selector="random",
        seed=0,
        source="bench.csv",
        item_ids=ids,
        subtasks=["s"] * len(ids),
        weights=np.full(len(ids), 1 / len(ids)),
        info={},
    )


def test_subset_reads_what_select_writes_and_one_id_per_line(tmp_path):
    files = {
        "s.json": json.dumps(select_document(["gpqa:1", "gpqa:7"]), indent=2),
        "plain.txt": "gpqa:1\n\n gpqa:7 \n",
        "header.txt": "item\ngpqa:1\ngpqa:7\n",
        "table.csv": "subtask,item,weight\ns,gpqa:1,0.5\ns,gpqa:7,0.5\n",
    }
    for name, text in files.items():
        path = write(tmp_path / name, text)
        assert read_subset(path) == ["gpqa:1", "gpqa:7"], name
    # CSV quoting is honoured: an id holding a comma
    assert read_subset(write(tmp_path / "q.csv", 'item\n"a,b"\nc\n')) == ["a,b", "c"]


BAD_SUBSETS = [
    (b"", "s.txt", r"names no items"),
    (b"\n  \n", "s.txt", r"names no items"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "s.txt", r"binary data"),
    ("caf\xe9\n".encode("latin-1"), "s.txt", r"not UTF-8 text"),
    (b'{"item_ids": ["a",', "s.json", r"not valid JSON \(.* at line 1"),
    (b'["a", "b"]', "s.json", r"with an 'item_ids' list"),
    (b'{"items": ["a"]}', "s.json", r"with an 'item_ids' list"),
    (b'{"item_ids": []}', "s.json", r"names no items"),
    (b'{"item_ids": ["a", null]}', "s.json", r"item_ids\[1\] is null"),
    (b'{"item_ids": ["a", ""]}', "s.json", r"item_ids\[1\] is \"\""),
    (b'item\n"a\nb\n', "s.csv", r"line 2: not readable as CSV"),
    (b"item,subtask\na,s\nb\n", "s.csv", r"line 3: 1 cells, but the header"),
    (b"id,subtask\na,s\n", "s.csv", r"needs an 'item' column"),
    (b"item\na\nNA\n", "s.csv", r"line 3: blank item id"),
    (b"a\nb\na\n", "s.txt", r"duplicate item ids \['a'\]"),
    (b'{"item_ids": ["a", "a"]}', "s.json", r"duplicate item ids \['a'\]"),
]


@pytest.mark.parametrize(("data", "name", "message"), BAD_SUBSETS)
def test_malformed_subset_is_one_line(tmp_path, data, name, message):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UserInputError, match=message) as err:
        read_subset(path)
    assert str(err.value).startswith(str(path))
    one_line(err.value)


def test_subset_folder_and_missing_file(tmp_path):
    with pytest.raises(UserInputError, match="is a folder"):
        read_subset(tmp_path)
    with pytest.raises(UserInputError, match="no such subset file"):
        read_subset(tmp_path / "nope.json")


# ------------------------------------------------------- each drop is said once
EMPTY_LLM = "llm,x,y\nm1,1,0\nm2,,\nm3,0,1\n"


@pytest.mark.filterwarnings("always::bayes_microbench.exceptions.DroppedDataWarning")
def test_dropped_llm_is_said_once_per_cli_run(tmp_path, capsys, caplog):
    path = write(tmp_path / "b.csv", EMPTY_LLM)
    assert main(["info", str(path)]) == 0
    said = [ln for ln in capsys.readouterr().err.splitlines() if "'m2'" in ln]
    # the CLI prints log records on stderr too; under pytest they land in caplog instead
    said += [rec.getMessage() for rec in caplog.records if "'m2'" in rec.getMessage()]
    assert said == [
        f"bayes-microbench: warning: {path}: no observed response for llms ['m2']; dropped them"
    ]


def test_dropped_llm_is_one_stderr_line_of_the_real_cli(tmp_path):
    path = write(tmp_path / "b.csv", EMPTY_LLM)
    proc = subprocess.run(
        [sys.executable, "-m", "bayes_microbench.cli", "info", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert [ln for ln in proc.stderr.splitlines() if "'m2'" in ln] == [
        f"bayes-microbench: warning: {path}: no observed response for llms ['m2']; dropped them"
    ]


# ---------------------------------------------------------------- property tests
def is_blank(text: str) -> bool:
    return text.strip().lower() in {"", "na", "n/a", "nan", "null", "none"}


def expected_cell(text: str) -> float | None:
    """The documented reading of one generated cell; None for an invalid one.

    The generators below only draw from CORRECT, MISSING, JUNK and text without
    digits, so anything neither blank nor in CORRECT is invalid.
    """
    if is_blank(text):
        return math.nan
    return CORRECT.get(text)


# text that is no number and no spelling: no digits, no '.', '+', '-'
free_junk = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="0123456789.+-\x00"),
    min_size=1,
    max_size=5,
).filter(lambda t: not is_blank(t) and t.strip().lower() not in {"true", "false"})
cells = st.one_of(
    st.sampled_from(sorted(CORRECT)),
    st.sampled_from(MISSING),
    st.sampled_from(JUNK),
    free_junk,
)
ids = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6),
    st.sampled_from(["x", "y", "z", "", " ", "NA", "null", 'a"b', "a,b", "l\nm", "llm"]),
).filter(lambda t: t not in ("item", "correct"))


def oracle_wide(header: list[str], rows: list[list[str]]) -> tuple[list, list, np.ndarray] | None:
    """What the documented wide format says the file holds; None when it must be refused."""
    records = [r for r in [header, *rows] if r and not (len(r) == 1 and not r[0].strip())]
    if not records:
        return None
    head, body = records[0], records[1:]
    if head[0] != "llm" or len(head) < 2 or any(is_blank(h) for h in head):
        return None
    if len(set(head)) != len(head) or any(len(r) != len(head) for r in body) or not body:
        return None
    llms = [r[0] for r in body]
    if any(is_blank(name) for name in llms) or len(set(llms)) != len(llms):
        return None
    values = [[expected_cell(c) for c in r[1:]] for r in body]
    if any(v is None for row in values for v in row):
        return None
    arr = np.array(values, dtype=float)
    keep_l, keep_i = ~np.isnan(arr).all(axis=1), ~np.isnan(arr).all(axis=0)
    if not keep_l.any():
        return None
    return (
        [n for n, k in zip(llms, keep_l, strict=True) if k],
        [n for n, k in zip(head[1:], keep_i, strict=True) if k],
        arr[np.ix_(keep_l, keep_i)],
    )


def csv_text(records: list[list[str]], crlf: bool, bom: bool) -> str:
    buf = io.StringIO()
    # the csv writer leaves a lone "\r" unquoted, which any reader takes for a line end
    quoting = csv.QUOTE_ALL if any("\r" in c for r in records for c in r) else csv.QUOTE_MINIMAL
    csv.writer(buf, lineterminator="\r\n" if crlf else "\n", quoting=quoting).writerows(records)
    return ("\ufeff" if bom else "") + buf.getvalue()


def check_valid(r: Responses) -> None:
    vals = r.values
    assert np.isin(vals[~np.isnan(vals)], [0.0, 1.0]).all()
    for labels in (r.llms.tolist(), r.items.tolist()):
        assert len(set(labels)) == len(labels)
        assert all(isinstance(v, str) and not is_blank(v) for v in labels)
    assert vals.shape == (r.n_llms, r.n_items) and r.n_llms >= 1 and r.n_items >= 1


def load_or_error(path: Path) -> Responses | None:
    """Load, returning None on a one-line UserInputError (anything else fails the test)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DroppedDataWarning)
        try:
            r = load_responses(path)
        except UserInputError as err:
            one_line(err)
            return None
    check_valid(r)
    return r


def fresh(factory: pytest.TempPathFactory, name: str) -> Path:
    return Path(tempfile.mkdtemp(dir=factory.getbasetemp())) / name


label = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=6
).filter(lambda t: not is_blank(t))

MUTATIONS = [None, None, None, "short", "long", "blank header", "repeated header"]
MUTATIONS += ["blank llm", "repeated llm", "first column", "junk"]


@st.composite
def wide_files(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    """A header and rows: either random, or well formed with at most one defect."""
    if draw(st.booleans()):
        header = ["llm", *draw(st.lists(ids, min_size=1, max_size=4))]
        header[0] = draw(st.sampled_from(["llm", "llm", "llm", "model", ""]))
        row = st.tuples(ids, st.lists(cells, max_size=5)).map(lambda t: [t[0], *t[1]])
        return header, draw(st.lists(row, max_size=5))
    n_i, n_l = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    items = draw(
        st.lists(label.filter(lambda t: t != "llm"), min_size=n_i, max_size=n_i, unique=True)
    )
    llms = draw(st.lists(label, min_size=n_l, max_size=n_l, unique=True))
    valid = st.sampled_from(sorted(CORRECT) + MISSING)
    header = ["llm", *items]
    rows = [[name, *draw(st.lists(valid, min_size=n_i, max_size=n_i))] for name in llms]
    mutation = draw(st.sampled_from(MUTATIONS))
    r = draw(st.integers(0, n_l - 1))
    c = draw(st.integers(1, n_i))
    if mutation == "short":
        rows[r] = rows[r][:c]
    elif mutation == "long":
        rows[r] = [*rows[r], draw(valid)]
    elif mutation == "blank header":
        header[c] = draw(st.sampled_from(MISSING))
    elif mutation == "repeated header":
        header[c] = header[draw(st.integers(0, n_i))]
    elif mutation == "blank llm":
        rows[r][0] = draw(st.sampled_from(MISSING))
    elif mutation == "repeated llm":
        rows.append(list(rows[r]))
    elif mutation == "first column":
        header[0] = draw(st.sampled_from(["model", "LLM", " llm"]))
    elif mutation == "junk":
        rows[r][c] = draw(st.one_of(st.sampled_from(JUNK), free_junk))
    return header, rows


@SETTINGS
@given(file=wide_files(), crlf=st.booleans(), bom=st.booleans())
def test_any_wide_csv_loads_as_written_or_is_refused(tmp_path_factory, file, crlf, bom):
    header, rows = file
    path = fresh(tmp_path_factory, "w.csv")
    write(path, csv_text([header, *rows], crlf, bom))
    expected = oracle_wide(header, rows)
    got = load_or_error(path)
    assert_matches_oracle(got, expected)


def assert_matches_oracle(got, expected) -> None:
    """A reader's result equals the independent reading of the file (None: refused)."""
    event("refused" if expected is None else "loaded")
    if expected is None:
        assert got is None
    else:
        assert got is not None
        assert got.llms.tolist() == expected[0] and got.items.tolist() == expected[1]
        np.testing.assert_array_equal(got.values, expected[2])


def oracle_long(rows: list[tuple[str, str, str]]) -> tuple[list, list, np.ndarray] | None:
    if not rows:
        return None
    if any(is_blank(a) or is_blank(b) for a, b, _ in rows):
        return None
    cells: dict[tuple[str, str], set] = {}
    for llm, item, c in rows:
        v = expected_cell(c)
        if v is None:
            return None
        cells.setdefault((llm, item), set()).add("nan" if math.isnan(v) else v)
    if any(len(vs) > 1 for vs in cells.values()):
        return None
    llms = list(dict.fromkeys(r[0] for r in rows))
    items = list(dict.fromkeys(r[1] for r in rows))
    arr = np.full((len(llms), len(items)), np.nan)
    for (llm, item), vs in cells.items():
        (v,) = vs
        arr[llms.index(llm), items.index(item)] = np.nan if v == "nan" else v
    keep_l, keep_i = ~np.isnan(arr).all(axis=1), ~np.isnan(arr).all(axis=0)
    if not keep_l.any():
        return None
    return (
        [n for n, k in zip(llms, keep_l, strict=True) if k],
        [n for n, k in zip(items, keep_i, strict=True) if k],
        arr[np.ix_(keep_l, keep_i)],
    )


valid_cells = st.sampled_from(sorted(CORRECT) + MISSING)


@st.composite
def long_rows(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    """Rows of a long table: mostly valid names and cells, sometimes a blank name or junk."""
    names = st.sampled_from(["m1", "m2", "m 3", "m4", "m5", "m6"])
    items = st.sampled_from(["x", "y", "z", "w", "a,b", "q\nr", "v"])
    rows = draw(st.lists(st.tuples(names, items, valid_cells), max_size=8))
    if rows and draw(st.booleans()):
        i = draw(st.integers(0, len(rows) - 1))
        llm, item, cell = rows[i]
        which = draw(st.sampled_from(["llm", "item", "cell"]))
        blank = draw(st.sampled_from(MISSING))
        if which == "llm":
            rows[i] = (blank, item, cell)
        elif which == "item":
            rows[i] = (llm, blank, cell)
        else:
            rows[i] = (llm, item, draw(cells))
    return rows


@SETTINGS
@given(rows=long_rows(), parquet=st.booleans())
def test_any_long_table_loads_as_written_or_is_refused(tmp_path_factory, rows, parquet):
    if parquet:
        path = fresh(tmp_path_factory, "l.parquet")
        frame = pd.DataFrame(rows, columns=["llm", "item", "correct"], dtype=object)
        frame.astype(str).to_parquet(path)
    else:
        path = fresh(tmp_path_factory, "l.csv")
        write(path, csv_text([["llm", "item", "correct"], *map(list, rows)], False, False))
    expected = oracle_long(rows)
    got = load_or_error(path)
    assert_matches_oracle(got, expected)


raw_text = st.one_of(
    st.binary(max_size=60).map(lambda b: b.decode("utf-8", errors="ignore")),
    st.lists(
        st.sampled_from(["llm", "x", ",", '"', "\n", "\r\n", "1", "0", "NA", "\ufeff", " "]),
        max_size=25,
    ).map("".join),
)


@SETTINGS
@given(data=st.binary(max_size=80), suffix=st.sampled_from([".csv", ".parquet", ".tsv"]))
def test_random_bytes_load_or_refuse_in_one_line(tmp_path_factory, data, suffix):
    path = fresh(tmp_path_factory, f"r{suffix}")
    path.write_bytes(data)
    load_or_error(path)


@SETTINGS
@given(text=raw_text)
def test_random_csv_text_through_the_cli_is_exit_0_or_one_line_exit_2(tmp_path_factory, text):
    path = fresh(tmp_path_factory, "c.csv")
    write(path, text)
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DroppedDataWarning)
        old = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            rc = main(["info", str(path)])
        finally:
            sys.stdout, sys.stderr = old
    lines = err.getvalue().splitlines()
    assert rc in (0, 2), err.getvalue()
    if rc == 2:
        assert len(lines) == 1 and lines[0].startswith("bayes-microbench: error: "), lines


@SETTINGS
@given(
    data=st.one_of(
        st.binary(max_size=60),
        raw_text.map(str.encode),
        st.lists(st.one_of(ids, st.none(), st.integers(), st.booleans()), max_size=4).map(
            lambda v: json.dumps({"item_ids": v}).encode()
        ),
    ),
    suffix=st.sampled_from([".json", ".txt", ".csv"]),
)
def test_any_subset_file_gives_unique_ids_or_one_line(tmp_path_factory, data, suffix):
    path = fresh(tmp_path_factory, f"s{suffix}")
    path.write_bytes(data)
    try:
        got = read_subset(path)
    except UserInputError as err:
        one_line(err)
        return
    assert got and len(set(got)) == len(got)
    assert all(isinstance(i, str) and not is_blank(i) for i in got)


@st.composite
def valid_responses(draw) -> Responses:
    n_l = draw(st.integers(1, 4))
    n_i = draw(st.integers(1, 4))
    llms = draw(st.lists(label, min_size=n_l, max_size=n_l, unique=True))
    items = draw(
        st.lists(
            label.filter(lambda t: t not in ("llm", "item", "correct")),
            min_size=n_i,
            max_size=n_i,
            unique=True,
        )
    )
    values = np.array(
        draw(st.lists(st.sampled_from([0.0, 1.0, np.nan]), min_size=n_l * n_i, max_size=n_l * n_i)),
    ).reshape(n_l, n_i)
    values[:, 0] = np.where(np.isnan(values[:, 0]), 1.0, values[:, 0])
    values[0, :] = np.where(np.isnan(values[0, :]), 0.0, values[0, :])
    subtask = draw(st.lists(label, min_size=n_i, max_size=n_i))
    conf = None
    if draw(st.booleans()):
        conf = np.array(
            draw(st.lists(st.floats(0, 1), min_size=n_l * n_i, max_size=n_l * n_i))
        ).reshape(n_l, n_i)
    opts = draw(st.lists(st.sampled_from([0, 2, 4, 10]), min_size=n_i, max_size=n_i))
    return Responses.from_arrays(
        values, llms, items, subtask=subtask, confidence=conf, n_options=opts
    )


@SETTINGS
@given(r=valid_responses(), suffix=st.sampled_from([".csv", ".parquet"]))
def test_saved_responses_load_back_equal(tmp_path_factory, r, suffix):
    path = save_responses(r, fresh(tmp_path_factory, f"bench{suffix}"))[0]
    back = load_responses(path)
    assert back.llms.tolist() == r.llms.tolist() and back.items.tolist() == r.items.tolist()
    np.testing.assert_array_equal(back.values, r.values)
    assert back.item_subtask.tolist() == r.item_subtask.tolist()
    assert back.n_options.tolist() == r.n_options.tolist()
    if r.confidence is None:
        assert back.confidence is None
    else:
        np.testing.assert_array_equal(back.confidence, r.confidence)


def test_score_says_nothing_of_the_items_a_subset_leaves_unasked(tmp_path, capsys):
    from bayes_microbench.posterior import read_posterior

    posterior = ROOT / "models" / "gpqa-2pl.nc"

    ids = [str(i) for i in read_posterior(str(posterior))["item"].values]
    rows = {"llm": ["a", "b", "c"]}
    for k, item in enumerate(ids):
        rows[item] = [float(k % 2), float((k + 1) % 2), np.nan] if k < 30 else [np.nan] * 3
    path = tmp_path / "subset.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # printed by the CLI as one line each, not raised
        code = main(["score", "--posterior", str(posterior), "--responses", str(path), "--json"])
    assert code == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    # the 418 unasked items are not news; the llm that answered nothing is
    assert len(err) == 1 and "llms ['c']" in err[0] and "items" not in err[0], err

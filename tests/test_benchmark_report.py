"""``benchmarks/README.md`` is the index rendered from ``benchmarks/results/*.json``.

Reads files only (no package import, no benchmark run). Why: every figure is kept once, in
its script's results file, and the report is generated from them
(docs/decisions/0028-benchmark-report-from-results.md); a results file edited without
rerendering, or a script without its results file, fails here.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from .conftest import ROOT

BENCH = ROOT / "benchmarks"
RESULTS = sorted((BENCH / "results").glob("*.json"))
SCRIPTS = sorted(
    p for prefix in ("bench_", "study_", "reproduce_") for p in BENCH.glob(f"{prefix}*.py")
)


@pytest.fixture(scope="module")
def report():
    """The ``benchmarks/_report.py`` module, loaded from its file."""
    spec = importlib.util.spec_from_file_location("_bench_report", BENCH / "_report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_report_is_the_rendering_of_the_results(report):
    text = (BENCH / "README.md").read_text()
    assert text == report.render_index(), "run `python benchmarks/_report.py --index`"
    assert len(text.encode()) < 30_000, "the index is meant to stay short: trim a headline"
    assert report.main(["--check"]) == 0


@pytest.mark.parametrize("path", RESULTS, ids=[p.stem for p in RESULTS])
def test_each_results_file_is_valid_and_listed(report, path):
    data = json.loads(path.read_text())
    rep = data["report"]
    report.check_report(rep, path.name)
    assert (ROOT / rep["script"]).is_file(), rep["script"]
    assert report.results_path((ROOT / rep["script"]).stem) == path
    assert rep["tables"] == report.parse_tables(rep["body"]), "tables are the body's tables"
    index = (BENCH / "README.md").read_text()
    assert f"\n## {rep['title']}\n" in index
    assert f"](results/{path.name})" in index
    if rep.get("source"):  # transcribed: names the report and commit it came from
        assert rep["source"].startswith("transcribed from benchmarks/README.md at ")
        assert rep["command"] is None


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_each_script_has_its_results_file(report, script):
    path = report.results_path(script.stem)
    assert path.is_file(), f"{script.name} has no {path.name}: run it (or transcribe its figures)"
    assert json.loads(path.read_text())["report"]["script"] == f"benchmarks/{script.name}"


BODY = """Intro paragraph.

| a | b |
|---|---:|
| 1 | 2 |

### Second table

Short caption:

| x | y | z |
|---|---|---|
| p | 1.0 | keep |
| q | 2.0 | drop |
"""


def test_write_section_records_the_figures_and_renders_the_index(report, tmp_path, monkeypatch):
    results, index = tmp_path / "results", tmp_path / "README.md"
    monkeypatch.setattr(report, "RESULTS", results)
    monkeypatch.setattr(report, "REPORT", index)
    path = report.results_path("bench_toy")
    assert path == results / "toy.json"
    report.update_results(path, rows=[{"k": 1}])  # a script's own data, saved first
    spec = {"table": 1, "columns": ["x", "y"], "where": {"z": ["keep"]}}
    assert report.write_section("bench_toy", "Toy", BODY, headline=[spec]) == index
    data = json.loads(path.read_text())
    assert data["rows"] == [{"k": 1}], "the script's data is kept beside the report"
    rep = data["report"]
    assert [t["title"] for t in rep["tables"]] == ["", "Second table"]
    assert rep["tables"][1]["caption"] == "Short caption:"
    assert rep["tables"][1]["rows"] == [["p", "1.0", "keep"], ["q", "2.0", "drop"]]
    assert rep["date"].endswith("UTC") and rep["machine"] and rep["rendered"] is None
    text = index.read_text()
    assert "| x | y |\n|---|---|\n| p | 1.0 |\n" in text
    assert "| q |" not in text and "| a | b |" not in text
    assert "(some rows or columns; all in the JSON)" in text
    assert "[`results/toy.json`](results/toy.json)" in text
    report.update_results(path, rows=[])  # a later data write keeps the report
    assert json.loads(path.read_text())["report"] == rep
    assert report.render_index() == text

    # figures rendered from saved runs name that run, and when they were rendered
    report.write_section("bench_toy", "Toy", BODY, run=("2026-01-01 00:00 UTC", "abc1234"))
    rep = json.loads(path.read_text())["report"]
    assert (rep["date"], rep["commit"], rep["machine"]) == ("2026-01-01 00:00 UTC", "abc1234", None)
    assert rep["rendered"]["date"].endswith("UTC") and rep["headline"] == [0]
    assert "run 2026-01-01 00:00 UTC, commit abc1234 ·" in index.read_text()


def test_a_stale_index_or_a_bad_report_is_caught(report, tmp_path, monkeypatch, capsys):
    results, index = tmp_path / "results", tmp_path / "README.md"
    monkeypatch.setattr(report, "RESULTS", results)
    monkeypatch.setattr(report, "REPORT", index)
    report.write_section("study_toy", "Toy", BODY)
    index.write_text(index.read_text() + "edited by hand\n")
    assert report.main(["--check"]) == 1
    assert "python benchmarks/_report.py --index" in capsys.readouterr().err
    assert report.main(["--index"]) == 0 and report.main(["--check"]) == 0

    path = results / "toy.json"
    data = json.loads(path.read_text())
    data["report"]["headline"] = [5]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"toy\.json: headline table 5 is not one of its 2"):
        report.render_index()
    assert report.main(["--check"]) == 2
    assert "toy.json" in capsys.readouterr().err
    (results / "other.json").write_text(json.dumps({"rows": []}))
    data["report"]["headline"] = [0]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"other\.json: no \"report\" block"):
        report.render_index()


def test_run_rows_merges_its_rows_beside_the_report(report, tmp_path, monkeypatch):
    """A study's one-row-per-process runner keeps the report block its file already has."""
    results, index = tmp_path / "results", tmp_path / "README.md"
    monkeypatch.setattr(report, "RESULTS", results)
    monkeypatch.setattr(report, "REPORT", index)
    report.write_section("study_toy", "Toy", BODY)
    script = tmp_path / "study_toy.py"
    script.write_text(
        "import json, sys\n"
        "assert sys.argv[1] == '--one'\n"
        "print('ROW ' + json.dumps({'k': sys.argv[2], 'v': 2 * int(sys.argv[2])}))\n"
    )
    path = report.results_path("study_toy")
    saved = report.run_rows(str(script), [["1"], ["2"], ["1"]], lambda r: (r["k"],), path)
    assert saved is not None and [(r["k"], r["v"]) for r in saved] == [("2", 4), ("1", 2)]
    data = json.loads(path.read_text())
    assert data["rows"] == saved and data["report"]["title"] == "Toy"
    assert {"load", "date", "commit", "machine"} <= set(saved[0])


OLD_REPORT = """# Benchmark report

Header paragraph.

<!-- BEGIN bench_toy -->
## Toy speed

_Run 2026-01-02 03:04 UTC on 2 cores (AMD EPYC), 24 GiB, Python 3.12.1, commit abc1234, by `benchmarks/bench_toy.py`._

| a | b |
|---|---|
| 1 | 2 |
<!-- END bench_toy -->

<!-- BEGIN study_other -->
## Toy study

_Run 2026-01-01 00:00 UTC on a machine its saved rows do not record, commit def5678, by `benchmarks/study_other.py`; section rewritten from the saved runs 2026-01-03 00:00 UTC, commit 9999999._

Reading: one line.
<!-- END study_other -->
"""


def test_old_sections_are_transcribed_once(report, tmp_path, monkeypatch):
    """A branch whose scripts still wrote Markdown sections merges by transcription."""
    results, index = tmp_path / "results", tmp_path / "README.md"
    monkeypatch.setattr(report, "RESULTS", results)
    monkeypatch.setattr(report, "REPORT", index)
    assert report.transcribe_sections(OLD_REPORT, "0123abc") == ["bench_toy", "study_other"]
    toy = json.loads((results / "toy.json").read_text())["report"]
    assert (toy["date"], toy["commit"], toy["machine"], toy["command"]) == (
        "2026-01-02 03:04 UTC",
        "abc1234",
        "2 cores (AMD EPYC), 24 GiB, Python 3.12.1",
        None,
    )
    assert toy["source"] == "transcribed from benchmarks/README.md at 0123abc"
    assert toy["body"] == "| a | b |\n|---|---|\n| 1 | 2 |" and toy["tables"][0]["rows"] == [
        ["1", "2"]
    ]
    assert report.transcribe_sections(OLD_REPORT, "later") == [], "a recorded report is kept"
    assert json.loads((results / "toy.json").read_text())["report"] == toy
    assert report.transcribe_sections(OLD_REPORT, "later", replace=True) == [
        "bench_toy",
        "study_other",
    ]
    study = json.loads((results / "other.json").read_text())["report"]
    assert (study["machine"], study["rendered"]) == (
        None,
        {"date": "2026-01-03 00:00 UTC", "commit": "9999999"},
    )
    assert "## Toy study" in report.render_index()
    with pytest.raises(ValueError, match="section bench_bad: its first line"):
        report.transcribe_sections(
            "<!-- BEGIN bench_bad -->\n## T\n\nno run line\n\nx\n<!-- END bench_bad -->", "x"
        )

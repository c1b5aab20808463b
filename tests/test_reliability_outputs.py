"""Output folders: evaluate's resume by recorded settings, damaged folders, all-or-nothing sets.

Every output set (``mdad``'s three files, ``report`` and its figures, ``evaluate``'s
aggregates) is checked by failing each of its writes in turn: the folder is then
exactly the old one, and without a failure exactly the new one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayes_microbench import Responses, _outputs, save_responses, simulate_responses
from bayes_microbench.cli import main
from bayes_microbench.exceptions import UserInputError
from bayes_microbench.protocol import GridConfig, evaluate_grid

ROOT = Path(__file__).resolve().parents[1]
POSTERIOR = ROOT / "models" / "gpqa-2pl.nc"


# --------------------------------------------------------------------------- helpers
@pytest.fixture(scope="module")
def resp() -> Responses:
    sim = simulate_responses("gpqa", n_llms=30, n_items=40, random_seed=5)
    subtask = np.array(["a"] * 24 + ["b"] * 16)
    return Responses.from_arrays(sim.values, sim.llms, sim.items, subtask=subtask)


@pytest.fixture(scope="module")
def resp_other(resp) -> Responses:
    """The same shape and ids as ``resp``, one response flipped (another data fingerprint)."""
    values = resp.values.copy()
    values[0, 0] = 1.0 - values[0, 0]
    return Responses.from_arrays(values, resp.llms, resp.items, subtask=resp.item_subtask)


@pytest.fixture(scope="module")
def resp_file(resp, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "sim.csv"
    save_responses(resp, path)
    return path


def _grid(**kw) -> GridConfig:
    base = dict(selectors=("random",), sizes=(4, 8), source_llms=(6,), target_llms=6, runs=2)
    base.update(kw)
    return GridConfig(**base)  # type: ignore[arg-type]


def snapshot(folder: Path, *, skip: tuple[str, ...] = ()) -> dict[str, bytes | None]:
    """Every entry under ``folder``: files by their bytes, folders as None."""
    if not folder.exists():
        return {}
    out: dict[str, bytes | None] = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if rel.split("/")[0] in skip:
            continue
        out[rel] = None if p.is_dir() else p.read_bytes()
    return out


class Injected(OSError):
    pass


def fail_on_call(monkeypatch, k: int, targets: list[tuple[object, str]]) -> list[str]:
    """Make the ``k``-th call (1-based, counted over all ``targets``) raise; returns the log."""
    calls: list[str] = []
    for owner, attr in targets:
        original = getattr(owner, attr)

        def wrapper(*args, __original=original, __name=attr, **kwargs):
            calls.append(__name)
            if len(calls) == k:
                raise Injected(f"injected failure of write {k} ({__name})")
            return __original(*args, **kwargs)

        monkeypatch.setattr(owner, attr, wrapper)
    return calls


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("bayes-microbench: error: "), err
    return err[0]


# --------------------------------------------------------------------------- resume
def test_resume_refuses_cells_of_another_seed(resp_file, tmp_path, capsys):
    """The issue's case: a seed-0 folder without config.json, rerun with --seed 1."""
    args = ["evaluate", "--responses", str(resp_file), "--sizes", "4,8", "--source-llms", "6"]
    args += ["--target-llms", "6", "--runs", "2", "--quiet"]
    assert main([*args, "--output", str(tmp_path / "a")]) == 0
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (tmp_path / "b" / "config.json").unlink()
    before = snapshot(tmp_path / "b")
    assert main([*args, "--seed", "1", "--output", str(tmp_path / "b")]) == 2
    line = one_error_line(capsys)
    assert str(tmp_path / "b") in line and "seed (0 there, 1 now)" in line
    assert "rerun with a new --output folder or the same settings" in line
    assert snapshot(tmp_path / "b") == before  # nothing recomputed, reused or relabelled
    # the same settings resume it: every cell reused, outputs as in the original folder
    assert main([*args, "--output", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "mdad.csv").read_bytes() == (tmp_path / "a" / "mdad.csv").read_bytes()


@pytest.mark.parametrize(
    ("change", "setting"),
    [
        ({"runs": 3}, "runs"),
        ({"threshold": 0.9}, "threshold"),
        ({"target_llms": 7}, "target_llms"),
    ],
)
def test_resume_names_the_differing_setting(resp, tmp_path, change, setting):
    out = tmp_path / "g"
    evaluate_grid(resp, _grid(), out)
    (out / "config.json").unlink()
    with pytest.raises(UserInputError, match=rf"{setting} \(.* there, .* now\)"):
        evaluate_grid(resp, _grid(**change), out)


def test_resume_refuses_cells_of_other_data(resp, resp_other, tmp_path):
    out = tmp_path / "g"
    evaluate_grid(resp, _grid(), out)
    (out / "config.json").unlink()
    with pytest.raises(UserInputError, match=r"data_fingerprint"):
        evaluate_grid(resp_other, _grid(), out)


def test_resume_refuses_cells_of_an_older_version(resp, tmp_path):
    out = tmp_path / "g"
    evaluate_grid(resp, _grid(), out)
    for path in (out / "cells").glob("*.json"):  # cell files as the previous version wrote them
        doc = json.loads(path.read_text())
        path.write_text(json.dumps({"metrics": doc["metrics"], "mdad": doc["mdad"]}))
    with pytest.raises(
        UserInputError, match=r"older version of bayes-microbench.*rerun with a new output folder$"
    ):
        evaluate_grid(resp, _grid(), out)


_CONFIGS = st.fixed_dictionaries(
    {
        "data": st.sampled_from(["resp", "resp_other"]),
        "selectors": st.sampled_from([("random",), ("random", "random-subtask-equal")]),
        "sizes": st.sampled_from([(4,), (8,), (4, 8)]),
        "source_llms": st.sampled_from([(6,), (10,), (6, 10)]),
        "runs": st.integers(1, 2),
        "seed": st.integers(0, 1),
        "threshold": st.sampled_from([0.8, 0.9]),
        "target_llms": st.sampled_from([5, 6]),
        "analytic": st.booleans(),
    }
)


@pytest.mark.long
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=_CONFIGS, second=_CONFIGS)
def test_resume_never_reuses_a_cell_of_other_settings(resp, resp_other, tmp_path, first, second):
    """Grid A, then grid B into the same folder (its config.json deleted): either B is
    refused, because a cell both grids share was computed with other settings, or the
    folder holds exactly what B alone writes into a fresh folder."""
    data = {"resp": resp, "resp_other": resp_other}
    root = Path(tmp_path) / f"case{np.random.default_rng().integers(1 << 62)}"

    def run(cfg, folder):
        cfg = dict(cfg)
        return evaluate_grid(data[cfg.pop("data")], GridConfig(**cfg), folder)

    run(first, root / "resumed")
    (root / "resumed" / "config.json").unlink()
    before = snapshot(root / "resumed")
    run(second, root / "fresh")
    shared = {p.name for p in (root / "resumed" / "cells").glob("*.json")} & {
        p.name for p in (root / "fresh" / "cells").glob("*.json")
    }
    same_settings = all(
        json.loads((root / "resumed" / "cells" / n).read_text()).get("settings")
        == json.loads((root / "fresh" / "cells" / n).read_text()).get("settings")
        for n in shared
    )
    if same_settings:
        report = run(second, root / "resumed")
        assert set(report.reused) <= {n.removesuffix(".json") for n in shared}
        for name in ("mdad.csv", "metrics.parquet", "config.json"):
            assert (root / "resumed" / name).read_bytes() == (root / "fresh" / name).read_bytes()
    else:
        with pytest.raises(UserInputError, match="computed with other settings"):
            run(second, root / "resumed")
        assert snapshot(root / "resumed") == before
    shutil.rmtree(root)


# --------------------------------------------------------------------------- threshold
@pytest.mark.parametrize("value", ["0.1", "0.3", "0.5", "1", "nan"])
def test_evaluate_refuses_threshold_outside_the_ranking_range(resp_file, tmp_path, capsys, value):
    args = ["evaluate", "--responses", str(resp_file), "--sizes", "4", "--source-llms", "6"]
    args += ["--target-llms", "6", "--runs", "1", "--output", str(tmp_path / "t")]
    assert main([*args, "--threshold", value]) == 2
    line = one_error_line(capsys)
    assert "--threshold" in line
    if 0 < float(value) < 1:  # in (0, 1) but not above 0.5: refused as a ranking threshold
        assert "above 0.5 and below 1" in line
    assert not (tmp_path / "t").exists()


def test_evaluate_threshold_is_the_one_mdad_and_plan_use(resp, tmp_path, capsys):
    """The library refuses it too, naming the parameter where the mdad command names its flag."""
    with pytest.raises(UserInputError) as lib:
        evaluate_grid(resp, _grid(threshold=0.1), tmp_path / "t")
    assert main(["mdad", "--posterior", str(POSTERIOR), "--threshold", "0.1", "--output",
                 str(tmp_path / "m")]) == 2  # fmt: skip
    line = one_error_line(capsys)
    assert "--threshold" in line and "above 0.5 and below 1, got '0.1'" in line
    assert str(lib.value) == "threshold must lie in (0.5, 1), got 0.1"
    report = evaluate_grid(resp, _grid(threshold=0.55, sizes=(4,)), tmp_path / "ok")
    assert report.mdad is not None and len(report.mdad) > 0


# --------------------------------------------------------------------------- progress
def test_progress_bar_does_not_draw_into_a_non_terminal(resp, tmp_path, capsys):
    evaluate_grid(resp, _grid(), tmp_path / "p", progress=True)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


# --------------------------------------------------------------------------- damaged folders
@pytest.fixture
def evaluated(resp, tmp_path) -> Path:
    out = tmp_path / "e"
    evaluate_grid(resp, _grid(analytic=False), out)
    return out


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_bytes(b""), "the cell file is empty"),
        (lambda p: p.write_text("{"), "not valid JSON"),
        (lambda p: p.write_text("[1, 2]"), "not a cell file"),
        (
            lambda p: p.write_text(
                json.dumps(
                    json.loads(p.read_text())
                    | {"mdad": [dict(json.loads(p.read_text())["mdad"][0], mdad="abc")]}
                )
            ),
            "mdad is 'abc', not a number",
        ),
    ],
)
def test_damaged_cell_file_is_named(resp, evaluated, damage, message):
    cell = evaluated / "cells" / "random__n4__s6.json"
    damage(cell)
    with pytest.raises(UserInputError) as err:
        evaluate_grid(resp, _grid(analytic=False), evaluated)
    text = str(err.value)
    assert str(cell) in text and message in text and "delete it" in text
    assert "\n" not in text


def test_damaged_pairs_file_is_named(resp, evaluated):
    pairs = evaluated / "pairs" / "random__n8__s6.parquet"
    pairs.write_bytes(b"")
    with pytest.raises(UserInputError, match=r"random__n8__s6.parquet: does not match.*delete"):
        evaluate_grid(resp, _grid(analytic=False), evaluated)


def test_damaged_config_json_is_named(resp, evaluated):
    (evaluated / "config.json").write_bytes(b"\xff\xfe")
    with pytest.raises(UserInputError, match=r"config.json: unreadable .*delete it to resume"):
        evaluate_grid(resp, _grid(analytic=False), evaluated)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("mdad.csv", "", "mdad.csv: the file is empty"),
        ("mdad.csv", "selector,n_items,mdad,mdad_lower,mdad_upper\n", "mdad.csv: the table has no"),
        (
            "mdad.csv",
            "selector,n_items,mdad,mdad_lower,mdad_upper\nrandom,10,abc,1,2\n",
            "mdad.csv: column mdad has a value that is not a number ('abc' on line 2)",
        ),
        (
            "mdad.csv",
            "selector,n_items,mdad,mdad_lower\nrandom,10,3,1\n",
            "mdad.csv: missing column(s) mdad_upper",
        ),
        (
            "curves.csv",
            "selector,n_items,gap,p_correct,p_correct_lower,p_correct_upper\nr,10,x,1,1,1\n",
            "curves.csv: column gap has a value that is not a number",
        ),
        ("curves.csv", "selector,n_items,gap\nr,10,1\n", "curves.csv: missing column(s)"),
        ("config.json", "{", "config.json: not valid JSON"),
    ],
)
def test_report_names_the_damaged_file(tmp_path, capsys, name, content, message):
    (tmp_path / "mdad.csv").write_text(
        "selector,n_items,mdad,mdad_lower,mdad_upper,ci_prob\nrandom,10,12.0,9.0,15.0,0.9\n"
    )
    (tmp_path / name).write_text(content)
    before = snapshot(tmp_path)
    assert main(["report", str(tmp_path), "--quiet"]) == 2
    line = one_error_line(capsys)
    assert message in line and "rerun the 'evaluate' or 'mdad' command" in line
    assert "plot_" not in line  # no internal function names
    assert snapshot(tmp_path) == before  # no figures/, no report


# --------------------------------------------------------------------------- all or nothing
def test_output_set_keeps_the_folder_on_failure_and_swaps_on_success(tmp_path):
    folder = tmp_path / "o"
    folder.mkdir()
    (folder / "a.txt").write_text("old a")
    (folder / "report.md").write_text("old report")
    (folder / "figures").mkdir()
    (folder / "figures" / "mdad_0.png").write_text("old fig")
    (folder / "keep.txt").write_text("not ours")
    before = snapshot(folder)
    with pytest.raises(RuntimeError), _outputs.output_set(folder, stale=_outputs.REPORT_FILES) as f:
        f.write("a.txt", lambda t: t.write_text("new a"))
        raise RuntimeError("boom")
    assert snapshot(folder) == before
    with _outputs.output_set(folder, stale=_outputs.REPORT_FILES) as f:
        f.write("a.txt", lambda t: t.write_text("new a"))
        f.write("sub/b.txt", lambda t: t.write_text("new b"))
    assert snapshot(folder) == {
        "a.txt": b"new a",
        "keep.txt": b"not ours",
        "sub": None,
        "sub/b.txt": b"new b",
    }


def test_output_set_into_a_new_folder_leaves_nothing_on_failure(tmp_path):
    with pytest.raises(RuntimeError), _outputs.output_set(tmp_path / "new") as f:
        f.write("a.txt", lambda t: t.write_text("a"))
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_output_set_rolls_back_a_failed_swap(tmp_path, monkeypatch):
    """A rename that fails during the swap itself puts every moved file back."""
    folder = tmp_path / "o"
    folder.mkdir()
    for name in ("a.txt", "b.txt", "report.md"):
        (folder / name).write_text(f"old {name}")
    before = snapshot(folder)
    real = _outputs._replace
    n_renames = 0
    for k in range(1, 20):
        calls = [0]

        def failing(src, dst, calls=calls, k=k):
            calls[0] += 1
            if calls[0] == k:
                raise Injected("injected rename failure")
            real(src, dst)

        monkeypatch.setattr(_outputs, "_replace", failing)
        try:
            with _outputs.output_set(folder, stale=_outputs.REPORT_FILES) as f:
                for name in ("a.txt", "b.txt", "c.txt"):
                    f.write(name, lambda t, name=name: t.write_text(f"new {name}"))
        except Injected:
            assert snapshot(folder) == before, k
            continue
        n_renames = calls[0]
        break
    assert n_renames == 3 + 3  # old a, b and report.md out; a, b, c in
    assert snapshot(folder) == {f"{n}.txt": f"new {n}.txt".encode() for n in "abc"}


@pytest.fixture(scope="module")
def curves_results():
    """Two real design_curves results (sizes 10 and 10, 25) from the shipped posterior."""
    from bayes_microbench.design import design_curves
    from bayes_microbench.posterior import read_posterior

    posterior = read_posterior(POSTERIOR)
    return posterior, {
        sizes: design_curves(posterior, sizes=sizes, max_draws=200, random_seed=0)
        for sizes in ((10,), (10, 25))
    }


def _mdad_command(monkeypatch, curves_results, sizes, folder) -> int:
    """The mdad command with its posterior and curves precomputed (the command's writes run)."""
    import bayes_microbench.design as design
    import bayes_microbench.posterior as posterior_layer

    posterior, results = curves_results
    monkeypatch.setattr(posterior_layer, "read_posterior", lambda path: posterior)
    monkeypatch.setattr(design, "design_curves", lambda *a, **kw: results[sizes])
    spec = ",".join(map(str, sizes))
    return main(["mdad", "--posterior", str(POSTERIOR), "--sizes", spec, "--output", str(folder),
                 "--quiet"])  # fmt: skip


def _mdad_writes() -> list[tuple[object, str]]:
    import xarray as xr

    return [(pd.DataFrame, "to_csv"), (xr.Dataset, "to_netcdf")]


def _report_writes() -> list[tuple[object, str]]:
    from matplotlib.figure import Figure

    return [(Figure, "savefig"), (Path, "write_text")]


def test_mdad_outputs_all_or_nothing(tmp_path, monkeypatch, curves_results, capsys):
    """Old folder: mdad (n = 10) and its report; new: mdad (n = 10, 25), which makes the
    report stale. Failing each write leaves the old folder; no failure gives the new one."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")  # reproducible SVG bytes
    old = tmp_path / "old"
    assert _mdad_command(monkeypatch, curves_results, (10,), old) == 0
    assert main(["report", str(old), "--quiet"]) == 0
    assert (old / "figures" / "mdad_0.png").exists()
    new = tmp_path / "new"
    shutil.copytree(old, new)
    assert _mdad_command(monkeypatch, curves_results, (10, 25), new) == 0
    expected_old, expected_new = snapshot(old), snapshot(new)
    assert set(expected_new) == {"mdad.csv", "curves.csv", "curves.nc"}  # the report is gone
    assert expected_new["mdad.csv"] != expected_old["mdad.csv"]
    for k in (1, 2, 3):
        folder = tmp_path / f"k{k}"
        shutil.copytree(old, folder)
        with monkeypatch.context() as m:
            calls = fail_on_call(m, k, _mdad_writes())
            assert _mdad_command(m, curves_results, (10, 25), folder) == 1
        assert len(calls) == k
        assert snapshot(folder) == expected_old, k
    capsys.readouterr()
    # into a folder that does not exist yet: a failure leaves no folder
    with monkeypatch.context() as m:
        fail_on_call(m, 3, _mdad_writes())  # curves.nc, the case
        assert _mdad_command(m, curves_results, (10, 25), tmp_path / "absent") == 1
    assert not (tmp_path / "absent").exists()


def test_report_outputs_all_or_nothing(tmp_path, monkeypatch):
    """Old folder: a report of one mdad.csv; new: the report of a changed mdad.csv."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    header = "selector,n_items,mdad,mdad_lower,mdad_upper,ci_prob\n"
    old = tmp_path / "old"
    old.mkdir()
    (old / "mdad.csv").write_text(header + "random,10,12.0,9.0,15.0,0.9\n")
    (old / "figures").mkdir()
    (old / "figures" / "mine.txt").write_text("a file of the user's")
    assert main(["report", str(old), "--quiet"]) == 0
    (old / "mdad.csv").write_text(header + "random,10,8.0,6.0,10.0,0.9\n")
    new = tmp_path / "new"
    shutil.copytree(old, new)
    assert main(["report", str(new), "--quiet"]) == 0
    expected_old, expected_new = snapshot(old), snapshot(new)
    assert expected_new["report.md"] != expected_old["report.md"]
    assert expected_new["figures/mdad_0.png"] != expected_old["figures/mdad_0.png"]
    assert expected_new["figures/mine.txt"] == b"a file of the user's"
    n_writes = 3  # mdad_0.png, mdad_0.svg, report.md
    for k in range(1, n_writes + 1):
        folder = tmp_path / f"k{k}"
        shutil.copytree(old, folder)
        with monkeypatch.context() as m:
            calls = fail_on_call(m, k, _report_writes())
            assert main(["report", str(folder), "--quiet"]) == 1
        assert len(calls) == k
        assert snapshot(folder) == expected_old, k
    # a failed first report leaves no empty figures/ behind
    first = tmp_path / "first"
    first.mkdir()
    (first / "mdad.csv").write_text(header + "random,10,12.0,9.0,15.0,0.9\n")
    with monkeypatch.context() as m:
        fail_on_call(m, 1, _report_writes())
        assert main(["report", str(first), "--quiet"]) == 1
    assert snapshot(first) == {"mdad.csv": (first / "mdad.csv").read_bytes()}


def test_evaluate_aggregates_all_or_nothing(resp, tmp_path, monkeypatch):
    """Old folder: a grid (n = 4) and its report; new: the grid with n = 8 added. Failing each
    write of the rerun leaves config.json, mdad.csv, metrics.parquet and the report exactly as
    they were (new cell files may stay: they are the resumable part); no failure: the new set."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    old = tmp_path / "old"
    evaluate_grid(resp, _grid(sizes=(4,), analytic=False), old)
    assert main(["report", str(old), "--quiet"]) == 0
    new = tmp_path / "new"
    shutil.copytree(old, new)
    writes = [(Path, "write_text"), (pd.DataFrame, "to_csv"), (pd.DataFrame, "to_parquet")]
    evaluate_grid(resp, _grid(sizes=(4, 8), analytic=False), new)
    skip = ("cells", "pairs")
    expected_old, expected_new = snapshot(old, skip=skip), snapshot(new, skip=skip)
    assert set(expected_new) == {"config.json", "mdad.csv", "metrics.parquet"}
    assert expected_new["mdad.csv"] != expected_old["mdad.csv"]
    k = 0
    while True:
        k += 1
        folder = tmp_path / f"k{k}"
        shutil.copytree(old, folder)
        with monkeypatch.context() as m:
            calls = fail_on_call(m, k, writes)
            try:
                evaluate_grid(resp, _grid(sizes=(4, 8), analytic=False), folder)
            except Injected:
                assert snapshot(folder, skip=skip) == expected_old, (k, calls[-1])
                continue
        assert snapshot(folder, skip=skip) == expected_new
        break
    assert k - 1 == 2 + 3  # the new cell's pairs and JSON, then the three aggregates


# ---------------------------------------------------------- output checked up front
@pytest.mark.parametrize("command", ["mdad", "evaluate"])
def test_output_under_a_file_is_refused_before_any_work(
    resp_file, tmp_path, capsys, monkeypatch, command
):
    import bayes_microbench.design as design
    import bayes_microbench.protocol as protocol

    def no_work(*args, **kwargs):
        raise AssertionError("computed before checking --output")

    monkeypatch.setattr(design, "design_curves", no_work)
    monkeypatch.setattr(protocol, "evaluate_grid", no_work)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = str(blocker / "out")
    if command == "mdad":
        argv = ["mdad", "--posterior", str(POSTERIOR), "--output", out]
    else:
        argv = [
            "evaluate",
            "--responses",
            str(resp_file),
            "--selectors",
            "random",
            "--sizes",
            "4",
            "--source-llms",
            "6",
            "--target-llms",
            "6",
            "--output",
            out,
        ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--output" in err[0] and "is a file" in err[0]


def test_target_llms_on_too_few_llms_says_no_value_works(tmp_path):
    tiny = Responses.from_arrays(
        np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]]),
        ["a", "b"],
        [f"q{i}" for i in range(4)],
    )
    with pytest.raises(UserInputError, match="no value works") as err:
        evaluate_grid(tiny, _grid(sizes=(2,), source_llms=(1,), target_llms=2), tmp_path / "o")
    assert "2 to 1" not in str(err.value) and "2 llms" in str(err.value)

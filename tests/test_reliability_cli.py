"""The command line's promise, property by property.

A user error (a bad flag value, an unknown or missing flag, a path that is
missing, a folder or under a regular file) prints exactly one line
``bayes-microbench: error: ...``, exits 2 and writes nothing; an internal error
prints one line naming ``--debug`` and exits 1; third-party log chatter stays
out of the user's way. Commands run in-process through ``cli.main`` (fast);
one subprocess test checks the whole process (no traceback) and one the
logging of a fresh process. Tests run as root here, which ignores permission
bits: "cannot write" cases use a path under a regular file or a folder given
as a file, and EACCES is simulated with ``monkeypatch``.
"""

from __future__ import annotations

import errno
import json
import logging
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayes_microbench import simulate_responses
from bayes_microbench._validate import check_int_range, check_output_path, plural, span
from bayes_microbench.cli import THIRD_PARTY_LOGGERS, main
from bayes_microbench.commands._common import MAX_COUNT, MAX_SEED
from bayes_microbench.exceptions import UserInputError
from bayes_microbench.io import save_responses

from .conftest import ROOT

POSTERIOR = ROOT / "models" / "gpqa-2pl.nc"
PREFIX = "bayes-microbench: error:"
SETTINGS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """A tiny responses file (12 llms x 10 items), a regular file and a folder, read-only use."""
    root = tmp_path_factory.mktemp("inputs")
    resp = simulate_responses("gpqa", n_llms=12, n_items=10, model="2pl", random_seed=0)
    responses = save_responses(resp, root / "bench.csv")[0]
    (root / "folder").mkdir()
    return {"responses": responses, "file": responses, "folder": root / "folder"}


@pytest.fixture
def workspace() -> Iterator[Path]:
    """An empty folder for outputs; the tests check it stays empty on a user error."""
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


def fresh_workspace() -> tempfile.TemporaryDirectory:
    """An empty output folder per hypothesis example (function fixtures are shared)."""
    return tempfile.TemporaryDirectory()


def one_error_line(capsys) -> str:
    """The single stderr line of a user error (fails on anything else)."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(PREFIX), err
    assert "Traceback" not in err
    return lines[0]


def written(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*"))


# -- numeric flags ---------------------------------------------------------------------------

# (command argv without the flag, with {R} responses, {P} posterior, {O} output folder), flags
# and their kind: ("int", minimum, maximum) or ("float", low, high, low included, high included)
SEED = ("int", 0, MAX_SEED)
COUNT = ("int", 1, MAX_COUNT)
PROB = ("float", 0.0, 1.0, False, False)
COMMANDS: dict[str, tuple[list[str], dict[str, tuple]]] = {
    "select": (
        ["select", "--responses", "{R}", "--n", "3", "--output", "{O}/s.json"],
        {"--n": COUNT, "--seed": SEED},
    ),
    "fit": (
        ["fit", "--responses", "{R}", "--method", "map", "--output", "{O}/p.nc"],
        {
            "--chains": COUNT,
            "--draws": COUNT,
            "--tune": ("int", 0, MAX_COUNT),
            "--thin": COUNT,
            "--dims": COUNT,
            "--n-options": ("int", 2, MAX_COUNT),
            "--seed": SEED,
        },
    ),
    "evaluate": (
        [
            "evaluate",
            "--responses",
            "{R}",
            "--sizes",
            "3",
            "--source-llms",
            "5",
            "--output",
            "{O}/ev",
        ],
        {
            "--runs": COUNT,
            "--target-llms": ("int", 2, MAX_COUNT),
            "--threshold": PROB,
            "--seed": SEED,
        },
    ),
    "mdad": (
        ["mdad", "--posterior", "{P}", "--sizes", "10", "--output", "{O}/md"],
        {"--threshold": PROB, "--ci-prob": PROB, "--max-draws": COUNT, "--seed": SEED},
    ),
    "plan": (
        ["plan", "--posterior", "{P}"],
        {
            "--delta": ("float", 0.0, 100.0, False, True),
            "--prob": PROB,
            "--ci-prob": PROB,
            "--max-draws": COUNT,
            "--seed": SEED,
        },
    ),
    "score": (
        ["score", "--posterior", "{P}", "--responses", "{R}"],
        {"--ci-prob": PROB, "--max-draws": COUNT, "--seed": SEED},
    ),
    "check": (["check", "{P}"], {"--max-draws": COUNT, "--seed": SEED}),
    "demo": (["demo", "--output", "{O}/demo"], {"--max-draws": COUNT, "--seed": SEED}),
    "import": (
        ["import", "lm-eval", "{O}/logs", "--output", "{O}/r.csv"],
        {
            "--threshold": ("float", float("-inf"), float("inf"), False, False),
            "--epoch": ("int", 0, MAX_COUNT),
        },
    ),
}
FLAGS = [(command, flag) for command, (_, flags) in COMMANDS.items() for flag in flags]

# text that no number type reads (letters only; "nan"/"inf" are refused by the float types too)
WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)


def bad_values(kind: tuple) -> st.SearchStrategy[str]:
    """Values the flag's type must refuse: out of range, not a number, empty, not finite."""
    common = st.one_of(WORDS, st.just(""), st.sampled_from(["nan", "inf", "-inf", " "]))
    if kind[0] == "int":
        _, low, high = kind
        return st.one_of(
            common,
            st.integers(max_value=low - 1).map(str),
            st.integers(min_value=high + 1, max_value=10**40).map(str),
            st.sampled_from(["2.5", "1e3", "0x10", "1,000"]),
        )
    _, low, high, low_ok, high_ok = kind
    outside = []
    if low > float("-inf"):
        outside.append(st.floats(max_value=low, exclude_max=low_ok, allow_nan=False))
    if high < float("inf"):
        outside.append(st.floats(min_value=high, exclude_min=high_ok, allow_nan=False))
    return st.one_of(common, *(s.map(repr) for s in outside))


def argv(template: list[str], paths: dict[str, str]) -> list[str]:
    return [a.format(**paths) for a in template]


@SETTINGS
@given(data=st.data())
def test_a_bad_numeric_flag_is_one_line_exit_2_and_writes_nothing(data, inputs, capsys):
    command, flag = data.draw(st.sampled_from(FLAGS), label="flag")
    template, flags = COMMANDS[command]
    value = data.draw(bad_values(flags[flag]), label="value")
    with fresh_workspace() as tmp:
        out = Path(tmp)
        paths = {"R": str(inputs["responses"]), "P": str(POSTERIOR), "O": tmp}
        capsys.readouterr()
        assert main([*argv(template, paths), flag, value]) == 2
        line = one_error_line(capsys)
        assert flag in line, line
        assert written(out) == []


@pytest.mark.parametrize("command", sorted(c for c, (_, f) in COMMANDS.items() if "--seed" in f))
def test_a_negative_seed_stops_every_command_before_it_writes(command, inputs, workspace, capsys):
    template, _ = COMMANDS[command]
    paths = {"R": str(inputs["responses"]), "P": str(POSTERIOR), "O": str(workspace)}
    assert main([*argv(template, paths), "--seed", "-1"]) == 2
    line = one_error_line(capsys)
    assert "--seed" in line and "'-1'" in line and str(MAX_SEED) in line
    assert written(workspace) == []  # evaluate left config.json here


@SETTINGS
@given(n=st.integers(min_value=1, max_value=25), seed=st.integers(0, MAX_SEED))
def test_select_succeeds_or_names_n_and_the_items_available(n, seed, inputs, capsys):
    with fresh_workspace() as tmp:
        out = Path(tmp) / "subset.json"
        capsys.readouterr()
        args = ["select", "--responses", str(inputs["responses"]), "--n", str(n)]
        code = main([*args, "--seed", str(seed), "--output", str(out), "--quiet"])
        if n <= 10:
            assert code == 0 and len(json.loads(out.read_text())["item_ids"]) == n
        else:
            assert code == 2
            line = one_error_line(capsys)
            assert f"--n: got {n}; choose 1 to 10 items" in line and "has 10 items" in line
            assert written(Path(tmp)) == []


def test_select_n_beyond_a_posteriors_items_speaks_of_n(workspace, capsys):
    out = workspace / "s.json"
    assert main(["select", "--posterior", str(POSTERIOR), "--n", "9999", "--output", str(out)]) == 2
    line = one_error_line(capsys)
    assert "--n: got 9999; choose 1 to 448 items" in line and "sizes" not in line
    assert written(workspace) == []


# -- unknown and missing flags ---------------------------------------------------------------

REQUIRED = {
    "select": ["--n", "--output"],
    "fit": ["--responses", "--output"],
    "evaluate": ["--responses", "--output"],
    "mdad": ["--posterior", "--output"],
    "plan": ["--posterior"],
    "score": ["--posterior", "--responses"],
    "import": ["--output"],
}


@SETTINGS
@given(command=st.sampled_from(sorted(COMMANDS)), name=WORDS)
def test_an_unknown_flag_is_one_line_exit_2(command, name, inputs, capsys):
    template, _ = COMMANDS[command]
    with fresh_workspace() as tmp:
        paths = {"R": str(inputs["responses"]), "P": str(POSTERIOR), "O": tmp}
        capsys.readouterr()
        assert main([*argv(template, paths), f"--zz-{name}"]) == 2
        line = one_error_line(capsys)
        assert f"--zz-{name}" in line and "unrecognized arguments" in line
        assert written(Path(tmp)) == []


@pytest.mark.parametrize(
    ("command", "flag"), [(c, f) for c, flags in REQUIRED.items() for f in flags]
)
def test_a_missing_required_flag_is_one_line_exit_2(command, flag, inputs, workspace, capsys):
    template, _ = COMMANDS[command]
    paths = {"R": str(inputs["responses"]), "P": str(POSTERIOR), "O": str(workspace)}
    args = argv(template, paths)
    if flag in args:
        k = args.index(flag)
        del args[k : k + 2]
    assert main(args) == 2
    line = one_error_line(capsys)
    assert flag in line and "required" in line
    assert written(workspace) == []


def test_no_command_and_an_unknown_command_are_one_line_exit_2(capsys):
    assert main([]) == 2
    assert "COMMAND" in one_error_line(capsys)
    assert main(["nope"]) == 2
    assert "invalid choice: 'nope'" in one_error_line(capsys)


# -- paths -----------------------------------------------------------------------------------

# (argv with {R} responses, {P} posterior, {O} output folder, {X} the bad path)
PATH_CASES = {
    "info PATH": ["info", "{X}"],
    "info --items": ["info", "{R}", "--items", "{X}"],
    "select --responses": ["select", "--responses", "{X}", "--n", "3", "--output", "{O}/s.json"],
    "select --items": [
        "select",
        "--responses",
        "{R}",
        "--items",
        "{X}",
        "--n",
        "3",
        "--output",
        "{O}/s.json",
    ],
    "select --output": ["select", "--responses", "{R}", "--n", "3", "--output", "{X}"],
    "fit --responses": ["fit", "--responses", "{X}", "--method", "map", "--output", "{O}/p.nc"],
    "fit --output": ["fit", "--responses", "{R}", "--method", "map", "--output", "{X}.nc"],
    "score --posterior": ["score", "--posterior", "{X}", "--responses", "{R}"],
    "score --responses": ["score", "--posterior", "{P}", "--responses", "{X}"],
    "plan --posterior": ["plan", "--posterior", "{X}"],
    "check POSTERIOR": ["check", "{X}"],
    "report DIR": ["report", "{X}"],
    "evaluate --responses": [
        "evaluate",
        "--responses",
        "{X}",
        "--sizes",
        "3",
        "--source-llms",
        "5",
        "--runs",
        "1",
        "--target-llms",
        "3",
        "--output",
        "{O}/ev",
    ],
    "import PATH": ["import", "lm-eval", "{X}", "--output", "{O}/r.csv"],
    "demo --output": ["demo", "--output", "{X}"],
}
# which kinds of bad path each case must refuse (an empty folder is fine as an output folder)
KINDS = {
    "missing": lambda inputs, out: out / "missing.csv",
    "folder": lambda inputs, out: inputs["folder"],
    "under a file": lambda inputs, out: inputs["file"] / "x.csv",
    "a file": lambda inputs, out: inputs["file"],
}
OUTPUTS = {"select --output": ["folder", "under a file"], "fit --output": ["under a file"]}
OUTPUTS["demo --output"] = ["a file", "under a file"]
INPUT_KINDS = ["missing", "folder", "under a file"]
PATH_PARAMS = [(case, kind) for case in PATH_CASES for kind in OUTPUTS.get(case, INPUT_KINDS)]


@pytest.mark.parametrize(("case", "kind"), PATH_PARAMS)
def test_a_bad_path_is_one_line_exit_2_and_writes_nothing(case, kind, inputs, workspace, capsys):
    bad = KINDS[kind](inputs, workspace)
    paths = {"R": str(inputs["responses"]), "P": str(POSTERIOR), "O": str(workspace), "X": str(bad)}
    before = written(inputs["folder"])
    assert main(argv(PATH_CASES[case], paths)) == 2
    line = one_error_line(capsys)
    assert str(bad).split("/x.csv")[0] in line, line  # the message names the path
    assert written(workspace) == [] and written(inputs["folder"]) == before


def test_an_unwritable_output_fails_before_any_work(inputs, workspace, monkeypatch, capsys):
    """EACCES (simulated: root ignores permission bits) is found before loading the responses."""
    import bayes_microbench.io as io_module

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(workspace))

    def not_reached(*args, **kwargs):
        raise AssertionError("the responses were loaded before the output was checked")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    monkeypatch.setattr(io_module, "load_responses", not_reached)
    out = workspace / "p.nc"
    assert main(["fit", "--responses", str(inputs["responses"]), "--output", str(out)]) == 2
    line = one_error_line(capsys)
    assert f"--output {out}: cannot write in {workspace}: permission denied" in line
    assert "choose a writable --output" in line


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (PermissionError(errno.EACCES, "Permission denied", "/data/b.csv"), "permission denied"),
        (IsADirectoryError(errno.EISDIR, "Is a directory", "/data/b.csv"), "is a folder"),
        (FileExistsError(errno.EEXIST, "File exists", "/data/b.csv"), "already exists"),
        (OSError(errno.EIO, "Input/output error", "/data/b.csv"), "input/output error"),
    ],
)
def test_an_os_error_about_a_path_is_a_user_error(error, words, monkeypatch, capsys):
    import bayes_microbench.commands.info as info

    def fail(args):
        raise error

    monkeypatch.setattr(info, "run", fail)
    assert main(["info", "/data/b.csv"]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"{PREFIX} /data/b.csv: {words}") and line.endswith(")")


def test_check_output_path_accepts_new_nested_outputs(workspace):
    assert check_output_path(workspace / "a" / "b" / "p.nc", "--output") == workspace / "a/b/p.nc"
    assert check_output_path(workspace / "new", "--output", folder=True) == workspace / "new"
    assert written(workspace) == []  # the probe file is removed, no folder is made


# -- internal errors and --debug -------------------------------------------------------------


@pytest.fixture
def broken_info(monkeypatch):
    import bayes_microbench.commands.info as info

    def boom(args):
        raise RuntimeError("boom")

    monkeypatch.setattr(info, "run", boom)
    monkeypatch.delenv("BAYES_MICROBENCH_DEBUG", raising=False)


def test_an_internal_error_is_one_line_naming_debug(broken_info, capsys):
    assert main(["info", "x.csv"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "internal error: RuntimeError: boom" in lines[0]
    assert "--debug" in lines[0]


@pytest.mark.parametrize("where", ["before", "after", "env"])
def test_debug_raises_with_the_traceback(where, broken_info, monkeypatch):
    args = {"before": ["--debug", "info", "x.csv"], "after": ["info", "x.csv", "--debug"]}
    if where == "env":
        monkeypatch.setenv("BAYES_MICROBENCH_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(args.get(where, ["info", "x.csv"]))


def test_debug_leaves_user_errors_one_line(inputs, capsys):
    assert main(["--debug", "info", str(inputs["folder"])]) == 2
    one_error_line(capsys)


def test_the_whole_process_gives_one_line_and_no_traceback(inputs, workspace):
    out = workspace / "s.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bayes_microbench",
            "select",
            "--responses",
            str(inputs["responses"]),
            "--n",
            "3",
            "--seed",
            "-1",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"{PREFIX} select: argument --seed:")
    assert written(workspace) == []


# -- noise -----------------------------------------------------------------------------------

_NOISY_COMMAND = """
import logging, sys
import bayes_microbench.commands.info as info
from bayes_microbench.cli import main

def run(args):
    logging.getLogger("pytensor.link.c.cmodule").info("g++ -march=native selected lines")
    logging.getLogger("jax._src.xla_bridge").info("Unable to initialize backend 'tpu'")
    logging.getLogger("pytensor.configparser").info("Suppressed KeyError")
    logging.getLogger("bayes_microbench.irt.model").info("nuts fit of 2pl took 1 s")
    logging.getLogger("pytensor.tensor.blas").warning("a real library warning")
    return 0

info.run = run
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("quiet", [False, True])
def test_third_party_info_is_hidden_and_the_packages_own_shows(quiet):
    """In a fresh process, as on the command line (pytest's own handlers mask it in-process)."""
    args = ["info", "x.csv", *(["--quiet"] if quiet else [])]
    proc = subprocess.run(
        [sys.executable, "-c", _NOISY_COMMAND, *args], capture_output=True, text=True, check=True
    )
    lines = proc.stderr.strip().splitlines()
    expected = [] if quiet else ["bayes-microbench: nuts fit of 2pl took 1 s"]
    expected.append("bayes-microbench: warning: a real library warning (pytensor.tensor.blas)")
    assert lines == expected, proc.stderr


def test_logging_levels_are_restored_after_a_command(broken_info, capsys):
    loggers = [logging.getLogger(n) for n in ("", "bayes_microbench", *THIRD_PARTY_LOGGERS)]
    before = [(lg.level, list(lg.handlers)) for lg in loggers]
    assert main(["info", "x.csv"]) == 1
    capsys.readouterr()
    assert [(lg.level, list(lg.handlers)) for lg in loggers] == before


@pytest.mark.parametrize("debug", [False, True])
def test_library_deprecations_show_only_with_debug(debug, monkeypatch, capsys):
    import bayes_microbench.commands.info as info

    def run(args):
        warnings.warn("`find_MAP` will return an InferenceData", FutureWarning, stacklevel=1)
        warnings.warn("2 llms dropped", UserWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(info, "run", run)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["info", "x.csv", *(["--debug"] if debug else [])]) == 0
    err = capsys.readouterr().err
    assert "bayes-microbench: warning: 2 llms dropped" in err
    assert ("find_MAP" in err) == debug


# -- message helpers -------------------------------------------------------------------------


def test_plural_and_span_agree_with_their_count():
    assert [plural(n, "item") for n in (0, 1, 2)] == ["0 items", "1 item", "2 items"]
    assert (
        plural(1, "target llm") == "1 target llm" and plural(3, "query", "queries") == "3 queries"
    )
    assert span(2, 2, "llm") == "exactly 2 llms" and span(1, 40, "item") == "1 to 40 items"
    assert span(1, 1, "item") == "exactly 1 item"


@given(
    value=st.integers(-5, 50),
    low=st.integers(0, 5),
    high=st.integers(-3, 40),
)
@settings(max_examples=60, deadline=None)
def test_check_int_range_never_offers_an_empty_range(value, low, high):
    context = f"the responses have {plural(max(high, 0), 'llm')}"
    try:
        got = check_int_range(value, "--x", low, high, noun="llm", context=context)
    except UserInputError as err:
        msg = str(err)
        assert msg.startswith(f"--x: got {value}") and context in msg
        if high < low:
            assert "no value works" in msg and f"{low} to" not in msg
        else:
            assert not low <= value <= high and span(low, high, "llm") in msg
    else:
        assert low <= got == value <= high

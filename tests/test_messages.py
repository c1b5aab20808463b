"""Library messages name parameters; the command line names its flags (docs/decisions/0026).

Each family of messages that names a parameter is checked from both sides: the
Python API's message names the parameter (``sizes``, ``max_draws=100``) and the
command's one error line names the flag (``--sizes``, ``--max-draws 100``), in the
same wording otherwise.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from bayes_microbench import Responses, save_responses, simulate_responses
from bayes_microbench._validate import check_positive_int, flag_names, param, step
from bayes_microbench.cli import PROG, build_parser, command_flags, main
from bayes_microbench.exceptions import UserInputError
from bayes_microbench.protocol import GridConfig, evaluate_grid

from .conftest import FIXTURES, ROOT

PACKAGE = ROOT / "bayes_microbench"
POSTERIOR = ROOT / "models" / "gpqa-2pl.nc"
#: The command layer, which names its own flags; build_models is a command line of its own.
COMMAND_LAYER = ("commands/", "cli.py", "irt/build_models.py")
#: A step quoted whole as a command line: flags inside it are that command's, for either reader.
QUOTED_COMMAND = re.compile(r"'(?:bayes-microbench|python -m|inspect|lm_eval)\b[^']*'")


def one_error_line(capsys) -> str:
    """The single stderr line of a user error, without the program's prefix."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    prefix = f"{PROG}: error: "
    assert lines[0].startswith(prefix), lines
    return lines[0].removeprefix(prefix)


# --------------------------------------------------------------------------- the mechanism
def test_param_and_step_spell_the_api_outside_the_cli_and_flags_inside():
    assert param("max_draws") == "max_draws"
    assert param("max_draws", 100) == "max_draws=100"
    assert param("item_key", "doc_hash") == "item_key='doc_hash'"
    assert param("threshold", np.float64(2.0)) == "threshold=2.0"
    assert param("epoch", "N", placeholder=True) == "epoch=N"
    assert step("bayes-microbench fit", "IRTModel.fit") == "IRTModel.fit"
    with flag_names({"max_draws": "--max-draws", "item_key": "--item-key", "epoch": "--epoch"}):
        assert param("max_draws") == "--max-draws"
        assert param("max_draws", 100) == "--max-draws 100"
        assert param("item_key", "doc_hash") == "--item-key doc_hash"
        assert param("epoch", "N", placeholder=True) == "--epoch N"
        # a name the running command has no flag for keeps the API's spelling
        assert param("n_grid", 11) == "n_grid=11"
        assert step("bayes-microbench fit", "IRTModel.fit") == "'bayes-microbench fit'"
        with flag_names({"threshold": "--prob"}):  # nested: merged over the outer flags
            assert (param("threshold"), param("max_draws")) == ("--prob", "--max-draws")
        assert param("threshold") == "threshold"
    # a name that is already a flag (as the commands pass theirs) is kept as given
    assert param("--sizes") == "--sizes" and param("--output", "/x") == "--output /x"
    assert param("max_draws") == "max_draws"  # the context is left as it was


def test_the_shared_checks_name_the_parameter_or_the_flag():
    with pytest.raises(UserInputError, match=r"^n_draws must be at least 2, got 1$"):
        check_positive_int(1, "n_draws", minimum=2)
    with flag_names({"n_draws": "--draws"}), pytest.raises(UserInputError) as err:
        check_positive_int(1, "n_draws", minimum=2)
    assert str(err.value) == "--draws must be at least 2, got 1"


def test_each_command_maps_the_parameters_it_sets_to_its_flags():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    imp = command_flags(commands["import"])
    assert imp["lm_filter"] == "--filter" and imp["item_key"] == "--item-key"
    assert command_flags(commands["score"])["max_draws"] == "--max-draws"
    assert "help" not in imp and "paths" not in imp  # --help and positionals are no parameter
    assert "max_draws" not in command_flags(commands["import"])


def _message_texts(tree: ast.Module):
    """Each string literal of a module that is not a docstring nor a step's command line.

    f-strings are joined with ``{}`` for their fields, so that a flag split over two
    pieces is still seen whole.
    """
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "step":
            skip.update(id(n) for arg in node.args for n in ast.walk(arg))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
            yield (
                node.lineno,
                "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values),
            )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def test_no_library_message_names_a_flag_of_the_command_line():
    """The grep of issue 24, kept: a flag outside a quoted command means a parameter."""
    flags: set[str] = set()
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for command in commands.values():
        flags |= set(command_flags(command).values())
    flags -= {"--debug"}
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, sorted(flags))) + r")(?![\w-])")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(COMMAND_LAYER):
            continue
        for lineno, text in _message_texts(ast.parse(path.read_text())):
            hit = pattern.search(QUOTED_COMMAND.sub("", text))
            if hit:
                found.append(f"{rel}:{lineno}: {hit.group(0)} in {text[:70]!r}")
    assert len(flags) > 40  # the scan looks for the real flags
    assert not found, "\n".join(found)


# --------------------------------------------------------------------------- evaluate's grid
@pytest.fixture(scope="module")
def resp() -> Responses:
    sim = simulate_responses("gpqa", n_llms=20, n_items=40, random_seed=5)
    return Responses.from_arrays(
        sim.values, sim.llms, sim.items, subtask=np.array(["a"] * 24 + ["b"] * 16)
    )


@pytest.fixture(scope="module")
def resp_file(resp, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "sim.csv"
    save_responses(resp, path)
    return path


def _grid(**kw) -> GridConfig:
    base = dict(selectors=("random",), sizes=(4,), source_llms=(6,), target_llms=6, runs=1)
    return GridConfig(**(base | kw))  # type: ignore[arg-type]


def _evaluate(resp_file: Path, out: Path, *extra: str) -> list[str]:
    base = ["evaluate", "--responses", str(resp_file), "--selectors", "random"]
    base += ["--source-llms", "6", "--target-llms", "6", "--runs", "1"]
    return [*base, "--output", str(out), *extra]


def test_grid_messages_name_sizes_and_target_group(resp, resp_file, tmp_path, capsys):
    with pytest.raises(UserInputError) as lib:
        evaluate_grid(resp, _grid(sizes=(4, 100)), tmp_path / "a")
    assert str(lib.value).startswith("sizes: [100] larger than the 20 seen items")
    assert main(_evaluate(resp_file, tmp_path / "b", "--sizes", "4,100")) == 2
    assert one_error_line(capsys) == f"--{lib.value}"

    absent = tmp_path / "groups.json"
    with pytest.raises(UserInputError) as lib:
        evaluate_grid(resp, _grid(target_group=f"{absent}:small"), tmp_path / "a")
    assert str(lib.value) == f"target_group: {absent}: no such file"
    cli = _evaluate(resp_file, tmp_path / "b", "--sizes", "4", "--target-group", f"{absent}:k")
    assert main(cli) == 2
    assert one_error_line(capsys) == f"--target-group: {absent}: no such file"
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_resume_messages_name_the_output(resp, resp_file, tmp_path, capsys):
    out = tmp_path / "e"
    evaluate_grid(resp, _grid(seed=1), out)
    with pytest.raises(UserInputError) as lib:
        evaluate_grid(resp, _grid(seed=2), out)
    rest = (
        ": holds results of a different configuration (differs in seed); use a new folder, "
        "or the same data and settings to resume"
    )
    assert str(lib.value) == f"output={str(out)!r}{rest}"
    assert main(_evaluate(resp_file, out, "--sizes", "4", "--seed", "2")) == 2
    assert one_error_line(capsys) == f"--output {out}{rest}"


# --------------------------------------------------------------------------- posterior draws
def _posterior_answers(tmp_path: Path) -> Path:
    """Two llms' answers to 30 of the shipped GPQA posterior's items, as a responses file."""
    from bayes_microbench.posterior import item_draws

    items = item_draws(POSTERIOR, max_draws=None).items[:30]
    values = np.random.default_rng(1).integers(0, 2, (2, 30)).astype(float)
    resp = Responses.from_arrays(values, ["m1", "m2"], items)
    return save_responses(resp, tmp_path / "new.csv")[0]


def test_few_draws_messages_name_max_draws(tmp_path, capsys):
    from bayes_microbench.posterior import item_draws

    with pytest.raises(UserInputError) as lib:
        item_draws(POSTERIOR, max_draws=10).check_interval_draws()
    assert str(lib.value).startswith("max_draws: only 10 of the ")
    assert str(lib.value).endswith("draw gives a point): use max_draws=100 or more")
    new = _posterior_answers(tmp_path)
    args = ["score", "--posterior", str(POSTERIOR), "--responses", str(new), "--max-draws", "10"]
    assert main(args) == 2
    line = one_error_line(capsys)
    assert line.startswith("--max-draws: only 10 of the ")
    assert line.endswith("draw gives a point): use --max-draws 100 or more")


def _full_posterior(path: Path, draws: int) -> Path:
    """A saved 3PL fit with abilities and its responses (what ``check`` reads)."""
    from bayes_microbench.irt.config import FORMAT_VERSION, IRTConfig

    rng = np.random.default_rng(0)
    llms, items = [f"l{i}" for i in range(4)], [f"q{i}" for i in range(6)]
    post = xr.Dataset(
        {
            "ability": (("chain", "draw", "llm"), rng.normal(size=(1, draws, 4))),
            "difficulty": (("chain", "draw", "item"), rng.normal(size=(1, draws, 6))),
            "discrimination": (("chain", "draw", "item"), np.ones((1, draws, 6))),
            "guessing": ("item", np.full(6, 0.25)),
        },
        coords={"llm": llms, "item": items},
    )
    observed = xr.Dataset(
        {"correct": (("llm", "item"), rng.integers(0, 2, (4, 6)).astype(float))},
        coords={"llm": llms, "item": items},
    )
    cfg = IRTConfig.from_dict({"model": "3pl", "n_options": 4})
    tree = xr.DataTree.from_dict({"posterior": post, "observed_data": observed})
    tree.attrs.update(
        config_json=cfg.to_json(), config_hash=cfg.hash(), format_version=FORMAT_VERSION
    )
    tree.to_netcdf(path)
    return path


def test_check_messages_name_max_draws(tmp_path, capsys):
    from bayes_microbench.irt import load_posterior
    from bayes_microbench.irt.checks import MIN_PPC_DRAWS, posterior_predictive_check

    path = _full_posterior(tmp_path / "full.nc", draws=200)
    fit = load_posterior(path)
    with pytest.raises(UserInputError) as lib:
        posterior_predictive_check(fit, max_draws=5)
    assert str(lib.value).startswith("max_draws=5: a posterior predictive check of ")
    assert str(lib.value).endswith(f"use max_draws={MIN_PPC_DRAWS} or more")
    assert main(["check", str(path), "--max-draws", "5", "--quiet"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("--max-draws 5: a posterior predictive check of ")
    assert line.endswith(f"use --max-draws {MIN_PPC_DRAWS} or more")


# --------------------------------------------------------------------------- the next step
def test_a_missing_posterior_names_the_step_in_each_readers_terms(tmp_path, capsys):
    from bayes_microbench.irt import load_posterior

    absent = tmp_path / "absent.nc"
    with pytest.raises(UserInputError) as lib:
        load_posterior(absent)
    assert str(lib.value) == (
        f"{absent}: no such file; fit a posterior with IRTModel(responses).fit().save('{absent}')"
    )
    args = ["score", "--posterior", str(absent), "--responses", str(_posterior_answers(tmp_path))]
    assert main(args) == 2
    assert one_error_line(capsys) == (
        f"{absent}: no such file; fit a posterior with 'bayes-microbench fit --output {absent}'"
    )


# --------------------------------------------------------------------------- importers
LM_OUT = FIXTURES / "lm_eval"


def _continuous_run(tmp_path: Path) -> Path:
    import json

    run = tmp_path / "m"
    run.mkdir()
    recs = [
        {"doc_id": 0, "doc_hash": "h0", "metrics": ["f1"], "f1": 0.75},
        {"doc_id": 1, "doc_hash": "h1", "metrics": ["f1"], "f1": 0.25},
    ]
    path = run / "samples_squad_mini_2024-01-01T00-00-00.000001.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run


def test_import_messages_name_threshold_metric_and_filter(tmp_path, capsys):
    from bayes_microbench.importers import import_responses

    run = _continuous_run(tmp_path)
    with pytest.raises(UserInputError) as lib:
        import_responses("lm-eval", [run], metric="f1", threshold=2)
    assert str(lib.value).startswith("threshold=2.0 is outside the values of metric 'f1'")
    base = ["import", "lm-eval", str(run), "--metric", "f1"]
    assert main([*base, "--threshold", "2", "--output", str(tmp_path / "o.csv")]) == 2
    assert one_error_line(capsys).startswith("--threshold 2 is outside the values of metric")

    with pytest.raises(UserInputError) as lib:
        import_responses("lm-eval", [run], metric="f1")
    assert str(lib.value).endswith(
        "pass threshold=T to count values >= T as correct, or choose a binary metric with metric"
    )
    assert main([*base, "--output", str(tmp_path / "o.csv")]) == 2
    assert one_error_line(capsys).endswith(
        "pass --threshold T to count values >= T as correct, "
        "or choose a binary metric with --metric"
    )

    with pytest.raises(UserInputError) as lib:
        import_responses("inspect", [FIXTURES / "inspect"], lm_filter="none")
    assert str(lib.value).startswith("lm_filter does not apply to inspect logs")
    args = ["import", "inspect", str(FIXTURES / "inspect"), "--filter", "none"]
    assert main([*args, "--output", str(tmp_path / "i.csv")]) == 2
    assert one_error_line(capsys).startswith("--filter does not apply to inspect logs")
    assert not list(tmp_path.glob("*.csv"))


# --------------------------------------------------------------------------- response files
def test_items_with_a_long_table_names_items(tmp_path, capsys):
    from bayes_microbench import load_responses

    sim = simulate_responses("gpqa", n_llms=3, n_items=10, random_seed=1)
    long = tmp_path / "long.parquet"
    save_responses(sim, long)
    items = tmp_path / "items.csv"
    items.write_text("item,subtask\n")
    with pytest.raises(UserInputError) as lib:
        load_responses(long, items=items)
    assert str(lib.value) == (
        f"{long}: items applies to a wide matrix; a long table carries its subtask column"
    )
    assert main(["info", str(long), "--items", str(items)]) == 2
    assert one_error_line(capsys) == (
        f"{long}: --items applies to a wide matrix; a long table carries its subtask column"
    )


# --------------------------------------------------------------------------- adaptive
def test_rank_goal_without_a_reference_names_the_parameter():
    """The ``adapt`` command refuses this itself (``--goal rank needs --reference FILE``)."""
    from bayes_microbench.adaptive import AdaptiveState, Settings
    from bayes_microbench.posterior import item_draws

    draws = item_draws(POSTERIOR, max_draws=100)
    with pytest.raises(
        UserInputError, match=r"^the rank goal needs a reference llm \(reference\)$"
    ):
        AdaptiveState(draws, settings=Settings(goal="rank"))
    with flag_names({"reference": "--reference"}), pytest.raises(UserInputError) as err:
        AdaptiveState(draws, settings=Settings(goal="rank"))
    assert str(err.value) == "the rank goal needs a reference llm (--reference)"

"""One interval default: every public signature and CLI flag takes it from ``_defaults``.

Why: two defaults (0.9 and 0.95) and literals in between gave intervals of different
probability for the same question (docs/decisions/0011-one-interval-default.md).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import pkgutil
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import bayes_microbench
from bayes_microbench import _defaults
from bayes_microbench._defaults import DEFAULT_CI_PROB, DEFAULT_RANK_PROB, STUDY_CI_PROB

#: Parameter names that hold an interval's probability (from a grep of the package's
#: signatures; ``alpha``/``q`` style names do not occur).
INTERVAL_NAMES = frozenset(
    {"ci_prob", "prob", "ci", "level", "ci_level", "credible", "interval_prob", "band_prob",
     "hdi_prob", "coverage", "coverage_prob"}
)  # fmt: skip
#: The study's functions: their interval is the study's 95% percentile bootstrap of MDAD.
STUDY_FUNCTIONS = frozenset(
    {
        "bayes_microbench.mdad.bin_shares",
        "bayes_microbench.mdad.mdad_from_pairs",
        "bayes_microbench.mdad.monotone_from_table",
        "bayes_microbench.mdad.monotone_mdad",
        "bayes_microbench.analytic.analytic_mdad",
    }
)
#: A ``prob`` that is a ranking threshold, not an interval: (function, parameter) ->
#: the constant's name it must default to.
THRESHOLDS = {("bayes_microbench.design.plan", "prob"): "DEFAULT_THRESHOLD"}
CONSTANTS = {"DEFAULT_CI_PROB": DEFAULT_CI_PROB, "STUDY_CI_PROB": STUDY_CI_PROB}


def _public_modules() -> Iterator[Any]:
    yield bayes_microbench
    for info in pkgutil.walk_packages(bayes_microbench.__path__, "bayes_microbench."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        try:
            yield importlib.import_module(info.name)
        except ImportError as err:  # an optional dependency that is not installed
            if getattr(err, "name", None) and str(err.name).startswith("bayes_microbench"):
                raise
            continue


def _callables() -> Iterator[tuple[str, Callable[..., Any], Any]]:
    """Every public function, class ``__init__`` and public method: name, callable, source.

    The source is the callable, or for a dataclass's generated ``__init__`` the class
    (whose fields spell the defaults).
    """
    for mod in _public_modules():
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            if inspect.isfunction(obj):
                yield f"{mod.__name__}.{name}", obj, obj
            elif inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr != "__init__":
                        continue
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if inspect.isfunction(member):
                        generated = member.__code__.co_filename.startswith("<")
                        source = obj if generated else member
                        yield f"{mod.__name__}.{name}.{attr}", member, source


def _default_spelling(source: Any, param: str) -> str | None:
    """How the source spells ``param``'s default: a name (``DEFAULT_CI_PROB``) or a literal."""
    try:
        src = textwrap.dedent(inspect.getsource(source))
    except (OSError, TypeError):
        return None
    tree = ast.parse(src)
    node = tree.body[0]
    if isinstance(node, ast.ClassDef):  # a dataclass's generated __init__: its field
        for stmt in node.body:
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and stmt.target.id == param
                and stmt.value is not None
            ):
                return ast.unparse(stmt.value)
        return None
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    args = node.args
    positional = args.posonlyargs + args.args
    pairs = list(
        zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)
    )
    pairs += [
        (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
    ]
    for arg, default in pairs:
        if arg.arg == param:
            return ast.unparse(default)
    return None


def _interval_params() -> list[tuple[str, str, float, str | None]]:
    out = []
    for qual, func, source in _callables():
        try:
            sig = inspect.signature(func)
        except (TypeError, ValueError):
            continue
        for p in sig.parameters.values():
            if p.name in INTERVAL_NAMES and isinstance(p.default, float):
                out.append((qual, p.name, float(p.default), _default_spelling(source, p.name)))
    return out


def test_the_two_constants():
    assert DEFAULT_CI_PROB == 0.9 and STUDY_CI_PROB == 0.95 and DEFAULT_RANK_PROB == 0.95
    from bayes_microbench import scoring

    assert scoring.DEFAULT_CI_PROB is _defaults.DEFAULT_CI_PROB  # still importable there
    assert _defaults.percent(DEFAULT_CI_PROB) == "90%"


def test_the_walk_finds_the_known_interval_parameters():
    found = {(q, n) for q, n, _, _ in _interval_params()}
    for known in (
        ("bayes_microbench.irt.checks.posterior_predictive_check", "ci_prob"),
        ("bayes_microbench.irt.validity.coverage_study", "ci_prob"),
        ("bayes_microbench.mdad.mdad_from_pairs", "ci_prob"),
        ("bayes_microbench.analytic.analytic_mdad", "ci_prob"),
    ):
        assert known in found


@pytest.mark.parametrize("qual,name,default,spelled", _interval_params())
def test_interval_defaults_come_from_the_constants(qual, name, default, spelled):
    if (qual, name) in THRESHOLDS:
        assert spelled == THRESHOLDS[qual, name], f"{qual}({name}=...) spelled {spelled}"
        return
    allowed = (
        {"DEFAULT_CI_PROB", "STUDY_CI_PROB"} if qual in STUDY_FUNCTIONS else {"DEFAULT_CI_PROB"}
    )
    assert spelled in allowed, (
        f"{qual}({name}={spelled}): default an interval probability to "
        f"{' or '.join(sorted(allowed))} from bayes_microbench._defaults"
    )
    assert default == CONSTANTS[spelled]


def test_study_functions_keep_the_study_probability():
    by_name = {q: d for q, n, d, _ in _interval_params() if n == "ci_prob"}
    for qual in STUDY_FUNCTIONS:
        assert by_name[qual] == STUDY_CI_PROB, qual


def _flags() -> Iterator[tuple[str, argparse.Action]]:
    from bayes_microbench.cli import build_parser

    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                for flag in sub._actions:
                    yield command, flag


def test_cli_interval_flags_default_to_the_constant():
    seen = []
    for command, action in _flags():
        if "--ci-prob" in action.option_strings:
            seen.append(command)
            assert action.default == DEFAULT_CI_PROB, command
            assert f"default {DEFAULT_CI_PROB:g}" in (action.help or ""), command
        if command == "adapt" and "--prob" in action.option_strings:
            assert action.default is None  # the goal decides: interval or rank certainty
            assert f"{DEFAULT_CI_PROB:g}" in action.help and f"{DEFAULT_RANK_PROB:g}" in action.help
    assert {"score", "plan", "mdad", "validate"} <= set(seen)

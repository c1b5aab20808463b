"""The ``bayes-microbench`` command line.

Each sub-command lives in :mod:`bayes_microbench.commands` as a module with
``register(subparsers)`` and ``run(args) -> int``; heavy imports (PyMC,
ArviZ) happen inside ``run`` so that frequentist commands start fast.

Exit codes: 0 success, 2 user error (one line on stderr), 1 internal error.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import NoReturn

from .exceptions import UserInputError

PROG = "bayes-microbench"

# Modules under bayes_microbench.commands, in the order of --help; each registers
# its own sub-command name ("import_" registers "import").
COMMAND_MODULES: tuple[str, ...] = (
    "demo",
    "info",
    "fit",
    "check",
    "evaluate",
    "import_",
    "report",
    "select",
    "score",
    "mdad",
    "plan",
)


class UsageError(UserInputError):
    """A bad flag or argument on the command line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(
        prog=PROG,
        description="Reliable LLM micro-benchmarking with hierarchical Bayesian IRT.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in COMMAND_MODULES:
        mod = importlib.import_module(f".commands.{module}", __package__)
        mod.register(sub)
    return parser


@contextlib.contextmanager
def _one_line_warnings(quiet: bool) -> Iterator[None]:
    """Show warnings as one ``bayes-microbench: warning: ...`` line while a command runs."""

    def show(message, category, filename, lineno, file=None, line=None):
        if quiet and not issubclass(category, UserWarning):
            return
        print(f"{PROG}: warning: {message}", file=sys.stderr)

    previous = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        args = parser.parse_args(args_list)
        quiet = bool(getattr(args, "quiet", False))
        logging.basicConfig(
            level=logging.WARNING if quiet else logging.INFO,
            format=f"{PROG}: %(message)s",
            stream=sys.stderr,
        )
        with _one_line_warnings(quiet):
            return int(args.func(args) or 0)
    except UserInputError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:
        if os.environ.get("BAYES_MICROBENCH_DEBUG"):
            raise
        print(
            f"{PROG}: internal error: {type(err).__name__}: {err} "
            "(set BAYES_MICROBENCH_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

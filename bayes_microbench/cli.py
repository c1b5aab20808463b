"""The ``bayes-microbench`` command line.

Each sub-command lives in :mod:`bayes_microbench.commands` as a module with
``register(subparsers)`` and ``run(args) -> int``; heavy imports (PyMC,
ArviZ) happen inside ``run`` so that frequentist commands start fast.

Exit codes: 0 success; 2 a user error (a bad flag, value or file, including a
path that cannot be read or written): one line ``bayes-microbench: error: ...``
on stderr, nothing written; 1 an internal error: one line that names
``--debug``, which (like ``BAYES_MICROBENCH_DEBUG=1``) shows the traceback.
Commands may add their own codes (``fit``: 3, an unconverged fit not written).

While a command runs, the package's own log lines show at INFO (WARNING with
``--quiet``) and third-party libraries' loggers only at WARNING, so that
PyTensor's, JAX's and the compilers' chatter stays out of the user's way.
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

from ._validate import flag_names, os_error_message
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
    "validate",
    "adapt",
    "models",
)


class UsageError(UserInputError):
    """A bad flag or argument on the command line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix(PROG).strip()
        where = f"{command}: " if command else ""
        raise UsageError(f"{where}{message} (see '{self.prog} --help')")


_DEBUG_HELP = "on an internal error, show the traceback (also BAYES_MICROBENCH_DEBUG=1)"

#: Loggers of the libraries the commands drive; kept at WARNING while a command runs.
THIRD_PARTY_LOGGERS: tuple[str, ...] = (
    "pytensor",
    "pymc",
    "jax",
    "jaxlib",
    "numba",
    "numpyro",
    "nutpie",
    "arviz",
    "arviz_base",
    "arviz_stats",
    "arviz_plots",
    "matplotlib",
    "h5py",
    "h5netcdf",
    "xarray",
    "absl",
    "PIL",
)

#: Warnings addressed to the developers of the code that triggers them, not to its users.
_DEVELOPER_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(
        prog=PROG,
        description="Reliable LLM micro-benchmarking with hierarchical Bayesian IRT.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in COMMAND_MODULES:
        mod = importlib.import_module(f".commands.{module}", __package__)
        mod.register(sub)
    for command in sub.choices.values():
        # also after the command; SUPPRESS keeps a --debug given before it
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP
        )
        command.set_defaults(flags_by_param=command_flags(command))
    return parser


def command_flags(command: argparse.ArgumentParser) -> dict[str, str]:
    """A sub-command's flags by the parameter they set: ``{"max_draws": "--max-draws", ...}``.

    :func:`main` runs the command inside :func:`~bayes_microbench._validate.flag_names`
    with them, so that a library message naming ``max_draws`` reads ``--max-draws``.
    Why from the parser: a message can then only name a flag the command has.
    """
    flags = {}
    for action in command._actions:  # argparse keeps no public list of its arguments
        long = [s for s in action.option_strings if s.startswith("--")]
        if long and action.dest not in ("help", argparse.SUPPRESS):
            flags[action.dest] = max(long, key=len)
    return flags


class _StderrHandler(logging.Handler):
    """Log records as ``bayes-microbench: [level: ]message`` on the current ``sys.stderr``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
            own = record.name == __package__ or record.name.startswith(f"{__package__}.")
            source = "" if own else f" ({record.name})"
            print(f"{PROG}: {level}{record.getMessage()}{source}", file=sys.stderr)
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def _command_logging(quiet: bool) -> Iterator[None]:
    """Log the package at INFO (WARNING if ``quiet``), everyone else at WARNING, to stderr.

    Why: with the root logger at INFO, a cold PyTensor compile cache relays
    dozens of lines of configuration and g++ flags to the user.
    """
    root = logging.getLogger()
    own = logging.getLogger(__package__)
    others = [logging.getLogger(name) for name in THIRD_PARTY_LOGGERS]
    saved = [(lg, lg.level) for lg in (root, own, *others)]
    handler = _StderrHandler()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    own.setLevel(logging.WARNING if quiet else logging.INFO)
    for lg in others:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.removeHandler(handler)
        for lg, level in saved:
            lg.setLevel(level)


@contextlib.contextmanager
def _one_line_warnings(quiet: bool, debug: bool = False) -> Iterator[None]:
    """Show warnings as one ``bayes-microbench: warning: ...`` line while a command runs.

    ``quiet`` keeps only :class:`UserWarning` (the package's own warnings derive
    from it); deprecation and future warnings show only with ``debug``.
    """

    def show(message, category, filename, lineno, file=None, line=None):
        if quiet and not issubclass(category, UserWarning):
            return
        if not debug and issubclass(category, _DEVELOPER_WARNINGS):
            return
        print(f"{PROG}: warning: {message}", file=sys.stderr)

    previous = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def _debug_env() -> bool:
    """Whether ``BAYES_MICROBENCH_DEBUG`` asks for tracebacks (set, and not ``0``)."""
    return os.environ.get("BAYES_MICROBENCH_DEBUG", "") not in ("", "0")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one sub-command; return the exit code (0 ok, 2 user error, 1 internal error).

    A :class:`UserInputError`, and an ``OSError`` about a path (a file that
    cannot be read, a folder given as a file, an output that cannot be
    written), print one line and return 2; anything else prints one line that
    names ``--debug`` and returns 1, or, with ``--debug`` or
    ``BAYES_MICROBENCH_DEBUG=1``, raises with its traceback.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = _debug_env()
    try:
        parser = build_parser()
        args = parser.parse_args(args_list)
        debug = debug or bool(getattr(args, "debug", False))
        quiet = bool(getattr(args, "quiet", False))
        flags = getattr(args, "flags_by_param", {})
        with _command_logging(quiet), _one_line_warnings(quiet, debug), flag_names(flags):
            return int(args.func(args) or 0)
    except UserInputError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as err:
        if debug:
            raise
        if err.filename is None:
            return _internal_error(err)
        print(f"{PROG}: error: {os_error_message(err)}", file=sys.stderr)
        return 2
    except Exception as err:
        if debug:
            raise
        return _internal_error(err)


def _internal_error(err: BaseException) -> int:
    """Print the one line of an internal error and return its exit code, 1."""
    print(
        f"{PROG}: internal error: {type(err).__name__}: {err} "
        f"(rerun with --debug for the traceback, and please report it)",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

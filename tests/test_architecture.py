"""ARCHITECTURE.md's module table against the package's module files.

Reads files only (no package import), so it stays fast.
"""

from __future__ import annotations

import re

from .conftest import ROOT

PACKAGE = ROOT / "bayes_microbench"


def _module_rows(text: str) -> list[str]:
    """The first cell of every row of the "## Modules" table."""
    section = text.split("## Modules", 1)[1].split("\n## ", 1)[0]
    cells = []
    for line in section.splitlines():
        if line.startswith("| `"):
            cells.append(line.split("|")[1])
    return cells


def named_modules(text: str) -> set[str]:
    """The module files the table names, as paths relative to the package.

    A cell lists backticked names: ``irt/io.py`` names a module, ``importers/``
    a package (its ``__init__.py``); a bare ``subtask.py`` after ``selectors/random.py``
    lies in the folder of the cell's first name.
    """
    names = set()
    for cell in _module_rows(text):
        folder = ""
        for i, token in enumerate(re.findall(r"`([^`]+)`", cell)):
            if i == 0 and "/" in token:
                folder = token.rsplit("/", 1)[0]
            path = token if "/" in token or not folder else f"{folder}/{token}"
            names.add(f"{path}__init__.py" if path.endswith("/") else path)
    return names


def module_files() -> set[str]:
    return {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")}


def test_parser_reads_folders_and_bare_names():
    text = (
        "## Modules\n\n| module | owns |\n|---|---|\n"
        "| `selectors/random.py`, `subtask.py` | x |\n| `importers/`, `_common.py` | y |\n"
        "| `cli.py` | z |\n\n## Outside\n| `models/` | w |\n"
    )
    assert named_modules(text) == {
        "selectors/random.py",
        "selectors/subtask.py",
        "importers/__init__.py",
        "importers/_common.py",
        "cli.py",
    }


def test_every_module_is_in_architecture_md():
    missing = module_files() - named_modules((ROOT / "ARCHITECTURE.md").read_text())
    assert not missing, f"module files not in ARCHITECTURE.md's table: {sorted(missing)}"


def test_every_module_architecture_md_names_exists():
    stale = named_modules((ROOT / "ARCHITECTURE.md").read_text()) - module_files()
    assert not stale, f"ARCHITECTURE.md names modules that do not exist: {sorted(stale)}"

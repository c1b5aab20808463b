"""Every ``docs/decisions/NNNN-*.md`` the package's code names exists, and the index lists it.

Reads files only (no package import). Why: docstrings say "Why: ... (docs/decisions/...)"
instead of carrying the record; a renamed or missing record would leave a dead link.
"""

from __future__ import annotations

import re

from .conftest import ROOT

LINK = re.compile(r"docs/decisions/(\d{4}-[a-z0-9-]+\.md)")


def test_decision_links_in_the_code_exist_and_are_indexed():
    index = (ROOT / "docs" / "README.md").read_text()
    named = set()
    for path in (ROOT / "bayes_microbench").rglob("*.py"):
        named |= set(LINK.findall(path.read_text()))
    assert named, "no decision links found"
    for name in sorted(named):
        assert (ROOT / "docs" / "decisions" / name).is_file(), name
        assert f"decisions/{name}" in index, f"{name} is not in docs/README.md's index"

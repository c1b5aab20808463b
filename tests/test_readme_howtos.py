"""Every how-to in README.md runs as written.

A runnable block is the fenced ``bash`` or ``python`` block right after a
``<!-- howto: NAME [long] -->`` comment (``long``: the
long tier, which ``.ci/run`` runs after the default suite); the blocks of one NAME run in order in
one fresh folder, which sits beside a link to the real ``../shared`` (so that
``../shared/data/...`` resolves as it does from the repository root), with the
project's ``.venv/bin`` first on PATH, ``models/`` found as in a checkout. Blocks
without the comment (harness commands that need a model) are not run. Each
how-to must exit 0, write no error line, and leave the files it says it writes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, SHARED_DATA

README = ROOT / "README.md"
MARK = re.compile(r"<!-- howto: (?P<name>[\w-]+)(?P<long> long)? -->\n```(?P<lang>\w+)\n")


def howtos() -> dict[str, tuple[bool, list[tuple[str, str]]]]:
    """README's runnable blocks by how-to name: (long, [(language, code), ...])."""
    text = README.read_text()
    found: dict[str, tuple[bool, list[tuple[str, str]]]] = {}
    for m in MARK.finditer(text):
        end = text.index("\n```", m.end() - 1)
        code = text[m.end() : end + 1]
        long, blocks = found.get(m["name"], (False, []))
        found[m["name"]] = (long or bool(m["long"]), [*blocks, (m["lang"], code)])
    return found


HOWTOS = howtos()
# what each how-to says it writes (checked after it ran)
WRITES = {
    "models": [],
    "design": ["subset.json", "mdad-subset/mdad.csv"],
    "harness": ["samples.json", "sample_ids.txt"],
    "score": ["mine.csv", "scores.json"],
    "notebook": ["mdad.png", "mdad.svg"],
    "compare": ["cmp/mdad.csv"],
    "adapt": ["next.json", "replay.json"],
    "validate": ["validation.json"],
}


def test_readme_has_the_howtos():
    assert set(HOWTOS) == set(WRITES), "a how-to added or removed: update WRITES"
    assert all(lang in ("bash", "python") for _, blocks in HOWTOS.values() for lang, _ in blocks)


def _params():
    for name, (long, _) in HOWTOS.items():
        marks = [pytest.mark.long] if long else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(_params()))
def test_howto_runs(name, tmp_path):
    if not SHARED_DATA.exists():
        pytest.skip("../shared/data is not present (the how-tos use its GPQA matrix)")
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)
    work = tmp_path / "work"
    work.mkdir()
    venv_bin = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "MPLBACKEND": "Agg",
    }
    env.pop("BAYES_MICROBENCH_MODELS", None)
    for lang, code in HOWTOS[name][1]:
        cmd = (
            ["bash", "-euo", "pipefail", "-c", code]
            if lang == "bash"
            else [sys.executable, "-c", code]
        )
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
        assert "error:" not in proc.stderr, proc.stderr[-3000:]
    for rel in WRITES[name]:
        assert (work / rel).is_file(), f"{name}: {rel} was not written"
    if name == "score":
        rows = json.loads((work / "scores.json").read_text())["llms"]
        assert [r["n_observed"] for r in rows] == [50, 50]
        assert all(r["accuracy_lower"] <= r["accuracy_mean"] <= r["accuracy_upper"] for r in rows)
    if name == "harness":
        ids = json.loads((work / "subset.json").read_text())["item_ids"]
        samples = json.loads((work / "samples.json").read_text())
        assert sum(len(v) for v in samples.values()) == len(ids) == 25
        assert len((work / "sample_ids.txt").read_text().strip().split(",")) == 25

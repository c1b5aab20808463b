"""Every notebook runs end to end in fast mode (BAYES_MICROBENCH_FAST=1)."""

from __future__ import annotations

import json

import pytest

from .conftest import ROOT, SHARED_DATA

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.long
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_in_fast_mode(path):
    pytest.importorskip("nbclient")
    meta = json.loads(path.read_text())["metadata"].get("bayes_microbench", {})
    for rel in meta.get("needs_shared_data", []):
        if not (SHARED_DATA / rel).exists():
            pytest.skip(f"{path.name} needs ../shared/data/{rel}, which is not present")
    import sys

    sys.path.insert(0, str(ROOT / "notebooks"))
    try:
        from run_notebooks import execute
    finally:
        sys.path.pop(0)
    execute(path, fast=True, save=False)


def test_notebooks_present():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart_gpqa.ipynb",
        "02_study_main_figure.ipynb",
        "03_design_for_gap.ipynb",
        "04_model_checking.ipynb",
        "05_similar_llms.ipynb",
    ]

"""Each IRT graph is the one recorded before the graph builders became blocks.

``tests/data/graph_reference.json`` was written by ``tests/data/make_graph_reference.py``
at the commit it names, with the code before the change of docs/decisions/0025; every
(model, prior, parameterization, missing, floors) case is rebuilt here and compared:
the same free variables and shapes, the same potentials, the same log density (1e-6
relative) and gradient norm at the same seeded point.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"
_spec = importlib.util.spec_from_file_location(
    "make_graph_reference", DATA / "make_graph_reference.py"
)
assert _spec is not None and _spec.loader is not None
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)

FIXTURE = json.loads((DATA / "graph_reference.json").read_text())


def test_the_fixture_covers_every_case():
    assert sorted(FIXTURE["cases"]) == sorted(ref.case_key(c) for c in ref.CASES)
    assert len(FIXTURE["commit"]) == 40


@pytest.mark.parametrize("case", ref.CASES, ids=ref.case_key)
def test_graph_is_the_recorded_one(case, caplog):
    caplog.set_level(logging.ERROR)  # the degenerate llms / items of the 70%-missing matrix
    want = FIXTURE["cases"][ref.case_key(case)]
    got = ref.record(case)
    assert got["free"] == want["free"]
    assert got["potentials"] == want["potentials"]
    assert got["dense"] == want["dense"]
    assert got["logp"] == pytest.approx(want["logp"], rel=1e-6)
    assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-6)

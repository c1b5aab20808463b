"""Every matrix in ../shared/data loads with the shape its README states."""

from __future__ import annotations

import pytest

from bayes_microbench import load_responses

from .conftest import shared_path

# (path, n_llms, n_items, n_subtasks or None, n_missing or None) from ../shared/data/README.md
SHAPES = [
    ("open-llm-leaderboard-v2/gpqa.csv", 420, 448, 1, 0),
    ("predictaboard-oll-v2/bbh.csv", 78, 5761, 24, None),
    ("predictaboard-oll-v2/mmlu-pro.csv", 43, 12032, 1, None),
    ("predictaboard-oll-v2/musr.csv", 78, 756, 3, None),
    ("predictaboard-oll-v2/math-hard.csv", 81, 1324, 7, None),
    ("predictaboard-oll-v2/ifeval.csv", 81, 541, None, None),
    ("tiger-lab/mmlu-pro.csv", 29, 12032, 14, 1713),
]
METABENCH = ["arc", "gsm8k", "mmlu", "truthfulqa", "winogrande"]


@pytest.mark.parametrize(("path", "n_llms", "n_items", "n_subtasks", "n_missing"), SHAPES)
def test_shared_matrix_shapes(path, n_llms, n_items, n_subtasks, n_missing):
    r = load_responses(shared_path(path))
    assert (r.n_llms, r.n_items) == (n_llms, n_items)
    if n_subtasks is not None:
        assert r.n_subtasks == n_subtasks
    if n_missing is not None:
        assert r.n_missing == n_missing
    assert 0.0 < r.mean_accuracy < 1.0


@pytest.mark.parametrize("name", METABENCH)
def test_metabench_matrices(name):
    r = load_responses(shared_path(f"metabench-oll-v1/{name}.csv"))
    assert 4278 <= r.n_llms <= 5476
    assert 100 <= r.n_items <= 249

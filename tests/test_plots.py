from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayes_microbench import plots
from bayes_microbench.exceptions import UserInputError


def _mdad_frame() -> pd.DataFrame:
    sizes = [10, 25, 50]
    return pd.DataFrame(
        {
            "selector": ["random"] * 3 + ["anchor-points"] * 3,
            "n_items": sizes * 2,
            "mdad": [20.0, 10.0, 6.0, 7.0, 6.0, 5.0],
            "mdad_lower": [15.0, 8.0, 5.0, 6.0, 5.0, 4.0],
            "mdad_upper": [25.0, 12.0, 7.0, 8.0, 7.0, 6.0],
            "reached": [False, True, True, True, True, True],
        }
    )


def test_each_plot_writes_png_and_svg(tmp_path):
    rng = np.random.default_rng(0)
    gaps = np.arange(0, 30.5, 0.5)
    curves = pd.concat(
        [
            pd.DataFrame(
                {
                    "n_items": n,
                    "gap": gaps,
                    "p_correct": p,
                    "p_correct_lower": p - 0.05,
                    "p_correct_upper": np.minimum(p + 0.05, 1),
                }
            )
            for n in (10, 50)
            for p in [0.5 + 0.5 * (1 - np.exp(-gaps / (30 / np.sqrt(n))))]
        ]
    )
    truth = rng.uniform(0.2, 0.5, 20)
    scores = pd.DataFrame(
        {
            "accuracy_mean": truth + 0.01,
            "accuracy_lower": truth - 0.05,
            "accuracy_upper": truth + 0.06,
            "true_accuracy": truth,
        }
    )
    items = pd.DataFrame(
        {
            "subtask": ["a"] * 10 + ["b"] * 10,
            "difficulty": rng.normal(size=20),
            "chosen": [True, False] * 10,
        }
    )
    figures = {
        "mdad": plots.plot_mdad_vs_n(_mdad_frame(), title="MDAD"),
        "curve": plots.plot_ranking_curve(curves),
        "estimates": plots.plot_estimates(scores),
        "selection": plots.plot_selection(items),
    }
    for name, fig in figures.items():
        written = plots.save_figure(fig, tmp_path / name)
        assert [p.suffix for p in written] == [".png", ".svg"]
        assert all(p.stat().st_size > 1000 for p in written)
    assert "<svg" in (tmp_path / "mdad.svg").read_text()[:500]


def test_missing_column_is_named():
    with pytest.raises(UserInputError, match=r"missing column\(s\) \['mdad_upper'\]"):
        plots.plot_mdad_vs_n(_mdad_frame().drop(columns="mdad_upper"))

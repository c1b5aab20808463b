from __future__ import annotations

import json

import pandas as pd

from bayes_microbench.cli import main


def _evaluate_folder(tmp_path):
    rows = []
    for split in ("seen", "unseen"):
        for sel, base in (("random", 20.0), ("anchor-points", 7.0)):
            for n in (10, 50):
                m = base * (10 / n) ** 0.5
                rows.append((sel, n, 300, split, m, m - 1, m + 1, True))
    cols = [
        "selector",
        "n_items",
        "n_source_llms",
        "split",
        "mdad",
        "mdad_lower",
        "mdad_upper",
        "reached",
    ]
    pd.DataFrame(rows, columns=cols).to_csv(tmp_path / "mdad.csv", index=False)
    (tmp_path / "config.json").write_text(json.dumps({"runs": 50, "seed": 0}))
    return tmp_path


def test_report_markdown_and_html(tmp_path, capsys):
    folder = _evaluate_folder(tmp_path)
    assert main(["report", str(folder), "--quiet"]) == 0
    text = (folder / "report.md").read_text()
    assert "## MDAD by selector and size (split = seen, source llms = 300)" in text
    assert "| random | 20.0 [19.0, 21.0] | 8.9 [7.9, 9.9] |" in text
    assert (folder / "figures" / "mdad_0.png").exists() and (
        folder / "figures" / "mdad_1.svg"
    ).exists()
    assert main(["report", str(folder), "--format", "html", "--quiet"]) == 0
    page = (folder / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<img src='figures/mdad_0.png'" in page


def test_report_on_folder_without_mdad_is_user_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no mdad.csv" in err[0]
    assert list(tmp_path.iterdir()) == []

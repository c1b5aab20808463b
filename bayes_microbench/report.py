"""Turn an ``evaluate`` or ``mdad`` output folder into a Markdown or HTML report.

The report is a list of blocks (headings, paragraphs, tables, figures)
rendered either to Markdown (``report.md``) or to a self-contained HTML page
(``report.html``) with the figures beside it in ``figures/``.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from .exceptions import UserInputError
from .io import write_atomic

Format = Literal["md", "html"]


@dataclass(frozen=True)
class Block:
    kind: Literal["h1", "h2", "p", "table", "figure"]
    text: str = ""
    table: pd.DataFrame | None = None


def _fmt_interval(row: pd.Series) -> str:
    if pd.isna(row["mdad"]):
        return "n/a"
    text = f"{row['mdad']:.1f} [{row['mdad_lower']:.1f}, {row['mdad_upper']:.1f}]"
    if "reached" in row.index and not bool(row["reached"]):
        text += " (not reached)"
    return text


def mdad_table(mdad: pd.DataFrame) -> pd.DataFrame:
    """Selectors as rows, sizes as columns, cells ``mdad [lower, upper]``."""
    cells = mdad.assign(cell=mdad.apply(_fmt_interval, axis=1))
    table = cells.pivot_table(
        index="selector", columns="n_items", values="cell", aggfunc="first", sort=False
    )
    table.columns = [f"n = {c}" for c in table.columns]
    return table.reset_index()


def _read_config(folder: Path) -> dict[str, object]:
    for name in ("config.json", "run_config.json", "configuration.json"):
        path = folder / name
        if path.exists():
            try:
                loaded = json.loads(path.read_text())
            except json.JSONDecodeError as err:
                raise UserInputError(
                    f"{path}: not valid JSON ({err.msg} at line {err.lineno})"
                ) from None
            return loaded if isinstance(loaded, dict) else {}
    return {}


def build_blocks(folder: Path, figures: Path) -> list[Block]:
    """Read the output folder, draw its figures into ``figures`` and return the report blocks."""
    from . import plots

    mdad = pd.read_csv(folder / "mdad.csv")
    config = _read_config(folder)
    kind = "evaluate" if "split" in mdad.columns else "mdad"
    blocks = [Block("h1", "Micro-benchmark reliability report")]
    if kind == "evaluate":
        blocks.append(
            Block(
                "p",
                "Empirical MDAD from the study's protocol: pairs of target llms binned by their "
                "seen-set accuracy gap (0.5-point bins); MDAD is the smallest gap at which the "
                "micro-benchmark ranks pairs correctly at the threshold rate, with its bootstrap interval.",
            )
        )
    else:
        blocks.append(
            Block(
                "p",
                "Bayesian MDAD from the posterior: P(correct ranking | gap, design) with a credible band; "
                "MDAD is the smallest gap at which the curve reaches the threshold.",
            )
        )
    if config:
        shown = {
            k: v for k, v in config.items() if not isinstance(v, dict | list) or len(str(v)) < 120
        }
        cfg = pd.DataFrame({"setting": list(shown), "value": [str(v) for v in shown.values()]})
        blocks += [Block("h2", "Configuration"), Block("table", table=cfg)]

    groups: list[tuple[str, pd.DataFrame]]
    if kind == "evaluate":
        groups = [
            (f"split = {split}, source llms = {n_src}", g)
            for (split, n_src), g in mdad.groupby(["split", "n_source_llms"], sort=True)
        ]
    else:
        groups = [("", mdad)]
    for i, (label, g) in enumerate(groups):
        title = "MDAD by selector and size" + (f" ({label})" if label else "")
        stem = figures / f"mdad_{i}"
        plots.save_figure(plots.plot_mdad_vs_n(g, title=title), stem)
        blocks += [
            Block("h2", title),
            Block("figure", f"{figures.name}/{stem.name}.png"),
            Block("table", table=mdad_table(g)),
        ]

    curves_path = folder / "curves.csv"
    if curves_path.exists():
        curves = pd.read_csv(curves_path)
        by = "selector" if "selector" in curves.columns else None
        for j, (name, g) in enumerate(curves.groupby(by) if by else [("", curves)]):
            stem = figures / f"curve_{j}"
            title = "P(correct ranking) vs gap" + (f": {name}" if name else "")
            plots.save_figure(plots.plot_ranking_curve(g, title=title), stem)
            blocks += [Block("h2", title), Block("figure", f"{figures.name}/{stem.name}.png")]
    return blocks


def _md_table(frame: pd.DataFrame) -> str:
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |")
    return "\n".join(lines)


def render(blocks: list[Block], fmt: Format) -> str:
    """Render the blocks as Markdown or as an HTML page."""
    out: list[str] = []
    if fmt == "md":
        for b in blocks:
            if b.kind == "h1":
                out.append(f"# {b.text}")
            elif b.kind == "h2":
                out.append(f"## {b.text}")
            elif b.kind == "p":
                out.append(b.text)
            elif b.kind == "table" and b.table is not None:
                out.append(_md_table(b.table))
            elif b.kind == "figure":
                out.append(f"![{Path(b.text).stem}]({b.text})")
        return "\n\n".join(out) + "\n"
    out.append(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>bayes_microbench report</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em}"
        "img{max-width:100%}</style></head><body>"
    )
    for b in blocks:
        if b.kind in ("h1", "h2", "p"):
            out.append(f"<{b.kind}>{html.escape(b.text)}</{b.kind}>")
        elif b.kind == "table" and b.table is not None:
            out.append(b.table.to_html(index=False, na_rep="", border=0))
        elif b.kind == "figure":
            out.append(f"<img src='{html.escape(b.text)}' alt='{html.escape(Path(b.text).stem)}'>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_report(folder: str | Path, fmt: Format = "md") -> Path:
    """Write ``report.md`` or ``report.html`` (and ``figures/``) into ``folder``."""
    root = Path(folder)
    if not root.is_dir():
        raise UserInputError(
            f"{root}: no such folder; pass the --output folder of 'evaluate' or 'mdad'"
        )
    if fmt not in ("md", "html"):
        raise UserInputError(f"report format must be 'md' or 'html', got {fmt!r}")
    if not (root / "mdad.csv").exists():
        raise UserInputError(
            f"{root}: no mdad.csv here; pass the --output folder of 'bayes-microbench evaluate' or 'mdad'"
        )
    figures = root / "figures"
    figures.mkdir(exist_ok=True)
    text = render(build_blocks(root, figures), fmt)
    return write_atomic(root / f"report.{fmt}", lambda tmp: tmp.write_text(text))

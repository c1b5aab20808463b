"""Turn an ``evaluate`` or ``mdad`` output folder into a Markdown or HTML report.

The report is a list of blocks (headings, paragraphs, tables, figures)
rendered either to Markdown (``report.md``) or to a self-contained HTML page
(``report.html``) with the figures beside it in ``figures/``. The report and
its figures are written all or nothing (:mod:`bayes_microbench._outputs`).
A damaged input (an empty or non-numeric ``mdad.csv`` or ``curves.csv``, an
unreadable ``config.json``) is a user error naming the file and what to do.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from .exceptions import UserInputError

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


MDAD_REQUIRED = ("selector", "n_items", "mdad", "mdad_lower", "mdad_upper")
CURVES_REQUIRED = ("n_items", "gap", "p_correct", "p_correct_lower", "p_correct_upper")


def _rewrite_hint(folder: Path) -> str:
    return (
        f"rerun the 'evaluate' or 'mdad' command that wrote it, with {folder} as its output "
        "folder (evaluate rewrites it from its cells)"
    )


def read_output_table(
    path: Path, required: tuple[str, ...], numeric: tuple[str, ...]
) -> pd.DataFrame:
    """A CSV table of an output folder, checked: readable, not empty, columns, numbers.

    Parameters
    ----------
    path
        The file (``mdad.csv`` or ``curves.csv``).
    required
        Columns it must have.
    numeric
        Columns whose non-empty values must be numbers (``inf`` allowed).

    Returns
    -------
    pandas.DataFrame

    Why: a damaged file must be named with what is wrong, not fail inside a plot.
    """
    hint = _rewrite_hint(path.parent)
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise UserInputError(f"{path}: the file is empty; {hint}") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as err:
        reason = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise UserInputError(f"{path}: not a readable CSV table ({reason}); {hint}") from None
    absent = [c for c in required if c not in frame.columns]
    if absent:
        raise UserInputError(
            f"{path}: missing column(s) {', '.join(absent)} (it has "
            f"{', '.join(map(str, frame.columns))}); {hint}"
        )
    if frame.empty:
        raise UserInputError(f"{path}: the table has no rows; {hint}")
    for col in numeric:
        if col not in frame.columns:
            continue
        values = pd.to_numeric(frame[col], errors="coerce")
        bad = frame[col][values.isna() & frame[col].notna()]
        if len(bad):
            row = int(bad.index[0]) + 2  # the header is line 1
            raise UserInputError(
                f"{path}: column {col} has a value that is not a number ({bad.iloc[0]!r} on "
                f"line {row}); {hint}"
            )
        if frame[col].dtype == object:
            frame[col] = values
    if "reached" in frame.columns:
        text = frame["reached"].astype(str).str.lower()
        if not text.isin(["true", "false"]).all():
            bad_value = frame["reached"][~text.isin(["true", "false"])].iloc[0]
            raise UserInputError(
                f"{path}: column reached must be True or False, found {bad_value!r}; {hint}"
            )
        frame["reached"] = text == "true"
    return frame


def _read_config(folder: Path) -> dict[str, object]:
    for name in ("config.json", "run_config.json", "configuration.json"):
        path = folder / name
        if path.exists():
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as err:
                raise UserInputError(
                    f"{path}: not valid JSON ({err.msg} at line {err.lineno}); "
                    f"{_rewrite_hint(folder)}"
                ) from None
            except (UnicodeDecodeError, OSError) as err:
                raise UserInputError(
                    f"{path}: cannot be read ({err}); {_rewrite_hint(folder)}"
                ) from None
            return loaded if isinstance(loaded, dict) else {}
    return {}


def build_blocks(folder: Path, figures: Path) -> list[Block]:
    """Read the output folder, draw its figures into ``figures`` and return the report blocks."""
    from . import plots

    mdad = read_output_table(
        folder / "mdad.csv", MDAD_REQUIRED, ("n_items", "n_source_llms", *MDAD_REQUIRED[2:])
    )
    config = _read_config(folder)
    kind = "evaluate" if "split" in mdad.columns else "mdad"
    if kind == "evaluate" and "n_source_llms" not in mdad.columns:
        raise UserInputError(
            f"{folder / 'mdad.csv'}: has a split column but no n_source_llms (an evaluate "
            f"mdad.csv has both); {_rewrite_hint(folder)}"
        )
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
        curves = read_output_table(curves_path, CURVES_REQUIRED, CURVES_REQUIRED)
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
    """Write ``report.md`` or ``report.html`` and its figures into ``folder``, all or nothing.

    Figures go to ``figures/mdad_*`` and ``figures/curve_*``; earlier figures of
    those names that this report does not draw are removed with the swap, other
    files in ``figures/`` are kept. Returns the report's path.
    """
    root = Path(folder)
    if not root.is_dir():
        raise UserInputError(
            f"{root}: no such folder; pass the output folder of 'evaluate' or 'mdad'"
        )
    if fmt not in ("md", "html"):
        raise UserInputError(f"report format must be 'md' or 'html', got {fmt!r}")
    if not (root / "mdad.csv").exists():
        raise UserInputError(
            f"{root}: no mdad.csv here; pass the output folder of 'bayes-microbench evaluate' "
            "or 'mdad'"
        )
    from ._outputs import output_set

    with output_set(root, stale=("figures/mdad_[0-9]*", "figures/curve_[0-9]*")) as files:
        figures = files.path("figures")
        figures.mkdir()
        text = render(build_blocks(root, figures), fmt)
        files.write(f"report.{fmt}", lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return root / f"report.{fmt}"

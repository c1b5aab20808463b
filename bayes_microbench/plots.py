"""Figures: MDAD vs n, P(correct ranking) vs gap, estimates vs truth, chosen items.

Every function takes a tidy :class:`pandas.DataFrame` (the CSV files the
commands write), draws on a new or given matplotlib ``Axes`` and returns the
figure; :func:`save_figure` writes PNG and SVG side by side. matplotlib is
imported lazily with the non-interactive ``Agg`` back end, so plotting works
on machines without a screen.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .exceptions import UserInputError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _pyplot() -> Any:
    import matplotlib

    if not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _axes(ax: Axes | None, figsize: tuple[float, float] = (6.4, 4.2)) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax  # type: ignore[return-value]
    plt = _pyplot()
    fig, new_ax = plt.subplots(figsize=figsize, layout="constrained")
    return fig, new_ax


def _finish(fig: Figure, ax: Axes, title: str | None, grid_axis: str = "both") -> Figure:
    """The common last touches: light grid, frameless small legend, optional title."""
    ax.grid(alpha=0.3, axis=grid_axis)  # type: ignore[arg-type]
    ax.legend(fontsize="small", frameon=False)
    if title:
        ax.set_title(title)
    return fig


def _require(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    absent = [c for c in columns if c not in frame.columns]
    if absent:
        raise UserInputError(f"{what}: missing column(s) {absent}; have {list(frame.columns)}")


def plot_mdad_vs_n(
    mdad: pd.DataFrame,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    log_x: bool = True,
) -> Figure:
    """MDAD (points) against the number of items, one line per selector, with interval bands.

    ``mdad`` has columns ``selector, n_items, mdad, mdad_lower, mdad_upper``
    (the ``mdad.csv`` of ``evaluate`` or ``mdad``); an optional ``reached``
    column marks sizes where no gap reached the threshold (drawn hollow).
    Filter other columns (``split``, ``n_source_llms``) before calling.
    """
    _require(mdad, ["selector", "n_items", "mdad", "mdad_lower", "mdad_upper"], "plot_mdad_vs_n")
    fig, ax = _axes(ax)
    finite = mdad[["mdad", "mdad_lower", "mdad_upper"]].to_numpy(dtype=float)
    finite = finite[np.isfinite(finite)]
    cap = max(30.0, float(finite.max())) if finite.size else 30.0
    for selector, group in mdad.groupby("selector", sort=False):
        g = group.sort_values("n_items")
        x = g["n_items"].to_numpy(dtype=float)
        # an interval open above (not reached within the gaps studied) is drawn up to the cap
        upper = np.nan_to_num(g["mdad_upper"].to_numpy(dtype=float), nan=cap, posinf=cap)
        point = np.minimum(g["mdad"].to_numpy(dtype=float), cap)
        line = ax.plot(x, point, marker="o", label=str(selector))[0]
        ax.fill_between(x, g["mdad_lower"], upper, color=line.get_color(), alpha=0.18, lw=0)
        if "reached" in g.columns:
            not_reached = ~g["reached"].astype(bool).to_numpy()
            if not_reached.any():
                ax.plot(
                    x[not_reached],
                    g["mdad"].to_numpy()[not_reached],
                    ls="none",
                    marker="o",
                    mfc="white",
                    color=line.get_color(),
                )
    if log_x:
        ax.set_xscale("log")
        ticks = sorted(mdad["n_items"].unique())
        ax.set_xticks(ticks, [str(int(t)) for t in ticks])
        ax.minorticks_off()
    ax.set_xlabel("items in the micro-benchmark")
    ax.set_ylabel("MDAD (accuracy points)")
    ax.set_ylim(bottom=0)
    return _finish(fig, ax, title)


def plot_ranking_curve(
    curves: pd.DataFrame,
    *,
    ax: Axes | None = None,
    threshold: float | None = 0.8,
    group: str = "n_items",
    title: str | None = None,
) -> Figure:
    """P(correct ranking) against the accuracy gap, one line per ``group`` value, with bands.

    ``curves`` has columns ``gap`` (points), ``p_correct``, ``p_correct_lower``,
    ``p_correct_upper`` (the ``curves.csv`` of ``mdad``) and the grouping
    column (default ``n_items``).
    """
    _require(
        curves,
        ["gap", "p_correct", "p_correct_lower", "p_correct_upper", group],
        "plot_ranking_curve",
    )
    fig, ax = _axes(ax)
    for key, g in curves.groupby(group, sort=True):
        g = g.sort_values("gap")
        line = ax.plot(g["gap"], g["p_correct"], label=f"{group.replace('_', ' ')} = {key}")[0]
        ax.fill_between(
            g["gap"],
            g["p_correct_lower"],
            g["p_correct_upper"],
            color=line.get_color(),
            alpha=0.18,
            lw=0,
        )
    if threshold is not None:
        ax.axhline(threshold, color="0.4", ls="--", lw=1)
    ax.set_xlabel("full-benchmark accuracy gap (points)")
    ax.set_ylabel("P(subset ranks the pair correctly)")
    ax.set_ylim(0.45, 1.01)
    return _finish(fig, ax, title)


def plot_estimates(
    scores: pd.DataFrame,
    *,
    truth: str = "true_accuracy",
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Estimated against true accuracy, with each llm's interval as an error bar.

    ``scores`` has columns ``accuracy_mean, accuracy_lower, accuracy_upper``
    (the output of ``score``) and the true accuracy column ``truth``.
    """
    _require(scores, ["accuracy_mean", "accuracy_lower", "accuracy_upper", truth], "plot_estimates")
    fig, ax = _axes(ax, figsize=(5.2, 5.0))
    mean = scores["accuracy_mean"].to_numpy()
    err = np.vstack(
        [mean - scores["accuracy_lower"].to_numpy(), scores["accuracy_upper"].to_numpy() - mean]
    )
    t = scores[truth].to_numpy()
    inside = (scores["accuracy_lower"] <= t) & (t <= scores["accuracy_upper"])
    ax.errorbar(
        t,
        mean,
        yerr=err,
        fmt="o",
        ms=3,
        lw=0.8,
        alpha=0.8,
        label=f"interval covers truth: {inside.mean():.0%}",
    )
    lo = float(min(t.min(), scores["accuracy_lower"].min()))
    hi = float(max(t.max(), scores["accuracy_upper"].max()))
    ax.plot([lo, hi], [lo, hi], color="0.4", ls="--", lw=1)
    ax.set_xlabel("true full-benchmark accuracy")
    ax.set_ylabel("estimate from the subset")
    return _finish(fig, ax, title)


def plot_selection(
    items: pd.DataFrame,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    ylabel: str = "difficulty",
) -> Figure:
    """Which items a selector chose: difficulty by subtask, chosen items highlighted.

    ``items`` has columns ``item, subtask, difficulty, chosen`` (bool); the
    difficulty may be an IRT difficulty or 1 - proportion correct.
    """
    _require(items, ["subtask", "difficulty", "chosen"], "plot_selection")
    fig, ax = _axes(ax, figsize=(7.0, 4.2))
    subtasks = list(pd.unique(items["subtask"]))
    pos = {s: i for i, s in enumerate(subtasks)}
    rng = np.random.default_rng(0)  # jitter only; fixed so the figure is reproducible
    x = items["subtask"].map(pos).to_numpy(dtype=float) + rng.uniform(-0.3, 0.3, len(items))
    chosen = items["chosen"].astype(bool).to_numpy()
    d = items["difficulty"].to_numpy()
    ax.scatter(x[~chosen], d[~chosen], s=6, color="0.75", label="not chosen")
    ax.scatter(x[chosen], d[chosen], s=18, color="C3", label=f"chosen ({chosen.sum()})")
    ax.set_xticks(
        range(len(subtasks)),
        subtasks,
        rotation=45 if len(subtasks) > 4 else 0,
        ha="right" if len(subtasks) > 4 else "center",
        fontsize="small",
    )
    ax.set_ylabel(ylabel)
    return _finish(fig, ax, title, grid_axis="y")


def save_figure(
    fig: Figure, stem: str | os.PathLike[str], formats: Sequence[str] = ("png", "svg")
) -> list[Path]:
    """Write ``fig`` as ``stem.png`` and ``stem.svg`` (atomically) and close it."""
    from .io import atomic_path

    paths = []
    for fmt in formats:
        target = Path(f"{stem}.{fmt}")
        with atomic_path(target) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150)
        paths.append(target)
    _pyplot().close(fig)
    return paths

"""Acceptance run: the study's GPQA MDAD table, reproduced, and the 7B/8B-instruct case study.

Runs ``evaluate`` (in-process, resumable) on ``../shared/data/open-llm-leaderboard-v2/gpqa.csv``
with 50 runs, 50 random targets, 300 source llms, sizes 10/25/50/100/200 and every
registered selector, then the same protocol with the fixed target groups
``7b_instruct`` and ``8b_instruct``. Records the tables in ``results/reproduce_gpqa.json``.

Usage::

    .venv/bin/python benchmarks/reproduce_gpqa.py [--out out/reproduce_gpqa] [--selectors a,b]
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import write_section  # noqa: E402

from bayes_microbench import load_responses  # noqa: E402
from bayes_microbench.protocol import GridConfig, evaluate_grid  # noqa: E402
from bayes_microbench.selectors import SELECTORS  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "open-llm-leaderboard-v2"
SIZES = (10, 25, 50, 100, 200)

# The study's GPQA MDAD (points; seen split; 300 source llms), as quoted in issue 3.
STUDY: dict[str, list[float]] = {
    "random": [25.5, 12.0, 7.5, 4.0, 1.5],
    "random-subtask-equal": [16.0, 12.0, 8.0, 4.0, 1.5],
    "diversity": [15.5, 9.0, 6.0, 4.5, 2.0],
    "stratified-confidence": [19.0, 9.5, 6.5, 4.0, 1.0],
    "anchor-points": [6.5, 5.5, 5.0, 4.5, 3.5],
    "tinybenchmarks": [15.5, 9.5, 7.0, 4.5, 1.5],
}
STUDY_RANDOM_CI = [(18.0, 33.0), (10.5, 13.5), (6.5, 8.5), (3.5, 4.5), (1.0, 2.0)]


def fmt(row: pd.Series) -> str:
    if not row["reached"]:
        return "not reached"
    lo = "open" if math.isnan(row["mdad_lower"]) else f"{row['mdad_lower']:.1f}"
    hi = "open" if math.isnan(row["mdad_upper"]) else f"{row['mdad_upper']:.1f}"
    return f"{row['mdad']:.1f} [{lo}, {hi}]"


def num(value: float, spec: str) -> str:
    return "-" if value is None or math.isnan(value) else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(ROOT / "out" / "reproduce_gpqa"))
    parser.add_argument("--selectors", default=",".join(SELECTORS))
    parser.add_argument("--case-selectors", default=None, help="default: same as --selectors")
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    selectors = tuple(s for s in args.selectors.split(",") if s)
    case_selectors = (
        tuple(s for s in args.case_selectors.split(",") if s) if args.case_selectors else selectors
    )
    out = Path(args.out)
    resp = load_responses(DATA / "gpqa.csv")

    t0 = time.perf_counter()
    main_cfg = GridConfig(
        selectors=selectors, sizes=SIZES, source_llms=(300,), target_llms=50, runs=args.runs, seed=0
    )
    report = evaluate_grid(resp, main_cfg, out / "main", progress=sys.stderr.isatty())
    t_main = time.perf_counter() - t0
    assert report.mdad is not None and report.metrics is not None
    seen = report.mdad[report.mdad["split"] == "seen"]

    lines = [
        f"Data: `gpqa.csv` ({resp.n_llms} llms x {resp.n_items} items, 224 seen per run), "
        f"{args.runs} runs, 50 random target llms, 300 source llms, seed 0, seen split. "
        "Ours: MDAD in points with the study's symmetric bootstrap interval. "
        f"Grid time {t_main:.0f} s for {len(report.computed)} newly computed cells "
        f"({len(report.reused)} reused from an earlier run of this script).",
        "",
        "| selector | " + " | ".join(f"n={n} ours" for n in SIZES) + " | study (n=10..200) |",
        "|---|" + "---|" * (len(SIZES) + 1),
    ]
    order = [s for s in seen["selector"].unique()]
    for sel in order:
        rows = seen[seen["selector"] == sel].set_index("n_items")
        cells = [fmt(rows.loc[n]) for n in SIZES]
        study = STUDY.get(sel)
        study_txt = ", ".join(f"{v:g}" for v in study) if study else "-"
        lines.append(f"| {sel} | " + " | ".join(cells) + f" | {study_txt} |")

    # overlap of our random intervals with the study's
    rnd = seen[seen["selector"] == "random"].set_index("n_items")
    overlap = []
    for n, (slo, shi) in zip(SIZES, STUDY_RANDOM_CI, strict=True):
        r = rnd.loc[n]
        lo = r["mdad_lower"] if not math.isnan(r["mdad_lower"]) else r["mdad"]
        hi = r["mdad_upper"] if not math.isnan(r["mdad_upper"]) else math.inf
        overlap.append(bool(r["reached"] and lo <= shi and slo <= hi))

    def ours(sel: str, n: int) -> str:
        r = seen[(seen["selector"] == sel) & (seen["n_items"] == n)]
        return fmt(r.iloc[0]) if len(r) else "-"

    lines += [
        "",
        "Random: our interval overlaps the study's ("
        + ", ".join(
            f"n={n}: {lo:g}-{hi:g}" for n, (lo, hi) in zip(SIZES, STUDY_RANDOM_CI, strict=True)
        )
        + f") at every size: **{'yes' if all(overlap) else 'NO'}** "
        f"({', '.join('yes' if o else 'no' for o in overlap)}).",
        "",
        "Reading the table:",
        "",
        "- GPQA here has correctness only, no confidences, so `stratified-confidence`, "
        "`anchor-points` and `diversity` run on correctness (the notes column below says so). "
        "The study's Anchor Points clusters items by the correlation of the source llms' "
        "*confidence in the correct answer*, a continuous signal; on 0/1 correctness the "
        "correlation distance is much coarser and the medoids less representative, which is "
        f"the likely reason our anchor-points is weaker at the smallest size (n=10: "
        f"{ours('anchor-points', 10)} vs the study's 6.5).",
        "- GPQA has a single subtask, so `random-subtask-equal` and `random-subtask-proportional` "
        "are the same sampling design as `random`; their spread at n=10 (ours "
        f"{ours('random', 10)}, {ours('random-subtask-equal', 10)}, "
        f"{ours('random-subtask-proportional', 10)}; the study's 25.5 vs 16.0) is the Monte "
        "Carlo noise of the first-crossing rule, not a real difference.",
        "- `random-analytic` is the exact expectation over item samples on the same runs' pairs "
        f"(no Monte Carlo): {ours('random-analytic', 10)} at n=10. Its interval reflects only "
        "which pairs were drawn (normal, pairs treated as independent), so it is narrow. "
        "The Monte Carlo first-crossing MDAD tends to fall below it at small n: one noisy bin "
        "above the threshold is enough. The monotone variants (isotonic, logistic) in the "
        "table below are steadier.",
        "",
        "Per-cell metrics (seen split; mean over runs): agreement = share of target pairs "
        "ranked as on the full seen set; tau = Kendall tau-b of estimates vs seen accuracies; "
        "error = mean |estimate - seen accuracy| in points.",
        "",
        "| selector | n | agreement | tau | error (pts) | MDAD isotonic | MDAD logistic | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    met = report.metrics
    for _, m in met.iterrows():
        err = m.get("error_seen", math.nan)
        tau = m.get("kendall_tau_seen", math.nan)
        iso = m.get("mdad_isotonic_seen", math.nan)
        logi = m.get("mdad_logistic_seen", math.nan)
        lines.append(
            f"| {m['selector']} | {m['n_items']} | {m['agreement_seen']:.3f} | "
            f"{num(tau, '.3f')} | {num(100 * err, '.2f')} | {num(iso, '.1f')} | "
            f"{num(logi, '.1f')} | {m.get('notes') or ''} |"
        )

    # case study: fixed groups of similar llms
    groups = DATA / "gpqa.llm-groups.json"
    case_lines = [
        "",
        "### Similar llms: the 7B- and 8B-instruct groups as fixed targets",
        "",
        "Share of target pairs ranked as on the full seen set (mean over runs), 300 source llms.",
        "",
    ]
    for key in ("7b_instruct", "8b_instruct"):
        cfg = GridConfig(
            selectors=case_selectors,
            sizes=SIZES,
            source_llms=(300,),
            runs=args.runs,
            seed=0,
            target_group=f"{groups}:{key}",
        )
        t1 = time.perf_counter()
        rep = evaluate_grid(resp, cfg, out / key, progress=sys.stderr.isatty())
        assert rep.metrics is not None and rep.mdad is not None
        n_t = int(rep.metrics["n_targets"].dropna().iloc[0])
        case_lines += [
            f"**{key}** ({n_t} llms; {time.perf_counter() - t1:.0f} s):",
            "",
            "| selector | " + " | ".join(f"n={n}" for n in SIZES) + " | MDAD at n=200 |",
            "|---|" + "---|" * (len(SIZES) + 1),
        ]
        mseen = rep.mdad[rep.mdad["split"] == "seen"]
        for sel in rep.metrics["selector"].unique():
            rows = rep.metrics[rep.metrics["selector"] == sel].set_index("n_items")
            mrow = mseen[(mseen["selector"] == sel) & (mseen["n_items"] == SIZES[-1])].iloc[0]
            case_lines.append(
                f"| {sel} | "
                + " | ".join(f"{rows.loc[n, 'agreement_seen']:.3f}" for n in SIZES)
                + f" | {fmt(mrow)} |"
            )
        case_lines.append("")
    body = "\n".join(lines + case_lines)
    write_section(
        "reproduce_gpqa",
        "GPQA: the study's MDAD table reproduced",
        body,
        headline=[0],
    )
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Adaptive micro-benchmarking on held-out llms: items used, coverage at the stop, rank decisions.

For each split, ``--held-out`` llms of the benchmark are set aside and a posterior
is fitted on the rest with ``validate.default_fit("2pl")`` (NUTS plus the saved
calibration, as ``fit`` does by default). Each held-out llm is then replayed:

* ``accuracy`` goal at the width a 100-item random subset gives (the median
  calibrated 90% width of ``score`` on one random 100-item subset per llm),
  with the variance-reduction rule, Fisher information (Fluid's rule) and
  random order under the same stopping rule; items used and coverage of the
  true full-benchmark accuracy by the interval at the stop;
* ``rank`` goal at p = 0.95 against a held-out reference llm 1-5 points apart
  (its full row as the reference): share of correct decisions among the
  stopped runs, items used;
* the cost of one choice among 12000 items (a simulated posterior);
* what the calibration allows (``--floor``, from the shipped posteriors, no fit): the
  calibrated 90% width of a random n-item subset at each calibrated size, the width
  of a 100-item one (the accuracy goal's target), and the residual scale an interval
  of that width needs at 30 items, beside the scale the calibration measured.

``--benchmark`` is any of the shared matrices (``gpqa``, a metabench one ...); each
benchmark's runs are kept under its name. Per-run figures go to
``benchmarks/results/adaptive.json``, and its report block
(the index ``benchmarks/README.md`` is rendered from it) is rewritten from them.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from _report import MATRICES, commit, load_results, machine, update_results, write_section

RESULTS = Path(__file__).parent / "results" / "adaptive.json"
RULES = ("goal", "fisher", "random")
#: sizes of the static bayes-ranking subsets set beside the rank goal
STATIC_SIZES = (25, 50, 100, 150)


def _answers(resp: Any, k: int) -> dict[str, int]:
    row = resp.values[k]
    return {str(i): int(v) for i, v in zip(resp.items, row, strict=True) if not np.isnan(v)}


def subset_width(posterior: Any, misfit: Any, held: Any, n: int, seed: int) -> float:
    """Median calibrated 90% width of ``score`` on a random ``n``-item subset per llm."""
    from bayes_microbench.scoring import score

    rng = np.random.default_rng(seed)
    values = np.full(held.values.shape, np.nan)
    for k in range(held.n_llms):
        seen = np.nonzero(~np.isnan(held.values[k]))[0]
        pick = rng.choice(seen, size=min(n, len(seen)), replace=False)
        values[k, pick] = held.values[k, pick]
    from bayes_microbench.responses import Responses

    sub = Responses.from_arrays(values, held.llms, held.items, on_empty="subset")
    res = score(posterior, sub, misfit=misfit, random_seed=seed)
    iv = res["accuracy_interval"].to_numpy()
    return float(np.median(iv[:, 1] - iv[:, 0]))


def replay_split(
    resp: Any,
    split: int,
    held_out: int,
    budget: int,
    batch: int,
    replay_llms: int,
    max_draws: int,
) -> dict[str, Any]:
    """Fit on the training llms of one split and replay every held-out llm."""
    from bayes_microbench.adaptive import AdaptiveState, Reference, Settings, run_replay
    from bayes_microbench.validate import default_fit

    rng = np.random.default_rng(1000 + split)
    order = rng.permutation(resp.n_llms)
    held_idx, train_idx = np.sort(order[:held_out]), np.sort(order[held_out:])
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = default_fit("2pl")(resp.isel(llm=train_idx), split)
    fit_s = time.perf_counter() - t0
    post, misfit = fitted.posterior, fitted.misfit
    held = resp.isel(llm=held_idx)
    width = subset_width(post, misfit, held, 100, split)
    truth = np.nanmean(held.values, axis=1)
    runs: list[dict[str, Any]] = []
    print(f"split {split}: fit {fit_s:.0f} s, target width {width * 100:.1f} points", flush=True)
    for rule in RULES:
        t0 = time.perf_counter()
        s = Settings(width=width, prob=0.9, budget=budget, minimum=5, rule=rule, seed=split)
        for k in range(min(held.n_llms, replay_llms)):
            ans = _answers(held, k)
            final, _ = run_replay(
                lambda av, s=s: AdaptiveState(
                    post, settings=s, misfit=misfit, available=av, max_draws=max_draws
                ),
                ans,
                batch,
            )
            covered = final["accuracy_lower"] <= truth[k] <= final["accuracy_upper"]
            runs.append(
                {
                    "goal": "accuracy",
                    "rule": rule,
                    "llm": str(held.llms[k]),
                    "items_used": final["items_used"],
                    "stopped": final["stopped"],
                    "covered": bool(covered),
                    "width": final["accuracy_upper"] - final["accuracy_lower"],
                    "truth": float(truth[k]),
                }
            )
        print(f"  accuracy/{rule}: {time.perf_counter() - t0:.0f} s", flush=True)
    # rank: each held-out llm against another held-out llm 1-5 points apart
    pairs = rank_pairs(truth, min(held.n_llms, replay_llms), split)
    for rule in RULES:
        t0 = time.perf_counter()
        s = Settings(goal="rank", prob=0.95, budget=budget, minimum=5, rule=rule, seed=split)
        for k, r in pairs:
            ref = Reference(str(held.llms[r]), _answers(held, r))
            final, _ = run_replay(
                lambda av, s=s, ref=ref: AdaptiveState(
                    post,
                    settings=s,
                    misfit=misfit,
                    reference=ref,
                    available=av,
                    max_draws=max_draws,
                ),
                _answers(held, k),
                batch,
            )
            want = "above" if truth[k] > truth[r] else "below"
            runs.append(
                {
                    "goal": "rank",
                    "rule": rule,
                    "llm": str(held.llms[k]),
                    "reference": ref.name,
                    "gap": float(truth[k] - truth[r]),
                    "items_used": final["items_used"],
                    "stopped": final["stopped"],
                    "decision": final["decision"],
                    "correct": final["decision"] == want,
                }
            )
        print(f"  rank/{rule}: {time.perf_counter() - t0:.0f} s", flush=True)
    t0 = time.perf_counter()
    static = static_ranking(post, misfit, held, truth, pairs, max_draws, split)
    print(f"  rank/static bayes-ranking: {time.perf_counter() - t0:.0f} s", flush=True)
    return {
        "split": split,
        "n_train": len(train_idx),
        "held_out": len(held_idx),
        "fit_seconds": round(fit_s, 1),
        "converged": fitted.converged,
        "target_width": width,
        "runs": runs,
        "static": static,
    }


def rank_pairs(truth: np.ndarray, n: int, split: int) -> list[tuple[int, int]]:
    """Each of the first ``n`` held-out llms with a held-out reference 1-5 points apart."""
    pairs = []
    for k in range(n):
        gaps = np.abs(truth - truth[k])
        ok = np.nonzero((gaps >= 0.01) & (gaps <= 0.05))[0]
        if len(ok):
            pairs.append((k, int(np.random.default_rng([split, k]).choice(ok))))
    return pairs


def static_ranking(
    post: Any,
    misfit: Any,
    held: Any,
    truth: np.ndarray,
    pairs: list[tuple[int, int]],
    max_draws: int,
    split: int,
) -> list[dict[str, Any]]:
    """Decision accuracy of fixed ``bayes-ranking`` subsets on the rank goal's pairs.

    Per size, the subset ``select`` would give; each llm answers it, the reference
    answers in full (as in the adaptive runs), and the decision is forced at the
    subset's end: ``above`` when P(llm above reference) >= 0.5. Why: the issue sets
    the adaptive rule's items against the static subset of the same decision accuracy.
    """
    from bayes_microbench.adaptive import AdaptiveState, Reference, Settings
    from bayes_microbench.design import select_from_posterior

    rows = []
    for n in STATIC_SIZES:
        if n > held.n_items:
            continue
        items = select_from_posterior(post, "bayes-ranking", n, random_seed=split)[0]
        s = Settings(goal="rank", prob=0.95, budget=n, minimum=0, seed=split)
        correct = []
        for k, r in pairs:
            ans = _answers(held, k)
            seen = [i for i in items if i in ans]
            st = AdaptiveState(
                post,
                settings=s,
                misfit=misfit,
                reference=Reference(str(held.llms[r]), _answers(held, r)),
                available=seen,
                max_draws=max_draws,
            )
            st.record({i: ans[i] for i in seen})
            above = st.state()["p_above"] >= 0.5
            correct.append(bool(above == (truth[k] > truth[r])))
        rows.append({"n": n, "pairs": len(correct), "correct": float(np.mean(correct))})
    return rows


def choice_cost(n_items: int = 12000, repeats: int = 5) -> dict[str, Any]:
    """Seconds for one ``next_items(1)`` among ``n_items`` (simulated posterior, 20 answers)."""
    from bayes_microbench import simulate_responses
    from bayes_microbench.adaptive import AdaptiveState, Reference, Settings
    from bayes_microbench.testing import posterior_from_truth

    resp, truth = simulate_responses(
        "mmlu-pro", n_llms=3, n_items=n_items, random_seed=0, return_truth=True
    )
    post = posterior_from_truth(truth, n_draws=200, noise=0.05, random_seed=0)
    out: dict[str, Any] = {"n_items": n_items}
    ref = Reference("ref", dict(list(_answers(resp, 1).items())[:50]))
    for goal in ("accuracy", "rank"):
        for rule in RULES:
            st = AdaptiveState(
                post,
                settings=Settings(goal=goal, width=0.001, prob=0.95, budget=1000, rule=rule),
                reference=ref if goal == "rank" else None,
            )
            st.record(dict(list(_answers(resp, 0).items())[:20]))
            times = []
            for _ in range(repeats):
                st._cache = None  # time the posterior summary with the choice
                t = time.perf_counter()
                st.next_items(1)
                times.append(time.perf_counter() - t)
            out[f"{goal}/{rule}"] = float(np.median(times))
    return out


def calibration_floor(names: list[str] | None = None) -> list[dict[str, Any]]:
    """What each shipped posterior's calibration allows the accuracy goal.

    For each shipped model with a calibration measured at 100 items: N, and at the
    fitted llms' median IRT prediction (the middle knot of the 100-item size), the
    calibrated 90% width of a random n-item subset for each calibrated n
    (``(q95 - q05) * scale(n) * (N - n) / N``), the target width of the accuracy goal
    (n = 100), and the scale a 90% interval of that width needs at 30 items (with the
    residual quantiles interpolated at 30 items) beside the measured scale at each size. The calibration is
    indexed by the number of items observed, not by which, so a rule meets the target
    at 30 items only if its subsets carry less residual error than random ones of 100-200.
    """
    from bayes_microbench.posterior import read_posterior_file
    from bayes_microbench.shipped import models_dir

    rows = []
    for path in sorted(models_dir().glob("*.nc")):
        if names and path.stem not in names:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            post, cal = read_posterior_file(str(path))
        sizes = [int(n) for n in getattr(cal, "n_observed", [])]
        n_items = int(post.sizes["item"])
        if cal is None or 100 not in sizes or n_items <= 100:
            continue
        k100 = sizes.index(100)
        pred = np.array([float(np.median(cal.knots[k100]))])

        def width(n: int, scale: float | None = None, cal=cal, pred=pred, big=n_items) -> float:
            q05, q95 = cal.residual_quantile(np.array([n]), np.array([[0.05], [0.95]]))[:, 0]
            sc = cal.at(np.array([n]), pred)[1][0] if scale is None else scale
            return float((q95 - q05) * sc * (big - n) / big)

        target = width(100)
        unit = width(30, scale=1.0)
        rows.append(
            {
                "model": path.stem,
                "n_items": n_items,
                "predicted": float(pred[0]),
                "sizes": sizes,
                "width": [width(n) for n in sizes],
                "scale": [float(cal.at(np.array([n]), pred)[1][0]) for n in sizes],
                "target_width": target,
                "scale_needed_at_30": target / unit,
            }
        )
    return rows


def floor_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The calibration-floor table (:func:`calibration_floor`) as Markdown lines."""
    if not rows:
        return []
    lines = [
        "",
        "**What the calibration allows the accuracy goal** (shipped posteriors, at the fitted "
        "llms' median prediction; `--floor`): the calibrated 90% width of a random n-item "
        "subset, the target (n = 100), and the residual scale a 90% interval that narrow "
        "needs at 30 items beside the scale the calibration measured on random subsets. "
        "The calibration depends on how many items were observed, not which: a rule reaches "
        "the target at 30 items only where its subsets carry less residual error than random "
        "subsets of 100-200.",
        "",
        "| model | items | width at n = 25 / 50 / 100 / 200 (points) | scale measured at n = 25 / 50 / 100 / 200 | scale needed at 30 |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['n_items']} | "
            + " / ".join(f"{100 * w:.1f}" for w in r["width"])
            + " | "
            + " / ".join(f"{s:.4f}" for s in r["scale"])
            + f" | **{r['scale_needed_at_30']:.4f}** |"
        )
    return lines


BENCH_FIELDS = (
    "benchmark",
    "n_llms",
    "n_items",
    "held_out",
    "replay_llms",
    "max_draws",
    "budget",
    "batch",
    "splits",
    "replay_commit",
)


def per_benchmark(saved: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each benchmark's replays (the file kept one benchmark's at top level before)."""
    found = dict(saved.get("benchmarks", {}))
    if "splits" in saved and saved.get("benchmark") not in found:
        found[saved["benchmark"]] = {k: saved[k] for k in BENCH_FIELDS if k in saved}
    return found


def replay_lines(run: dict[str, Any]) -> list[str]:
    """One benchmark's replays: the settings sentence and the table of goals and rules."""
    lines = [
        "Replay on held-out llms of "
        f"{run['benchmark']} ({run['n_llms']} llms x {run['n_items']} items): per split "
        f"{run['held_out']} llms held out (the first {run['replay_llms']} replayed, "
        f"{run['max_draws']} posterior draws), a 2PL fitted on the rest by "
        "`validate.default_fit('2pl')` (NUTS + saved calibration). Accuracy goal: the "
        "calibrated 90% interval at most as wide as the median one of a 100-item random "
        "subset; rank goal: p = 0.95 against a held-out llm 1-5 points apart. Stop not before "
        "the calibration's smallest size (25 items) and at most "
        f"{run['budget']} items; batch {run['batch']}; {len(run['splits'])} split(s).",
        "",
        "| goal | rule | runs | mean items used | median | stopped by goal | coverage (90%) "
        "| correct decisions (stopped) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    runs = [r for sp in run["splits"] for r in sp["runs"]]
    for goal in ("accuracy", "rank"):
        for rule in RULES:
            rs = [r for r in runs if r["goal"] == goal and r["rule"] == rule]
            if not rs:
                continue
            used = np.array([r["items_used"] for r in rs])
            stopped = [r for r in rs if r["stopped"] == "goal"]
            cov = f"{np.mean([r['covered'] for r in rs]):.3f}" if goal == "accuracy" else ""
            dec = (
                f"{np.mean([r['correct'] for r in stopped]):.3f} ({len(stopped)})"
                if goal == "rank" and stopped
                else ""
            )
            lines.append(
                f"| {goal} | {rule} | {len(rs)} | {used.mean():.1f} | {np.median(used):.0f} | "
                f"{len(stopped) / len(rs):.2f} | {cov} | {dec} |"
            )
    lines += static_lines(run, runs)
    if "replay_commit" in run:
        lines += ["", f"Replays run at commit {run['replay_commit']}."]
    widths = ", ".join(f"{sp['target_width'] * 100:.1f}" for sp in run["splits"])
    lines += ["", f"Target widths per split (points): {widths}.", ""]
    return lines


def static_lines(run: dict[str, Any], runs: list[dict[str, Any]]) -> list[str]:
    """The static bayes-ranking subsets beside the rank goal (runs before them: none)."""
    static = [row for sp in run["splits"] for row in sp.get("static", [])]
    if not static:
        return []
    acc = {}
    for n in sorted({row["n"] for row in static}):
        rows = [row for row in static if row["n"] == n]
        pairs = sum(row["pairs"] for row in rows)
        acc[n] = sum(row["correct"] * row["pairs"] for row in rows) / max(pairs, 1)
    lines = [
        "",
        "Static `bayes-ranking` subsets on the same pairs (the llm answers the subset, the "
        "reference its full row, the decision forced at the end): share of correct decisions "
        + ", ".join(f"n = {n}: {a:.3f}" for n, a in acc.items())
        + ".",
    ]
    for rule in ("fisher", "goal"):  # the rank goal's default rule first (decision 0038)
        rs = [r for r in runs if r["goal"] == "rank" and r["rule"] == rule]
        stopped = [r for r in rs if r["stopped"] == "goal"]
        if not stopped:
            continue
        target = float(np.mean([r["correct"] for r in stopped]))
        match = [n for n, a in acc.items() if a >= target]
        same = (
            f"the smallest static subset as accurate has {match[0]} items"
            if match
            else f"no static subset up to {max(acc)} items is as accurate"
        )
        lines.append(
            f"The rank goal with the `{rule}` rule decided {target:.3f} of its "
            f"{len(stopped)} stopped runs correctly, {np.mean([r['items_used'] for r in rs]):.1f} "
            f"items on average over all its runs; {same}."
        )
    return lines


def body(saved: dict[str, Any]) -> str:
    lines: list[str] = []
    for run in per_benchmark(saved).values():
        lines += replay_lines(run)
    lines += floor_lines(saved.get("floor", []))
    cost = saved.get("cost")
    if cost:
        lines += [
            "",
            f"Cost of one choice among {cost['n_items']} items (simulated 2PL-like posterior, "
            "200 draws, 20 answers; median of 5, including the posterior summary), seconds: "
            + ", ".join(f"{k} {v:.3f}" for k, v in cost.items() if k not in ("n_items", "commit"))
            + (f" (measured at commit {cost['commit']})" if "commit" in cost else "")
            + ".",
        ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--benchmark", default="gpqa", choices=sorted(MATRICES))
    ap.add_argument("--splits", type=int, default=1)
    ap.add_argument("--held-out", type=int, default=100)
    ap.add_argument("--budget", type=int, default=200)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--replay-llms", type=int, default=100, help="held-out llms replayed")
    ap.add_argument("--max-draws", type=int, default=400, help="posterior draws per state")
    ap.add_argument("--cost-only", action="store_true")
    ap.add_argument(
        "--floor",
        action="store_true",
        help="only (re)compute what the shipped calibrations allow the accuracy goal",
    )
    args = ap.parse_args()
    from bayes_microbench.io import load_responses

    saved: dict[str, Any] = load_results(RESULTS)
    saved["floor"] = calibration_floor()
    saved["benchmarks"] = per_benchmark(saved)
    for key in BENCH_FIELDS:  # the single-benchmark layout of earlier runs
        saved.pop(key, None)
    if args.floor:
        update_results(
            RESULTS, drop=BENCH_FIELDS, **{k: v for k, v in saved.items() if k != "report"}
        )
        write_section(
            "bench_adaptive", "Adaptive micro-benchmarking (issue 21)", body(saved), headline=[0]
        )
        print("\n".join(floor_lines(saved["floor"])))
        return
    if not args.cost_only:
        resp = load_responses(MATRICES[args.benchmark])
        splits = [
            replay_split(
                resp,
                s,
                args.held_out,
                args.budget,
                args.batch,
                args.replay_llms,
                args.max_draws,
            )
            for s in range(args.splits)
        ]
        saved["benchmarks"][args.benchmark] = dict(
            benchmark=args.benchmark,
            n_llms=resp.n_llms,
            n_items=resp.n_items,
            held_out=args.held_out,
            replay_llms=args.replay_llms,
            max_draws=args.max_draws,
            budget=args.budget,
            batch=args.batch,
            splits=splits,
            replay_commit=commit(),
        )
    saved["cost"] = {**choice_cost(), "commit": commit()}
    saved.update(commit=commit(), machine=machine())
    update_results(RESULTS, drop=BENCH_FIELDS, **{k: v for k, v in saved.items() if k != "report"})
    if per_benchmark(saved):
        write_section(
            "bench_adaptive", "Adaptive micro-benchmarking (issue 21)", body(saved), headline=[0]
        )
    print(body(saved))


if __name__ == "__main__":
    main()

"""Why the 2PL misfits GPQA: items that stronger llms answer worse, and what the selectors pick.

Three measurements on ``../shared/data/open-llm-leaderboard-v2/gpqa.csv`` (420 llms x 448 items):

1. Item-total correlation: for each item, the Pearson correlation across llms
   between the item's 0/1 responses and the llm's accuracy on the whole
   benchmark. A 2PL with positive discriminations can only represent items
   whose correlation is positive; the rest get discriminations near 0.
   Sampling noise alone gives a spread of about ``1/sqrt(420) = 0.05``.
2. Which items the Bayesian selectors choose (``bayes-fisher``,
   ``bayes-ranking``) from the shipped posterior ``models/gpqa-2pl.nc``, beside
   random subsets: mean item-total correlation and share of negatively
   correlated items among the chosen ones.
3. Whether letting discriminations be negative fixes the held-out prediction:
   a joint posterior mode (L-BFGS; abilities ~ Normal(0, 1), intercepts ~
   Normal(0, 3), log-discriminations ~ Normal(0, 0.5) for the positive 2PL,
   discriminations ~ Normal(0.5, 0.5) for the signed one) on 320 llms; 100
   held-out llms are scored on the grid from a random subset (25/50/100
   items, their own per llm); reported: the regression slope of their true
   accuracy on the unobserved items on the model's prediction (1 = calibrated
   spread; below 1 = predictions vary too much across llms), and the mean
   absolute error beside that of the subset mean.

Usage::

    .venv/bin/python benchmarks/study_gpqa_items.py [--no-report]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _report import write_section  # noqa: E402

from bayes_microbench import load_responses  # noqa: E402

GPQA = ROOT.parent / "shared" / "data" / "open-llm-leaderboard-v2" / "gpqa.csv"
POSTERIOR = ROOT / "models" / "gpqa-2pl.nc"


def item_total_correlation(y: np.ndarray) -> np.ndarray:
    acc = np.nanmean(y, axis=1)
    out = np.zeros(y.shape[1])
    for i in range(y.shape[1]):
        if y[:, i].std() > 0:
            out[i] = np.corrcoef(y[:, i], acc)[0, 1]
    return out


def joint_mode(y: np.ndarray, signed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Joint posterior mode of a 2PL; returns (discrimination, intercept) on the N(0, 1) scale."""
    n_l, n_i = y.shape
    prior_mean = 0.5 if signed else 0.0

    def unpack(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        th, e, q = x[:n_l], x[n_l : n_l + n_i], x[n_l + n_i :]
        return th, e, q, (q if signed else np.exp(q))

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        th, e, q, a = unpack(x)
        eta = th[:, None] * a[None, :] + e[None, :]
        value = np.sum(y * eta - np.logaddexp(0.0, eta))
        value -= (
            0.5 * np.sum(th**2)
            + 0.5 * np.sum(e**2) / 9
            + 0.5 * np.sum((q - prior_mean) ** 2) / 0.25
        )
        g = y - expit(eta)
        g_a = g.T @ th
        g_q = (g_a if signed else g_a * a) - (q - prior_mean) / 0.25
        grad = np.concatenate([g @ a - th, g.sum(axis=0) - e / 9, g_q])
        return -value, -grad

    acc = y.mean(axis=1)
    p = y.mean(axis=0).clip(0.02, 0.98)
    x0 = np.concatenate(
        [(acc - acc.mean()) / acc.std(), np.log(p / (1 - p)), np.full(n_i, prior_mean)]
    )
    res = minimize(objective, x0, jac=True, method="L-BFGS-B", options={"maxiter": 3000})
    th, e, _, a = unpack(res.x)
    return a * th.std(), e + a * th.mean()


def heldout_prediction(
    a: np.ndarray, e: np.ndarray, y: np.ndarray, masks: np.ndarray
) -> tuple[float, float, float]:
    """(slope, IRT abs error, subset-mean abs error) over the held-out llms ``y``.

    ``masks`` (llm, item): each held-out llm's observed subset.
    """
    grid = np.linspace(-5, 5, 401)
    eta = grid[:, None] * a[None, :] + e[None, :]
    p_grid, lp1, lp0 = expit(eta), log_expit(eta), log_expit(-eta)
    pred, truth, sub = [], [], []
    for row, obs in zip(y, masks, strict=True):
        lp = -0.5 * grid**2 + (lp1[:, obs] * row[obs] + lp0[:, obs] * (1 - row[obs])).sum(axis=1)
        w = np.exp(lp - lp.max())
        w /= w.sum()
        pred.append((w @ p_grid)[~obs].mean())
        truth.append(row[~obs].mean())
        sub.append(row[obs].mean())
    pred_a, truth_a, sub_a = np.array(pred), np.array(truth), np.array(sub)
    slope = float(np.cov(pred_a, truth_a)[0, 1] / pred_a.var(ddof=1))
    return slope, float(np.abs(pred_a - truth_a).mean()), float(np.abs(sub_a - truth_a).mean())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not GPQA.exists():
        print(f"GPQA data not found at {GPQA}; run from a checkout with ../shared beside it")
        return 2
    warnings.simplefilter("ignore")
    start = time.perf_counter()
    resp = load_responses(GPQA)
    y = np.asarray(resp.values, dtype=np.float64)
    corr = item_total_correlation(y)
    lines = [
        "GPQA (`../shared/data/open-llm-leaderboard-v2/gpqa.csv`, 420 llms x 448 items, complete).",
        "",
        "### 1. Item-total correlation (noise alone: sd about 0.05)",
        "",
        "| statistic | value |",
        "|---|---|",
        f"| median | {np.median(corr):.3f} |",
        f"| 10th / 90th percentile | {np.percentile(corr, 10):.3f} / {np.percentile(corr, 90):.3f} |",
        f"| items with negative correlation | {(corr < 0).sum()} of {len(corr)} ({(corr < 0).mean():.0%}) |",
        f"| items below -0.10 (beyond noise) | {(corr < -0.1).sum()} |",
        "",
    ]
    cor_of = dict(zip(map(str, resp.items), corr, strict=True))
    rows = ["| selector | n | mean item-total corr | share negative |", "|---|---|---|---|"]
    if POSTERIOR.exists():
        from bayes_microbench.design import select_from_posterior
        from bayes_microbench.posterior import read_posterior

        post = read_posterior(str(POSTERIOR))
        for sel in ("bayes-fisher", "bayes-ranking", "random"):
            for n in (25, 50, 100, 200):
                ids, *_ = select_from_posterior(post, sel, n, random_seed=args.seed)
                cc = np.array([cor_of[str(i)] for i in ids])
                rows.append(f"| {sel} | {n} | {cc.mean():.3f} | {(cc < 0).mean():.2f} |")
    lines += [
        "### 2. Items the Bayesian selectors choose (posterior `models/gpqa-2pl.nc`)",
        "",
        f"All items: mean correlation {corr.mean():.3f}, share negative {(corr < 0).mean():.2f}.",
        "",
        *rows,
        "",
    ]
    rng = np.random.default_rng(args.seed)
    perm = rng.permutation(resp.n_llms)
    test, train = perm[:100], perm[100:]
    table = [
        "| model | share of negative discriminations | n | slope | IRT abs error (points) | subset-mean abs error (points) |",
        "|---|---|---|---|---|---|",
    ]
    # the same random subsets (one per held-out llm and size) for both models
    masks = {}
    for n in (25, 50, 100):
        key = rng.random((len(test), resp.n_items)).argsort(axis=1)[:, :n]
        masks[n] = np.zeros((len(test), resp.n_items), dtype=bool)
        np.put_along_axis(masks[n], key, True, axis=1)
    for signed in (False, True):
        a, e = joint_mode(y[train], signed)
        for n in (25, 50, 100):
            slope, err, sub_err = heldout_prediction(a, e, y[test], masks[n])
            name = "signed 2PL" if signed else "2PL (positive)"
            table.append(
                f"| {name} | {(a < 0).mean():.2f} | {n} | {slope:.2f} | {100 * err:.2f} | {100 * sub_err:.2f} |"
            )
    lines += [
        "### 3. Held-out prediction: positive vs signed discriminations (joint mode, 320 / 100 llms)",
        "",
        *table,
        "",
        f"{time.perf_counter() - start:.0f} s in all.",
    ]
    body = "\n".join(lines)
    print(body)
    if not args.no_report:
        write_section(
            "study_gpqa_items", "GPQA: items stronger llms answer worse", body, headline=[0, 2]
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

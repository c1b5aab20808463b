"""``bayes-microbench score``: a new llm's full-benchmark accuracy from its responses on any subset.

For each llm in the responses file, the posterior of its ability given its
observed cells (integrating over the saved item posterior) and the posterior
predictive of its accuracy on every item of the posterior, with a credible
interval; beside it the Wilson interval of its subset accuracy.

On real benchmarks the plain IRT predictive is overconfident about the
unobserved items. The interval printed is the calibrated one: ``fit`` saves
with the posterior its calibration on the llms it was fitted on
(``misfit.estimate_misfit`` by item-split cross-validation: a piecewise-linear
recentring and rescaling in the IRT prediction and the empirical quantiles of
the standardized residuals; split-conformal intervals), and ``score`` applies
it. ``--calibrate-with PATH`` (responses of the llms the posterior was fitted
on) estimates it afresh instead; ``--raw-model`` prints the raw model's
interval. A posterior saved without calibration gives the raw interval, with a
one-line warning saying how to add it. Llms that share one subset (a designed
micro-benchmark) get that subset's own calibration when the calibration carries
at least 100 fitted llms (``Misfit.for_subset``).
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings

from .._defaults import DEFAULT_CI_PROB
from ._common import (
    POSITIVE_INT,
    PROBABILITY,
    add_output_flags,
    add_posterior,
    add_raw_model,
    add_responses,
    add_seed,
    print_json,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "score",
        help="estimate llms' full-benchmark accuracy from subset responses and a posterior",
        description=__doc__,
    )
    add_posterior(p)
    add_responses(p)
    p.add_argument(
        "--ci-prob",
        type=PROBABILITY,
        default=DEFAULT_CI_PROB,
        help=f"interval probability (default {DEFAULT_CI_PROB:g})",
    )
    p.add_argument(
        "--max-draws", type=POSITIVE_INT, default=1000, help="posterior draws used (default 1000)"
    )
    p.add_argument(
        "--calibrate-with",
        metavar="PATH",
        default=None,
        help="responses of the llms the posterior was fitted on: recalibrate the intervals for misfit",
    )
    add_raw_model(p, "the raw model's interval, without the calibration saved with the posterior")
    add_seed(p)
    add_output_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..exceptions import UserInputError
    from ..io import load_responses
    from ..misfit import carried_training, estimate_misfit
    from ..posterior import read_posterior_file
    from ..scoring import score

    if args.raw_model and args.calibrate_with is not None:
        raise UserInputError("--raw-model and --calibrate-with contradict each other; drop one")
    posterior, saved = read_posterior_file(args.posterior)
    resp = load_responses(args.responses, args.items, on_empty="subset")
    misfit = None if args.raw_model else saved
    if misfit is None and not args.raw_model and args.calibrate_with is None:
        warnings.warn(
            f"{args.posterior} carries no calibration: the intervals are the raw model's, "
            "which undercover on real benchmarks; refit it with 'bayes-microbench fit' "
            "(which saves one) or pass --calibrate-with TRAINING_RESPONSES",
            UserWarning,
            stacklevel=1,
        )
    if args.calibrate_with is not None:
        where = f"--calibrate-with {args.calibrate_with}"
        try:
            train = load_responses(args.calibrate_with)
        except UserInputError as err:
            # the reader names the file; say which flag gave it (not --responses)
            raise type(err)(f"{where}: {err}") from None
        n_min = int(train.observed.sum(axis=1).min())
        sizes = [n for n in (25, 50, 100, 200) if n <= n_min - 10] or [max(1, n_min // 2)]
        misfit = estimate_misfit(posterior, train, sizes=sizes, random_seed=args.seed, where=where)
        # a subset the scored llms share is then calibrated on itself (Misfit.for_subset)
        misfit = dataclasses.replace(misfit, training=carried_training(train, args.seed))
    kind = "raw" if misfit is None else "calibrated"
    res = score(
        posterior,
        resp,
        ci_prob=args.ci_prob,
        max_draws=args.max_draws,
        random_seed=args.seed,
        misfit=misfit,
    )
    ci = float(res.attrs["ci_prob"])
    rows = []
    for k, llm in enumerate(res["llm"].to_numpy()):
        lo, hi = res["accuracy_interval"].to_numpy()[k]
        blo, bhi = res["binomial_interval"].to_numpy()[k]
        rows.append(
            {
                "llm": str(llm),
                "accuracy_mean": round(float(res["accuracy_mean"][k]), 6),
                "accuracy_lower": round(float(lo), 6),
                "accuracy_upper": round(float(hi), 6),
                "n_observed": int(res["n_observed"][k]),
                "observed_accuracy": round(float(res["observed_accuracy"][k]), 6),
                "binomial_lower": round(float(blo), 6),
                "binomial_upper": round(float(bhi), 6),
            }
        )
    if args.json:
        print_json(
            {
                "ci_prob": ci,
                "n_benchmark_items": res.attrs["n_benchmark_items"],
                "interval_kind": kind,
                "misfit": str(res.attrs.get("misfit", "")),
                "llms": rows,
            }
        )
        return 0
    n_bench = res.attrs["n_benchmark_items"]
    print(f"full-benchmark accuracy over {n_bench} items, {ci:.0%} intervals ({kind})")
    width = max(len("llm"), *(len(str(r["llm"])) for r in rows))
    print(f"{'llm':<{width}}  n_obs  subset acc  bayes mean [interval]      wilson [interval]")
    for r in rows:
        print(
            f"{r['llm']:<{width}}  {r['n_observed']:>5}  {r['observed_accuracy']:>10.3f}  "
            f"{r['accuracy_mean']:.3f} [{r['accuracy_lower']:.3f}, {r['accuracy_upper']:.3f}]"
            f"      [{r['binomial_lower']:.3f}, {r['binomial_upper']:.3f}]"
        )
    return 0

"""``bayes-microbench check POSTERIOR [POSTERIOR ...]``: how well saved fits fit their responses.

For each posterior written by ``fit``: its convergence (as saved) and its
posterior predictive checks (per-llm accuracy, per-item proportion correct,
raw-score sd; a p-value outside [0.05, 0.95] flags misfit). Given two or more
posteriors fitted on the same responses (e.g. ``--model 1pl``, ``2pl``, ``3pl``),
their PSIS-LOO comparison, best first. Items-only artifacts (``models/*.nc``)
hold no abilities and cannot be checked: check the full fit.

``check --responses PATH`` instead fits each of ``--candidates`` (default 1PL, 2PL
and the multidimensional 2PL with 2-4 dimensions) as ``fit`` does by default and
ranks them by PSIS-LOO, naming the one ``fit --model auto`` would keep and why.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from ._common import (
    POSITIVE_INT,
    add_output_flags,
    add_responses,
    add_seed,
    check_output_folder,
    print_json,
    print_model_choice,
)

logger = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="posterior predictive checks of saved fits, and their LOO comparison",
        description=__doc__,
    )
    p.add_argument("posteriors", nargs="*", metavar="POSTERIOR", help="saved posterior (.nc)")
    add_responses(p, required=False)
    p.add_argument(
        "--candidates",
        default=None,
        metavar="LIST",
        help="with --responses: the models fitted and ranked, simplest first (default "
        "1pl,2pl,2pl-md:2,2pl-md:3,2pl-md:4)",
    )
    p.add_argument(
        "--store",
        default=None,
        metavar="DIR",
        help="with --responses: keep each candidate's fit in DIR as it finishes; the same "
        "command again with the same DIR resumes where it stopped",
    )
    p.add_argument(
        "--max-draws",
        type=POSITIVE_INT,
        default=400,
        help="posterior draws used per check (default 400; LOO memory: draws x cells x 4 bytes)",
    )
    add_seed(p)
    add_output_flags(p)
    p.set_defaults(func=run)


def _names(paths: list[str]) -> list[str]:
    """File names, or the paths where two posteriors share a file name."""
    names = [Path(p).name for p in paths]
    return names if len(set(names)) == len(names) else list(paths)


def run(args: argparse.Namespace) -> int:
    from ..exceptions import ConfigurationError
    from ..irt.checks import check_same_responses, loo, loo_rows, posterior_predictive_check
    from ..irt.io import load_posterior

    if args.max_draws < 1:
        raise ConfigurationError(f"--max-draws must be at least 1, got {args.max_draws}")
    if bool(args.posteriors) == bool(args.responses):
        raise ConfigurationError(
            "check takes either saved POSTERIOR files or --responses PATH (to fit and rank "
            "the --candidates models), not both and not neither"
        )
    if args.responses:
        return _rank_candidates(args)
    for name, value in (("--candidates", args.candidates), ("--store", args.store)):
        if value is not None:
            raise ConfigurationError(f"{name} applies only with --responses; drop it")
    fits = {
        name: load_posterior(p)
        for name, p in zip(_names(args.posteriors), args.posteriors, strict=True)
    }
    for name, fit in fits.items():
        if fit.items_only:
            raise ConfigurationError(
                f"{name}: an items-only artifact (no abilities, no responses); "
                "check the full posterior that 'fit --output' wrote"
            )
    if len(fits) > 1:
        check_same_responses(fits)
    checked = []
    for name, fit in fits.items():
        ppc = posterior_predictive_check(fit, max_draws=args.max_draws, random_seed=args.seed)
        diag = fit.diagnostics
        checked.append(
            {
                "posterior": name,
                "model": fit.model,
                "method": fit.sampler.method,
                "converged": fit.converged,
                "problems": fit.convergence_problems(),
                "diagnostics": None if diag is None else diag.to_dict(),
                "ppc": ppc.summary,
            }
        )
    table = None
    if len(fits) > 1:
        elpd = {}
        for name, fit in fits.items():
            # per-cell Pareto smoothing: about 2 minutes per fit for GPQA's 188k cells
            logger.info("PSIS-LOO of %s ...", name)
            elpd[name] = loo(fit, max_draws=args.max_draws)
        table = loo_rows(elpd, key="posterior")
    if args.json:
        print_json({"posteriors": checked, "loo": table})
        return 0
    for row in checked:
        _print_checked(row)
    if table is not None:
        _print_loo(table, args.max_draws)
    return 0


def _rank_candidates(args: argparse.Namespace) -> int:
    """``check --responses``: fit the candidates by default, rank them by PSIS-LOO."""
    from ..io import load_responses
    from ..irt.choice import compare_candidates, parse_candidates

    candidates = parse_candidates(args.candidates)
    if args.store is not None:
        check_output_folder(args.store, "--store")
    resp = load_responses(args.responses, args.items)
    _, report = compare_candidates(
        resp,
        candidates,
        max_draws=args.max_draws,
        store=args.store,
        random_seed=args.seed,
        progressbar=False,
    )
    if args.json:
        print_json({"model_choice": report})
    elif not args.quiet:
        print_model_choice(report)
    return 0


def _print_checked(row: dict[str, Any]) -> None:
    diag, ppc = row["diagnostics"], row["ppc"]
    if diag is None and row["converged"] is False:
        fit = f"{row['method']}, NOT converged: {'; '.join(row['problems'])}"
    elif diag is None:
        fit = f"{row['method']} (an approximation: no convergence diagnostics)"
    elif row["converged"]:
        fit = (
            f"NUTS, converged (max R-hat {diag['max_rhat']:.4f}, min bulk ESS "
            f"{diag['min_ess_bulk']:.0f}, {diag['divergences']} divergences)"
        )
    else:
        fit = f"NUTS, NOT converged: {'; '.join(diag['problems'])}"
    print(f"{row['posterior']}: {row['model']}, {fit}")
    print(
        f"  PPC ({ppc['draws_used']} draws): {ppc['llm_accuracy_ppp_outside_5_95']} of "
        f"{ppc['n_llms']} llms and {ppc['item_p_correct_ppp_outside_5_95']} of "
        f"{ppc['n_items']} items with p outside [0.05, 0.95]; mean |observed - predicted| "
        f"accuracy {ppc['llm_accuracy_mean_abs_error']:.4f}, proportion correct "
        f"{ppc['item_p_correct_mean_abs_error']:.4f}; raw-score sd p "
        f"{ppc['raw_score_sd_ppp']:.2f}"
    )


def _print_loo(rows: list[dict[str, Any]], max_draws: int) -> None:
    width = max(len(r["posterior"]) for r in rows)
    print(
        f"PSIS-LOO over {rows[0]['cells']} observed cells (at most {max_draws} draws), best first:"
    )
    print(
        f"  {'posterior':<{width}}  {'elpd_loo':>11}  {'SE':>7}  {'elpd_diff':>10}  {'dse':>7}  k>0.7"
    )
    for r in rows:
        print(
            f"  {r['posterior']:<{width}}  {r['elpd_loo']:>11.1f}  {r['se']:>7.1f}  "
            f"{r['elpd_diff']:>10.1f}  {r['dse']:>7.1f}  {r['cells_pareto_k_over_0.7']}"
        )

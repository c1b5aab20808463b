"""``bayes-microbench fit``: fit a hierarchical IRT model and save its posterior.

A NUTS fit that misses a convergence threshold (R-hat <= 1.01, bulk and tail
ESS >= 400, no divergences, BFMI >= 0.3) prints one line naming what failed and
exits 3 without writing ``--output``, so that no later step picks up an
unconverged posterior; ``--allow-unconverged`` writes it anyway (its
diagnostics are stored in the file) and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from typing import cast

from ._common import (
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    add_dims,
    add_output_flags,
    add_responses,
    add_seed,
    check_dims,
    check_output_file,
    check_output_folder,
    print_json,
    print_model_choice,
    whole_number,
)

EXIT_UNCONVERGED = 3


def register(sub: argparse._SubParsersAction) -> None:
    from ..irt.policy import WEAK_ITEM_SHARE

    p = sub.add_parser(
        "fit",
        help="fit a hierarchical 1PL/2PL/3PL (or multidimensional 2PL) IRT model and save the posterior",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_responses(p)
    p.add_argument(
        "--model",
        choices=["1pl", "2pl", "3pl", "2pl-md", "auto"],
        default="2pl",
        help="default 2pl; 2pl-md is the multidimensional 2PL (see --dims); auto fits each of "
        "--candidates and keeps the one PSIS-LOO chooses, recording why in the file",
    )
    p.add_argument(
        "--candidates",
        default=None,
        metavar="LIST",
        help="--model auto: the models compared, simplest first (default "
        "1pl,2pl,2pl-md:2,2pl-md:3,2pl-md:4; 2pl-md:D has D ability dimensions)",
    )
    p.add_argument(
        "--store",
        default=None,
        metavar="DIR",
        help="--model auto: keep each candidate's fit in DIR as it finishes; the same "
        "command again with the same DIR resumes where it stopped",
    )
    add_dims(p)
    p.add_argument(
        "--method",
        choices=["nuts", "advi", "pathfinder", "map", "laplace"],
        default="nuts",
        help="nuts (default) or a fast approximation",
    )
    p.add_argument("--chains", type=POSITIVE_INT, default=2, help="NUTS chains (default 2)")
    p.add_argument(
        "--draws",
        type=POSITIVE_INT,
        default=None,
        help="draws per chain (default for NUTS: 1000, extended up to 4000 when a fit misses "
        "only R-hat or ESS; 1000 for the approximations)",
    )
    p.add_argument(
        "--tune", type=NON_NEGATIVE_INT, default=1000, help="NUTS tuning steps (default 1000)"
    )
    p.add_argument(
        "--backend",
        choices=["nutpie", "numpyro"],
        default="nutpie",
        help="NUTS back end (default nutpie)",
    )
    p.add_argument(
        "--discrimination-prior",
        choices=["auto", "lognormal", "truncated-normal"],
        default="auto",
        help="2PL/3PL: auto (default: a NUTS 2PL with the parameterization left to auto "
        f"takes truncated-normal where at least {100 * WEAK_ITEM_SHARE:.0f}%% of the items are answered "
        "no more often by the llms that do better on the others, else lognormal), lognormal, or "
        "truncated-normal (density at zero discrimination; docs/decisions/0036)",
    )
    p.add_argument(
        "--parameterization",
        default="auto",
        metavar="NAME",
        help="what NUTS samples: auto (default: decoupled from 100 llms, decoupled-nc below "
        "for a lognormal 2PL/3PL and at any size for a lognormal 3PL whose fixed floors leave "
        "its items weakly informed, else non-centered), decoupled (centered items), "
        "decoupled-nc, non-centered; 2pl-md: decoupled, centered or non-centered",
    )
    p.add_argument(
        "--n-options",
        type=whole_number(2),
        default=None,
        help="3PL: K answer options for every item (guessing fixed at 1/K)",
    )
    add_seed(p)
    p.add_argument("--output", required=True, metavar="PATH", help="posterior file (.nc)")
    p.add_argument(
        "--items-only",
        action="store_true",
        help="save only item and subtask parameters (small artifact, no abilities)",
    )
    p.add_argument("--thin", type=POSITIVE_INT, default=1, help="keep every N-th draw (default 1)")
    p.add_argument(
        "--allow-unconverged",
        action="store_true",
        help="write the posterior and exit 0 even if convergence checks fail",
    )
    p.add_argument("--progress", action="store_true", help="show the sampler's progress bar")
    add_output_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..exceptions import ConvergenceWarning, UserInputError
    from ..io import load_responses
    from ..irt import IRTModel
    from ..irt.config import IRTConfig, check_fit_settings
    from ..irt.model import fit_default
    from ..irt.policy import prior_choice, refits_text, remedy_text

    out = Path(args.output)
    if out.suffix.lower() not in (".nc", ".netcdf", ".h5"):
        raise UserInputError(f"--output {out}: the posterior is NetCDF; use a .nc file name")
    check_output_file(args.output, suggest="posterior.nc")  # before minutes of sampling
    config: dict[str, object] = {}
    if args.n_options is not None:
        config["n_options"] = args.n_options
    if args.discrimination_prior != "auto":
        if args.model not in ("2pl", "3pl", "auto"):
            raise UserInputError(
                f"--discrimination-prior applies to --model 2pl and 3pl (got --model "
                f"{args.model}); drop it"
            )
        config["discrimination_prior"] = args.discrimination_prior
    check_dims(args)
    if args.model == "2pl-md":
        config["n_dims"] = 2 if args.dims is None else args.dims
    if args.model == "auto":
        for name, value, default in (
            ("--method", args.method, "nuts"),
            ("--parameterization", args.parameterization, "auto"),
        ):
            if value != default:
                raise UserInputError(
                    f"{name} {value}: --model auto compares NUTS fits with each model's own "
                    f"parameterization; drop {name}"
                )
        from ..irt.choice import parse_candidates

        candidates = parse_candidates(args.candidates)
        if args.store is not None:
            check_output_folder(args.store, "--store")
    else:
        for name, value in (("--candidates", args.candidates), ("--store", args.store)):
            if value is not None:
                raise UserInputError(
                    f"{name} applies only to --model auto (got --model {args.model}); drop it"
                )
    # every setting, before any data is read (the messages name this command's flags)
    if args.model != "auto":  # auto: each candidate's configuration is its own
        IRTConfig.from_dict({**config, "model": args.model})
    check_fit_settings(
        model="2pl" if args.model == "auto" else args.model,
        discrimination_prior=cast(str, config.get("discrimination_prior", "lognormal")),
        method=args.method,
        backend=args.backend,
        chains=args.chains,
        draws=args.draws,
        tune=args.tune,
        parameterization=args.parameterization,
    )
    resp = load_responses(args.responses, args.items)
    settings = {
        "chains": args.chains,
        "tune": args.tune,
        "random_seed": args.seed,
        "progressbar": args.progress and not args.quiet,
        "backend": args.backend,
        "parameterization": args.parameterization,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # reported below, once
        if args.model == "auto":
            from ..irt.choice import compare_candidates

            model, _ = compare_candidates(
                resp,
                candidates,
                config=config or None,
                draws=args.draws,
                store=args.store,
                **settings,
            )
        elif args.method == "nuts" and args.draws is None:
            # the data decide the chain length, within DRAWS_BUDGET draws per chain
            model = fit_default(resp, args.model, config or None, **settings)
        else:
            chosen = None
            if args.method == "nuts":  # draws given: no refits, but the data choose the prior
                chosen = prior_choice(resp.values, args.model, config, args.parameterization)
            if chosen is not None:
                config["discrimination_prior"] = chosen["prior"]
            model = IRTModel(resp, args.model, config=config or None)
            model.fit(args.method, draws=args.draws or 1000, **settings)
            if chosen is not None:
                model.fit_info["prior_choice"] = chosen
    diag = model.diagnostics
    # NUTS: the diagnostics; an approximation: its optimizer (MAP's L-BFGS-B, ADVI's schedule)
    converged = model.converged is not False
    problems = model.convergence_problems()
    written = converged or args.allow_unconverged
    calibration = None
    if written:
        # the calibration score applies by default (irt.calibration): seconds, not minutes
        import time

        start = time.perf_counter()
        try:
            model.calibrate(random_seed=args.seed)
        except UserInputError as err:
            logging.getLogger(__name__).warning(
                "no calibration saved with the posterior (%s); score will print the raw "
                "model's intervals",
                err,
            )
        else:
            calibration = {"seconds": round(time.perf_counter() - start, 3)}
        model.save(out, items_only=args.items_only, thin=args.thin)
    chosen = model.config.model
    result = {
        "model": chosen,
        "n_dims": model.config.n_dims if chosen == "2pl-md" else None,
        "method": args.method,
        "parameterization": model.parameterization,
        "n_llms": model.data.n_llms,
        "n_items": model.data.n_items,
        "wall_seconds": round(
            float(model.fit_info.get("wall_seconds_all", model.wall_seconds) or 0.0), 3
        ),
        "converged": model.converged,
        "max_rhat": diag.max_rhat if diag else None,
        "min_ess_bulk": diag.min_ess_bulk if diag else None,
        "min_ess_tail": diag.min_ess_tail if diag else None,
        "divergences": diag.divergences if diag else None,
        "min_bfmi": diag.min_bfmi if diag else None,
        "problems": problems,
        "output": str(out) if written else None,
        "notes": model.data.notes,
        "fit_info": model.fit_info,
        "calibration": calibration,
        "model_choice": model.fit_info.get("model_choice"),
    }
    if args.json:
        print_json(result)
    elif not args.quiet:
        if result["model_choice"]:
            print_model_choice(result["model_choice"])
        print(
            f"{chosen} {args.method} fit of {model.data.n_llms} llms x {model.data.n_items} items in {result['wall_seconds']:.1f} s"
        )
        if diag is not None:
            print(
                f"  max R-hat {diag.max_rhat:.4f}, min bulk ESS {diag.min_ess_bulk:.0f}, "
                f"min tail ESS {diag.min_ess_tail:.0f}, divergences {diag.divergences}"
            )
        choice = model.fit_info.get("prior_choice")
        # said when the kept fit has it (a lognormal refit kept is said by the refits line)
        if choice and choice["prior"] == model.config.discrimination_prior != "lognormal":
            print(
                f"  the {choice['prior']} discrimination prior, chosen from the data: "
                f"{100 * choice['weak_item_share']:.0f}% of the items are answered no more "
                f"often by the llms that do better on the others (at least "
                f"{100 * choice['threshold']:.0f}%)"
            )
        refits = model.fit_info.get("refits") or []
        if len(refits) > 1 and converged:
            first = refits[0]
            print(
                f"  the default {first['parameterization']} fit missed (max R-hat "
                f"{first['max_rhat']:.3f}, {first['divergences']} divergences); kept the refit "
                f"in {model.parameterization} with the {model.config.discrimination_prior} "
                "discrimination prior"
            )
        if written:
            print(f"  posterior written to {out}")
    if not converged:
        remedy = "more --tune/--draws" if diag is not None else "--method nuts"
        action = (
            f"written anyway to {out} (--allow-unconverged)"
            if written
            else f"not written; rerun with {remedy}, or pass --allow-unconverged"
        )
        hint = remedy_text(model.policy()) if diag is not None else ""
        if len(model.fit_info.get("refits") or []) > 1:
            hint = refits_text(model.fit_info["refits"])
        print(
            f"bayes-microbench: {'warning' if written else 'error'}: the {args.method} fit did "
            f"not converge ({'; '.join(problems)}); posterior {action}"
            + (f"; {hint}" if hint else ""),
            file=sys.stderr,
        )
        return 0 if written else EXIT_UNCONVERGED
    return 0

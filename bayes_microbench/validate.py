"""Held-out validation: fit on some llms, check every interval the tool prints on the others.

Why: an interval checked only on data simulated from the model checks nothing
about real data; this module is how the tool's own defaults are checked on llms
the posterior never saw.

For each split, ``held_out`` llms are drawn at random and set aside; the item
posterior is fitted on the other llms with the same recipe as ``fit`` (by
default: NUTS with the default settings, and the calibration ``fit`` saves with
it). Each held-out llm's *true* accuracy is its accuracy on every item it
answered. For each design and size:

* **score intervals**: each held-out llm is scored from its answers on the
  design's subset with :func:`bayes_microbench.scoring.score` (the calibrated
  interval, as ``score`` prints it); coverage is the share of llms whose true
  accuracy lies inside the interval, beside its mean width and the mean
  absolute error of the point estimate;
* **P(correct ranking)**: every pair of held-out llms, ranked by the design's
  estimator (the weighted subset mean, what :mod:`bayes_microbench.design`
  predicts for), gets the predicted P(correct | its realized gap) read off the
  design's posterior-mean curve; pairs are pooled in deciles of that
  prediction and the realized share of correct rankings is set beside it;
* **MDAD**: the Bayesian MDAD with its band (:func:`design.design_curves`)
  beside the realized MDAD of the held-out pairs (the study's rule,
  :func:`bayes_microbench.mdad.mdad_from_pairs`): pooled over a random design's
  subsets for the point, and per subset against the band of what one study of
  the held-out llms would measure (one subset is one study).

A ``random`` design draws ``n_replicates`` subsets per size, each shared by all
held-out llms (as one run of the study's protocol); a selector's subset is
chosen once per split from the training posterior.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ._defaults import DEFAULT_CI_PROB
from ._validate import check_positive_int, preview
from .exceptions import ConvergenceWarning, DroppedDataWarning, UserInputError
from .responses import Responses

logger = logging.getLogger(__name__)

#: Fewest held-out llms a validation accepts: below it a coverage share moves in steps
#: of more than 5 points and the pairs are too few to bin.
MIN_HELD_OUT = 20
#: Fewest llms left to fit the posterior on.
MIN_TRAINING = 20
DEFAULT_DESIGNS = ("random", "bayes-fisher", "bayes-ranking")
DEFAULT_SIZES = (25, 50, 100)
DEFAULT_HELD_OUT = 60
DEFAULT_REPLICATES = 10
#: Decile edges of the predicted P(correct ranking).
DECILES = np.linspace(0.0, 1.0, 11)


@dataclass(frozen=True)
class FittedPosterior:
    """What a validation fit returns: the posterior and the calibration ``score`` uses.

    ``misfit`` is ``None`` when the recipe saves no calibration (then the raw
    model's interval is validated, and the report says so).
    """

    posterior: Any
    misfit: Any = None
    converged: bool | None = None
    note: str = ""

    @property
    def calibration(self) -> Any:
        """The calibration, under the name a fit carries it by (so that
        :func:`~bayes_microbench.posterior.open_posterior` reads both alike)."""
        return self.misfit


@dataclass
class ValidationResult:
    """Tables of a held-out validation (see the module docstring).

    ``scores``: one row per (split, design, size): ``coverage``, ``width``,
    ``abs_error`` (fractions), ``n_scored`` (llm x subset cases), ``interval`` (``calibrated`` /
    ``raw``). ``ranking``: one row per decile of the predicted P(correct
    ranking), pooled over splits, designs and sizes: ``predicted``,
    ``realized``, ``n_pairs``. ``mdad``: one row per (split, design, size):
    predicted MDAD (``predicted``) and the posterior band of the design's MDAD
    (``lower``, ``upper``), the band of the MDAD a study of the held-out llms'
    count would measure (``study_lower``, ``study_upper``: the curve's
    uncertainty and which llms the study holds) and the share of those simulated
    studies within 1 point of ``predicted`` (``study_within_one``: how often even
    a right prediction lands within a point), realized MDAD by the study's
    first-crossing rule and from the isotonic fit of the pairs (points; ``inf``
    where not reached; a random design's pooled over its subsets), the MDAD each
    subset realizes on its own (``realized_studies``: one study each, the
    first-crossing rule), ``inside`` (the first subset's within the study band),
    ``studies_inside`` (how many of the subsets' are within it) and
    ``inside_curve_band`` (the pooled realized MDAD within the posterior band).
    Why per subset: the study band is the spread of one study's MDAD; pooled
    subsets cross later and steadier than any one study. ``fits``: one row per
    split: ``n_train``, ``converged``, ``note`` (the failed checks), ``seconds``.
    ``settings``: what ran.
    """

    scores: pd.DataFrame
    ranking: pd.DataFrame
    mdad: pd.DataFrame
    fits: pd.DataFrame
    settings: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The tables as JSON-ready records (``inf`` as ``None``)."""

        def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
            out = frame.replace([np.inf, -np.inf], np.nan).astype(object)
            return out.where(out.notna(), None).to_dict(orient="records")

        return {
            "settings": self.settings,
            "scores": records(self.scores),
            "ranking": records(self.ranking),
            "mdad": records(self.mdad),
            "fits": records(self.fits),
        }


def default_fit(
    model: str = "2pl", n_dims: int | None = None
) -> Callable[[Responses, int], FittedPosterior]:
    """The ``fit`` command's default recipe as a validation fit: NUTS (draws extended as
    ``fit`` extends them), then calibration.

    Parameters
    ----------
    model
        The IRT model (``1pl``, ``2pl``, ``3pl``, ``2pl-md``).
    n_dims
        Ability dimensions of a ``2pl-md`` (None: the model's default, 2).

    Returns
    -------
    A function ``(training responses, seed) -> FittedPosterior``.
    """

    config = _dims_config(model, n_dims)

    def fit(train: Responses, seed: int) -> FittedPosterior:
        from .irt.calibration import calibrate_fitted
        from .irt.model import fit_default

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # reported below, once
            irt = fit_default(train, model, config, random_seed=seed, progressbar=False)
        converged = irt.converged
        note = ""
        if converged is False:
            note = "; ".join(irt.convergence_problems())
            warnings.warn(
                f"validation fit (seed {seed}) did not converge: {note}; its figures rest on "
                "an unconverged posterior",
                ConvergenceWarning,
                stacklevel=2,
            )
        misfit = calibrate_fitted(irt, train, random_seed=seed)
        return FittedPosterior(irt.posterior, misfit, converged, note)

    return fit


def _dims_config(model: str, n_dims: int | None) -> dict[str, Any] | None:
    """The fit's configuration for ``n_dims`` (None when left to the model), checked."""
    if n_dims is None:
        return None
    if model != "2pl-md":
        raise UserInputError(
            f"n_dims = {n_dims}: dimensions apply only to the 2pl-md (got model {model!r}); "
            "drop them or fit the 2pl-md"
        )
    return {"n_dims": check_positive_int(n_dims, "n_dims")}


def _check_settings(
    responses: Responses, designs: Sequence[str], sizes: Sequence[int], held_out: int, splits: int
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    from .selectors import SELECTORS

    held_out = check_positive_int(held_out, "held_out")
    check_positive_int(splits, "splits")
    if held_out < MIN_HELD_OUT:
        raise UserInputError(
            f"held_out = {held_out}: a validation needs at least {MIN_HELD_OUT} held-out llms "
            "(fewer give coverage in steps of more than 5 points); hold out more"
        )
    if responses.n_llms - held_out < MIN_TRAINING:
        raise UserInputError(
            f"held_out = {held_out}: {responses.benchmark} has {responses.n_llms} llms and "
            f"at least {MIN_TRAINING} must be left to fit on; hold out at most "
            f"{max(0, responses.n_llms - MIN_TRAINING)}"
        )
    sizes_t = tuple(sorted({check_positive_int(n, "sizes") for n in sizes}))
    too_big = [n for n in sizes_t if n >= responses.n_items]
    if not sizes_t or too_big:
        raise UserInputError(
            f"sizes {too_big or list(sizes)}: {responses.benchmark} has {responses.n_items} "
            "items; choose sizes below it"
        )
    known = {"random", *SELECTORS}
    unknown = [d for d in designs if d not in known]
    if not designs or unknown:
        raise UserInputError(
            f"designs {unknown or list(designs)}: not a registered design; choose from "
            f"{preview(sorted(known), 20)}"
        )
    return tuple(dict.fromkeys(designs)), sizes_t


def _subsets(
    design: str, posterior: Any, n: int, items: np.ndarray, replicates: int, rng: Any
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The design's subsets of size ``n``: (item positions, estimator weights) each."""
    from .design import select_from_posterior

    if design == "random":
        out = []
        for _ in range(replicates):
            pos = np.sort(rng.choice(len(items), size=n, replace=False))
            out.append((pos, np.full(n, 1.0 / n)))
        return out
    ids, _, weights, _ = select_from_posterior(
        posterior, design, n, random_seed=int(rng.integers(2**31))
    )
    index = pd.Index(items)
    return [(index.get_indexer(ids), np.asarray(weights, dtype=np.float64))]


def _weighted_estimate(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each llm's weighted subset mean over the items it answered (NaN where none)."""
    seen = ~np.isnan(values)
    w = np.where(seen, weights[None, :], 0.0)
    total = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (w * np.nan_to_num(values)).sum(axis=1) / total, np.nan)


def _share_within(values: np.ndarray, point: float, tol: float) -> float:
    """Share of ``values`` within ``tol`` of ``point`` (an ``inf`` matches an ``inf``)."""
    both_inf = np.isinf(values) & np.isinf(point)
    with np.errstate(invalid="ignore"):
        close = np.abs(values - point) <= tol
    return float(np.mean(both_inf | close))


def _one_study(diff: np.ndarray, correct: np.ndarray) -> float:
    """The MDAD one study's pairs realize (points; ``inf`` where not reached, as in the
    simulated studies' band)."""
    from .mdad import mdad_from_pairs

    mdad = mdad_from_pairs(diff, correct, n_boot=1, random_seed=0).mdad  # the point only
    return math.inf if math.isnan(mdad) else float(mdad)


def mdad_check(rows: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """Of one run's MDAD rows (``ValidationReport.to_json()["mdad"]``): how many lie inside
    the simulated studies' band, and how many within 1 point of the prediction.

    A row where neither the prediction nor the realized MDAD is reached counts as within
    1 point; one where only one of them is, does not. Why one function: the benchmark
    report and the model cards count the same rows.
    """
    inside = sum(bool(m.get("inside")) for m in rows)
    close = 0
    for m in rows:
        p, r = m.get("predicted"), m.get("realized")
        if p is None or r is None:
            close += p is None and r is None
        else:
            close += abs(p - r) <= 1.0
    return inside, close


def _pairs(truth: np.ndarray, estimate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gap (fraction) and correct-ranking indicator of every pair with a defined truth."""
    i, j = np.triu_indices(len(truth), k=1)
    diff = truth[i] - truth[j]
    est = estimate[i] - estimate[j]
    keep = (diff != 0) & ~np.isnan(est)
    correct = (np.sign(est[keep]) == np.sign(diff[keep])).astype(np.float64)
    return diff[keep], correct


def validate(
    responses: Responses,
    *,
    designs: Sequence[str] = DEFAULT_DESIGNS,
    sizes: Sequence[int] = DEFAULT_SIZES,
    held_out: int = DEFAULT_HELD_OUT,
    splits: int = 1,
    n_replicates: int = DEFAULT_REPLICATES,
    fit: Callable[[Responses, int], FittedPosterior] | None = None,
    model: str = "2pl",
    n_dims: int | None = None,
    ci_prob: float | None = None,
    random_seed: int = 0,
) -> ValidationResult:
    """Validate the tool's intervals and design predictions on held-out llms.

    Parameters
    ----------
    responses
        A complete responses matrix (llms x items); held-out llms are drawn from it.
    designs
        ``random`` and/or registered selector names (the Bayesian selectors
        choose from the training posterior).
    sizes
        Subset sizes, each below the number of items.
    held_out
        Llms held out per split (at least :data:`MIN_HELD_OUT`, leaving at
        least :data:`MIN_TRAINING` to fit on).
    splits
        Independent held-out splits.
    n_replicates
        Random subsets per size of the ``random`` design.
    fit
        ``(training responses, seed) -> FittedPosterior``; default
        :func:`default_fit` of ``model`` (what ``fit`` does with no flags).
    model
        The model of the default fit.
    n_dims
        Ability dimensions of a ``2pl-md`` default fit (None: 2).
    ci_prob
        Interval probability (default: the scoring default).
    random_seed
        Seed of the splits, subsets and fits.

    Returns
    -------
    ValidationResult
    """
    from .design import design_curves, fixed_design
    from .mdad import mdad_from_pairs, monotone_mdad
    from .posterior import item_draws
    from .scoring import score

    designs_t, sizes_t = _check_settings(responses, designs, sizes, held_out, splits)
    n_replicates = check_positive_int(n_replicates, "n_replicates")
    ci = DEFAULT_CI_PROB if ci_prob is None else float(ci_prob)
    _dims_config(model, n_dims)
    fit = default_fit(model, n_dims) if fit is None else fit
    rng = np.random.default_rng(random_seed)
    score_rows: list[dict[str, Any]] = []
    fit_rows: list[dict[str, Any]] = []
    mdad_rows: list[dict[str, Any]] = []
    pred_all: list[np.ndarray] = []
    real_all: list[np.ndarray] = []
    for split in range(splits):
        held = np.sort(rng.choice(responses.n_llms, size=held_out, replace=False))
        train_mask = np.ones(responses.n_llms, dtype=bool)
        train_mask[held] = False
        train = responses.isel(llm=np.flatnonzero(train_mask))
        logger.info("split %d: fitting on %d llms, %d held out", split, train.n_llms, held_out)
        started = time.perf_counter()
        fitted = fit(train, int(rng.integers(2**31)))
        fit_rows.append(
            {
                "split": split,
                "n_train": train.n_llms,
                "converged": fitted.converged,
                "note": fitted.note,
                "seconds": time.perf_counter() - started,
            }
        )
        draws = item_draws(fitted.posterior, multidim=True)
        post_items = np.asarray(draws.items).astype(str)
        # the held-out llms on the posterior's items, in its order
        test = responses.isel(llm=held).select(items=post_items.tolist())
        values = test.values
        truth = np.nanmean(values, axis=1)
        for design in designs_t:
            for n in sizes_t:
                subsets = _subsets(design, fitted, n, post_items, n_replicates, rng)
                covered, widths, errors = [], [], []
                diffs, corrects = [], []
                for pos, weights in subsets:
                    with warnings.catch_warnings():
                        # an llm that answered none of the subset is scored from the prior
                        warnings.simplefilter("ignore", DroppedDataWarning)
                        scored = score(
                            fitted.posterior,
                            test.isel(item=pos),
                            misfit=fitted.misfit,
                            ci_prob=ci,
                            random_seed=int(rng.integers(2**31)),
                            draws=draws,
                        )
                    kept = pd.Index(test.llms).get_indexer(scored["llm"].to_numpy())
                    bounds = scored["accuracy_interval"].to_numpy()
                    mean = scored["accuracy_mean"].to_numpy()
                    t = truth[kept]
                    covered.append((bounds[:, 0] <= t) & (t <= bounds[:, 1]))
                    widths.append(bounds[:, 1] - bounds[:, 0])
                    errors.append(np.abs(mean - t))
                    diff, correct = _pairs(truth, _weighted_estimate(values[:, pos], weights))
                    diffs.append(diff)
                    corrects.append(correct)
                diff = np.concatenate(diffs)
                correct = np.concatenate(corrects)
                score_rows.append(
                    {
                        "split": split,
                        "design": design,
                        "n": n,
                        "coverage": float(np.mean(np.concatenate(covered))),
                        "width": float(np.mean(np.concatenate(widths))),
                        "abs_error": float(np.mean(np.concatenate(errors))),
                        "n_scored": int(sum(len(c) for c in covered)),
                        "interval": "raw" if fitted.misfit is None else "calibrated",
                    }
                )
                if design == "random":
                    design_obj = None
                else:
                    pos, weights = subsets[0]
                    design_obj = fixed_design([pos], len(post_items), design, [weights])
                curves = design_curves(
                    fitted.posterior,
                    design_obj,
                    sizes=[n] if design_obj is None else None,
                    ci_prob=ci,
                    random_seed=split,
                    draws=draws,
                    population=fitted.misfit,
                    n_llms=held_out,
                )
                gaps = curves["gap"].to_numpy()
                curve = curves["p_correct_mean"].isel(n_items=0).to_numpy()
                pred_all.append(np.interp(np.abs(diff) * 100.0, gaps, curve))
                real_all.append(correct)
                realized = mdad_from_pairs(diff, correct, random_seed=split).mdad
                smooth = monotone_mdad(
                    diff, correct, method="isotonic", n_boot=200, random_seed=split
                ).mdad
                band = curves["mdad_interval"].isel(n_items=0).to_numpy()
                study = curves["mdad_study_interval"].isel(n_items=0).to_numpy()
                one = [_one_study(d, c) for d, c in zip(diffs, corrects, strict=True)]
                inside = [bool(study[0] <= r <= study[1]) for r in one]
                point = float(curves["mdad"].isel(n_items=0))
                studies = curves["mdad_study_draws"].isel(n_items=0).to_numpy().ravel()
                mdad_rows.append(
                    {
                        "split": split,
                        "design": design,
                        "n": n,
                        "predicted": point,
                        "lower": float(band[0]),
                        "upper": float(band[1]),
                        "realized": float(realized),
                        "realized_isotonic": float(smooth),
                        "study_lower": float(study[0]),
                        "study_upper": float(study[1]),
                        "study_within_one": _share_within(studies, point, 1.0),
                        "realized_studies": [None if np.isinf(r) else r for r in one],
                        "inside": inside[0],
                        "studies_inside": int(sum(inside)),
                        "inside_curve_band": bool(band[0] <= realized <= band[1]),
                        "n_pairs": int(diff.size),
                    }
                )
    predicted = np.concatenate(pred_all)
    outcome = np.concatenate(real_all)
    which = np.clip(np.digitize(predicted, DECILES[1:-1]), 0, len(DECILES) - 2)
    ranking = pd.DataFrame(
        [
            {
                "bin_lower": DECILES[b],
                "bin_upper": DECILES[b + 1],
                "predicted": float(predicted[which == b].mean()),
                "realized": float(outcome[which == b].mean()),
                "n_pairs": int((which == b).sum()),
            }
            for b in range(len(DECILES) - 1)
            if (which == b).any()
        ]
    )
    settings = {
        "benchmark": responses.benchmark,
        "n_llms": responses.n_llms,
        "n_items": responses.n_items,
        "designs": list(designs_t),
        "sizes": list(sizes_t),
        "held_out": held_out,
        "splits": splits,
        "n_replicates": n_replicates,
        "ci_prob": ci,
        "random_seed": random_seed,
    }
    if n_dims is not None:
        settings["n_dims"] = n_dims
    return ValidationResult(
        pd.DataFrame(score_rows), ranking, pd.DataFrame(mdad_rows), pd.DataFrame(fit_rows), settings
    )

"""The sampling policy: what a fit of these data samples in, how it adapts, what it suggests.

:func:`choose` is one pure function of the data, the configuration and the method (and
what the caller asked for) returning a :class:`Policy`: the parameterization and the
mass-matrix adaptation ``"auto"`` resolves to, and the remedy an unconverged fit names.
:func:`remedy_text` phrases the remedy, naming the settings as the caller spells them
(parameters for the library, flags for the command); :func:`remedy_refits` lists the
refits a default fit tries itself when it has not converged. :func:`data_prior` is the
discrimination prior a default 2PL fit starts from, chosen from the share of items that
do not discriminate (:func:`weak_item_share`).

Why: docs/decisions/0013-decoupled-parameterization-for-nuts.md (decoupled and
``draw_diag`` from 100 llms), docs/decisions/0014-decoupled-nc-below-100-llms-and-weak-3pl.md
(decoupled-nc below, the weakly informed 3PL, the remedies) and
docs/decisions/0025-irt-graph-blocks-and-one-policy.md (one function, not six members),
docs/decisions/0032-default-fit-tries-its-remedies.md (the refits),
docs/decisions/0036-default-fit-continues-its-chains.md (the prior the data choose).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._validate import param
from .config import IRTConfig
from .data import IRTData

#: NUTS samples centered item parameters ("decoupled") from this many llms on
#: (but see ``WEAK_SLOPE_SD``).
CENTERED_MIN_LLMS = 100

#: A fixed-floor lognormal 3PL whose median item
#: :func:`~bayes_microbench.irt.pymc_model.slope_sd` exceeds this is sampled
#: non-centered ("decoupled-nc") at any size (:attr:`Policy.weak_slopes`).
#: Measured on the simulator's GPQA preset, shifted (docs/decisions/0014).
WEAK_SLOPE_SD = 0.24

#: A default 2PL fit starts from the truncated-normal discrimination prior where at
#: least this share of the items is answered correctly no more often by the llms that
#: do better on the other items (:func:`weak_item_share`). An item that does not
#: discriminate falls on either side of 0 about equally often, so 0.2 marks about 40% of
#: items without discrimination (docs/decisions/0036).
WEAK_ITEM_SHARE = 0.2

Remedy = Literal["floor-misfit", "truncated-normal", "centered-items", "plain-abilities", ""]

#: What an unconverged ``"decoupled-nc"`` NUTS fit suggests (``{centered}``: how to
#: ask for the centered items in the caller's interface).
SMALL_MATRIX_HINT = (
    "below 100 llms no parameterization has converged on every real matrix measured; "
    "{centered} (centered items) mixed better on all five PredictaBoard matrices, "
    "diverging on three with the lognormal prior and on none with the truncated normal "
    "(benchmarks/README.md, 'NUTS below 100 llms')"
)


@dataclass(frozen=True)
class Policy:
    """What :func:`choose` decided for one fit.

    Attributes
    ----------
    parameterization
        What the graph is built in (``"auto"`` resolved).
    adaptation
        nutpie's mass-matrix adaptation (``"auto"`` resolved).
    remedy
        The remedy an unconverged NUTS fit names: ``"floor-misfit"`` (use the 2PL),
        ``"truncated-normal"`` (the truncated-normal discrimination prior),
        ``"centered-items"`` (``parameterization="decoupled"``), ``"plain-abilities"``
        (a decoupled ``2pl-md``: ``parameterization="centered"``) or ``""`` (none known).
    floor_misfit
        Why a fixed-floor 3PL may fail here, in one clause ("" when it does not apply).
    weak_slopes
        Whether the data pin a fixed-floor lognormal 3PL's slopes too loosely to center them.
    truncated_normal_may_help
        Whether the truncated-normal prior is the measured remedy for this fit.
    """

    parameterization: str
    adaptation: str
    remedy: Remedy
    floor_misfit: str
    weak_slopes: bool
    truncated_normal_may_help: bool


def lognormal_discrimination(config: IRTConfig) -> bool:
    """A 2PL or 3PL with the lognormal discrimination prior (what ``"decoupled-nc"`` samples)."""
    return config.model in ("2pl", "3pl") and config.discrimination_prior == "lognormal"


def floor_misfit(data: IRTData, config: IRTConfig) -> str:
    """Why a fixed-floor 3PL may fail on ``data``, in one clause ("" when it does not apply).

    Applies where some item is answered correctly below its fixed guessing floor
    beyond chance (``data.notes["items_far_below_floor"]``, Bonferroni over the
    items): the model cannot fit such items. Names how many items are below their
    floor at all (``data.notes["items_below_floor"]``, about 1% of a well-fitting
    3PL's items) and how many beyond chance. On GPQA 158 of the 448 items are below,
    118 beyond chance; without the 158 its 3PL mixed better (R-hat 1.014 against
    1.028, with the 2PL's item centring), though still short of converging.
    """
    far = data.notes.get("items_far_below_floor", [])
    if config.model != "3pl" or not far:
        return ""
    below = data.notes.get("items_below_floor", [])
    return (
        "items answered correctly less often than their fixed guessing floor allows: "
        f"{len(below)} ({len(far)} beyond chance; items_below_floor and "
        "items_far_below_floor in the log); a 3PL cannot fit them: use the 2PL"
    )


def weak_slopes(data: IRTData, config: IRTConfig) -> bool:
    """Whether a 3PL's data pin its items' slopes down too loosely to center them.

    True for a lognormal-prior 3PL with fixed floors that no item contradicts
    beyond chance (no :func:`floor_misfit`) whose median item slope is weakly
    informed: its likelihood alone leaves ``log discrimination`` an sd above
    :data:`WEAK_SLOPE_SD` (:func:`~bayes_microbench.irt.pymc_model.slope_sd`). A
    floor spends the information of every llm near it, so on a hard benchmark the
    slopes rest on the few strong llms and the centered items meet a funnel in the
    subtask sd; NUTS then samples the items non-centered at any number of llms
    (``benchmarks/study_3pl_parameterization.py``). On GPQA's real matrix, whose
    1/4 floor 118 items contradict beyond chance, the centered form mixed better,
    so a floor misfit keeps it.
    """
    from .pymc_model import slope_sd

    if not (config.model == "3pl" and lognormal_discrimination(config)):
        return False
    if floor_misfit(data, config) or not (data.guessing_fixed > 0).any():
        return False
    return bool(np.median(slope_sd(data)) > WEAK_SLOPE_SD)


def weak_item_share(values: np.ndarray) -> float:
    """The share of items whose correctness does not rise with the llm's other answers.

    Parameters
    ----------
    values
        The llm x item response matrix (1 / 0, NaN where missing).

    Returns
    -------
    float
        Among items answered both right and wrong, the share whose correlation with the
        rest score (each llm's accuracy on its other answered items) is at most 0; 0.0
        when no item qualifies.

    Why: under the lognormal prior items with no discrimination stretch the subtask's
    log-discrimination spread over orders of magnitude, which NUTS explores slowly;
    the truncated normal puts density at 0 (docs/decisions/0036).
    """
    x = np.asarray(values, dtype=np.float64)
    seen = ~np.isnan(x)
    xz = np.where(seen, x, 0.0)
    answered = seen.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rest = np.where(
            seen & (answered > 1), (xz.sum(axis=1, keepdims=True) - xz) / (answered - 1), 0.0
        )
        use = seen & (answered > 1)
        n = use.sum(axis=0)
        mx, mr = (xz * use).sum(axis=0) / n, rest.sum(axis=0) / n
        cov = (xz * rest).sum(axis=0) / n - mx * mr
        vx = (xz * xz * use).sum(axis=0) / n - mx * mx
        vr = (rest * rest).sum(axis=0) / n - mr * mr
    ok = (n > 2) & (vx > 1e-12) & (vr > 1e-12)
    if not ok.any():
        return 0.0
    corr = cov[ok] / np.sqrt(vx[ok] * vr[ok])
    return float(np.mean(corr <= 0.0))


def data_prior(values: np.ndarray, model: str) -> tuple[str, float]:
    """The discrimination prior a default NUTS fit of ``model`` starts from, and why.

    Parameters
    ----------
    values
        The llm x item response matrix (1 / 0, NaN where missing).
    model
        The IRT model; only the 2PL's prior is chosen from the data (the 3PL keeps
        the lognormal, whose remedies :func:`choose` names).

    Returns
    -------
    tuple[str, float]
        ``"truncated-normal"`` where :func:`weak_item_share` is at least
        :data:`WEAK_ITEM_SHARE`, else ``"lognormal"``; and the share (NaN when not
        computed).
    """
    if model != "2pl":
        return "lognormal", float("nan")
    share = weak_item_share(values)
    return ("truncated-normal" if share >= WEAK_ITEM_SHARE else "lognormal"), share


def prior_choice(
    values: np.ndarray,
    model: str,
    config: dict[str, Any] | None = None,
    parameterization: str = "auto",
) -> dict[str, Any] | None:
    """The record of the prior a fit that left it to the data starts from, or ``None``.

    ``None`` unless ``model`` is the 2PL and the caller left both the discrimination
    prior (not in ``config``) and the parameterization (``"auto"``) to the defaults;
    else ``{"prior", "weak_item_share", "threshold"}`` (:func:`data_prior`), which a fit
    keeps in ``fit_info["prior_choice"]``. Why one function: the default fit, a fit of
    given draws and ``fit --model auto`` choose the same way.
    """
    if model != "2pl" or parameterization != "auto" or "discrimination_prior" in (config or {}):
        return None
    prior, share = data_prior(values, model)
    return {"prior": prior, "weak_item_share": round(share, 4), "threshold": WEAK_ITEM_SHARE}


def choose(
    data: IRTData,
    config: IRTConfig,
    method: str | None,
    *,
    parameterization: str = "auto",
    adaptation: str = "auto",
    weak: bool | None = None,
) -> Policy:
    """The sampling policy of a ``method`` fit of ``data`` under ``config``.

    Parameters
    ----------
    data, config
        The data as the model sees them and the validated configuration.
    method
        ``"nuts"`` or an approximation; ``None`` before any fit (no method-dependent
        remedy, and ``"auto"`` resolves as for an approximation).
    parameterization
        What the caller asked for: ``"auto"`` resolves to ``"decoupled"`` (NUTS from
        :data:`CENTERED_MIN_LLMS` llms, unless :func:`weak_slopes`), ``"decoupled-nc"``
        (NUTS of a lognormal 2PL/3PL otherwise), ``"non-centered"`` (the rest); for a
        ``2pl-md``: ``"decoupled"`` (NUTS from 100 llms) or ``"non-centered"``. Any other
        value is kept (it is validated by :func:`~bayes_microbench.irt.config.check_fit_settings`).
    adaptation
        ``"auto"`` resolves to ``"draw_diag"`` for ``"decoupled"``, ``"diag"`` otherwise.
    weak
        :func:`weak_slopes` when the caller has it already (it costs a pass over the cells).

    Returns
    -------
    Policy
        The resolved parameterization and adaptation, and the remedy.
    """
    nuts = method == "nuts"
    big = data.n_llms >= CENTERED_MIN_LLMS
    misfit = floor_misfit(data, config)
    weak = weak_slopes(data, config) if weak is None else weak
    lognormal = lognormal_discrimination(config)
    if parameterization == "auto":
        if config.model == "2pl-md":
            parameterization = "decoupled" if nuts and big else "non-centered"
        elif nuts and big and not weak:
            parameterization = "decoupled"
        elif nuts and lognormal:
            parameterization = "decoupled-nc"
        elif nuts and config.model == "2pl":
            # the truncated normal below 100 llms: the centered items mixed better on the
            # real matrices measured (benchmarks/study_small_matrices.py, docs/decisions/0036)
            parameterization = "decoupled"
        else:
            parameterization = "non-centered"
    if adaptation == "auto":
        adaptation = "draw_diag" if parameterization == "decoupled" else "diag"
    # the truncated normal sampled GPQA faster from 100 llms and diverged below; with
    # weak slopes (centered) it mixed worse than the lognormal's non-centered items
    truncated_helps = lognormal and nuts and big and not weak
    remedy: Remedy = ""
    if config.model == "2pl-md":
        # the decoupled 2pl-md mixed faster on GPQA, but its centered slopes can diverge
        # where the plain abilities did not (docs/decisions/0050)
        remedy = "plain-abilities" if nuts and parameterization == "decoupled" else ""
    elif misfit:
        remedy = "floor-misfit"
    elif truncated_helps:
        remedy = "truncated-normal"
    elif parameterization == "decoupled-nc" and not big:
        # on every real matrix below 100 llms measured the centered items mixed
        # better, though with divergences on some (benchmarks/study_small_matrices.py)
        remedy = "centered-items"
    return Policy(
        parameterization=parameterization,
        adaptation=adaptation,
        remedy=remedy,
        floor_misfit=misfit,
        weak_slopes=weak,
        truncated_normal_may_help=truncated_helps,
    )


def spell_parameter(name: str, value: Any) -> str:
    """A setting as the caller takes it: ``parameterization='decoupled'``, a config key in
    ``config=``; inside the command line, the running command's flag (``--parameterization
    decoupled``, :func:`~bayes_microbench._validate.param`)."""
    if param(name).startswith("--"):
        return param(name, value)
    if name in IRTConfig.__dataclass_fields__:
        return f"config={{{name!r}: {value!r}}}"
    return f"{name}={value!r}"


def remedy_text(policy: Policy, spell: Callable[[str, Any], str] = spell_parameter) -> str:
    """The remedy of ``policy`` in one clause ("" when none), its settings spelled by ``spell``.

    ``spell(name, value)`` names a setting in the caller's interface (default
    :func:`spell_parameter`: the library's parameters, or the command's flags).
    """
    if policy.remedy == "floor-misfit":
        return policy.floor_misfit
    if policy.remedy == "truncated-normal":
        prior = spell("discrimination_prior", "truncated-normal")
        return (
            f"where many items do not discriminate (GPQA), {prior} samples faster "
            "and converges more often"
        )
    if policy.remedy == "centered-items":
        return SMALL_MATRIX_HINT.format(centered=spell("parameterization", "decoupled"))
    if policy.remedy == "plain-abilities":
        return (
            f"{spell('parameterization', 'centered')} samples the plain abilities: "
            "no divergences where the decoupled form had some, but slower mixing "
            "(docs/decisions/0050)"
        )
    return ""


def remedy_refits(policy: Policy) -> list[dict[str, str]]:
    """The refits an unconverged default NUTS fit tries, in order, as changed settings.

    Each entry holds ``parameterization`` and/or ``discrimination_prior``; empty
    when the policy knows no remedy that a refit can apply (a 3PL's floor misfit
    asks for another model). Why this order: the centered items mixed better on
    every small matrix measured and the truncated normal removed the divergences
    where they appeared (docs/decisions/0032-default-fit-tries-its-remedies.md).
    """
    if policy.remedy == "centered-items":
        return [
            {"parameterization": "decoupled"},
            {"parameterization": "decoupled", "discrimination_prior": "truncated-normal"},
        ]
    if policy.remedy == "truncated-normal":
        return [{"discrimination_prior": "truncated-normal"}]
    if policy.remedy == "plain-abilities":
        return [{"parameterization": "centered"}]
    return []


def lognormal_refits(n_llms: int) -> list[dict[str, str]]:
    """The refits after a default fit that started from the data's truncated normal missed.

    The lognormal prior as a default fit of such data used to start, then below
    :data:`CENTERED_MIN_LLMS` llms its centered items: what converged before the prior was
    chosen from the data is still tried (docs/decisions/0036).
    """
    rungs = [{"discrimination_prior": "lognormal"}]
    if n_llms < CENTERED_MIN_LLMS:
        rungs.append({"parameterization": "decoupled", "discrimination_prior": "lognormal"})
    return rungs


def refits_text(
    refits: list[dict[str, Any]], spell: Callable[[str, Any], str] = spell_parameter
) -> str:
    """What a default fit tried after its first fit, in one clause ("" when nothing).

    ``refits``: ``fit_info["refits"]`` (:func:`~bayes_microbench.irt.model.fit_default`).
    """
    tried = []
    for r in refits[1:]:
        settings = ", ".join(spell(k, v) for k, v in r["settings"].items())
        if r.get("skipped"):
            tried.append(f"{settings} (not tried: {r['skipped']})")
        else:
            tried.append(
                f"{settings} (max R-hat {r['max_rhat']:.3f}, {r['divergences']} divergences)"
            )
    return "the default fit also tried " + "; ".join(tried) if tried else ""

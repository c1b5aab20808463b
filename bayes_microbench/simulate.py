"""Simulate response matrices from the hierarchical IRT family the package fits.

The generative model (the family :mod:`bayes_microbench.irt` fits: the same
likelihood; the fitted model pools each subtask's intercepts ``-a * b`` and
log-discriminations, where this simulator pools difficulties)::

    ability[j]            ~ Normal(ability_mean, ability_sd)
    subtask_mean[s]       ~ Normal(difficulty_mean, subtask_mean_sd)
    subtask_sd[s]         ~ LogNormal(log(difficulty_sd), 0.25)
    difficulty[i]         ~ Normal(subtask_mean[s(i)], subtask_sd[s(i)])
    discrimination[i]     ~ LogNormal(discrimination_logmean, discrimination_logsd)  (1 for 1PL)
    guessing[i]           = 1 / n_options (3PL; 0 otherwise)
    P(correct[j, i])      = guessing[i] + (1 - guessing[i]) * logistic(discrimination[i] * (ability[j] - difficulty[i]))

Missing cells (``missing_rate``) are dropped completely at random, never
leaving an llm or item without an observed cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, overload

import numpy as np
import pandas as pd
import xarray as xr

from ._validate import check_positive_int
from .exceptions import ConfigurationError
from .response_model import logit, prob
from .responses import Responses

ModelName = Literal["1pl", "2pl", "3pl"]


@dataclass(frozen=True)
class SimulationConfig:
    """Parameters of :func:`simulate_responses` (see the module docstring)."""

    n_llms: int = 420
    n_items: int = 448
    model: ModelName = "3pl"
    n_subtasks: int = 3
    n_options: int = 4
    ability_mean: float = 0.0
    ability_sd: float = 1.0
    difficulty_mean: float = 3.6
    subtask_mean_sd: float = 0.4
    difficulty_sd: float = 1.2
    discrimination_logmean: float = 0.0
    discrimination_logsd: float = 0.35
    missing_rate: float = 0.0
    benchmark: str = "simulated"

    def validate(self) -> SimulationConfig:
        check_positive_int(self.n_llms, "n_llms", minimum=2)
        check_positive_int(self.n_items, "n_items", minimum=2)
        check_positive_int(self.n_subtasks, "n_subtasks")
        if self.n_subtasks > self.n_items:
            raise ConfigurationError(
                f"n_subtasks ({self.n_subtasks}) exceeds n_items ({self.n_items})"
            )
        if self.model not in ("1pl", "2pl", "3pl"):
            raise ConfigurationError(f"model must be '1pl', '2pl' or '3pl', got {self.model!r}")
        if self.model == "3pl" and self.n_options < 2:
            raise ConfigurationError(
                f"a 3PL guessing floor needs n_options >= 2, got {self.n_options}"
            )
        if not 0.0 <= self.missing_rate < 0.9:
            raise ConfigurationError(f"missing_rate must lie in [0, 0.9), got {self.missing_rate}")
        for name in ("ability_sd", "subtask_mean_sd", "difficulty_sd", "discrimination_logsd"):
            if getattr(self, name) < 0:
                raise ConfigurationError(f"{name} must be >= 0, got {getattr(self, name)}")
        return self


#: Defaults that resemble real benchmarks.
PRESETS: dict[str, SimulationConfig] = {
    # GPQA (Open LLM Leaderboard v2): 4 options, accuracy near 0.3 over a 0.25 floor.
    "gpqa": SimulationConfig(benchmark="gpqa-like"),
    # MMLU-Pro: 10 options, 14 subjects, accuracy near 0.35 with a wide spread.
    "mmlu-pro": SimulationConfig(
        n_llms=450,
        n_items=12032,
        n_subtasks=14,
        n_options=10,
        difficulty_mean=0.9,
        subtask_mean_sd=0.6,
        difficulty_sd=1.3,
        ability_sd=1.2,
        benchmark="mmlu-pro-like",
    ),
    # metabench-like: thousands of llms on a few hundred items, 2PL.
    "metabench": SimulationConfig(
        n_llms=5000,
        n_items=250,
        model="2pl",
        n_subtasks=1,
        difficulty_mean=-0.3,
        difficulty_sd=1.3,
        benchmark="metabench-like",
    ),
}


@dataclass(frozen=True)
class SimulationTruth:
    """The ground truth behind a simulated :class:`Responses`."""

    config: SimulationConfig
    ability: pd.Series  # index llm
    difficulty: pd.Series  # index item
    discrimination: pd.Series
    guessing: pd.Series
    subtask_mean: pd.Series  # index subtask
    subtask_sd: pd.Series
    p_correct: np.ndarray = field(repr=False)  # llm x item
    expected_accuracy: pd.Series = field(repr=False)  # index llm: mean of p_correct over all items

    def to_dataset(self) -> xr.Dataset:
        """The truth as an :class:`xarray.Dataset` with dims ``llm``, ``item``, ``subtask``."""
        return xr.Dataset(
            {
                "ability": ("llm", self.ability.to_numpy()),
                "expected_accuracy": ("llm", self.expected_accuracy.to_numpy()),
                "difficulty": ("item", self.difficulty.to_numpy()),
                "discrimination": ("item", self.discrimination.to_numpy()),
                "guessing": ("item", self.guessing.to_numpy()),
                "subtask_mean": ("subtask", self.subtask_mean.to_numpy()),
                "subtask_sd": ("subtask", self.subtask_sd.to_numpy()),
                "p_correct": (("llm", "item"), self.p_correct),
            },
            coords={
                "llm": self.ability.index.to_numpy(),
                "item": self.difficulty.index.to_numpy(),
                "subtask": self.subtask_mean.index.to_numpy(),
            },
        )


def irt_probability(
    ability: np.ndarray, difficulty: np.ndarray, discrimination: np.ndarray, guessing: np.ndarray
) -> np.ndarray:
    """P(correct) for every (llm, item): ``c + (1 - c) * logistic(a * (theta - b))``."""
    eta = logit(ability[:, None], discrimination[None, :], difficulty[None, :])
    return prob(eta, guessing[None, :])


@overload
def simulate_responses(
    preset: str | SimulationConfig | None = ...,
    *,
    random_seed: int | np.random.Generator | None = ...,
    return_truth: Literal[False] = ...,
    **overrides: Any,
) -> Responses: ...


@overload
def simulate_responses(
    preset: str | SimulationConfig | None = ...,
    *,
    random_seed: int | np.random.Generator | None = ...,
    return_truth: Literal[True],
    **overrides: Any,
) -> tuple[Responses, SimulationTruth]: ...


def simulate_responses(
    preset: str | SimulationConfig | None = None,
    *,
    random_seed: int | np.random.Generator | None = None,
    return_truth: bool = False,
    **overrides: Any,
) -> Responses | tuple[Responses, SimulationTruth]:
    """Draw a response matrix from the hierarchical IRT family.

    Parameters
    ----------
    preset
        ``"gpqa"`` (default: 420 x 448, 3PL, 4 options, accuracy ~0.3),
        ``"mmlu-pro"`` or ``"metabench"``, or a :class:`SimulationConfig`.
    random_seed
        Seed or generator; the same seed gives the same matrix.
    return_truth
        Also return the :class:`SimulationTruth` (abilities, item parameters,
        each llm's expected full-benchmark accuracy).
    **overrides
        Any :class:`SimulationConfig` field, e.g. ``n_llms=50, missing_rate=0.1``.

    Examples
    --------
    >>> resp, truth = simulate_responses("gpqa", n_llms=50, n_items=100, random_seed=1, return_truth=True)
    >>> resp.values.shape
    (50, 100)
    """
    if preset is None:
        cfg = PRESETS["gpqa"]
    elif isinstance(preset, SimulationConfig):
        cfg = preset
    elif preset in PRESETS:
        cfg = PRESETS[preset]
    else:
        raise ConfigurationError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    known = {f.name for f in fields(SimulationConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigurationError(
            f"unknown simulation parameter(s) {unknown}; valid: {sorted(known)}"
        )
    cfg = replace(cfg, **overrides).validate()
    rng = np.random.default_rng(random_seed)

    n_l, n_i, n_s = cfg.n_llms, cfg.n_items, cfg.n_subtasks
    width = len(str(n_i - 1))
    prefix = cfg.benchmark
    subtask_names = np.array([f"{prefix}/s{s}" for s in range(n_s)], dtype=object)
    # Every subtask gets at least one item; the rest are spread uniformly.
    codes = np.concatenate([np.arange(n_s), rng.integers(0, n_s, size=n_i - n_s)])
    codes = np.sort(codes)
    items = np.array([f"{prefix}:{i:0{width}d}" for i in range(n_i)], dtype=object)
    llms = np.array([f"llm-{j:0{len(str(n_l - 1))}d}" for j in range(n_l)], dtype=object)

    ability = rng.normal(cfg.ability_mean, cfg.ability_sd, size=n_l)
    sub_mean = rng.normal(cfg.difficulty_mean, cfg.subtask_mean_sd, size=n_s)
    sub_sd = cfg.difficulty_sd * np.exp(rng.normal(0.0, 0.25, size=n_s))
    difficulty = rng.normal(sub_mean[codes], sub_sd[codes])
    if cfg.model == "1pl":
        discrimination = np.ones(n_i)
    else:
        discrimination = np.exp(
            rng.normal(cfg.discrimination_logmean, cfg.discrimination_logsd, size=n_i)
        )
    guessing = np.full(n_i, 1.0 / cfg.n_options if cfg.model == "3pl" else 0.0)

    p = irt_probability(ability, difficulty, discrimination, guessing)
    correct = (rng.random((n_l, n_i)) < p).astype(np.float64)
    if cfg.missing_rate > 0:
        drop = rng.random((n_l, n_i)) < cfg.missing_rate
        # keep one observed cell per llm and per item
        drop[np.arange(n_l), rng.integers(0, n_i, size=n_l)] = False
        drop[rng.integers(0, n_l, size=n_i), np.arange(n_i)] = False
        correct[drop] = np.nan

    n_options = np.full(n_i, cfg.n_options) if cfg.model == "3pl" else None
    resp = Responses.from_arrays(
        correct,
        llms,
        items,
        subtask=subtask_names[codes],
        n_options=n_options,
        benchmark=cfg.benchmark,
        where="simulated responses",
    )
    if not return_truth:
        return resp
    truth = SimulationTruth(
        config=cfg,
        ability=pd.Series(ability, index=pd.Index(llms, name="llm"), name="ability"),
        difficulty=pd.Series(difficulty, index=pd.Index(items, name="item"), name="difficulty"),
        discrimination=pd.Series(
            discrimination, index=pd.Index(items, name="item"), name="discrimination"
        ),
        guessing=pd.Series(guessing, index=pd.Index(items, name="item"), name="guessing"),
        subtask_mean=pd.Series(
            sub_mean, index=pd.Index(subtask_names, name="subtask"), name="subtask_mean"
        ),
        subtask_sd=pd.Series(
            sub_sd, index=pd.Index(subtask_names, name="subtask"), name="subtask_sd"
        ),
        p_correct=p,
        expected_accuracy=pd.Series(
            p.mean(axis=1), index=pd.Index(llms, name="llm"), name="expected_accuracy"
        ),
    )
    return resp, truth

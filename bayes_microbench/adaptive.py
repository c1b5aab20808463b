"""Adaptive micro-benchmarking: choose each next item from the posterior, stop when the goal is met.

:class:`AdaptiveState` holds one llm's answers so far against a saved item
posterior. ``next_items(k)`` picks the ``k`` unasked items that most reduce
the quantity the goal is about, ``record`` adds answers, ``state()``
summarizes the ability, the full-benchmark accuracy with its interval (the
posterior's saved calibration applied as :func:`~bayes_microbench.scoring.score`
applies it) and whether to stop; ``to_json`` / ``from_json`` save and resume
a run, refusing a state written against another posterior.

Goals: ``accuracy`` stops when the interval of the full-benchmark accuracy at
probability ``prob`` is at most ``width`` wide; ``rank`` stops when
P(accuracy > the reference's) is above ``prob`` or below ``1 - prob``. Both
stop at ``budget`` items and never before ``minimum`` (raised, with a
calibration, to the smallest number of observed items the calibration was
estimated at: below it the calibrated interval is an extrapolation).

Rules (``rule``): ``goal`` (the accuracy goal's default) is the expected reduction, over the two
answers of an item, of the posterior variance of the full-benchmark number
correct (``accuracy``) or of the probability of a wrong rank decision
(``rank``), computed on the joint posterior draws of item parameters and
ability by reweighting them with each answer's likelihood; ``fisher`` is the
classical rule (Fisher information at the posterior-mean ability and the
posterior-mean items: Fluid Benchmarking's; the rank goal's default,
docs/decisions/0038); ``random`` a seeded random order.
With a saved population, ``goal`` also counts the widening the interval at
the stop gets for the subset asked (:meth:`Population.excess_if_added`), so
that it does not chase items whose misfit the interval must then carry
(docs/decisions/0020-adaptive-rules-see-the-subset-excess.md).

A ``2pl-md`` posterior (``D`` ability dims) works as a 1-D one: the ability
posterior is the ``D``-dim one scoring uses (:func:`~bayes_microbench.ability.ability_posterior_samples`
on :func:`~bayes_microbench.ability.scoring_grid`), the ``goal`` rules read only
P(correct) under the joint draws and so are unchanged, and ``fisher`` becomes
the ``D``-dim c-optimal rule (:meth:`AdaptiveState._fisher`)
(docs/decisions/0031-bayesian-selectors-in-d-dimensions.md); its interval carries
``score``'s subset widening and the ``goal`` rules count each candidate's widening
in ``D`` dims (docs/decisions/0033).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ._defaults import DEFAULT_CI_PROB, DEFAULT_RANK_PROB
from ._validate import param, step
from .ability import ability_grid, ability_posterior_samples, scoring_grid
from .exceptions import UserInputError
from .misfit import Misfit, observed_residual, prediction_shift
from .posterior import ItemDraws, item_draws
from .scoring import plugin_response, residual_carry, subset_widening

Goal = Literal["accuracy", "rank"]
Rule = Literal["goal", "fisher", "random"]
GOALS: tuple[str, ...] = ("accuracy", "rank")
RULES: tuple[str, ...] = ("goal", "fisher", "random")
#: Each goal's default rule: on held-out llms the rank goal's own rule stopped
#: over-confident and Fisher's did not (docs/decisions/0038).
DEFAULT_RULES: dict[str, str] = {"accuracy": "goal", "rank": "fisher"}
#: posterior draws the state works with (the interval needs at least 100)
DEFAULT_DRAWS = 400
STATE_VERSION = 1


class StateMismatchError(UserInputError):
    """A saved adaptive state that does not belong to the posterior it is used with."""


def posterior_fingerprint(draws: ItemDraws) -> str:
    """A short hash of the item ids and the posterior-mean item parameters.

    Why: a saved state is resumed only against the posterior it was written with.
    A ``2pl-md`` posterior's mean loadings enter too (a 1-D fingerprint is unchanged).
    """
    h = hashlib.sha256()
    h.update("\x1f".join(str(i) for i in draws.items).encode())
    for arr in (draws.difficulty, draws.discrimination, draws.guessing):
        h.update(np.round(arr.mean(axis=0), 8).tobytes())
    if draws.loadings is not None:
        h.update(np.round(draws.loadings.mean(axis=0), 8).tobytes())
    return h.hexdigest()[:16]


@dataclass
class Settings:
    """The goal and stopping rules of one adaptive run.

    ``prob`` (None: the goal's default) is the interval probability of the
    ``accuracy`` goal (``DEFAULT_CI_PROB``) or the certainty at which the ``rank``
    goal stops (``DEFAULT_RANK_PROB``), as the ``adapt`` command's ``--prob``.
    ``rule`` (None: the goal's default, :data:`DEFAULT_RULES`): ``goal`` for the
    ``accuracy`` goal, ``fisher`` for the ``rank`` goal, whose ``goal`` rule stops
    over-confident on held-out llms (docs/decisions/0038).
    """

    goal: str = "accuracy"
    width: float = 0.02
    prob: float | None = None
    budget: int = 200
    minimum: int = 5
    rule: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.prob is None:
            self.prob = DEFAULT_RANK_PROB if self.goal == "rank" else DEFAULT_CI_PROB
        if self.rule is None:
            self.rule = DEFAULT_RULES.get(self.goal, "goal")

    @property
    def level(self) -> float:
        """``prob`` as set (never None after construction)."""
        assert self.prob is not None
        return float(self.prob)

    def check(self) -> Settings:
        """Validate every field; one :class:`UserInputError` naming the bad one."""
        if self.goal not in GOALS:
            raise UserInputError(f"goal: expected one of {', '.join(GOALS)}, got {self.goal!r}")
        if self.rule not in RULES:
            raise UserInputError(f"rule: expected one of {', '.join(RULES)}, got {self.rule!r}")
        if not (np.isfinite(self.width) and 0 < self.width <= 1):
            raise UserInputError(
                f"width: {self.width!r} is out of range; give the interval width as a share in "
                "(0, 1] (0.02 for 2 points)"
            )
        low = 0.5 if self.goal == "rank" else 0.0
        if not (np.isfinite(self.level) and low < self.level < 1):
            raise UserInputError(
                f"prob: {self.prob!r} is out of range; give a probability in ({low:g}, 1)"
            )
        if int(self.budget) < 1 or int(self.minimum) < 0 or int(self.minimum) > int(self.budget):
            raise UserInputError(
                f"budget {self.budget} / minimum {self.minimum}: need budget >= 1 and "
                "0 <= minimum <= budget"
            )
        return self


@dataclass
class Reference:
    """The reference llm of a ``rank`` goal: its name and its answers."""

    name: str
    answers: dict[str, int]


@dataclass
class AdaptiveState:
    """One llm's adaptive run against an item posterior.

    Parameters
    ----------
    posterior
        An item posterior that :func:`~bayes_microbench.posterior.item_draws` accepts,
        a ``2pl-md`` one included (any model ``score`` accepts).
    settings
        The goal and stopping rules (:class:`Settings`).
    misfit
        The calibration applied to the interval (``read_posterior_file``'s
        second value); ``None`` gives the raw model's interval (``interval_kind``
        in :meth:`state` says which).
    reference
        The reference llm for the ``rank`` goal.
    available
        Items that may be asked (default: all of the posterior's); a replay
        passes the items the llm has answers for.
    max_draws
        Posterior draws used (evenly thinned).
    """

    posterior: Any
    settings: Settings = field(default_factory=Settings)
    misfit: Misfit | None = None
    reference: Reference | None = None
    available: Sequence[str] | None = None
    max_draws: int = DEFAULT_DRAWS
    llm: str = "llm"

    def __post_init__(self) -> None:
        self.settings.check()
        if isinstance(self.posterior, ItemDraws):
            self.draws = self.posterior
        else:
            self.draws = item_draws(self.posterior, max_draws=self.max_draws, multidim=True)
        self.draws.check_interval_draws()
        self.fingerprint = posterior_fingerprint(self.draws)
        self._index = {str(item): k for k, item in enumerate(self.draws.items)}
        self.answers: dict[str, int] = {}
        pool = np.ones(self.draws.n_items, dtype=bool)
        if self.available is not None:
            pool[:] = False
            pool[self._positions(list(self.available), "available items")] = True
        self._pool = pool
        self._mean = self.draws.mean()
        pop = None if self.misfit is None else self.misfit.population
        #: the saved population's positions of the posterior's items, for the rules'
        #: look-ahead (None: no population, or one of other ability dims)
        self._pop_positions = (
            None
            if pop is None or pop.n_dims != self.draws.n_dims
            else pop.positions(self.draws.items)
        )
        self._ref_draws: np.ndarray | None = None
        if self.settings.goal == "rank":
            if self.reference is None:
                raise UserInputError(f"the rank goal needs a reference llm ({param('reference')})")
            self._ref_draws = self._accuracy_draws(self.reference.answers, seed_offset=7)[0]
        self._cache: tuple[int, dict[str, Any]] | None = None
        #: the stop waits for the smallest size the calibration was estimated at: below it
        #: the calibrated interval is an extrapolation (too narrow on GPQA)
        floor = 0 if self.misfit is None else int(np.min(self.misfit.n_observed))
        self.minimum = min(max(int(self.settings.minimum), floor), int(self.settings.budget))

    # ------------------------------------------------------------------ answers
    def _positions(self, items: Sequence[str], where: str) -> np.ndarray:
        pos = np.array([self._index.get(str(i), -1) for i in items], dtype=np.int64)
        if (pos < 0).any():
            unknown = [str(items[int(k)]) for k in np.nonzero(pos < 0)[0]]
            raise UserInputError(
                f"{where}: {len(unknown)} item id(s) not in the posterior, e.g. {unknown[0]!r}; "
                "use only items the posterior was fitted on"
            )
        return pos

    def record(self, item: str | Mapping[str, Any], correct: Any = None) -> None:
        """Add answers: ``record(item, correct)`` or ``record({item: correct, ...})``.

        ``correct`` is 1 / 0 (or True / False). An item answered again with the
        same answer is ignored; with a different answer it is refused (one line).
        """
        pairs = item.items() if isinstance(item, Mapping) else [(item, correct)]
        new: dict[str, int] = {}
        for it, value in pairs:
            key = str(it)
            try:
                v = float(value)
            except (TypeError, ValueError):
                v = np.nan
            if v not in (0.0, 1.0):
                raise UserInputError(f"item {key!r}: answer {value!r} is not 1/0 (correct/wrong)")
            self._positions([key], "record")
            old = self.answers.get(key, new.get(key))
            if old is not None and old != int(v):
                raise UserInputError(
                    f"item {key!r}: asked twice with different answers ({old} then {int(v)}); "
                    "keep one answer per item"
                )
            new[key] = int(v)
        self.answers.update(new)
        self._cache = None

    def _observed(self) -> np.ndarray:
        """The items answered so far, as a mask over the posterior's items."""
        observed = np.zeros(self.draws.n_items, dtype=bool)
        if self.answers:
            observed[self._positions(list(self.answers), "answers")] = True
        return observed

    @property
    def n_used(self) -> int:
        """Items answered so far."""
        return len(self.answers)

    # ------------------------------------------------------------------ posterior
    def _accuracy_draws(
        self, answers: Mapping[str, int], seed_offset: int = 0, keep: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Full-benchmark accuracy draws (calibrated when a misfit is set), ability draws
        (``(S,)``, or ``(S, D)`` for a ``2pl-md`` posterior), and the observed mask, as
        ``score`` computes them."""
        d = self.draws
        rng = np.random.default_rng([self.settings.seed, len(answers), seed_offset])
        y = np.full((1, d.n_items), np.nan)
        if answers:
            y[0, self._positions(list(answers), "answers")] = list(answers.values())
        observed = ~np.isnan(y)
        used = np.nonzero(observed[0])[0]
        if len(used):
            grid = ability_grid() if d.n_dims == 1 else scoring_grid(None, d.n_dims)
            ability, _ = ability_posterior_samples(
                d.subset(used), y[:, used], grid=grid, random_seed=rng
            )
        else:  # no answers yet: the population prior, normal(0, 1) (normal(0, I_D))
            ability = rng.standard_normal((d.n_draws, 1, *([d.n_dims] if d.n_dims > 1 else [])))
        # as scoring._unobserved_hits, keeping P(correct) for the selection rules
        prob = d.prob(ability, dtype=np.float32)[:, 0, :]
        unobs = ~observed[0]
        expected = (prob @ unobs.astype(np.float32)).astype(np.float64)[:, None]
        hits = ((rng.random(prob.shape, dtype=np.float32) < prob) & unobs).sum(axis=1)
        hits = hits.astype(np.float64)[:, None]
        if keep:
            self._last_prob = prob
        n_obs = observed.sum(axis=1)
        n_unobs = d.n_items - n_obs
        if self.misfit is not None:
            extra = subset_widening(
                self.misfit.population,
                d,
                ability,
                observed,
                rng,
                about_shift=self.misfit.item_shifted,
            )
            seen = (prob @ observed[0].astype(np.float32)).astype(np.float64)[:, None]
            level = None
            if self.misfit.item_shifted:  # as score: m and r about the shifted prediction
                shift_u, shift_o, level = prediction_shift(
                    self.misfit.population, d, ability, observed
                )
                expected = expected + n_unobs * shift_u
                seen = seen + n_obs * shift_o
            residual = observed_residual(np.nansum(y, axis=1), n_obs, seen)
            carry = residual_carry(self.misfit.population, d, ability, observed, rng)
            hits = self.misfit.apply(
                hits, expected, n_obs, n_unobs, rng, extra, residual, carry, level
            )
        acc = (hits[:, 0] + np.nansum(y)) / d.n_items
        return acc, ability[:, 0], observed[0]

    def state(self) -> dict[str, Any]:
        """The summary: ability, full-benchmark accuracy and interval, items used, the stop.

        Returns a dict with ``ability_mean``, ``ability_sd``, ``accuracy_mean``,
        ``accuracy_lower`` / ``accuracy_upper`` (equal-tailed at ``prob``),
        ``interval_kind`` (``calibrated`` or ``raw``), ``items_used``, ``goal_met``,
        ``stopped`` (``goal``, ``budget`` or ``None``) and, for ``rank``,
        ``p_above`` and ``decision`` (``above`` / ``below`` / ``undecided``).
        For a ``2pl-md`` posterior ``ability_mean`` and ``ability_sd`` are lists, one
        value per dim.
        """
        if self._cache is not None and self._cache[0] == self.n_used:
            return dict(self._cache[1])
        s = self.settings
        acc, ability, observed = self._accuracy_draws(self.answers, keep=True)
        alpha = (1 - s.level) / 2
        lo, hi = np.quantile(acc, [alpha, 1 - alpha])
        out: dict[str, Any] = {
            "llm": self.llm,
            "goal": s.goal,
            "items_used": self.n_used,
            "minimum": self.minimum,
            "ability_mean": _per_dim(ability.mean(axis=0)),
            "ability_sd": _per_dim(ability.std(axis=0)),
            "accuracy_mean": float(acc.mean()),
            "accuracy_lower": float(lo),
            "accuracy_upper": float(hi),
            "ci_prob": s.level,
            "interval_kind": "calibrated" if self.misfit is not None else "raw",
        }
        if s.goal == "accuracy":
            met = bool(hi - lo <= s.width + 1e-12)
        else:
            assert self._ref_draws is not None
            ref = np.random.default_rng(s.seed).permutation(self._ref_draws)
            p = float(np.mean(acc > ref) + 0.5 * np.mean(acc == ref))
            out["p_above"] = p
            decided = p >= s.level or p <= 1 - s.level
            out["decision"] = ("above" if p >= 0.5 else "below") if decided else "undecided"
            met = bool(decided)
        left = int((self._pool & ~observed).sum())
        budget = self.n_used >= s.budget or left == 0
        enough = self.n_used >= self.minimum
        out["goal_met"] = met
        out["stopped"] = "goal" if (met and enough) else ("budget" if budget else None)
        self._cache = (self.n_used, out)
        self._acc, self._ability = acc, ability
        return dict(out)

    # ------------------------------------------------------------------ selection
    def next_items(self, k: int = 1) -> list[str]:
        """The ``k`` unasked items the rule ranks first (fewer when fewer are left or the
        budget allows fewer); ``[]`` once the run has stopped."""
        if int(k) < 1:
            raise UserInputError(f"batch: {k!r} must be a whole number of at least 1")
        st = self.state()
        if st["stopped"] is not None:
            return []
        k = min(int(k), self.settings.budget - self.n_used)
        cand = np.nonzero(self._pool & ~self._observed())[0]
        if len(cand) == 0 or k <= 0:
            return []
        scores = self.scores(cand)
        order = np.argsort(-scores, kind="stable")[:k]
        return [str(self.draws.items[cand[j]]) for j in order]

    def scores(self, cand: np.ndarray) -> np.ndarray:
        """The rule's score of each candidate item (higher is asked first)."""
        rule = self.settings.rule
        if rule == "random":
            rng = np.random.default_rng([self.settings.seed, self.n_used, 11])
            return rng.random(len(cand))
        if rule == "fisher":
            return self._fisher(cand)
        if self.settings.goal == "accuracy":
            return -(self._expected_variance(cand) + self._excess_after(cand))
        return -self._expected_wrong(cand, self._excess_after(cand))

    def _excess_after(self, cand: np.ndarray) -> np.ndarray | float:
        """The widening the interval would get after asking each candidate, as a variance of
        the number correct on the rest (0 without a saved population)."""
        positions = self._pop_positions
        if positions is None or not self.answers:
            return 0.0
        assert self.misfit is not None and self.misfit.population is not None
        observed = self._observed()
        # the plug-in ability: the posterior mean, (1,) or (1, D)
        prob, slope = plugin_response(self._mean, self._ability.mean(axis=0)[None])
        prob, slope = prob[0], slope[0]
        excess = self.misfit.population.excess_if_added(
            prob,
            slope,
            observed,
            cand,
            positions,
            random_seed=[self.settings.seed, self.n_used],
            about_shift=self.misfit.item_shifted,
        )
        rest = self.draws.n_items - self.n_used - 1
        return np.maximum(excess, 0.0) * rest**2

    def _fisher(self, cand: np.ndarray) -> np.ndarray:
        """Fisher information at the posterior-mean ability (``D`` dims: :meth:`_c_optimal`)."""
        if self.draws.n_dims > 1:
            return self._c_optimal(cand)
        theta = np.array([[float(self._ability.mean())]])
        m = self._mean.subset(cand)
        p = m.prob(theta)[0, 0]
        c = m.guessing[0]
        a = m.discrimination[0]
        q = np.clip((p - c) / np.maximum(1 - c, 1e-12), 1e-12, 1)
        return np.asarray(a**2 * (1 - p) / np.maximum(p, 1e-12) * q**2)

    def _c_optimal(self, cand: np.ndarray) -> np.ndarray:
        """The ``D``-dim Fisher rule: the reduction of ``gᵀ Σ g`` by each candidate.

        ``Σ`` is the covariance of the ability draws, ``g`` the gradient of the
        expected number correct on the unobserved items and ``I_i = w_i a_i a_iᵀ``
        the candidate's information, all at the posterior-mean ability and items;
        by Sherman-Morrison ``gᵀ Σ g - gᵀ (Σ⁻¹ + I_i)⁻¹ g = w_i (gᵀ Σ a_i)² / (1 +
        w_i a_iᵀ Σ a_i)``. With one dim it orders items as Fisher information does.
        """
        m = self._mean
        assert m.loadings is not None
        ability = self._ability  # (S, D)
        theta = ability.mean(axis=0)
        cov = np.atleast_2d(np.cov(ability, rowvar=False))
        p = m.prob(theta[None, None, :])[0, 0]
        c = m.guessing[0]
        lam = m.loadings[0]  # (I, D)
        dp = (p - c) * (1 - p) / np.maximum(1 - c, 1e-12)
        w = dp**2 / np.maximum(p * (1 - p), 1e-12)
        g = dp[~self._observed()] @ lam[~self._observed()]
        sg, lc = cov @ g, lam[cand]
        num = w[cand] * (lc @ sg) ** 2
        return np.asarray(num / (1 + w[cand] * np.einsum("id,de,ie->i", lc, cov, lc)))

    def _particles(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """P(correct) of every unobserved item under each joint draw ``(S, I)`` and its sums."""
        observed = self._observed()
        p = self._last_prob  # P(correct) under each joint draw, from the last state()
        p[:, observed] = 0.0
        m = p.sum(axis=1, dtype=np.float64)
        v = (p * (1 - p)).sum(axis=1, dtype=np.float64)
        return p, m, v

    def _expected_variance(self, cand: np.ndarray) -> np.ndarray:
        """E over the answer of item i of the posterior variance of the remaining number
        correct, for each candidate (the current variance minus the expected reduction)."""
        p_all, m, v = self._particles()
        p = np.ascontiguousarray(p_all[:, cand])  # (S, C) float32
        n = p.shape[0]
        w = np.full(n, 1.0 / n, dtype=np.float32)
        # every term is a weighted sum over the draws of p, p**2 or m * p: three products
        sp = (w @ p).astype(np.float64)  # P(correct)
        spp = (w @ (p * p)).astype(np.float64)
        smp = ((w * m.astype(np.float32)) @ p).astype(np.float64)
        m_bar, v_bar, mm_bar = float(m.mean()), float(v.mean()), float((m * m).mean())
        e_rest = m_bar - sp  # mean of the rest of the benchmark
        second = v_bar - sp + spp + mm_bar - 2 * smp + spp  # E[var + mean**2] of the rest
        var_rest = second - e_rest**2
        e1 = (smp - spp) / np.maximum(sp, 1e-12)  # its mean after a correct answer
        e0 = (e_rest - (smp - spp)) / np.maximum(1 - sp, 1e-12)  # after a wrong one
        between = sp * (e1 - e_rest) ** 2 + (1 - sp) * (e0 - e_rest) ** 2
        return np.asarray(var_rest - between)

    def _expected_wrong(self, cand: np.ndarray, excess: np.ndarray | float = 0.0) -> np.ndarray:
        """E over the answer of item i of min(P(above), P(below)) after the answer.

        ``excess``: the interval's widening after each candidate (variance of the number
        correct on the rest), added to the spread of the rest.
        """
        from scipy.special import ndtr

        assert self._ref_draws is not None
        p_all, m, v = self._particles()
        p = np.ascontiguousarray(p_all[:, cand], dtype=np.float32)  # (S, C)
        n_items = self.draws.n_items
        known = float(sum(self.answers.values()))
        ref_mean = float(self._ref_draws.mean()) * n_items
        ref_var = float(self._ref_draws.var()) * n_items**2
        w = np.full(p.shape[0], 1.0 / p.shape[0], dtype=np.float32)
        # float32 (S, C) arrays: the rule compares candidates, and halving the memory
        # traffic halves the cost of a choice among MMLU-Pro's 12000 items
        centre = (known + m - ref_mean).astype(np.float32)[:, None] - p  # rest + known - ref
        var = (v + ref_var).astype(np.float32)[:, None] - p * (1 - p)
        var += np.asarray(excess, dtype=np.float32)
        inv_sd = 1.0 / np.sqrt(np.maximum(var, np.float32(1e-9)))
        p_right = (w @ p).astype(np.float64)
        # P(above | draw, answer) for a right (y = 1) and a wrong answer
        above1 = (w @ (p * ndtr((centre + 1) * inv_sd))).astype(np.float64)
        above0 = (w @ ((1 - p) * ndtr(centre * inv_sd))).astype(np.float64)
        total = np.minimum(above1, p_right - above1) + np.minimum(above0, 1 - p_right - above0)
        return np.asarray(total)

    # ------------------------------------------------------------------ save / load
    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready state: settings, answers in order, reference, fingerprint."""
        s = self.settings
        return {
            "version": STATE_VERSION,
            "posterior_fingerprint": self.fingerprint,
            "llm": self.llm,
            "settings": {
                "goal": s.goal,
                "width": s.width,
                "prob": s.prob,
                "budget": s.budget,
                "minimum": s.minimum,
                "rule": s.rule,
                "seed": s.seed,
            },
            "max_draws": self.max_draws,
            "available": None if self.available is None else [str(i) for i in self.available],
            "answers": dict(self.answers),
            "reference": None
            if self.reference is None
            else {"name": self.reference.name, "answers": dict(self.reference.answers)},
            "summary": self.state(),
        }

    def to_json(self, path: str) -> None:
        """Write the state as JSON (atomically)."""
        from .io import write_atomic

        text = json.dumps(self.to_dict(), indent=2) + "\n"
        write_atomic(path, lambda tmp: tmp.write_text(text))

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], posterior: Any, misfit: Misfit | None, where: str = "state"
    ) -> AdaptiveState:
        """Rebuild a state against ``posterior``; refused when its fingerprint differs."""
        try:
            settings = Settings(**data["settings"])
            ref = data.get("reference")
            st = cls(
                posterior,
                settings=settings,
                misfit=misfit,
                reference=None if ref is None else Reference(ref["name"], dict(ref["answers"])),
                available=data.get("available"),
                max_draws=int(data.get("max_draws", DEFAULT_DRAWS)),
                llm=str(data.get("llm", "llm")),
            )
            answers = dict(data["answers"])
            fingerprint = data["posterior_fingerprint"]
        except (KeyError, TypeError, ValueError) as err:
            raise UserInputError(
                f"{where}: not an adaptive state written by this tool ({type(err).__name__}: "
                f"{err}); write one with "
                f"{step('bayes-microbench adapt --output FILE', 'AdaptiveState.to_json')}"
            ) from None
        if fingerprint != st.fingerprint:
            raise StateMismatchError(
                f"{where}: written against another posterior (fingerprint {fingerprint}, this "
                f"posterior's is {st.fingerprint}); resume it with the posterior it was started with"
            )
        st.record(answers)
        return st

    @classmethod
    def from_json(cls, path: str, posterior: Any, misfit: Misfit | None = None) -> AdaptiveState:
        """Read a state saved by :meth:`to_json` (see :meth:`from_dict`)."""
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as err:
            raise UserInputError(
                f"{path}: cannot be read as an adaptive state ({type(err).__name__}); give the "
                "JSON file 'adapt' wrote"
            ) from None
        if not isinstance(data, dict):
            raise UserInputError(f"{path}: not an adaptive state (expected a JSON object)")
        return cls.from_dict(data, posterior, misfit, where=path)


def _per_dim(x: np.ndarray) -> float | list[float]:
    """A 1-D ability summary as a float; a ``2pl-md`` one as a list (JSON-ready)."""
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else [float(v) for v in x]


def run_replay(
    make_state: Any, answers: Mapping[str, int], batch: int = 1
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Simulate the loop for one llm, answering from ``answers``.

    ``make_state(available)`` builds a fresh :class:`AdaptiveState` limited to
    ``available`` items. Returns the final summary and the trajectory (one
    summary per step, with the items asked at that step).
    """
    st: AdaptiveState = make_state(list(answers))
    trajectory: list[dict[str, Any]] = []
    while True:
        summary = st.state()
        nxt = st.next_items(batch)
        trajectory.append({**summary, "asked": nxt})
        if not nxt:
            return summary, trajectory
        st.record({i: answers[i] for i in nxt})


def summaries(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``--json`` rows of a replay (rounded)."""
    out = []
    for r in rows:
        row = {
            "llm": r["llm"],
            "items_used": int(r["items_used"]),
            "accuracy_mean": round(float(r["accuracy_mean"]), 6),
            "accuracy_lower": round(float(r["accuracy_lower"]), 6),
            "accuracy_upper": round(float(r["accuracy_upper"]), 6),
            "stopped": r["stopped"],
        }
        if r.get("goal") == "rank":
            row["decision"] = r["decision"]
            row["p_above"] = round(float(r["p_above"]), 6)
        out.append(row)
    return out

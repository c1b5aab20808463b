"""The fitted llms as a design sees them: their ability distribution and the misfit the IRT model leaves.

Why: a design's P(correct ranking) averages over pairs of llms from a
population and over their responses. With the prior's ``Normal(0, 1)``
population and responses that follow the IRT model exactly, the predicted
MDAD of a fixed subset is a single value that misses the MDAD real llms show
(docs/decisions/0007-design-population-and-misfit.md): real abilities are not
normal, and a subset's estimate strays from the full-benchmark accuracy by more
than the Bernoulli noise the model allows, most of all for subsets that load
on one cluster of items. :class:`Population` carries both, estimated on the
llms the posterior was fitted on, and travels with the posterior in its
``calibration`` group.

For an llm ``j`` with plug-in ability ``a_j`` (its posterior mean from all its
responses), the residual ``r_ji = y_ji - P_i(a_j)``; for a design with weights
``w`` the error of its estimate is ``e_j = (w - 1/N) . r_j``. The model's
share of ``E[e_j^2]`` is the Bernoulli variance ``sum_i (w_i - 1/N)^2
P_i (1 - P_i)``; the rest, ``(w - 1/N)' E (w - 1/N)``, is the excess the design
adds, with ``E`` the residual covariance minus its Bernoulli diagonal. ``E`` is
kept as a rank-``k`` factor (the correlated part: secondary abilities, item
clusters) plus a diagonal, so no llm's responses can be read back from it.

For a ``2pl-md`` posterior the plug-in abilities are ``D``-dimensional (the
posterior mean of each llm's ability posterior) and ``P_i(a_j)`` is the
multidimensional 2PL's; the rest is the same (docs/decisions/0030).

A design ranks *pairs*, and the misfit of two llms is not independent: llms of
close accuracy share much of it (on Winogrande's selector subsets a pair 0-3
points apart carries a third of twice one llm's excess), and it varies with
accuracy (GSM8K's weakest llms carry almost none). The pair tables hold the
excess covariance of the residual *difference* ``r_a - r_b`` of the fitted
llms' pairs, by accuracy group and band of realized gap, in the factor's
coordinates plus a diagonal, which :meth:`Population.pair_excess` evaluates for
any design (docs/decisions/0034-design-pairs-share-their-misfit.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd
import xarray as xr

from .exceptions import UserInputError

#: Rank of the residual covariance factor.
DEFAULT_RANK = 20
#: Posterior draws averaged for the plug-in abilities and residuals.
POPULATION_DRAWS = 50
#: Most abilities kept (quantiles of the fitted llms' when there are more).
MAX_ABILITIES = 2000
#: Random subsets a scored subset's excess misfit is compared with.
SUBSET_EXCESS_RANDOM = 16
#: Bands of a pair's realized full-benchmark gap (points) in the pair tables.
PAIR_GAP_EDGES = (0.0, 1.0, 2.0, 4.0, 7.0, 11.0, 16.0, 30.0)
#: Accuracy groups of the pair tables at most (quantiles of the llms' expected accuracy),
#: and the fewest llms a group holds (fewer llms: fewer groups).
PAIR_GROUPS = 4
PAIR_GROUP_LLMS = 50
#: Fewest pairs a cell of the pair tables is estimated from (else it copies the nearest
#: band of its group), most pairs it uses, and most pairs drawn in all.
PAIR_MIN_PAIRS = 40
PAIR_MAX_PAIRS = 20_000
PAIR_SAMPLE = 500_000


@dataclass(frozen=True)
class Population:
    """Ability distribution and residual excess covariance of the fitted llms.

    ``ability`` (L,): plug-in abilities, sorted; for a ``2pl-md`` posterior
    (L, D), one row per llm; ``factor`` (N, k) and ``diag`` (N,): the excess
    residual covariance ``factor @ factor.T + diag(diag)`` over the
    posterior's ``items``; ``n_llms``: llms behind it.

    The pair tables (None in a population saved before them): for ``G``
    accuracy groups (``pair_accuracy`` (G,): their centres, expected accuracy)
    and ``B`` gap bands (``pair_gap`` (G, B): the median realized gap of each
    cell's pairs, a fraction), the excess covariance of a pair's residual
    difference is ``F M F' + diag(pair_diag)`` with ``F = factor``, ``M =
    pair_cov`` (G, B, k, k) and ``pair_diag`` (G, B, N); ``pair_dof`` (G, B):
    the effective number of independent cases behind each cell (the
    uncertainty of its estimate).
    """

    items: np.ndarray
    ability: np.ndarray
    factor: np.ndarray
    diag: np.ndarray
    n_llms: int
    pair_accuracy: np.ndarray | None = None
    pair_gap: np.ndarray | None = None
    pair_cov: np.ndarray | None = None
    pair_diag: np.ndarray | None = None
    pair_dof: np.ndarray | None = None
    #: (G,): expected accuracy at the centre of each group of :attr:`item_shift`
    shift_accuracy: np.ndarray | None = None
    #: (G, N): the fitted llms' mean residual on each item, by accuracy group
    item_shift: np.ndarray | None = None

    @property
    def n_dims(self) -> int:
        """Ability dimensions: 1, or ``D`` for a ``2pl-md`` posterior's population."""
        return 1 if self.ability.ndim == 1 else int(self.ability.shape[1])

    def excess_variance(
        self, weights: np.ndarray, positions: np.ndarray | None = None
    ) -> np.ndarray:
        """The excess variance of a design's estimate error ``e_j``, per design.

        Parameters
        ----------
        weights
            ``(..., N_b, D)`` design weights over the benchmark items (each
            column sums to 1).
        positions
            The benchmark items' positions in :attr:`items` (default: all, in order).

        Returns
        -------
        numpy.ndarray
            ``(..., D)``, clipped at 0 (a design is never credited with less
            noise than the IRT model's own).
        """
        weights = np.asarray(weights, dtype=np.float64)
        d = weights - 1.0 / weights.shape[-2]
        return self.quadratic(np.swapaxes(d, -1, -2), positions)

    @property
    def has_pairs(self) -> bool:
        """Whether the population carries the pair tables (saved since decision 0034)."""
        return self.pair_cov is not None

    def pair_excess(self, weights: np.ndarray, positions: np.ndarray | None = None) -> np.ndarray:
        """The excess variance of a pair's estimate-error difference, per design and cell.

        For a design ``w`` (``d = w - 1/N``) and the cell (accuracy group ``g``,
        gap band ``b``): ``d' (F M_gb F' + diag_gb) d``, the variance of
        ``d . (r_a - r_b)`` beyond the Bernoulli noise for pairs of fitted llms in
        that cell. Without pair tables: twice :meth:`excess_variance` (two
        independent llms) in one cell.

        Parameters
        ----------
        weights
            ``(..., N_b, D)`` design weights over the benchmark items.
        positions
            The benchmark items' positions in :attr:`items` (default: all, in order).

        Returns
        -------
        numpy.ndarray
            ``(..., D, G, B)`` (``G = B = 1`` without pair tables), clipped at 0.
        """
        weights = np.asarray(weights, dtype=np.float64)
        if not self.has_pairs:
            return 2.0 * self.excess_variance(weights, positions)[..., None, None]
        assert self.pair_cov is not None  # has_pairs
        pair_diag = cast(np.ndarray, self.pair_diag)  # the pair tables come together
        if self.pair_cov.shape[-1] != self.factor.shape[1]:
            raise ValueError(
                f"the pair tables are of rank {self.pair_cov.shape[-1]} but the factor of rank "
                f"{self.factor.shape[1]}: replace both together (or set the pair tables to None)"
            )
        d = np.swapaxes(weights - 1.0 / weights.shape[-2], -1, -2)  # (..., D, N_b)
        factor = self.factor if positions is None else self.factor[positions]
        diag = pair_diag if positions is None else pair_diag[..., positions]
        low = d @ np.asarray(factor, dtype=np.float64)  # (..., D, k)
        quad = np.einsum("...dk,gbkl,...dl->...dgb", low, self.pair_cov, low)
        n_g, n_b = self.pair_cov.shape[:2]
        on_diag = (d * d) @ np.asarray(diag, dtype=np.float64).reshape(n_g * n_b, -1).T
        return np.maximum(quad + on_diag.reshape(*on_diag.shape[:-1], n_g, n_b), 0.0)

    def pair_cells(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pair tables' coordinates: accuracy centres (G,), gap centres (G, B), and
        the relative sd of each cell's variance estimate, ``sqrt(2 / dof)`` (G, B).

        Without pair tables: one cell (accuracy 0.5, gap 0) with no estimate sd.
        """
        if not self.has_pairs:
            return np.array([0.5]), np.zeros((1, 1)), np.zeros((1, 1))
        return (
            np.asarray(self.pair_accuracy, dtype=np.float64),
            np.asarray(self.pair_gap, dtype=np.float64),
            np.sqrt(2.0 / np.maximum(np.asarray(self.pair_dof, dtype=np.float64), 1.0)),
        )

    def bootstrap_weights(
        self, rng: np.random.Generator, count: int, points: int | None = None
    ) -> np.ndarray:
        """``count`` Bayesian-bootstrap weightings of ``points`` abilities: (count, points).

        ``points`` defaults to the stored abilities (:attr:`ability`, ``L``); each
        stands for ``n_llms / points`` fitted llms, so its weight is
        ``Gamma(n_llms / points)``, normalized (the Bayesian bootstrap of the fitted
        llms, aggregated); rows sum to 1. Why: a design's population is a sample of
        llms; its uncertainty belongs in the band (docs/decisions/0034).
        """
        n_ab = len(self.ability) if points is None else int(points)
        shape = max(self.n_llms / n_ab, 1e-3)
        g = rng.gamma(shape, size=(count, n_ab))
        return g / g.sum(axis=1, keepdims=True)

    def node_weights(self, count: int, weights: np.ndarray) -> np.ndarray:
        """Each of the :meth:`nodes` cells' total weight under ``weights`` (..., L): (..., count).

        A node stands for the abilities between its two neighbouring quantiles
        (``count`` cells of equal size, the sorted abilities in order).
        """
        self._check_1d("node_weights")
        n_ab = len(self.ability)
        cell = np.minimum((np.arange(n_ab) * count) // n_ab, count - 1)
        w = np.asarray(weights, dtype=np.float64)
        out = np.zeros((*w.shape[:-1], count))
        np.add.at(np.moveaxis(out, -1, 0), cell, np.moveaxis(w, -1, 0))
        return out

    def positions(self, items: np.ndarray) -> np.ndarray | None:
        """Positions of ``items`` in :attr:`items`; None when any is not there."""
        pos = pd.Index(self.items).get_indexer(np.asarray(items).astype(str))
        return None if (pos < 0).any() else pos

    def quadratic(
        self, v: np.ndarray, positions: np.ndarray | None = None, *, about_shift: bool = False
    ) -> np.ndarray:
        """``v' E v`` for error vectors ``v`` ``(..., N)`` over the items at ``positions``.

        ``about_shift``: ``E`` about the item shift, ``E - S' S / G`` with ``S``
        the :attr:`item_shift` table (``G`` groups of equal size): the misfit
        left once the centre carries each group's mean residual (without the
        table: ``E``). Returns ``(...)``, clipped at 0.
        """
        columns, sign = self._columns(positions, about_shift)
        diag = self.diag if positions is None else self.diag[positions]
        v = np.asarray(v, dtype=np.float64)
        low = v @ columns
        return np.maximum((low * low) @ sign + (v * v) @ diag, 0.0)

    def _columns(
        self, positions: np.ndarray | None, about_shift: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """The factor's columns at ``positions``, and with ``about_shift`` the item
        shift's rows scaled by ``1 / sqrt(G)`` beside them, with their signs (+1, -1)."""
        factor = np.asarray(
            self.factor if positions is None else self.factor[positions], dtype=np.float64
        )
        sign = np.ones(factor.shape[1])
        if not about_shift or self.item_shift is None:
            return factor, sign
        shift = self.item_shift if positions is None else self.item_shift[:, positions]
        shift = np.asarray(shift, dtype=np.float64).T / np.sqrt(shift.shape[0])
        return np.hstack([factor, shift]), np.concatenate([sign, -np.ones(shift.shape[1])])

    def subset_excess(
        self,
        prob: np.ndarray,
        slope: np.ndarray,
        observed: np.ndarray,
        positions: np.ndarray | None = None,
        *,
        n_random: int = SUBSET_EXCESS_RANDOM,
        random_seed: int | np.random.Generator | None = 0,
        about_shift: bool = False,
    ) -> np.ndarray:
        """How much more misfit variance each llm's observed subset carries than a random one.

        The model-based estimate of an llm's accuracy on its unobserved items
        ``U`` errs, to first order in the residuals ``r = y - P(a)``, by
        ``v . r`` with ``v_i = -1/|U|`` on ``U`` and ``v_i = (G_U / |U|)
        (g_i / P_i Q_i) / (1 + sum_S g_i^2 / P_i Q_i)`` on the observed items
        ``S`` (``g_i = dP_i/da``, ``G_U`` its sum over ``U``: the ability
        estimate absorbs the observed residuals, shrunk by the prior). Its
        excess variance ``v' E v`` is compared with the mean over
        ``n_random`` random subsets of the same size: a calibration estimated
        on random subsets already carries that much.

        Why: a calibration estimated on random subsets under-covers an llm scored on a
        selector's subset, which can load on one cluster of items
        (docs/decisions/0010-subset-aware-score-intervals.md).

        Parameters
        ----------
        prob, slope
            ``(L, N)``: ``P_i`` and ``dP_i/da`` at each llm's plug-in ability
            (``slope`` ``(L, N, D)`` for ``D``-dim abilities: the gradient).
        observed
            ``(L, N)`` bool: each llm's observed items.
        positions
            The ``N`` items' positions in :attr:`items` (default: all, in order).
        n_random
            Random subsets per llm for the reference.
        random_seed
            Seed of the random subsets.
        about_shift
            Measure the misfit about the item shift (:meth:`quadratic`): for a
            calibration whose centre carries it (``Misfit.item_shifted``), so the
            bias the shift removes is not counted again as spread
            (docs/decisions/0045-the-widening-about-the-shift.md).

        Returns
        -------
        numpy.ndarray
            ``(L,)``: excess variance of the accuracy on the unobserved items,
            this subset's minus the random subsets' mean (may be negative).
        """
        rng = np.random.default_rng(random_seed)
        prob = np.asarray(prob, dtype=np.float64)
        slope = np.asarray(slope, dtype=np.float64)
        observed = np.asarray(observed, dtype=bool)
        score_weight, info = _score_weights(prob, slope)
        out = np.zeros(observed.shape[0])
        for j, masks in _with_random_masks(observed, n_random, rng):
            v = _error_vectors(score_weight[j], slope[j], info[j], masks)
            ex = self.quadratic(v, positions, about_shift=about_shift)
            out[j] = ex[0] - ex[1:].mean()
        return out

    def mean_shift(
        self,
        accuracy: np.ndarray,
        mask: np.ndarray,
        positions: np.ndarray | None = None,
    ) -> np.ndarray:
        """Each llm's mean residual over its ``mask`` items, by its expected accuracy.

        Parameters
        ----------
        accuracy
            ``(L,)``: each llm's expected accuracy at its plug-in ability.
        mask
            ``(L, N)`` bool: the items to average over (e.g. the unobserved ones).
        positions
            The ``N`` items' positions in :attr:`items` (default: all, in order).

        Returns
        -------
        numpy.ndarray
            ``(L,)``: the mean of :attr:`item_shift` over each llm's ``mask``,
            interpolated linearly in accuracy between the groups (constant
            beyond); zeros without the table or where ``mask`` is empty.

        Why: the fitted llms show, item by item, how far the model errs at each
        level of accuracy (items stronger llms answer worse, a subtask the model
        underrates); adding it to the IRT prediction of any set of items carries
        that to a new llm whatever the subset it was scored on
        (docs/decisions/0044-the-item-shift.md).
        """
        mask = np.asarray(mask, dtype=bool)
        if self.item_shift is None or self.shift_accuracy is None:
            return np.zeros(mask.shape[0])
        per_item = self._item_shift_at(accuracy, positions)  # (L, N)
        count = mask.sum(axis=1)
        total = np.where(mask, per_item, 0.0).sum(axis=1)
        return np.where(count > 0, total / np.maximum(count, 1), 0.0)

    def _item_shift_at(self, accuracy: np.ndarray, positions: np.ndarray | None) -> np.ndarray:
        """:attr:`item_shift` at each llm's ``accuracy`` (L,): (L, N), interpolated linearly
        between the group centres (constant beyond); needs the table."""
        assert self.item_shift is not None and self.shift_accuracy is not None
        table = self.item_shift if positions is None else self.item_shift[:, positions]
        centres = self.shift_accuracy
        weights = np.stack(
            [np.interp(accuracy, centres, e) for e in np.eye(len(centres))], axis=1
        )  # (L, G): tent weights of each llm's accuracy on the group centres
        return weights @ np.asarray(table, dtype=np.float64)

    def with_misfit(
        self, prob: np.ndarray, rng: np.random.Generator, positions: np.ndarray | None = None
    ) -> np.ndarray:
        """The model's probabilities ``prob`` (L, N) moved by misfit like the fitted llms'.

        Each llm's row gets the item shift at its expected accuracy (the group means)
        plus a draw of ``Normal(0, E - S'S/G)``, the misfit about them
        (:meth:`quadratic` with ``about_shift``: the factor's low-rank part, its
        negative directions dropped, and the diagonal), clipped to ``[0, 1]``;
        Bernoulli draws of the result then have the fitted llms' excess covariance
        on top of the model's noise.

        Why: llms simulated from the model alone follow it exactly, so a selector's
        estimator calibrated on them learns nothing and its random fallback never
        sees the misfit that makes a random subset the better design
        (docs/decisions/0046-posterior-sources-carry-the-misfit.md).

        Parameters
        ----------
        prob
            ``(L, N)`` probabilities correct from the model.
        rng
            Source of the misfit draws.
        positions
            The ``N`` items' positions in :attr:`items` (default: all, in order).

        Returns
        -------
        numpy.ndarray
            ``(L, N)`` in ``[0, 1]``.
        """
        prob = np.asarray(prob, dtype=np.float64)
        columns, sign = self._columns(positions, about_shift=True)
        q, r = np.linalg.qr(columns)
        lam, vec = np.linalg.eigh((r * sign) @ r.T)
        keep = lam > 0
        low = q @ (vec[:, keep] * np.sqrt(lam[keep]))
        diag = np.maximum(self.diag if positions is None else self.diag[positions], 0.0)
        noise = rng.standard_normal((prob.shape[0], low.shape[1])) @ low.T
        noise += rng.standard_normal(prob.shape) * np.sqrt(diag)
        if self.item_shift is not None:
            noise += self._item_shift_at(prob.mean(axis=1), positions)
        return np.clip(prob + noise, 0.0, 1.0)

    def residual_carry(
        self,
        prob: np.ndarray,
        slope: np.ndarray,
        observed: np.ndarray,
        positions: np.ndarray | None = None,
        *,
        n_random: int = SUBSET_EXCESS_RANDOM,
        random_seed: int | np.random.Generator | None = 0,
    ) -> np.ndarray:
        """How far each llm's observed residual predicts its misfit, relative to a random subset's.

        To first order in the residuals ``r = y - P(a)`` the model's error on the
        unobserved items is ``v . r`` (:meth:`subset_excess`) and the observed
        residual (after the ability absorbs its share) is ``z . r``; with
        ``E = F F' + diag`` the excess covariance and ``C = E + diag(P Q)``, the
        weight the shared misfit gives the one on the other is
        ``-(v' F)(F' z) / z' C z`` (the item-level terms, Bernoulli noise and
        ``diag``, only pull the two apart through the ability estimate). The
        ratio of this subset's weight to the mean over ``n_random`` random
        subsets of the same size, clipped to ``[0, 1]``, times the ratio of the
        observed residual's variance ``z' C z`` to theirs (capped at 1), scales
        a calibration's observed-residual term (learned on random subsets) to
        this subset: a subset whose residual the ability absorbs (informative
        items) moves the centre less, since the term's offset in ``m`` was
        learned where the residual still varied.

        Why: items a selector picks (near each llm's ability, or from one
        cluster) can carry less of the misfit on the rest than random ones do;
        a random-subset weight would then over-correct
        (docs/decisions/0043-the-observed-residual-in-the-centre.md).

        Parameters
        ----------
        prob, slope, observed, positions, n_random, random_seed
            As in :meth:`subset_excess`.

        Returns
        -------
        numpy.ndarray
            ``(L,)`` in ``[0, 1]``; 1 where nothing or everything is observed, or
            where the random subsets' weight is not positive.
        """
        rng = np.random.default_rng(random_seed)
        prob = np.asarray(prob, dtype=np.float64)
        slope = np.asarray(slope, dtype=np.float64)
        observed = np.asarray(observed, dtype=bool)
        factor = self.factor if positions is None else self.factor[positions]
        diag = np.maximum(self.diag if positions is None else self.diag[positions], 0.0)
        score_weight, info = _score_weights(prob, slope)
        out = np.ones(observed.shape[0])
        for j, masks in _with_random_masks(observed, n_random, rng):
            v = _error_vectors(score_weight[j], slope[j], info[j], masks)
            z = _observed_vectors(score_weight[j], slope[j], info[j], masks)
            noise = diag + prob[j] * (1.0 - prob[j])
            low = z @ factor
            cov = ((v @ factor) * low).sum(axis=1)  # the shared misfit only
            var = (low * low).sum(axis=1) + (z * z) @ noise
            weight = -cov / np.maximum(var, 1e-12)
            reference = weight[1:].mean()
            if reference > 0:
                spread = min(1.0, float(var[0] / max(var[1:].mean(), 1e-12)))
                out[j] = float(np.clip(weight[0] / reference, 0.0, 1.0)) * spread
        return out

    def excess_if_added(
        self,
        prob: np.ndarray,
        slope: np.ndarray,
        observed: np.ndarray,
        candidates: np.ndarray,
        positions: np.ndarray | None = None,
        *,
        n_random: int = SUBSET_EXCESS_RANDOM,
        random_seed: int | Sequence[int] | np.random.Generator | None = 0,
        about_shift: bool = False,
    ) -> np.ndarray:
        """One llm's :meth:`subset_excess` after adding each candidate item to its subset.

        The error vector of ``S + {c}`` differs from that of ``S`` by two
        scalars and one entry, so its quadratic form is evaluated for every
        candidate at once through the factor's sums over ``U`` and ``S``
        (``O(C k)``, not ``O(C N k)``).

        Why: an adaptive rule that reduces the variance the interval at the stop
        carries must see the widening its own choices add
        (docs/decisions/0020-adaptive-rules-see-the-subset-excess.md).

        Parameters
        ----------
        prob, slope
            ``(N,)``: ``P_i`` and ``dP_i/da`` at the llm's plug-in ability
            (``slope`` ``(N, D)`` for ``D``-dim abilities: the gradient; the update
            then solves one ``D x D`` system per candidate).
        observed
            ``(N,)`` bool: the items asked so far.
        candidates
            ``(C,)`` positions of unasked items.
        positions
            The ``N`` items' positions in :attr:`items` (default: all, in order).
        n_random, random_seed
            The random subsets of size ``|S| + 1`` the excess is measured against.
        about_shift
            As in :meth:`subset_excess`.

        Returns
        -------
        numpy.ndarray
            ``(C,)``: this subset's excess minus the random subsets' mean (may
            be negative); zeros when adding a candidate leaves no unobserved item.
        """
        prob = np.asarray(prob, dtype=np.float64)
        slope = np.asarray(slope, dtype=np.float64)
        seen = np.asarray(observed, dtype=bool)
        cand = np.asarray(candidates, dtype=np.int64)
        n_items = seen.size
        n_u1 = int((~seen).sum()) - 1
        if len(cand) == 0 or n_u1 < 1:
            return np.zeros(len(cand))
        factor, sign = self._columns(positions, about_shift)
        diag = self.diag if positions is None else self.diag[positions]
        diag = np.asarray(diag, dtype=np.float64)
        w, info = _score_weights(prob, slope)
        unseen = ~seen
        f_c, d_c = factor[cand], diag[cand]
        rest = -(factor[unseen].sum(axis=0) - f_c) / n_u1
        rest_diag = (diag[unseen].sum() - d_c) / n_u1**2
        if slope.ndim == 2:  # D dims: v_i = kappa_c . w_i / (|U| - 1) on S + {c}
            g, w_s = slope[seen], w[seen]
            base = np.eye(slope.shape[1]) + g.T @ w_s  # I_D + sum_S g w'
            mat = base[None] + slope[cand][:, :, None] * w[cand][:, None, :]
            rhs = slope[unseen].sum(axis=0)[None] - slope[cand]
            kappa = np.linalg.solve(mat, rhs[..., None])[..., 0] / n_u1  # (C, D)
            kw_c = (kappa * w[cand]).sum(axis=1)
            low = rest + kappa @ (w_s.T @ factor[seen]) + kw_c[:, None] * f_c
            quad = np.einsum("cd,de,ce->c", kappa, (w_s * diag[seen, None]).T @ w_s, kappa)
            on_diag = rest_diag + quad + kw_c**2 * d_c
        else:
            w_c = w[cand]
            # v on U - {c}: -1 / (|U| - 1); on S + {c}: coef * w_i
            coef = (slope[unseen].sum() - slope[cand]) / (
                n_u1 * (1.0 + info[seen].sum() + info[cand])
            )
            low = rest + coef[:, None] * (
                (w[seen, None] * factor[seen]).sum(axis=0) + w_c[:, None] * f_c
            )
            on_diag = rest_diag + coef**2 * ((w[seen] ** 2 * diag[seen]).sum() + w_c**2 * d_c)
        own = np.maximum((low * low) @ sign + on_diag, 0.0)
        rng = np.random.default_rng(random_seed)
        masks = _random_masks(rng, n_random, n_items, int(seen.sum()) + 1)
        v = _error_vectors(w, slope, info, masks)
        ref = self.quadratic(v, positions, about_shift=about_shift).mean()
        return own - ref

    def density(self, theta: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Gaussian-kernel density of the 1-D abilities at ``theta`` (Silverman's bandwidth).

        ``weights`` (..., L): a weighting of the abilities (each row sums to 1, e.g.
        :meth:`bootstrap_weights`); the result is then (..., *theta.shape).
        """
        self._check_1d("density")
        a = self.ability
        spread = min(float(np.std(a)), float(np.subtract(*np.percentile(a, [75, 25]))) / 1.349)
        h = 0.9 * max(spread, 1e-3) * len(a) ** -0.2
        t = np.asarray(theta, dtype=np.float64)
        z = (t[..., None] - a) / h
        kernel = np.exp(-0.5 * z * z) / (h * np.sqrt(2.0 * np.pi))
        if weights is None:
            return kernel.mean(axis=-1)
        flat = kernel.reshape(-1, len(a))
        w = np.asarray(weights, dtype=np.float64)
        return (w @ flat.T).reshape(*w.shape[:-1], *t.shape)

    def nodes(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """``count`` equal-weight 1-D ability nodes at the population's mid-quantiles."""
        self._check_1d("nodes")
        q = (np.arange(count) + 0.5) / count
        return np.quantile(self.ability, q), np.full(count, 1.0 / count)

    def _check_1d(self, what: str) -> None:
        if self.n_dims != 1:
            raise ValueError(f"Population.{what} needs 1-D abilities ({self.n_dims} dims here)")

    def describe(self) -> str:
        """One line: where the population comes from."""
        dims = "" if self.n_dims == 1 else f"{self.n_dims}-D "
        pair_cov = self.pair_cov
        pairs = (
            f"; a pair's misfit by accuracy and gap ({pair_cov.shape[0]} x "
            f"{pair_cov.shape[1]} cells)"
            if pair_cov is not None  # has_pairs
            else "; a pair's misfit as two independent llms' (saved before the pair tables)"
        )
        return (
            f"{dims}abilities of the {self.n_llms} fitted llms, with their residual excess "
            f"covariance (rank {self.factor.shape[1]}){pairs}"
        )

    def to_dataset(self) -> xr.Dataset:
        """The population as a Dataset (dims ``population_llm``, ``item``, ``factor_rank``;
        ``population_dim`` too for D-dimensional abilities; ``pair_group``, ``pair_band``
        and ``factor_rank_b`` for the pair tables)."""
        ability_dims = (
            ("population_llm",) if self.n_dims == 1 else ("population_llm", "population_dim")
        )
        data: dict[str, tuple[str | tuple[str, ...], np.ndarray | None]] = {
            "population_ability": (ability_dims, self.ability),
            "population_factor": (("item", "factor_rank"), self.factor.astype(np.float32)),
            "population_diag": ("item", self.diag.astype(np.float32)),
        }
        if self.has_pairs:
            pair_diag = cast(np.ndarray, self.pair_diag)  # the pair tables come together
            cells = ("pair_group", "pair_band")
            data.update(
                {
                    "population_pair_accuracy": ("pair_group", self.pair_accuracy),
                    "population_pair_gap": (cells, self.pair_gap),
                    "population_pair_cov": (
                        (*cells, "factor_rank", "factor_rank_b"),
                        self.pair_cov,
                    ),
                    "population_pair_diag": ((*cells, "item"), pair_diag.astype(np.float32)),
                    "population_pair_dof": (cells, self.pair_dof),
                }
            )
        if self.item_shift is not None:
            data["population_shift_accuracy"] = ("shift_group", self.shift_accuracy)
            data["population_item_shift"] = (
                ("shift_group", "item"),
                self.item_shift.astype(np.float32),
            )
        return xr.Dataset(
            data,
            coords={"item": self.items.astype(str)},
            attrs={"population_n_llms": self.n_llms},
        )

    @classmethod
    def from_dataset(cls, ds: xr.Dataset) -> Population | None:
        """Inverse of :meth:`to_dataset`; None when ``ds`` holds no population."""
        if "population_ability" not in ds:
            return None

        def pair(name: str) -> np.ndarray | None:
            key = f"population_pair_{name}"
            return ds[key].to_numpy().astype(np.float64) if key in ds else None

        return cls(
            items=ds["item"].to_numpy().astype(str),
            ability=ds["population_ability"].to_numpy().astype(np.float64),
            factor=ds["population_factor"].to_numpy().astype(np.float64),
            diag=ds["population_diag"].to_numpy().astype(np.float64),
            n_llms=int(ds.attrs["population_n_llms"]),
            pair_accuracy=pair("accuracy"),
            pair_gap=pair("gap"),
            pair_cov=pair("cov"),
            pair_diag=pair("diag"),
            pair_dof=pair("dof"),
            shift_accuracy=(
                ds["population_shift_accuracy"].to_numpy().astype(np.float64)
                if "population_shift_accuracy" in ds
                else None
            ),
            item_shift=(
                ds["population_item_shift"].to_numpy().astype(np.float64)
                if "population_item_shift" in ds
                else None
            ),
        )


def estimate_population(
    posterior: Any,
    responses: Any,
    *,
    rank: int = DEFAULT_RANK,
    max_draws: int = POPULATION_DRAWS,
    random_seed: int | None = 0,
) -> Population:
    """The :class:`Population` of the llms a posterior was fitted on.

    Parameters
    ----------
    posterior
        An item posterior, 1-D or ``2pl-md`` (anything
        :func:`~bayes_microbench.posterior.item_draws` reads).
    responses
        The responses it was fitted on (:class:`~bayes_microbench.Responses`),
        at least 10 llms.
    rank
        Rank of the residual covariance factor.
    max_draws
        Item draws averaged for the abilities and the model's probabilities.
    random_seed
        Seed of the draws' thinning and the ability posterior.

    Returns
    -------
    Population
        With (L,) abilities for a 1-D posterior, (L, D) for a ``2pl-md`` one
        (why: docs/decisions/0030-design-in-d-dimensions.md).
    """
    from .ability import ability_posterior_samples
    from .posterior import item_draws

    draws = item_draws(posterior, max_draws=max_draws, multidim=True)
    items = np.asarray(draws.items).astype(str)
    y = np.asarray(responses.select(items=items.tolist()).values, dtype=np.float64)
    n_llms, n_items = y.shape
    if n_llms < 10:
        raise UserInputError(f"estimate_population: needs at least 10 fitted llms, got {n_llms}")
    samples, _ = ability_posterior_samples(draws, y, random_seed=random_seed)
    ability = np.asarray(samples).mean(axis=0)  # (L,) or (L, D)
    observed = ~np.isnan(y)
    resid = np.zeros_like(y)
    pq = np.zeros_like(y)  # Bernoulli variance of each observed cell
    expected = np.zeros(n_llms)  # each llm's expected accuracy at its plug-in ability
    for start in range(0, n_llms, 256):  # bounded memory: (S, 256, N) at a time
        rows = slice(start, min(n_llms, start + 256))
        p = draws.prob(np.broadcast_to(ability[rows], (draws.n_draws, *ability[rows].shape)))
        p = p.mean(axis=0)
        obs = observed[rows]
        resid[rows] = np.where(obs, np.nan_to_num(y[rows]) - p, 0.0)
        pq[rows] = np.where(obs, p * (1.0 - p), 0.0)
        expected[rows] = p.mean(axis=1)
    bern = pq.sum(axis=0)
    k = int(max(1, min(rank, n_llms - 1, n_items)))
    _, s, vt = np.linalg.svd(resid, full_matrices=False)
    factor = (vt[:k].T * s[:k]) / np.sqrt(n_llms)
    cov_diag = (resid * resid).sum(axis=0) / n_llms
    diag = cov_diag - (factor * factor).sum(axis=1) - bern / n_llms
    with np.errstate(invalid="ignore"):
        full = np.nanmean(y, axis=1)  # realized accuracy: what a study's gaps are made of
    pairs = _pair_tables(
        resid, pq, expected, full, factor, np.random.default_rng(_pair_seed(random_seed))
    )
    shift_accuracy, item_shift = _item_shift(resid, observed, expected)
    if ability.ndim == 1:
        kept = np.sort(ability)
        if len(kept) > MAX_ABILITIES:
            kept = np.quantile(kept, (np.arange(MAX_ABILITIES) + 0.5) / MAX_ABILITIES)
    else:  # D dims have no quantiles: a seeded subsample of the llms, in their order
        kept = ability
        if len(kept) > MAX_ABILITIES:
            picked = np.random.default_rng(random_seed).choice(
                len(kept), MAX_ABILITIES, replace=False
            )
            kept = kept[np.sort(picked)]
    return Population(
        items=items,
        ability=kept,
        factor=factor,
        diag=diag,
        n_llms=n_llms,
        shift_accuracy=shift_accuracy,
        item_shift=item_shift,
        **pairs,
    )


def _item_shift(
    resid: np.ndarray, observed: np.ndarray, expected: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:attr:`Population.item_shift` and its group centres from the fitted llms.

    The llms fall in ``G`` quantile groups of their expected accuracy (as the pair
    tables', ``G <= PAIR_GROUPS`` with at least :data:`PAIR_GROUP_LLMS` each); an
    item's shift in a group is its mean residual over the group's llms that
    answered it (0 where none did).
    """
    n_llms = resid.shape[0]
    n_groups = int(np.clip(n_llms // PAIR_GROUP_LLMS, 1, PAIR_GROUPS))
    edges = np.quantile(expected, np.linspace(0.0, 1.0, n_groups + 1))
    group = np.clip(np.searchsorted(edges[1:-1], expected, side="right"), 0, n_groups - 1)
    centres = np.empty(n_groups)
    shift = np.zeros((n_groups, resid.shape[1]))
    for g in range(n_groups):
        rows = group == g
        centres[g] = expected[rows].mean()
        seen = observed[rows].sum(axis=0)
        shift[g] = np.where(seen > 0, resid[rows].sum(axis=0) / np.maximum(seen, 1), 0.0)
    if n_groups > 1 and np.any(np.diff(centres) <= 0):  # tied accuracies: one group
        centres = np.array([expected.mean()])
        seen = observed.sum(axis=0)
        shift = (resid.sum(axis=0) / np.maximum(seen, 1))[None, :]
    return centres, shift


def _pair_seed(random_seed: int | None) -> int:
    """The pair sample's seed: fixed by the population's seed (0 when it is None)."""
    return 20034 if random_seed is None else int(random_seed) + 20034


def _pair_tables(
    resid: np.ndarray,
    pq: np.ndarray,
    expected: np.ndarray,
    full: np.ndarray,
    factor: np.ndarray,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """The pair tables of :class:`Population` from the fitted llms' residuals.

    Pairs of fitted llms (all of them, or :data:`PAIR_SAMPLE` drawn) are put in
    cells by their mean expected accuracy (``G`` quantile groups of the llms,
    ``G`` <= :data:`PAIR_GROUPS` with at least :data:`PAIR_GROUP_LLMS` llms each)
    and their realized gap (:data:`PAIR_GAP_EDGES`); a cell's excess covariance of
    ``r_a - r_b`` is its projection on the factor's directions (k x k) plus a
    diagonal, less the two llms' Bernoulli variance. A cell of fewer than
    :data:`PAIR_MIN_PAIRS` pairs copies the nearest band of its group (a group
    with none, the nearest group).

    Parameters
    ----------
    resid, pq
        ``(L, N)``: residuals at the plug-in abilities and their Bernoulli variance
        (0 where unobserved).
    expected, full
        ``(L,)``: expected accuracy at the plug-in ability; realized accuracy.
    factor
        ``(N, k)``: the population's excess factor (its columns are orthogonal).
    rng
        Draws the pairs when there are more than :data:`PAIR_SAMPLE`.

    Returns
    -------
    dict
        ``pair_accuracy``, ``pair_gap``, ``pair_cov``, ``pair_diag``, ``pair_dof``.
    """
    n_llms, n_items = resid.shape
    sigma = np.sqrt((factor * factor).sum(axis=0))
    basis = factor / np.where(sigma > 0, sigma, 1.0)
    scores = resid @ basis  # (L, k): each llm's residual on the factor's directions
    if n_llms * (n_llms - 1) // 2 <= PAIR_SAMPLE:
        first, second = np.triu_indices(n_llms, k=1)
    else:
        first = rng.integers(n_llms, size=PAIR_SAMPLE)
        second = rng.integers(n_llms, size=PAIR_SAMPLE)
    gap = np.abs(full[first] - full[second])
    edges = np.asarray(PAIR_GAP_EDGES) / 100.0
    keep = (first != second) & np.isfinite(gap) & (gap > 0) & (gap <= edges[-1])
    first, second, gap = first[keep], second[keep], gap[keep]
    n_groups = int(np.clip(n_llms // PAIR_GROUP_LLMS, 1, PAIR_GROUPS))
    acc_edges = np.quantile(expected, np.linspace(0.0, 1.0, n_groups + 1))
    mid = 0.5 * (expected[first] + expected[second])
    group = np.clip(np.searchsorted(acc_edges[1:-1], mid, side="right"), 0, n_groups - 1)
    band = np.clip(np.searchsorted(edges[1:-1], gap, side="right"), 0, len(edges) - 2)
    n_bands = len(edges) - 1
    k = factor.shape[1]
    cov = np.zeros((n_groups, n_bands, k, k))
    diag = np.zeros((n_groups, n_bands, n_items))
    dof = np.zeros((n_groups, n_bands))
    centre = np.tile(0.5 * (edges[:-1] + edges[1:]), (n_groups, 1))
    filled = np.zeros((n_groups, n_bands), dtype=bool)
    inv = np.where(sigma > 0, 1.0 / np.where(sigma > 0, sigma, 1.0), 0.0)
    chunk = max(1, 2_000_000 // max(n_items, 1))
    for g in range(n_groups):
        for b in range(n_bands):
            cell = np.flatnonzero((group == g) & (band == b))
            if len(cell) < PAIR_MIN_PAIRS:
                continue
            if len(cell) > PAIR_MAX_PAIRS:
                cell = np.sort(rng.choice(cell, PAIR_MAX_PAIRS, replace=False))
            i, j = first[cell], second[cell]
            proj = scores[i] - scores[j]
            cov_v = proj.T @ proj / len(cell)
            sq = np.zeros(n_items)
            noise = np.zeros(n_items)
            for start in range(0, len(cell), chunk):  # (chunk, N) at a time
                ii, jj = i[start : start + chunk], j[start : start + chunk]
                dr = resid[ii] - resid[jj]
                sq += (dr * dr).sum(axis=0)
                noise += (pq[ii] + pq[jj]).sum(axis=0)
            diag[g, b] = (sq - noise) / len(cell) - ((basis @ cov_v) * basis).sum(axis=1)
            cov[g, b] = cov_v * inv[:, None] * inv[None, :]  # in the factor's coordinates
            dof[g, b] = min(len(cell), len(np.unique(np.concatenate([i, j]))))
            centre[g, b] = float(np.median(gap[cell]))
            filled[g, b] = True
    groups_filled = filled.any(axis=1)
    if not groups_filled.any():  # too few pairs anywhere: independent llms, as before
        cov[:] = 2.0 * np.diag(np.where(sigma > 0, 1.0, 0.0))
        diag[:] = 2.0 * (np.sum(resid * resid, axis=0) - pq.sum(axis=0)) / n_llms - 2.0 * (
            factor * factor
        ).sum(axis=1)
        dof[:] = n_llms
        filled[:] = True
        groups_filled[:] = True
    for g in range(n_groups):  # empty cells copy the nearest band, then the nearest group
        src = (
            g
            if groups_filled[g]
            else int(np.argmin(np.where(groups_filled, np.abs(np.arange(n_groups) - g), n_groups)))
        )
        have = np.flatnonzero(filled[src])
        for b in range(n_bands):
            if filled[g, b]:
                continue
            near = have[np.argmin(np.abs(have - b))]
            cov[g, b], diag[g, b], dof[g, b] = cov[src, near], diag[src, near], dof[src, near]
    centres = np.array(
        [
            np.median(expected[(expected >= acc_edges[g]) & (expected <= acc_edges[g + 1])])
            for g in range(n_groups)
        ]
    )
    return {
        "pair_accuracy": centres,
        "pair_gap": centre,
        "pair_cov": cov,
        "pair_diag": diag,
        "pair_dof": dof,
    }


def _score_weights(prob: np.ndarray, slope: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``dlog-lik/da`` per residual (``g / PQ``) and the Fisher information ``g^2 / PQ``.

    A ``D``-dim ``slope`` (``prob.shape + (D,)``) gives a ``D``-dim weight and the
    information's trace (the D-dim paths build the information matrix themselves).
    """
    pq = np.maximum(prob * (1.0 - prob), 1e-9)
    weight = slope / (pq if slope.ndim == prob.ndim else pq[..., None])
    info = slope * weight
    return weight, info if slope.ndim == prob.ndim else info.sum(axis=-1)


def _with_random_masks(
    observed: np.ndarray, n_random: int, rng: np.random.Generator
) -> Iterator[tuple[int, np.ndarray]]:
    """Each llm with some but not all items observed, and its subset's mask stacked on
    ``n_random`` random masks of the same size (drawn in llm order from ``rng``)."""
    n_items = observed.shape[1]
    for j, row in enumerate(observed):
        n_obs = int(row.sum())
        if 0 < n_obs < n_items:
            yield j, np.concatenate([row[None, :], _random_masks(rng, n_random, n_items, n_obs)])


def _random_masks(rng: np.random.Generator, count: int, n_items: int, size: int) -> np.ndarray:
    """``count`` random subsets of ``size`` of ``n_items`` items, as ``(count, n_items)`` masks."""
    order = np.argsort(rng.random((count, n_items)), axis=1)[:, :size]
    masks = np.zeros((count, n_items), dtype=bool)
    np.put_along_axis(masks, order, True, axis=1)
    return masks


def _observed_vectors(
    weight: np.ndarray, slope: np.ndarray, info: np.ndarray, masks: np.ndarray
) -> np.ndarray:
    """The linearized observed residual ``z`` of :meth:`Population.residual_carry`, per mask.

    ``z_i = 1/|S| - g_S' K w_i / |S|`` on the observed items ``S`` (``g_S`` the
    slopes' sum over ``S``, ``K`` the ability estimate's shrinkage as in
    :func:`_error_vectors`), 0 elsewhere: the mean residual left once the ability
    has absorbed its share.
    """
    n_s = np.maximum(masks.sum(axis=1, keepdims=True), 1)
    if slope.ndim == 2:
        g_s = masks.astype(np.float64) @ slope  # (M, D)
        info_s = np.eye(slope.shape[1]) + np.einsum("mn,nd,ne->mde", masks, slope, weight)
        kappa = np.linalg.solve(info_s, g_s[..., None])[..., 0]  # (M, D)
        return np.where(masks, (1.0 - kappa @ weight.T) / n_s, 0.0)
    g_s = (slope * masks).sum(axis=1, keepdims=True)
    i_s = 1.0 + (info * masks).sum(axis=1, keepdims=True)
    return np.where(masks, (1.0 - g_s * weight / i_s) / n_s, 0.0)


def _error_vectors(
    weight: np.ndarray, slope: np.ndarray, info: np.ndarray, masks: np.ndarray
) -> np.ndarray:
    """The linearized error vectors ``v`` of :meth:`Population.subset_excess`, one per mask.

    ``weight`` and ``slope`` ``(N,)``, or ``(N, D)`` for ``D``-dim abilities: then
    ``v_i = g_U' (I_D + sum_S g_j w_j') ^-1 w_i / |U|`` on the observed items, the
    ability estimate's ``D``-dim shrinkage in place of the 1-D ratio.
    """
    unobs = ~masks
    n_u = unobs.sum(axis=1, keepdims=True)
    if slope.ndim == 2:
        g_u = unobs.astype(np.float64) @ slope  # (M, D)
        info_s = np.eye(slope.shape[1]) + np.einsum("mn,nd,ne->mde", masks, slope, weight)
        kappa = np.linalg.solve(info_s, g_u[..., None])[..., 0]  # (M, D)
        return np.where(unobs, -1.0 / n_u, (kappa @ weight.T) / n_u)
    g_u = (slope * unobs).sum(axis=1, keepdims=True)
    i_s = 1.0 + (info * masks).sum(axis=1, keepdims=True)
    return np.where(unobs, -1.0 / n_u, (g_u / n_u) * weight / i_s)

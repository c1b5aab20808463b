"""``diversity``: a k-DPP over item embeddings of the source llms' responses.

The study's ``dpp_selection`` (its "diversity" baseline) draws from a
*discrete orthogonal polynomial ensemble* (Bardenet & Hardy), a projection
DPP whose size is exactly ``n`` - hence a k-DPP with ``k = n`` (Kulesza &
Taskar). We build the same kernel:

1. each seen item's vector of source-llm confidences in the correct answer
   (1/0 correctness when the benchmark has none: ``info["signal"]`` says so;
   missing cells filled with the item's mean) is reduced by PCA to
   ``d = min(4, n_items, n_source_llms)`` components;
2. items outside the 1%-99% quantiles of any component are left out (the
   study's tail trimming), unless fewer than ``n`` items would remain, in
   which case nothing is trimmed (``info["trimmed_items"]`` counts the
   items left out);
3. each component is rescaled to ``[-0.99, 0.99]`` (constant components
   dropped);
4. the first ``n`` monomials ``prod_d x_d^{e_d}`` in graded order (by the
   largest exponent, then lexicographic) are evaluated at the items; the
   orthonormal basis ``Q`` of that Vandermonde matrix (QR) gives the
   projection kernel ``K = Q Q^T`` of rank ``n``;
5. ``n`` items are drawn exactly from that DPP (chain rule, seeded).

``DiversitySelector(item_embeddings=E)`` replaces step 1 by precomputed
embeddings (e.g. the posterior-mean loadings of a multidimensional 2PL,
:func:`bayes_microbench.irt.multidim.item_embeddings`); the default is the
study's PCA.

The estimate is the plain mean of the chosen items, as in the study (its
quadrature weights were computed but not used). If the embedding is
degenerate (every component constant) the draw is uniform and
``info["fallback"]`` says so.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..exceptions import UserInputError
from ._cluster import on_one_blas_thread, sample_projection_dpp
from ._features import check_inputs, fill_missing, signal
from .base import Seed, Selection, check_size, weighted_mean_estimate

MAX_COMPONENTS = 4
TAIL = 0.01


def graded_exponents(m: int, d: int) -> np.ndarray:
    """The first ``m`` exponent tuples in ``d`` variables, by largest exponent then lexicographic."""
    out: list[tuple[int, ...]] = []
    layer = 0
    while len(out) < m:
        out.extend(t for t in itertools.product(range(layer + 1), repeat=d) if layer in t)
        layer += 1
    return np.array(out[:m], dtype=np.int64).reshape(m, d)


def pca_embedding(x: np.ndarray, n_components: int) -> np.ndarray:
    """Scores of the rows of ``x`` (items x features) on its leading principal components."""
    centred = x - x.mean(0, keepdims=True)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    k = min(n_components, s.size)
    scores = u[:, :k] * s[:k]
    # fix each component's sign (largest-magnitude score positive) for reproducibility
    flip = np.sign(scores[np.abs(scores).argmax(0), np.arange(k)])
    return scores * np.where(flip == 0, 1.0, flip)


@dataclass(frozen=True)
class DiversitySelector:
    """``diversity`` (see the module docstring).

    Parameters
    ----------
    name
        The selector's name.
    item_embeddings
        Optional precomputed ``(n_items, d)`` item embeddings (e.g. the
        posterior-mean loadings of a ``2pl-md`` fit,
        ``FittedIRT.item_embeddings().values``), in the column order of the
        source matrix, used instead of step 1's PCA; steps 2-5 are unchanged.
        ``None`` (default): the study's PCA of the source responses.
    """

    name: str = "diversity"
    item_embeddings: Any = field(default=None, repr=False, compare=False)

    @on_one_blas_thread
    def prepare(
        self,
        source: np.ndarray,
        subtask_codes: np.ndarray,
        confidence: np.ndarray | None = None,
        random_seed: Seed = None,
    ) -> PreparedDiversity:
        src, _, conf = check_inputs(source, subtask_codes, confidence, self.name)
        if self.item_embeddings is not None:
            emb = _check_embeddings(self.item_embeddings, src.shape[1], self.name)
            note = f"precomputed item embeddings ({emb.shape[1]} dims)"
        else:
            x, note = signal(src, conf)
            items_by_llm = fill_missing(x).T
            d = min(MAX_COMPONENTS, *items_by_llm.shape)
            emb = pca_embedding(items_by_llm, d)
        low = np.quantile(emb, TAIL, axis=0)
        high = np.quantile(emb, 1.0 - TAIL, axis=0)
        keep = np.all((emb >= low) & (emb <= high), axis=1)
        return PreparedDiversity(
            name=self.name,
            n_seen=int(src.shape[1]),
            embedding=emb,
            inside=np.flatnonzero(keep),
            info={"signal": note},
        )


def _check_embeddings(values: Any, n_items: int, name: str) -> np.ndarray:
    """Precomputed embeddings as a finite ``(n_items, d)`` float array (one-line errors)."""
    emb = np.asarray(values, dtype=np.float64)
    if emb.ndim == 1:
        emb = emb[:, None]
    if emb.ndim != 2 or emb.shape[0] != n_items or emb.shape[1] < 1:
        raise UserInputError(
            f"{name}: item_embeddings must have shape (n_items, d) = ({n_items}, d) in the "
            f"source's item order, got shape {emb.shape}"
        )
    if not np.isfinite(emb).all():
        raise UserInputError(f"{name}: item_embeddings contain NaN or infinite values")
    return emb


def _rescale(x: np.ndarray) -> np.ndarray:
    lo, hi = x.min(0), x.max(0)
    span = hi - lo
    ok = span > 1e-12 * np.maximum(1.0, np.abs(x).max(0))
    x = x[:, ok]
    return 0.99 * (2.0 * (x - lo[ok]) / span[ok] - 1.0)


@dataclass(frozen=True)
class PreparedDiversity:
    name: str
    n_seen: int
    embedding: np.ndarray = field(repr=False)
    inside: np.ndarray = field(repr=False)
    info: dict[str, Any] = field(default_factory=dict)

    @on_one_blas_thread
    def select(self, n: int, random_seed: Seed = None) -> Selection:
        check_size(n, self.n_seen, self.name)
        n = int(n)
        rng = np.random.default_rng(random_seed)
        trimmed = self.inside.size >= n
        pool = self.inside if trimmed else np.arange(self.n_seen)
        info = {**self.info, "trimmed_items": int(self.n_seen - pool.size)}
        x = _rescale(self.embedding[pool])
        if x.shape[1] == 0:
            items = rng.choice(pool, size=n, replace=False)
            info["fallback"] = "degenerate embedding: uniform random draw"
        else:
            expo = graded_exponents(n, x.shape[1])
            vander = np.prod(x[:, None, :] ** expo[None, :, :], axis=2)
            q, _ = np.linalg.qr(vander, mode="reduced")
            items = pool[sample_projection_dpp(q, rng)]
        return Selection(items=items.astype(np.int64), weights=np.full(n, 1.0 / n), info=info)

    @on_one_blas_thread
    def estimate(self, selection: Selection, target: np.ndarray) -> np.ndarray:
        return weighted_mean_estimate(selection, target)

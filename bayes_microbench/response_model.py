"""The IRT response model in numpy: P(correct) and its log-likelihood, written once.

The 1PL / 2PL / 3PL on the saved scale ``logit = a (theta - b)`` (1PL: ``a = 1``),
the multidimensional 2PL ``logit = theta . a_vec + intercept``, and a floor ``c``
(``P = c + (1 - c) sigmoid(logit)``). Every numpy reader of the model (simulation,
posterior predictive checks and LOO, item draws, the ability posterior, design, the
demo) calls these; the PyTensor, JAX and Numba kernels that fitting differentiates
(``irt/_likelihood.py``, ``irt/_ffi_2pl.py``, the PyMC graphs' ``_loglik``) are
twins, tested against them. Why one core:
docs/decisions/0022-posterior-layer-and-response-model.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: The largest floor :func:`log_prob` takes ``log(1 - c)`` of (a floor of 1 would make
#: every wrong answer impossible).
MAX_FLOOR = 1 - 1e-6


def _cast(x: Any, dtype: Any) -> np.ndarray:
    """``x`` as an array of ``dtype`` (its own dtype when ``dtype`` is None)."""
    arr = np.asarray(x)
    return arr if dtype is None else arr.astype(dtype, copy=False)


def logit(
    ability: Any, discrimination: Any, difficulty: Any, *, dtype: Any = np.float64
) -> np.ndarray:
    """``discrimination * (ability - difficulty)``: the 1-D logit above the floor.

    Parameters
    ----------
    ability, discrimination, difficulty
        Arrays that broadcast together (the caller lays out the axes, e.g.
        ``ability[:, :, None]`` against ``(draws, 1, items)`` item parameters);
        a 1PL passes ``discrimination = 1``.
    dtype
        Each input is cast to it first (float32 halves the memory of large grids).

    Returns
    -------
    numpy.ndarray
        The broadcast shape. Why on the saved scale: that is what files hold.
    """
    a = _cast(discrimination, dtype)
    return a * (_cast(ability, dtype) - _cast(difficulty, dtype))


def logit_md(ability: Any, loadings: Any, intercept: Any, *, dtype: Any = np.float64) -> np.ndarray:
    """``ability . loadings + intercept``: the multidimensional 2PL's logit.

    Parameters
    ----------
    ability
        ``(..., K, D)``: ``K`` abilities of ``D`` dims.
    loadings
        ``(..., I, D)``: each item's loadings (leading dims broadcast with ``ability``'s).
    intercept
        ``(..., I)``.
    dtype
        Each input is cast to it first.

    Returns
    -------
    numpy.ndarray
        ``(..., K, I)``; a 1-D slope-intercept logit is the case ``D = 1``.
    """
    theta, lam = _cast(ability, dtype), _cast(loadings, dtype)
    icpt = _cast(intercept, dtype)[..., None, :]
    if theta.shape[-1] == 1:  # one dim: an outer product, without a stacked matmul
        return theta[..., :, 0, None] * lam[..., None, :, 0] + icpt
    return np.matmul(theta, np.swapaxes(lam, -1, -2)) + icpt


def prob(eta: Any, guessing: Any = None, *, dtype: Any = None) -> np.ndarray:
    """P(correct) from the logit: ``c + (1 - c) * sigmoid(eta)``.

    Parameters
    ----------
    eta
        Logits (see :func:`logit`, :func:`logit_md`).
    guessing
        The floor ``c``, broadcasting with ``eta``; ``None`` or 0 for none.
    dtype
        Cast ``eta`` and ``c`` to it first (default: ``eta``'s own).

    Returns
    -------
    numpy.ndarray
        The broadcast shape. The sigmoid is ``(1 + tanh(eta / 2)) / 2``: one
        transcendental per cell, finite for any ``eta``.
    """
    e = _cast(eta, dtype)
    sig = 0.5 + 0.5 * np.tanh(0.5 * e)
    if guessing is None:
        return sig
    c = _cast(guessing, e.dtype if dtype is None else dtype)
    return c + (1 - c) * sig


def softplus(eta: Any) -> np.ndarray:
    """``log(1 + exp(eta))`` = ``-log P(wrong)`` without a floor, finite for any ``eta``.

    Why beside :func:`log_prob`: a sum of ``y * eta - softplus(eta)`` over cells splits
    into a linear part that needs no per-cell work (importance sampling uses it).
    """
    e = np.asarray(eta)
    if e.dtype.kind != "f":
        e = e.astype(np.float64)
    # max(eta, 0) + log1p(exp(-|eta|)), in place: faster than np.logaddexp on large arrays
    out = np.abs(e, out=np.empty_like(e))
    np.negative(out, out=out)
    np.exp(out, out=out)
    np.log1p(out, out=out)
    out += np.maximum(e, 0)
    return out


def log_prob(eta: Any, guessing: Any = None, *, dtype: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``log P(correct)`` and ``log P(wrong)`` from the logit, stable in both tails.

    Parameters
    ----------
    eta
        Logits.
    guessing
        The floor ``c``, broadcasting with ``eta``; ``None`` (or all 0) for none.
        Floors above :data:`MAX_FLOOR` count as :data:`MAX_FLOOR` in ``log(1 - c)``.
    dtype
        Cast ``eta`` and ``c`` to it first (default: ``eta``'s own).

    Returns
    -------
    (log_right, log_wrong)
        Each of the broadcast shape. ``log sigmoid(eta) = min(eta, 0) -
        log1p(exp(-|eta|))`` (one ``exp`` and one ``log1p`` per cell);
        ``log(1 - P) = log(1 - c) + log sigmoid(-eta)`` keeps precision where
        ``P`` is near 1; an item without a floor keeps ``log sigmoid(eta)``
        exactly where ``P`` would underflow.
    """
    e = _cast(eta, dtype)
    log_sig = np.minimum(e, 0) - np.log1p(np.exp(-np.abs(e)))
    log_sig_neg = log_sig - e  # log sigmoid(-eta)
    if guessing is None:
        return log_sig, log_sig_neg
    c = _cast(guessing, e.dtype if dtype is None else dtype)
    if not np.any(c):
        return log_sig, log_sig_neg
    log_wrong = np.log1p(-np.minimum(c, c.dtype.type(MAX_FLOOR))) + log_sig_neg
    with np.errstate(divide="ignore"):
        log_right = np.log(c + (1 - c) * np.exp(log_sig))
    if not np.all(c > 0):
        log_right = np.where(c > 0, log_right, log_sig)
    return log_right, log_wrong


def loglik(eta: Any, correct: Any, guessing: Any = None, *, dtype: Any = None) -> np.ndarray:
    """The log-likelihood of each response: ``log P(correct)`` or ``log P(wrong)``.

    Parameters
    ----------
    eta
        Logits.
    correct
        1 / 0 responses broadcasting with ``eta``; NaN (not observed) gives 0.
    guessing
        The floor ``c`` (see :func:`log_prob`).
    dtype
        Cast ``eta`` and ``c`` to it first.

    Returns
    -------
    numpy.ndarray
        Per cell, the broadcast shape; sum it for the total. Why cellwise: PSIS-LOO
        needs each cell's value.
    """
    log_right, log_wrong = log_prob(eta, guessing, dtype=dtype)
    y = np.asarray(correct)
    out = np.where(y == 1, log_right, log_wrong)
    return np.where(np.isnan(y), out.dtype.type(0), out) if y.dtype.kind == "f" else out

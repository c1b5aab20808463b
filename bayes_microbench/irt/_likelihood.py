"""The Bernoulli-logit log likelihood as one PyTensor Op, with lean JAX and Numba kernels.

``sum w * (y * eta - softplus(eta))`` and its gradient ``w * (y - sigmoid(eta))`` from one
``t = exp(-|eta|)`` per cell: :class:`BernoulliLogitLogLik` (any logits) and
:class:`BernoulliLogit2PLLogLik` (the dense 2PL, or the 3PL with a floor, fused). The JAX
kernel is a ``jax.custom_vjp`` (nutpie, numpyro), the Numba kernel serves PyTensor's
default back end (ADVI, the optimizers, PPC). ``y`` (1/0) and ``w`` (observation
weights) are data: no gradient flows to them.

Why: docs/decisions/0016-likelihood-kernels.md (one ``exp`` per cell, about 0.7 ms
against 2 ms per call on GPQA).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import disconnected_type
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.jax.dispatch import jax_funcify
from pytensor.link.numba.dispatch.basic import numba_njit, register_funcify_default_op_cache_key


class BernoulliLogitLogLik(Op):
    """``sum(w * (y * eta - softplus(eta)))`` for broadcastable ``eta``, ``y``, ``w``."""

    __props__ = ()

    def make_node(self, *inputs: Any) -> Apply:
        eta_in, y_in, w_in = inputs
        eta = pt.as_tensor_variable(eta_in)
        y = pt.as_tensor_variable(y_in).astype(eta.dtype)
        w = pt.as_tensor_variable(w_in).astype(eta.dtype)
        return Apply(self, [eta, y, w], [pt.scalar(dtype=eta.dtype)])

    def perform(self, node: Apply, inputs: Sequence[Any], outputs: Any) -> None:
        eta, y, w = inputs
        value = np.sum(w * (y * eta - np.logaddexp(0.0, eta)))
        outputs[0][0] = np.asarray(value, dtype=node.outputs[0].type.dtype)

    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        return [[True], [False], [False]]

    def pullback(self, inputs: Any, outputs: Any, cotangents: Any) -> list[Any]:
        eta, y, w = inputs
        (g,) = cotangents
        return [g * w * (y - pt.sigmoid(eta)), disconnected_type(), disconnected_type()]

    def infer_shape(self, node: Apply, input_shapes: Any) -> list[tuple[()]]:
        return [()]


bernoulli_logit_loglik = BernoulliLogitLogLik()


def _jax_terms(eta: Any, y: Any, w: Any) -> tuple[Any, Any]:
    """The sum and its per-cell gradient ``w * (y - sigmoid(eta))``, from one ``exp(-|eta|)``."""
    import jax.numpy as jnp

    t = jnp.exp(-jnp.abs(eta))
    value = jnp.sum(w * (y * eta - jnp.maximum(eta, 0) - jnp.log1p(t)))
    return value, w * (y - jnp.where(eta >= 0, 1.0, t) / (1.0 + t))


@jax_funcify.register(BernoulliLogitLogLik)
def _jax_bernoulli_logit_loglik(op: BernoulliLogitLogLik, **kwargs: Any) -> Any:
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def loglik(eta: Any, y: Any, w: Any) -> Any:
        return _jax_terms(eta, y, w)[0]

    def forward(eta: Any, y: Any, w: Any) -> tuple[Any, tuple[Any, Any, Any]]:
        value, grad = _jax_terms(eta, y, w)
        return value, (grad, y, w)

    def backward(res: tuple[Any, Any, Any], g: Any) -> tuple[Any, Any, Any]:
        grad, y, w = res
        return g * grad, jnp.zeros_like(y), jnp.zeros_like(w)

    loglik.defvjp(forward, backward)
    return loglik


@numba_njit
def _numba_loglik_sum(eta: Any, y: Any, w: Any) -> Any:
    """``sum(w * (y * eta - softplus(eta)))`` from one ``exp(-|eta|)`` (both Numba kernels)."""
    softplus = np.maximum(eta, 0.0) + np.log1p(np.exp(-np.abs(eta)))
    return np.sum(w * (y * eta - softplus))


@register_funcify_default_op_cache_key(BernoulliLogitLogLik)
def _numba_bernoulli_logit_loglik(op: BernoulliLogitLogLik, node: Apply, **kwargs: Any) -> Any:
    out_dtype = np.dtype(node.outputs[0].type.dtype)

    @numba_njit
    def loglik(eta: Any, y: Any, w: Any) -> Any:
        return np.asarray(_numba_loglik_sum(eta, y, w)).astype(out_dtype)

    return loglik


class BernoulliLogit2PLLogLik(Op):
    """The dense 2PL (or fixed-floor 3PL) log likelihood of an llm x item matrix, fused.

    ``eta = outer(theta, a) + e``; without guessing the sum is
    ``sum(w * (y * eta - softplus(eta)))``; with ``guessing=True`` an item
    vector ``c`` enters as ``P(correct) = c + (1 - c) * sigmoid(eta)``.

    One Op so that its JAX kernel computes the value and the gradients in one
    pass over the cells: the per-cell derivative ``r = d loglik / d eta`` and
    then ``r @ a``, ``theta @ r`` and the column sums of ``r`` (and of
    ``d loglik / d c``), instead of the reductions that autodiff of the
    broadcast outer product produces. Inputs: ``theta`` (llm), ``a`` (item),
    ``e`` (item), with guessing ``c`` (item), then ``y`` and ``w`` (llm x item,
    or a scalar ``w``); no gradient flows to ``y`` and ``w``.
    """

    __props__ = ("guessing",)

    def __init__(self, guessing: bool = False) -> None:
        self.guessing = bool(guessing)

    def make_node(self, *inputs: Any) -> Apply:
        theta = pt.as_tensor_variable(inputs[0])
        rest = [pt.as_tensor_variable(x).astype(theta.dtype) for x in inputs[1:]]
        return Apply(self, [theta, *rest], [pt.scalar(dtype=theta.dtype)])

    def _split(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        """(theta, a, e, c or None, y, w) from the node's inputs."""
        if self.guessing:
            return tuple(inputs)
        theta, a, e, y, w = inputs
        return theta, a, e, None, y, w

    def perform(self, node: Apply, inputs: Sequence[Any], outputs: Any) -> None:
        theta, a, e, c, y, w = self._split(inputs)
        eta = np.outer(theta, a) + e[None, :]
        if c is None:
            value = np.sum(w * (y * eta - np.logaddexp(0.0, eta)))
        else:
            value = _guessing_terms(np, eta, c, y, w)[0]
        outputs[0][0] = np.asarray(value, dtype=node.outputs[0].type.dtype)

    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        return [[True]] * (4 if self.guessing else 3) + [[False], [False]]

    def pullback(self, inputs: Any, outputs: Any, cotangents: Any) -> list[Any]:
        theta, a, e, c, y, w = self._split(inputs)
        (g,) = cotangents
        eta = theta[:, None] * a[None, :] + e[None, :]
        grads = [disconnected_type(), disconnected_type()]
        if c is None:
            r = g * w * (y - pt.sigmoid(eta))
        else:
            _, r, r_c = _guessing_terms(pt, eta, c, y, w)
            r = g * r
            grads.insert(0, (g * r_c).sum(axis=0))
        return [pt.dot(r, a), pt.dot(theta, r), r.sum(axis=0), *grads]

    def infer_shape(self, node: Apply, input_shapes: Any) -> list[tuple[()]]:
        return [()]


bernoulli_logit_2pl_loglik = BernoulliLogit2PLLogLik()
bernoulli_3pl_loglik = BernoulliLogit2PLLogLik(guessing=True)


def _guessing_terms(xp: Any, eta: Any, c: Any, y: Any, w: Any) -> tuple[Any, Any, Any]:
    """3PL cells with floor ``c`` (item): the sum and ``d/d eta``, ``d/d c`` per cell.

    ``P = c + (1 - c) * sigmoid(eta)``; ``log(1 - P) = log1p(-c) - softplus(eta)``.
    From one ``t = exp(-|eta|)``. ``xp``: numpy, ``jax.numpy`` or
    ``pytensor.tensor``. Where ``P`` underflows (only for ``c = 0``) ``log P``
    is ``log sigmoid(eta)`` and the ratios take their limits.
    """
    t = xp.exp(-xp.abs(eta))
    sig = xp.where(eta >= 0, 1.0, t) / (1.0 + t)
    one_minus_sig = xp.where(eta >= 0, t, 1.0) / (1.0 + t)
    softplus = xp.maximum(eta, 0.0) + xp.log1p(t)
    p = c + (1.0 - c) * sig
    ok = p > 0
    safe_p = xp.where(ok, p, 1.0)
    log_p = xp.where(ok, xp.log(safe_p), eta - softplus)
    log_q = xp.log1p(-c) - softplus
    value = xp.sum(w * (y * log_p + (1.0 - y) * log_q))
    share = xp.where(ok, (1.0 - c) * sig / safe_p, 1.0)  # (1 - c) sigmoid / P
    r = w * (y * share * one_minus_sig - (1.0 - y) * sig)
    r_c = w * (y * xp.where(ok, one_minus_sig / safe_p, 0.0) - (1.0 - y) / (1.0 - c))
    return value, r, r_c


def _compiled_kernel_applies(op: BernoulliLogit2PLLogLik, node: Apply | None) -> bool:
    """Whether ``node`` can use the one-pass kernel of :mod:`._ffi_2pl` (and it works here).

    Float32, on a dense matrix whose weights are a constant scalar 1 or a
    constant 0/1 matrix; the 2PL, or the 3PL with constant floors (fixed at
    1/K: the kernel gives no gradient in them) of at least ``MIN_FLOOR`` (K <= 20).
    """
    from pytensor.graph.basic import Constant

    if node is None or node.inputs[0].type.dtype != "float32":
        return False
    _, _, _, c, y, w = op._split(node.inputs)
    if c is not None and (not isinstance(c, Constant) or c.type.ndim != 1):
        return False
    if y.type.ndim != 2 or not isinstance(w, Constant) or w.type.ndim not in (0, 2):
        return False
    weights = np.asarray(w.data)
    if not np.all((weights == 0) | (weights == 1)) or (w.type.ndim == 0 and weights != 1):
        return False
    from . import _accelerators

    if not _accelerators.enabled("ffi"):
        return False
    try:  # importing compiles the kernel (e.g. Numba may find no cache directory)
        from ._ffi_2pl import MIN_FLOOR, available
    except Exception as err:
        _accelerators.fall_back("ffi", f"its kernel did not compile: {type(err).__name__}: {err}")
        return False
    if c is not None and not np.all((c.data >= MIN_FLOOR) & (c.data < 1)):
        return False
    return available()


@jax_funcify.register(BernoulliLogit2PLLogLik)
def _jax_bernoulli_logit_2pl(
    op: BernoulliLogit2PLLogLik, node: Apply | None = None, **kwargs: Any
) -> Any:
    import jax
    import jax.numpy as jnp

    n_params = 4 if op.guessing else 3
    compiled = _compiled_kernel_applies(op, node)

    def terms(*inputs: Any) -> tuple[Any, list[Any]]:
        # one dtype throughout (JAX's x64 mode may hand over mixed precisions)
        theta = inputs[0]
        _, a, e, c, y, w = op._split([theta, *(jnp.asarray(x, theta.dtype) for x in inputs[1:])])
        if compiled and theta.dtype == jnp.float32:
            from ._ffi_2pl import dense_2pl

            value, *grads = dense_2pl(theta, a, e, y, w, c)
            # constant floors (see _compiled_kernel_applies): no gradient flows to them
            return value, grads + ([] if c is None else [jnp.zeros_like(c)])
        eta = theta[:, None] * a[None, :] + e[None, :]
        extra = []
        if c is None:
            value, r = _jax_terms(eta, y, w)
        else:
            value, r, r_c = _guessing_terms(jnp, eta, c, y, w)
            extra = [r_c.sum(axis=0)]
        raw = [r @ a, theta @ r, r.sum(axis=0), *extra]
        # cotangents in each primal input's own dtype
        return value, [jnp.asarray(gr, x.dtype) for gr, x in zip(raw, inputs, strict=False)]

    @jax.custom_vjp
    def loglik(*inputs: Any) -> Any:
        return terms(*inputs)[0]

    def forward(*inputs: Any) -> tuple[Any, tuple[Any, ...]]:
        value, grads = terms(*inputs)
        return value, (*grads, *inputs[n_params:])

    def backward(res: tuple[Any, ...], g: Any) -> tuple[Any, ...]:
        grads, data = res[:n_params], res[n_params:]
        return (
            *((g * gr).astype(gr.dtype) for gr in grads),
            *(jnp.zeros_like(x) for x in data),
        )

    loglik.defvjp(forward, backward)
    return loglik


@numba_njit
def _numba_guessing_sum(eta: Any, c: Any, y: Any, w: Any) -> Any:
    """The sum of :func:`_guessing_terms`, for Numba (which cannot take ``xp``)."""
    t = np.exp(-np.abs(eta))
    sig = np.where(eta >= 0, 1.0, t) / (1.0 + t)
    softplus = np.maximum(eta, 0.0) + np.log1p(t)
    p = c + (1.0 - c) * sig
    log_p = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), eta - softplus)
    return np.sum(w * (y * log_p + (1.0 - y) * (np.log1p(-c) - softplus)))


@register_funcify_default_op_cache_key(BernoulliLogit2PLLogLik)
def _numba_bernoulli_logit_2pl(op: BernoulliLogit2PLLogLik, node: Apply, **kwargs: Any) -> Any:
    out_dtype = np.dtype(node.outputs[0].type.dtype)

    if op.guessing:

        @numba_njit
        def loglik_guessing(theta: Any, a: Any, e: Any, c: Any, y: Any, w: Any) -> Any:
            eta = np.outer(theta, a) + e.reshape((1, -1))
            value = _numba_guessing_sum(eta, c.reshape((1, -1)), y, w)
            return np.asarray(value).astype(out_dtype)

        return loglik_guessing

    @numba_njit
    def loglik(theta: Any, a: Any, e: Any, y: Any, w: Any) -> Any:
        eta = np.outer(theta, a) + e.reshape((1, -1))
        return np.asarray(_numba_loglik_sum(eta, y, w)).astype(out_dtype)

    return loglik

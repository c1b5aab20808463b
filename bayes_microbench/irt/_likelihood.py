"""The Bernoulli-logit log likelihood as one PyTensor Op, with a lean JAX kernel.

Every IRT fit spends nearly all of its time in ``sum w * (y * eta - softplus(eta))``
over the cells of the response matrix and in its gradient ``w * (y - sigmoid(eta))``.
Written with PyTensor's elementwise ``softplus``, the JAX back end evaluates a
piecewise ``where`` chain (three exponentials and a ``log1p`` per cell) and JAX's
autodiff then differentiates every branch of it: on GPQA (188k cells) a
log-density-and-gradient call costs about 2 ms on this project's CPU, against
0.7 ms for the same quantity computed from one shared ``exp(-|eta|)``.

This Op computes the sum from ``t = exp(-|eta|)``::

    softplus(eta) = max(eta, 0) + log1p(t)
    sigmoid(eta)  = 1 / (1 + t) if eta >= 0 else t / (1 + t)

so a value-and-gradient call costs one ``exp``, one ``log1p`` and one division
per cell. Its JAX kernel (nutpie, numpyro) is a ``jax.custom_vjp`` that keeps the
per-cell gradient as the residual; its Numba kernel serves PyTensor's default
back end (ADVI, the optimizers, PPC), where the symbolic gradient
``w * (y - sigmoid(eta))`` is used.

``y`` (1/0) and ``w`` (observation weights: 1 observed, 0 missing; a scalar 1
for a complete matrix) are data: no gradient flows to them.
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
    """``sum(w * (y * eta - softplus(eta)))`` with ``eta = outer(theta, a) + e``, fused.

    The dense 2PL likelihood of an llm x item matrix in one Op, so that its JAX
    kernel computes the value and the three gradients in one pass over the
    cells: ``r = w * (y - sigmoid(eta))`` and then ``r @ a``, ``theta @ r`` and
    the column sums of ``r`` (matrix-vector products), instead of the
    reductions that autodiff of the broadcast outer product produces. Inputs:
    ``theta`` (llm), ``a`` (item), ``e`` (item), ``y`` and ``w`` (llm x item,
    or a scalar ``w``); no gradient flows to ``y`` and ``w``.
    """

    __props__ = ()

    def make_node(self, *inputs: Any) -> Apply:
        theta_in, a_in, e_in, y_in, w_in = inputs
        theta = pt.as_tensor_variable(theta_in)
        a = pt.as_tensor_variable(a_in).astype(theta.dtype)
        e = pt.as_tensor_variable(e_in).astype(theta.dtype)
        y = pt.as_tensor_variable(y_in).astype(theta.dtype)
        w = pt.as_tensor_variable(w_in).astype(theta.dtype)
        return Apply(self, [theta, a, e, y, w], [pt.scalar(dtype=theta.dtype)])

    def perform(self, node: Apply, inputs: Sequence[Any], outputs: Any) -> None:
        theta, a, e, y, w = inputs
        eta = np.outer(theta, a) + e[None, :]
        value = np.sum(w * (y * eta - np.logaddexp(0.0, eta)))
        outputs[0][0] = np.asarray(value, dtype=node.outputs[0].type.dtype)

    def connection_pattern(self, node: Apply) -> list[list[bool]]:
        return [[True], [True], [True], [False], [False]]

    def pullback(self, inputs: Any, outputs: Any, cotangents: Any) -> list[Any]:
        theta, a, e, y, w = inputs
        (g,) = cotangents
        r = g * w * (y - pt.sigmoid(theta[:, None] * a[None, :] + e[None, :]))
        return [
            pt.dot(r, a),
            pt.dot(theta, r),
            r.sum(axis=0),
            disconnected_type(),
            disconnected_type(),
        ]

    def infer_shape(self, node: Apply, input_shapes: Any) -> list[tuple[()]]:
        return [()]


bernoulli_logit_2pl_loglik = BernoulliLogit2PLLogLik()


@jax_funcify.register(BernoulliLogit2PLLogLik)
def _jax_bernoulli_logit_2pl(op: BernoulliLogit2PLLogLik, **kwargs: Any) -> Any:
    import jax
    import jax.numpy as jnp

    def terms(theta: Any, a: Any, e: Any, y: Any, w: Any) -> tuple[Any, Any]:
        # one dtype throughout (JAX's x64 mode may hand over mixed precisions)
        a, e, y, w = (jnp.asarray(x, dtype=theta.dtype) for x in (a, e, y, w))
        return _jax_terms(theta[:, None] * a[None, :] + e[None, :], y, w)

    @jax.custom_vjp
    def loglik(theta: Any, a: Any, e: Any, y: Any, w: Any) -> Any:
        return terms(theta, a, e, y, w)[0]

    def forward(theta: Any, a: Any, e: Any, y: Any, w: Any) -> tuple[Any, tuple[Any, ...]]:
        value, r = terms(theta, a, e, y, w)
        # cotangents in each primal input's own dtype
        raw = (r @ jnp.asarray(a, dtype=r.dtype), theta @ r, r.sum(axis=0))
        grads = [jnp.asarray(gr, dtype=x.dtype) for gr, x in zip(raw, (theta, a, e), strict=True)]
        return value, (*grads, y, w)

    def backward(res: tuple[Any, ...], g: Any) -> tuple[Any, ...]:
        g_theta, g_a, g_e, y, w = res
        return (
            (g * g_theta).astype(g_theta.dtype),
            (g * g_a).astype(g_a.dtype),
            (g * g_e).astype(g_e.dtype),
            jnp.zeros_like(y),
            jnp.zeros_like(w),
        )

    loglik.defvjp(forward, backward)
    return loglik


@register_funcify_default_op_cache_key(BernoulliLogit2PLLogLik)
def _numba_bernoulli_logit_2pl(op: BernoulliLogit2PLLogLik, node: Apply, **kwargs: Any) -> Any:
    out_dtype = np.dtype(node.outputs[0].type.dtype)

    @numba_njit
    def loglik(theta: Any, a: Any, e: Any, y: Any, w: Any) -> Any:
        eta = np.outer(theta, a) + e.reshape((1, -1))
        return np.asarray(_numba_loglik_sum(eta, y, w)).astype(out_dtype)

    return loglik

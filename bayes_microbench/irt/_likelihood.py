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


@jax_funcify.register(BernoulliLogitLogLik)
def _jax_bernoulli_logit_loglik(op: BernoulliLogitLogLik, **kwargs: Any) -> Any:
    import jax
    import jax.numpy as jnp

    def terms(eta: Any, y: Any, w: Any) -> tuple[Any, Any]:
        t = jnp.exp(-jnp.abs(eta))
        softplus = jnp.maximum(eta, 0) + jnp.log1p(t)
        value = jnp.sum(w * (y * eta - softplus))
        sigmoid = jnp.where(eta >= 0, 1.0, t) / (1.0 + t)
        return value, w * (y - sigmoid)

    @jax.custom_vjp
    def loglik(eta: Any, y: Any, w: Any) -> Any:
        return terms(eta, y, w)[0]

    def forward(eta: Any, y: Any, w: Any) -> tuple[Any, tuple[Any, Any, Any]]:
        value, grad = terms(eta, y, w)
        return value, (grad, y, w)

    def backward(res: tuple[Any, Any, Any], g: Any) -> tuple[Any, Any, Any]:
        grad, y, w = res
        return g * grad, jnp.zeros_like(y), jnp.zeros_like(w)

    loglik.defvjp(forward, backward)
    return loglik


@register_funcify_default_op_cache_key(BernoulliLogitLogLik)
def _numba_bernoulli_logit_loglik(op: BernoulliLogitLogLik, node: Apply, **kwargs: Any) -> Any:
    out_dtype = np.dtype(node.outputs[0].type.dtype)

    @numba_njit
    def loglik(eta: Any, y: Any, w: Any) -> Any:
        softplus = np.maximum(eta, 0.0) + np.log1p(np.exp(-np.abs(eta)))
        return np.asarray(np.sum(w * (y * eta - softplus))).astype(out_dtype)

    return loglik

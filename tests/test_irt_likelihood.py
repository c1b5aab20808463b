"""The Bernoulli-logit log-likelihood Op: value and gradient on every back end."""

from __future__ import annotations

import numpy as np
import pytest

pytensor = pytest.importorskip("pytensor")
import pytensor.tensor as pt  # noqa: E402

from bayes_microbench.irt._likelihood import bernoulli_logit_loglik  # noqa: E402

# compiling a fused kernel with Numba takes 15-25 s on a fresh clone: the long tier
NUMBA_LONG = pytest.param("NUMBA", marks=pytest.mark.long)


def _reference(eta: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, np.ndarray]:
    value = float(np.sum(w * (y * eta - np.logaddexp(0.0, eta))))
    grad = w * (y - np.exp(-np.logaddexp(0.0, -eta)))
    return value, np.broadcast_to(grad, eta.shape)


def _responses(rng, shape, masked, p_correct=0.4):
    """Random 1/0 responses and weights (1 observed, 0 missing; scalar 1 if complete)."""
    y = (rng.random(shape) < p_correct).astype(float)
    w = (rng.random(shape) < 0.7).astype(float) if masked else np.asarray(1.0)
    return y, w


CASES = {
    "matrix, complete": ((6, 9), False),
    "matrix, missing cells": ((6, 9), True),
    "vector (gathered cells)": ((23,), False),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("mode", ["NUMBA", "FAST_COMPILE", "JAX"])
def test_value_and_symbolic_gradient_match_reference(case, mode):
    shape, masked = CASES[case]
    rng = np.random.default_rng(0)
    y, w = _responses(rng, shape, masked)
    x = pt.tensor("x", shape=(None,) * len(shape), dtype="float64")
    out = bernoulli_logit_loglik(x, y, w)
    f = pytensor.function([x], [out, pt.grad(out, x)], mode=mode)
    # extreme logits included: no overflow, no loss of the tails
    eta = rng.normal(size=shape) * 6
    eta.flat[0], eta.flat[1] = 80.0, -80.0
    value, grad = f(eta)
    ref_value, ref_grad = _reference(eta, y, w)
    assert value == pytest.approx(ref_value, rel=1e-12, abs=1e-9)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-12)


def _float32_jax_autodiff(op, args, seed, constants=()):
    """JAX value and gradients of ``op(*inputs, *constants, y, w)`` at float32 ``args``.

    ``y``, ``w``: 5 x 8, constant. Returns the value, the gradients in ``args``
    and ``y``, ``w`` (as float64 for the references).
    """
    jax = pytest.importorskip("jax")
    from pymc.sampling.jax import get_jaxified_graph

    rng = np.random.default_rng(seed)
    y = (rng.random((5, 8)) < 0.5).astype(np.float32)
    w = (rng.random((5, 8)) < 0.8).astype(np.float32)
    inputs = [
        pt.tensor(f"x{k}", shape=(None,) * np.ndim(x), dtype="float32") for k, x in enumerate(args)
    ]
    consts = [np.asarray(c, np.float32) for c in constants]
    fn = get_jaxified_graph(inputs=inputs, outputs=[op(*inputs, *consts, y, w)])
    argnums = tuple(range(len(args)))
    value, grads = jax.value_and_grad(lambda *x: fn(*x)[0], argnums=argnums)(*args)
    assert np.asarray(value).dtype == np.float32
    return float(value), [np.asarray(g) for g in grads], y.astype(float), w.astype(float)


def test_jax_autodiff_uses_the_custom_gradient_in_float32():
    eta = (np.random.default_rng(11).normal(size=(5, 8)) * 4).astype(np.float32)
    value, (grad,), y, w = _float32_jax_autodiff(bernoulli_logit_loglik, [eta], seed=1)
    ref_value, ref_grad = _reference(eta.astype(float), y, w)
    assert value == pytest.approx(ref_value, rel=1e-5)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-6)


def _item_model_args(rng, n_llms, n_items, scale, dtype=np.float64):
    """Random abilities (sd ``scale``), discriminations (lognormal) and intercepts."""
    theta = rng.normal(size=n_llms) * scale
    a = np.exp(rng.normal(size=n_items))
    e = rng.normal(size=n_items) * scale
    return [x.astype(dtype) for x in (theta, a, e)]


def _reference_2pl(theta, a, e, y, w):
    eta = np.outer(theta, a) + e[None, :]
    value, r = _reference(eta, y, w)
    return value, (r @ a, theta @ r, r.sum(axis=0))


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("mode", [NUMBA_LONG, "FAST_COMPILE", "JAX"])
def test_fused_2pl_value_and_symbolic_gradient_match_reference(masked, mode):
    from bayes_microbench.irt._likelihood import bernoulli_logit_2pl_loglik

    rng = np.random.default_rng(2)
    y, w = _responses(rng, (7, 11), masked)
    theta, a, e = (pt.tensor(n, shape=(None,), dtype="float64") for n in ("theta", "a", "e"))
    out = bernoulli_logit_2pl_loglik(theta, a, e, y, w)
    f = pytensor.function([theta, a, e], [out, *pt.grad(out, [theta, a, e])], mode=mode)
    args = _item_model_args(rng, 7, 11, scale=3.0)
    value, *grads = f(*args)
    ref_value, ref_grads = _reference_2pl(*args, y, w)
    assert value == pytest.approx(ref_value, rel=1e-12, abs=1e-9)
    for got, want in zip(grads, ref_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_fused_2pl_jax_autodiff_uses_the_custom_gradient_in_float32():
    from bayes_microbench.irt._likelihood import bernoulli_logit_2pl_loglik

    rng = np.random.default_rng(13)
    args = _item_model_args(rng, 5, 8, scale=3.0, dtype=np.float32)
    value, grads, y, w = _float32_jax_autodiff(bernoulli_logit_2pl_loglik, args, seed=3)
    ref_value, ref_grads = _reference_2pl(*(x.astype(float) for x in args), y, w)
    assert value == pytest.approx(ref_value, rel=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _reference_3pl_value(theta, a, e, c, y, w):
    eta = np.outer(theta, a) + e[None, :]
    log_p = np.logaddexp(np.log(c)[None, :], np.log1p(-c)[None, :] - np.logaddexp(0.0, -eta))
    log_q = np.log1p(-c)[None, :] - np.logaddexp(0.0, eta)
    return float(np.sum(w * (y * log_p + (1 - y) * log_q)))


def _finite_differences(f, args, h=1e-6):
    """Central differences of scalar ``f`` with respect to each array in ``args``."""
    grads = []
    for k, x in enumerate(args):
        g = np.zeros_like(x)
        for i in range(x.size):
            up = [a.copy() for a in args]
            down = [a.copy() for a in args]
            up[k].flat[i] += h
            down[k].flat[i] -= h
            g.flat[i] = (f(*up) - f(*down)) / (2 * h)
        grads.append(g)
    return grads


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("mode", [NUMBA_LONG, "FAST_COMPILE", "JAX"])
def test_fused_3pl_value_and_gradients_match_reference(masked, mode):
    from bayes_microbench.irt._likelihood import bernoulli_3pl_loglik

    rng = np.random.default_rng(4)
    y, w = _responses(rng, (6, 9), masked, p_correct=0.5)
    names = ("theta", "a", "e", "c")
    theta, a, e, c = (pt.tensor(n, shape=(None,), dtype="float64") for n in names)
    out = bernoulli_3pl_loglik(theta, a, e, c, y, w)
    f = pytensor.function([theta, a, e, c], [out, *pt.grad(out, [theta, a, e, c])], mode=mode)
    args = [*_item_model_args(rng, 6, 9, scale=2.0), rng.uniform(0.05, 0.5, size=9)]
    args[0][0] = -40.0  # far below every item: P(correct) is the floor
    value, *grads = f(*args)
    ref = _reference_3pl_value(*args, y, w)
    assert value == pytest.approx(ref, rel=1e-12)
    ref_grads = _finite_differences(lambda *x: _reference_3pl_value(*x, y, w), args)
    for got, want, name in zip(grads, ref_grads, names, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.long
def test_fused_3pl_zero_floor_is_the_2pl():
    from bayes_microbench.irt._likelihood import bernoulli_3pl_loglik, bernoulli_logit_2pl_loglik

    rng = np.random.default_rng(5)
    y = (rng.random((4, 5)) < 0.5).astype(float)
    theta, a, e = (pt.tensor(n, shape=(None,), dtype="float64") for n in ("theta", "a", "e"))
    zero = np.zeros(5)
    out3 = bernoulli_3pl_loglik(theta, a, e, zero, y, 1.0)
    out2 = bernoulli_logit_2pl_loglik(theta, a, e, y, 1.0)
    f = pytensor.function(
        [theta, a, e], [out3, out2, *pt.grad(out3, [theta, a, e]), *pt.grad(out2, [theta, a, e])]
    )
    # logits down to -900: P underflows to 0 and log P must stay the 2PL's
    args = (np.array([-300.0, -1.0, 0.5, 2.0]), np.full(5, 3.0), rng.normal(size=5))
    v3, v2, *grads = f(*args)
    assert np.isfinite(v3) and v3 == pytest.approx(v2, rel=1e-12)
    for g3, g2 in zip(grads[:3], grads[3:], strict=True):
        np.testing.assert_allclose(g3, g2, rtol=1e-10, atol=1e-12)


def test_fused_3pl_jax_autodiff_uses_the_custom_gradient_in_float32():
    from bayes_microbench.irt._likelihood import bernoulli_3pl_loglik

    rng = np.random.default_rng(16)
    floors = rng.uniform(0.1, 0.4, size=8).astype(np.float32)
    args = [*_item_model_args(rng, 5, 8, scale=2.0, dtype=np.float32), floors]
    value, grads, y, w = _float32_jax_autodiff(bernoulli_3pl_loglik, args, seed=6)
    as64 = [x.astype(float) for x in args]
    ref_grads = _finite_differences(lambda *x: _reference_3pl_value(*x, y, w), as64)
    assert value == pytest.approx(_reference_3pl_value(*as64, y, w), rel=1e-5)
    for got, want, name in zip(grads, ref_grads, ("theta", "a", "e", "c"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)


def _compiled_kernel():
    """The one-pass FFI kernel module, asserted to work where this project runs (Linux)."""
    pytest.importorskip("jax")
    from bayes_microbench.irt import _ffi_2pl

    from .conftest import require_accelerators

    require_accelerators("ffi")
    assert _ffi_2pl.available(), _ffi_2pl._state.get("error")
    return _ffi_2pl


def _reference_3pl(theta, a, e, c, y, w):
    """The 3PL value and its gradients in ``theta``, ``a``, ``e`` (float64)."""
    eta = np.outer(theta, a) + e[None, :]
    sig = 1.0 / (1.0 + np.exp(-eta))
    p = c + (1.0 - c) * sig
    r = w * (y * (1.0 - c) * sig * (1.0 - sig) / p - (1.0 - y) * sig)
    return _reference_3pl_value(theta, a, e, c, y, w), (r @ a, theta @ r, r.sum(axis=0))


@pytest.mark.parametrize("floors", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_compiled_kernel_matches_the_float64_reference_over_several_blocks(masked, floors):
    import jax

    kernel = _compiled_kernel()
    rng = np.random.default_rng(21)
    n_llms, n_items = 3 * kernel.BLOCK + 7, 37
    theta, a, e = _item_model_args(rng, n_llms, n_items, scale=3.0)
    theta[:2] = 40.0, -40.0  # logits far past the tanh clamp both ways
    y, w = _responses(rng, (n_llms, n_items), masked)
    if floors:  # 1/K for K = 2 to 20, and a hard item every llm gets right at the lowest
        c = (1.0 / rng.integers(2, 21, n_items)).astype(np.float32)
        c[3], e[3], y[:, 3] = kernel.MIN_FLOOR, -40.0, 1.0
    args32 = [np.asarray(x, np.float32) for x in (theta, a, e, y, w)]
    as64 = [x.astype(float) for x in args32[:3]]
    if floors:
        value, *grads = jax.jit(kernel.dense_2pl)(*args32, c)
        ref_value, ref_grads = _reference_3pl(*as64, c.astype(float), y, w)
    else:
        value, *grads = jax.jit(kernel.dense_2pl)(*args32)
        ref_value, ref_grads = _reference_2pl(*as64, y, w)
    assert float(value) == pytest.approx(ref_value, rel=2e-6)
    for got, want, name in zip(grads, ref_grads, ("theta", "a", "e"), strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=2e-4, err_msg=name)


def test_fused_3pl_with_constant_floors_takes_the_compiled_kernel_in_jax(monkeypatch):
    from bayes_microbench.irt._likelihood import bernoulli_3pl_loglik

    kernel = _compiled_kernel()
    dense = kernel.dense_2pl
    rng = np.random.default_rng(17)
    floors = rng.uniform(0.1, 0.4, size=8).astype(np.float32)
    args = _item_model_args(rng, 5, 8, scale=2.0, dtype=np.float32)
    calls = []
    monkeypatch.setattr(kernel, "dense_2pl", lambda *x: calls.append(1) or dense(*x))
    value, grads, y, w = _float32_jax_autodiff(bernoulli_3pl_loglik, args, 7, constants=[floors])
    assert calls  # traced through the kernel
    ref_value, ref_grads = _reference_3pl(*(x.astype(float) for x in args), floors, y, w)
    assert value == pytest.approx(ref_value, rel=1e-5)
    for got, want, name in zip(grads, ref_grads, ("theta", "a", "e"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)


def test_compiled_2pl_kernel_gives_a_non_finite_value_for_a_non_finite_ability():
    import jax

    kernel = _compiled_kernel()
    rng = np.random.default_rng(22)
    theta, a, e = _item_model_args(rng, 9, 6, scale=1.0, dtype=np.float32)
    theta[4] = np.nan
    y, w = _responses(rng, (9, 6), masked=False)
    value = jax.jit(kernel.dense_2pl)(theta, a, e, y.astype(np.float32), np.float32(w))[0]
    assert not np.isfinite(float(value))


def _loglik_node(dtype, w, floors=None):
    """The Op and node of the dense 2PL (or 3PL) log likelihood on a 4 x 5 matrix.

    ``floors``: None (2PL), ``"variable"`` (3PL, floors an input) or constant floors.
    """
    from bayes_microbench.irt._likelihood import bernoulli_3pl_loglik, bernoulli_logit_2pl_loglik

    y = (np.random.default_rng(23).random((4, 5)) < 0.5).astype(dtype)
    vecs = [pt.tensor(n, shape=(None,), dtype=dtype) for n in ("theta", "a", "e")]
    if isinstance(floors, str):
        vecs.append(pt.tensor("c", shape=(None,), dtype=dtype))
    elif floors is not None:
        vecs.append(np.asarray(floors, dtype))
    op = bernoulli_logit_2pl_loglik if floors is None else bernoulli_3pl_loglik
    out = op(*vecs, y, np.asarray(w, dtype))
    return out.owner.op, out.owner


def test_the_op_takes_the_compiled_kernel_only_where_it_is_exact():
    from bayes_microbench.irt._likelihood import _compiled_kernel_applies

    _compiled_kernel()
    mask = (np.random.default_rng(24).random((4, 5)) < 0.7).astype(float)
    assert _compiled_kernel_applies(*_loglik_node("float32", 1.0))
    assert _compiled_kernel_applies(*_loglik_node("float32", mask))
    assert not _compiled_kernel_applies(*_loglik_node("float64", mask))  # float32 kernel only
    assert not _compiled_kernel_applies(*_loglik_node("float32", 0.5 * mask))  # weights not 0/1
    assert not _compiled_kernel_applies(*_loglik_node("float32", 2.0))
    # the 3PL with constant floors in (0, 1) only (the kernel gives no gradient in them)
    assert _compiled_kernel_applies(*_loglik_node("float32", mask, floors=np.full(5, 0.25)))
    assert not _compiled_kernel_applies(*_loglik_node("float32", 1.0, floors="variable"))
    assert not _compiled_kernel_applies(*_loglik_node("float32", 1.0, floors=np.zeros(5)))
    assert not _compiled_kernel_applies(*_loglik_node("float32", 1.0, floors=np.full(5, 0.01)))
    assert not _compiled_kernel_applies(*_loglik_node("float64", 1.0, floors=np.full(5, 0.25)))


def test_a_kernel_that_cannot_be_compiled_leaves_the_xla_kernel(monkeypatch, caplog):
    import sys

    from bayes_microbench.irt import _accelerators
    from bayes_microbench.irt._likelihood import _compiled_kernel_applies

    from .conftest import require_accelerators

    require_accelerators("ffi")
    monkeypatch.setattr(_accelerators, "_fallen", {})
    # as when Numba finds no directory to cache the kernel in: the import fails
    monkeypatch.setitem(sys.modules, "bayes_microbench.irt._ffi_2pl", None)
    with caplog.at_level("WARNING", logger=_accelerators.__name__):
        assert not _compiled_kernel_applies(*_loglik_node("float32", 1.0))
    assert "the one-pass FFI likelihood kernel" in caplog.text
    assert "is not used: its kernel did not compile" in caplog.text


def test_the_environment_switch_keeps_the_xla_kernel(monkeypatch, caplog):
    from bayes_microbench.irt import _accelerators, _ffi_2pl
    from bayes_microbench.irt._likelihood import _compiled_kernel_applies

    monkeypatch.setattr(_ffi_2pl, "_state", {})
    monkeypatch.setattr(_accelerators, "_fallen", {})
    monkeypatch.setenv(_accelerators.SWITCH, "workers")  # all but the FFI kernel
    with caplog.at_level("INFO", logger=_accelerators.__name__):
        assert not _ffi_2pl.available()
        assert not _compiled_kernel_applies(*_loglik_node("float32", 1.0))
    assert "ok" not in _ffi_2pl._state  # not even tried
    assert caplog.text == ""  # switched off is no fallback: nothing to warn about
    assert _accelerators.status()["ffi"] == f"switched off by {_accelerators.SWITCH}"

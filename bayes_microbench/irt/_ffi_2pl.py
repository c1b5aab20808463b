"""The dense float32 2PL (and fixed-floor 3PL) likelihood as one compiled pass, called by XLA.

A Numba kernel computes the value and the gradients in one pass over the cells (rational
``tanh`` sigmoid, logs of running products over blocks of :data:`BLOCK` llms, float64
totals; the 3PL with constant floors of at least :data:`MIN_FLOOR`), behind a typed XLA
FFI handler that reads XLA's call frame (FFI C API, major version 0) and answers its
metadata query. :func:`available` registers it and checks it against numpy once per
sampling process; :func:`dense_2pl` calls it. Importing this module compiles the kernels
(cached on disk). It is the ``ffi`` accelerator of :mod:`._accelerators`: switched off
there, outside its tested jaxlib range, or on a failed check, XLA's own kernel runs; a frame
that does not match the expected float32 buffers gets a NaN value.

Why: docs/decisions/0016-likelihood-kernels.md (0.22 ms against XLA's 0.56 ms per call on
GPQA, and the accuracy against float64).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import carray, types
from numba.extending import intrinsic

#: XLA's name for the handler.
TARGET = "bayes_microbench_dense_2pl_f32"

#: llms per running product of ``sigmoid(|eta|)`` factors (each >= 1/2: >= 2**-64).
BLOCK = 64

_F32 = 11  # XLA_FFI_DataType_F32

# Eigen's float32 tanh on [-CLAMP, CLAMP]: an odd numerator of degree 13 over an
# even denominator of degree 6 (tanh is 1 to float32 precision beyond)
_N13, _N11, _N9, _N7, _N5, _N3, _N1 = (np.float32(c) for c in (
    -2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
    5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
    4.89352455891786e-03,
))  # fmt: skip
_D6, _D4, _D2, _D0 = (np.float32(c) for c in (
    1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
    4.89352518554385e-03,
))  # fmt: skip
_CLAMP = np.float32(7.90531110763549805)
# the rational sigmoid is off by up to 2**-23 in absolute terms far in its tails
# (it levels off at 2**-23 below eta = -15.9): taken as 0 below -16.6 (where
# sigmoid = 2**-24), it stays within 6e-8 of the truth (the 3PL needs that)
_TAIL = np.float32(-16.6)

#: The smallest 3PL floor the kernel takes: with floor c a correct cell's
#: ``log P`` carries the sigmoid's absolute error (up to 6e-8) divided by c.
MIN_FLOOR = 0.05
_HALF, _ONE, _ZERO = np.float32(0.5), np.float32(1.0), np.float32(0.0)

# reassociation lets LLVM vectorize the reductions; no 'nnan'/'ninf', so a
# non-finite parameter still gives a non-finite value
_FLAGS = {"nsz", "arcp", "contract", "afn", "reassoc"}

_state: dict[str, Any] = {}


@numba.njit(fastmath=_FLAGS, error_model="numpy", cache=True)
def _sigmoid(eta: Any) -> Any:
    """``sigmoid(eta) = (1 + tanh(eta / 2)) / 2`` with Eigen's rational float32 ``tanh``."""
    x = min(max(_HALF * eta, -_CLAMP), _CLAMP)
    x2 = x * x
    p = x2 * _N13 + _N11
    p = x2 * p + _N9
    p = x2 * p + _N7
    p = x2 * p + _N5
    p = x2 * p + _N3
    p = x2 * p + _N1
    q = x2 * _D6 + _D4
    q = x2 * q + _D2
    q = x2 * q + _D0
    return _HALF + _HALF * (x * p / q)


@numba.njit(fastmath=_FLAGS, error_model="numpy", cache=True)
def _row(th: Any, a: Any, e: Any, y: Any, w: Any, weighted: bool,
         ga: Any, ge: Any, prod: Any) -> tuple[Any, Any]:  # fmt: skip
    """One llm's cells (2PL): its gradient and its ``y * eta - max(eta, 0)`` sum."""
    gi = _ZERO
    vi = _ZERO
    for j in range(a.shape[0]):
        eta = th * a[j] + e[j]
        s = _sigmoid(eta)
        pos = eta >= _ZERO
        lin = y[j] * eta - (eta if pos else _ZERO)
        factor = s if pos else _ONE - s  # sigmoid(|eta|)
        r = y[j] - s
        if weighted:
            lin *= w[j]
            factor = _ONE + w[j] * (factor - _ONE)  # w in {0, 1}
            r *= w[j]
        vi += lin
        prod[j] *= factor
        gi += r * a[j]
        ga[j] += r * th
        ge[j] += r
    return gi, vi


@numba.njit(fastmath=_FLAGS, error_model="numpy", cache=True)
def _row_floor(th: Any, a: Any, e: Any, c: Any, log_1mc: Any, y: Any, w: Any, weighted: bool,
               ga: Any, ge: Any, prod: Any) -> tuple[Any, Any]:  # fmt: skip
    """One llm's cells with floors ``c`` (3PL): its gradient and the sum outside the logs.

    ``P = c + (1 - c) * sigmoid(eta)``: a correct cell puts ``P`` in the
    running product, a wrong one ``sigmoid(|eta|)`` and ``log(1 - c) - max(eta, 0)``
    in the sum (``log(1 - P) = log(1 - c) - softplus(eta)``).
    """
    gi = _ZERO
    vi = _ZERO
    vc = _ZERO
    for j in range(a.shape[0]):
        eta = th * a[j] + e[j]
        s = _sigmoid(eta) if eta >= _TAIL else _ZERO
        pos = eta >= _ZERO
        correct = y[j] > _HALF
        p = c[j] + (_ONE - c[j]) * s
        lin = _ZERO if correct else -(eta if pos else _ZERO)
        const = _ZERO if correct else log_1mc[j]
        factor = p if correct else (s if pos else _ONE - s)
        r = (_ONE - c[j]) * s * (_ONE - s) / p if correct else -s
        if weighted:
            lin *= w[j]
            const *= w[j]
            factor = _ONE + w[j] * (factor - _ONE)  # w in {0, 1}
            r *= w[j]
        vi += lin
        vc += const
        prod[j] *= factor
        gi += r * a[j]
        ga[j] += r * th
        ge[j] += r
    return gi, np.float64(vi) + np.float64(vc)


@numba.njit(fastmath=_FLAGS, error_model="numpy", cache=True)
def _kernel(theta: Any, a: Any, e: Any, c: Any, y: Any, w: Any, weighted: bool, floor: bool,
            gtheta: Any, ga: Any, ge: Any) -> Any:  # fmt: skip
    """The log likelihood; writes its gradients in ``theta``, ``a``, ``e`` to the last three.

    ``floor``: the 3PL with floors ``c`` (item, each in [:data:`MIN_FLOOR`, 1));
    else the 2PL (``c`` is not read).
    """
    n, m = y.shape
    # per block of llms: float32 running products and item sums, added to
    # float64 totals at the block's end (summed in float32 over all llms, a
    # log-likelihood near -1e5 would round each addition to 0.008, and the item
    # gradients would carry an error 7 times XLA's)
    block = BLOCK
    log_1mc = np.zeros(m, dtype=np.float32)
    if floor:
        # each factor is at least min(c, 1/2): keep a block's product above 2**-100
        smallest = min(np.float64(c.min()), 0.5)
        block = max(1, min(BLOCK, int(100.0 / -np.log2(smallest))))
        for j in range(m):
            log_1mc[j] = np.log1p(-c[j])
    prod = np.ones(m, dtype=np.float32)
    ga_block = np.zeros(m, dtype=np.float32)
    ge_block = np.zeros(m, dtype=np.float32)
    logs = np.zeros(m, dtype=np.float64)
    ga_total = np.zeros(m, dtype=np.float64)
    ge_total = np.zeros(m, dtype=np.float64)
    value = 0.0
    for i in range(n):
        wi = w[i] if weighted else w[0]
        if floor:
            gi, vi = _row_floor(
                theta[i], a, e, c, log_1mc, y[i], wi, weighted, ga_block, ge_block, prod
            )
        else:
            gi, vi = _row(theta[i], a, e, y[i], wi, weighted, ga_block, ge_block, prod)
        gtheta[i] = gi
        value += vi
        if (i + 1) % block == 0 or i == n - 1:
            for j in range(m):
                logs[j] += np.log(prod[j])
                ga_total[j] += ga_block[j]
                ge_total[j] += ge_block[j]
                prod[j] = _ONE
                ga_block[j] = _ZERO
                ge_block[j] = _ZERO
    ga[:] = ga_total
    ge[:] = ge_total
    return value + logs.sum()


def _pointer_typing(typingctx: Any, address: Any) -> Any:
    """An integer address as ``void *`` (for ``numba.carray``)."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], ir.IntType(8).as_pointer())

    return types.voidptr(address), codegen


_pointer: Any = intrinsic(_pointer_typing)


@numba.njit(cache=True)
def _words(address: Any, count: int) -> Any:
    """``count`` 8-byte words at ``address``."""
    return carray(_pointer(address), (count,), np.int64)


@numba.njit(cache=True)
def _data(buffer: Any, shape: Any) -> Any:
    """The float32 array of an ``XLA_FFI_Buffer *`` (words: 3 data, 4 rank, 5 dims)."""
    return carray(_pointer(_words(buffer, 6)[3]), shape, np.float32)


@numba.cfunc(types.voidptr(types.voidptr), cache=True)
def _handler(frame_ptr: Any) -> Any:
    # XLA_FFI_CallFrame as 8-byte words: 0 struct_size, 1 extension_start, 2 api,
    # 7 args.size, 9 args.args, 12 rets.size, 14 rets.rets; returns NULL (no error)
    frame = carray(frame_ptr, (15,), np.int64)
    # XLA_FFI_Api: api_version's major and minor are the int32s at bytes 32, 36
    api = carray(_pointer(frame[2]), (10,), np.int32)
    if frame[1] != 0:
        # XLA_FFI_InternalExtension: 0 struct_size, 1 type; the metadata
        # extension (type 1) holds an XLA_FFI_Metadata * at word 3
        ext = _words(frame[1], 4)
        if (ext[1] & 0xFFFFFFFF) == 1 and ext[0] >= 32:
            meta = _words(ext[3], 6)
            # XLA_FFI_Metadata: 0 struct_size, 8 api_version (struct_size,
            # extension_start, int32 major at byte 24, minor at 28), uint32
            # traits at byte 32, then (in newer layouts) state_type_id at 40
            if meta[0] >= 36:
                ints = carray(_pointer(ext[3]), (12,), np.int32)
                meta[1] = 24
                meta[2] = 0
                ints[6] = api[8]
                ints[7] = api[9]
                ints[8] = 0
                if meta[0] >= 48:
                    meta[5] = 0  # stateless
        return _pointer(0)
    if frame[0] < 120 or frame[12] != 4:
        return _pointer(0)
    rets = _words(frame[14], 4)
    value = _data(rets[0], (1,))
    n_args = frame[7]
    ok = api[8] == 0 and (n_args == 5 or n_args == 6)
    args = _words(frame[9], n_args if ok else 0)
    for k in range(n_args if ok else 0):
        if (_words(args[k], 6)[2] & 0xFFFFFFFF) != _F32:  # XLA_FFI_Buffer's dtype
            ok = False
    if not ok:
        value[0] = np.float32(np.nan)
        return _pointer(0)
    floor = n_args == 6  # theta, a, e, (c,) y, w
    n = _words(_words(args[0], 6)[5], 1)[0]
    m = _words(_words(args[1], 6)[5], 1)[0]
    weighted = _words(args[n_args - 1], 6)[4] == 2
    value[0] = np.float32(
        _kernel(
            _data(args[0], (n,)),
            _data(args[1], (m,)),
            _data(args[2], (m,)),
            _data(args[3], (m,) if floor else (1,)),
            _data(args[n_args - 2], (n, m)),
            _data(args[n_args - 1], (n, m) if weighted else (1, 1)),
            weighted,
            floor,
            _data(rets[1], (n,)),
            _data(rets[2], (m,)),
            _data(rets[3], (m,)),
        )
    )
    return _pointer(0)


def available() -> bool:
    """Whether the kernel is registered with XLA and passed its check (tried once a process).

    Tried only when the ``ffi`` accelerator is enabled (:func:`._accelerators.enabled`);
    a failure falls back to XLA's kernel with one warning (:func:`._accelerators.fall_back`).
    """
    from . import _accelerators

    if not _accelerators.enabled("ffi"):
        return False
    if "ok" not in _state:
        _state["ok"] = False
        try:
            import jax

            major = _header_major()
            if major != 0:
                raise RuntimeError(f"this jaxlib's XLA FFI header gives major version {major}")
            capsule = jax.ffi.pycapsule(_handler.ctypes)
            jax.ffi.register_ffi_target(TARGET, capsule, platform="cpu")
            _state["ok"] = _check()
        except Exception as err:  # any failure: the plain XLA kernel is used
            _state["error"] = f"{type(err).__name__}: {err}"
        if not _state["ok"]:
            _accelerators.fall_back("ffi", _state["error"])
    return bool(_state["ok"])


def _header_major() -> int | None:
    """``XLA_FFI_API_MAJOR`` of the C API header this jaxlib ships (None: not found)."""
    import jax

    header = Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
    for line in header.read_text().splitlines():
        if line.startswith("#define XLA_FFI_API_MAJOR"):
            return int(line.split()[2])
    return None


def dense_2pl(theta: Any, a: Any, e: Any, y: Any, w: Any, c: Any = None) -> Any:
    """``(value, d/d theta, d/d a, d/d e)`` of the dense 2PL sum, float32 JAX arrays.

    ``y`` is (n, m) and ``w`` a 0/1 (n, m) array or a scalar. With ``c`` (item,
    each floor in [:data:`MIN_FLOOR`, 1)) the 3PL's sum, with
    ``P(correct) = c + (1 - c) * sigmoid(eta)``; no gradient in ``c``. Call only
    when :func:`available` is true.
    """
    import jax
    import jax.numpy as jnp

    shapes = (
        jax.ShapeDtypeStruct((), jnp.float32),
        jax.ShapeDtypeStruct(theta.shape, jnp.float32),
        jax.ShapeDtypeStruct(a.shape, jnp.float32),
        jax.ShapeDtypeStruct(e.shape, jnp.float32),
    )
    call = jax.ffi.ffi_call(TARGET, shapes, vmap_method="sequential")
    floors = () if c is None else (jnp.asarray(c, jnp.float32),)
    return call(theta, a, e, *floors, y, jnp.asarray(w, jnp.float32))


def _check() -> bool:
    """The handler against float64 numpy, weighted and not, 2PL and 3PL, over several blocks."""
    import jax
    import jax.numpy as jnp

    from ._likelihood import _guessing_terms

    rng = np.random.default_rng(0)
    n, m = 2 * BLOCK + 5, 11
    theta = rng.normal(0.0, 2.0, n)
    a = rng.lognormal(0.0, 0.7, m)
    e = rng.normal(0.0, 3.0, m)
    y = (rng.random((n, m)) < 0.5).astype(float)
    eta = np.outer(theta, a) + e
    for floors in (None, np.full(m, 0.25)):
        for w in (np.float64(1.0), (rng.random((n, m)) < 0.8).astype(float)):
            # the Op's float64 terms (a floor of 0 is the 2PL)
            value, r, _ = _guessing_terms(np, eta, 0.0 if floors is None else floors, y, w)
            want = [value, r @ a, theta @ r, r.sum(axis=0)]
            args = [jnp.asarray(x, jnp.float32) for x in (theta, a, e, y, w)]
            got = jax.jit(dense_2pl)(*args, floors)
            for g, x in zip(got, want, strict=True):
                if not np.allclose(np.asarray(g, dtype=float), np.asarray(x), rtol=1e-4, atol=1e-3):
                    _state["error"] = "the FFI kernel disagreed with numpy on a test matrix"
                    return False
    return True

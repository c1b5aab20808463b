"""The numpy response-model core, and the fitting kernels checked against it as twins."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_microbench import response_model as rm


def _reference_prob(eta, c=0.0):
    return c + (1.0 - c) / (1.0 + np.exp(-eta))


def test_prob_is_the_floored_logistic_and_finite_in_the_tails():
    rng = np.random.default_rng(0)
    eta = rng.normal(size=(4, 7)) * 5
    c = rng.uniform(0.0, 0.4, size=7)
    np.testing.assert_allclose(rm.prob(eta), _reference_prob(eta), rtol=1e-14, atol=1e-16)
    np.testing.assert_allclose(rm.prob(eta, c), _reference_prob(eta, c), rtol=1e-14)
    tails = rm.prob(np.array([-1e4, -800.0, 0.0, 800.0, 1e4]), 0.25)
    np.testing.assert_array_equal(tails, [0.25, 0.25, 0.625, 1.0, 1.0])
    assert rm.prob(eta.astype(np.float32)).dtype == np.float32
    assert rm.prob(eta, c, dtype=np.float32).dtype == np.float32


def test_logits_on_the_saved_scales():
    rng = np.random.default_rng(1)
    theta, a, b = rng.normal(size=5), np.exp(rng.normal(size=6)), rng.normal(size=6)
    np.testing.assert_allclose(
        rm.logit(theta[:, None], a[None, :], b[None, :]), a * (theta[:, None] - b)
    )
    assert rm.logit(theta[:, None], 1.0, b[None, :]).shape == (5, 6)  # a 1PL
    ability, lam, icpt = (
        rng.normal(size=(3, 5, 2)),
        rng.normal(size=(3, 6, 2)),
        rng.normal(size=(3, 6)),
    )
    want = np.einsum("skd,sid->ski", ability, lam) + icpt[:, None, :]
    np.testing.assert_allclose(rm.logit_md(ability, lam, icpt), want, rtol=1e-12)
    # one dim (the slope-intercept 1-D logit) and a grid shared by every draw
    np.testing.assert_allclose(
        rm.logit_md(ability[..., :1], lam[..., :1], icpt),
        ability[..., 0][:, :, None] * lam[..., 0][:, None, :] + icpt[:, None, :],
    )
    shared = rm.logit_md(ability[:1], lam, icpt)
    assert shared.shape == (3, 5, 6)
    assert rm.logit_md(ability, lam, icpt, dtype=np.float32).dtype == np.float32


@pytest.mark.parametrize("floors", [None, "mixed", "all"])
def test_log_prob_matches_the_direct_logs_and_keeps_the_tails(floors):
    rng = np.random.default_rng(2)
    eta = rng.normal(size=(5, 8)) * 4
    c = None
    if floors is not None:
        c = rng.uniform(0.05, 0.4, size=8)
        if floors == "mixed":
            c[:3] = 0.0
    p = _reference_prob(eta, 0.0 if c is None else c)
    log_right, log_wrong = rm.log_prob(eta, c)
    np.testing.assert_allclose(log_right, np.log(p), rtol=1e-12)
    np.testing.assert_allclose(log_wrong, np.log1p(-p), rtol=1e-10)
    # far tails: no overflow, no -inf where the probability is positive
    far = np.array([[-500.0, 500.0]])
    right, wrong = rm.log_prob(far, None if c is None else c[:2])
    assert np.isfinite(right).all() and np.isfinite(wrong).all()
    if c is None or floors == "mixed":
        assert right[0, 0] == pytest.approx(-500.0) and wrong[0, 1] == pytest.approx(-500.0)
    left, _ = rm.log_prob(eta.astype(np.float32), c, dtype=np.float32)
    assert left.dtype == np.float32
    np.testing.assert_allclose(left, np.log(p), rtol=2e-5, atol=2e-6)


def test_loglik_per_cell_with_missing_cells_and_softplus():
    rng = np.random.default_rng(3)
    eta = rng.normal(size=(6, 9)) * 3
    y = (rng.random((6, 9)) < 0.5).astype(float)
    y[rng.random((6, 9)) < 0.3] = np.nan
    c = rng.uniform(0.1, 0.3, size=9)
    p = _reference_prob(eta, c)
    want = np.where(np.isnan(y), 0.0, np.where(y == 1, np.log(p), np.log1p(-p)))
    np.testing.assert_allclose(rm.loglik(eta, y, c), want, rtol=1e-10, atol=1e-14)
    observed = ~np.isnan(y)
    two_pl = np.where(observed, np.nan_to_num(y) * eta - np.logaddexp(0.0, eta), 0.0)
    np.testing.assert_allclose(rm.loglik(eta, y), two_pl, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(rm.softplus(eta), np.logaddexp(0.0, eta))
    assert rm.softplus(eta.astype(np.float32)).dtype == np.float32


def test_item_draws_prob_is_the_core():
    from bayes_microbench import simulate_responses
    from bayes_microbench.posterior import item_draws
    from bayes_microbench.simulate import irt_probability
    from bayes_microbench.testing import posterior_from_truth

    _, truth = simulate_responses("gpqa", n_llms=4, n_items=30, random_seed=0, return_truth=True)
    draws = item_draws(posterior_from_truth(truth, n_draws=10, random_seed=0))
    theta = np.random.default_rng(4).normal(size=(draws.n_draws, 3))
    a, b, c = (x[:, None, :] for x in (draws.discrimination, draws.difficulty, draws.guessing))
    np.testing.assert_allclose(draws.prob(theta), _reference_prob(a * (theta[:, :, None] - b), c))
    p = irt_probability(truth.ability.to_numpy(), truth.difficulty.to_numpy(),
                        truth.discrimination.to_numpy(), truth.guessing.to_numpy())  # fmt: skip
    np.testing.assert_allclose(p, truth.p_correct)


# ------------------------------------------------------------ the fitting kernels, twins


def _world(seed, n_llms=9, n_items=12, missing=0.0):
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=n_llms) * 2
    a = np.exp(rng.normal(size=n_items) * 0.5)
    e = rng.normal(size=n_items) * 2
    c = rng.uniform(0.1, 0.35, size=n_items)
    y = (rng.random((n_llms, n_items)) < 0.5).astype(float)
    y[rng.random(y.shape) < missing] = np.nan
    return theta, a, e, c, y


def _core_total(theta, a, e, y, c=None):
    eta = rm.logit_md(theta[:, None], a[:, None], e)
    return float(rm.loglik(eta, y, c).sum())


def _data(y):
    from bayes_microbench.irt.data import IRTData

    n_l, n_i = y.shape
    return IRTData(
        values=y,
        llms=np.array([f"l{k}" for k in range(n_l)]),
        items=np.array([f"i{k}" for k in range(n_i)]),
        item_subtask=np.full(n_i, "s"),
        subtasks=np.array(["s"]),
        subtask_codes=np.zeros(n_i, dtype=int),
        guessing_fixed=np.zeros(n_i),
    )


# compiling with Numba takes 10-20 s on a fresh clone: the long tier
@pytest.mark.parametrize(
    "mode", [pytest.param("NUMBA", marks=pytest.mark.long), "FAST_COMPILE", "JAX"]
)
@pytest.mark.parametrize("guessing", [False, True])
def test_likelihood_ops_are_the_core(mode, guessing):
    import pytensor
    import pytensor.tensor as pt

    from bayes_microbench.irt._likelihood import (
        bernoulli_3pl_loglik,
        bernoulli_logit_2pl_loglik,
        bernoulli_logit_loglik,
    )

    theta, a, e, c, y = _world(5, missing=0.3)
    w = (~np.isnan(y)).astype(float)
    y0 = np.nan_to_num(y)
    vecs = [pt.tensor(n, shape=(None,), dtype="float64") for n in ("theta", "a", "e", "c")]
    if guessing:
        out = bernoulli_3pl_loglik(*vecs, y0, w)
        args = [theta, a, e, c]
    else:
        out = bernoulli_logit_2pl_loglik(*vecs[:3], y0, w)
        args = [theta, a, e]
    f = pytensor.function(vecs[: len(args)], out, mode=mode)
    want = _core_total(theta, a, e, y, c if guessing else None)
    assert float(f(*args)) == pytest.approx(want, rel=1e-12)
    if not guessing:  # the any-logit Op on the same cells
        x = pt.matrix("eta", dtype="float64")
        g = pytensor.function([x], bernoulli_logit_loglik(x, y0, w), mode=mode)
        assert float(g(np.outer(theta, a) + e)) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("floors", [False, True])
def test_the_compiled_float32_kernel_is_the_core(floors):
    jax = pytest.importorskip("jax")
    from bayes_microbench.irt import _ffi_2pl

    from .conftest import require_accelerators

    require_accelerators("ffi")
    assert _ffi_2pl.available(), _ffi_2pl._state.get("error")
    theta, a, e, _, y = _world(6, n_llms=3 * _ffi_2pl.BLOCK + 5, n_items=20, missing=0.2)
    w = (~np.isnan(y)).astype(np.float32)
    args = [np.asarray(x, np.float32) for x in (theta, a, e, np.nan_to_num(y), w)]
    c32 = (1.0 / np.random.default_rng(6).integers(2, 21, size=20)).astype(np.float32)
    value = jax.jit(_ffi_2pl.dense_2pl)(*args, *([c32] if floors else []))[0]
    as64 = [x.astype(float) for x in args[:3]]
    want = _core_total(*as64, y, c32.astype(float) if floors else None)
    assert float(value) == pytest.approx(want, rel=2e-6)


@pytest.mark.parametrize("missing", [0.0, 0.7])  # dense (complete) and gathered cells
@pytest.mark.parametrize("model", ["1pl", "2pl", "3pl"])
def test_the_pymc_graph_likelihood_is_the_core(model, missing):
    import pytensor.tensor as pt

    from bayes_microbench.irt.pymc_model import _loglik

    theta, a, e, c, y = _world(7, missing=missing)
    data = _data(y)
    assert data.dense == (missing == 0.0)

    def cast(x):
        return pt.as_tensor_variable(np.asarray(x, dtype="float64"))

    a_in = None if model == "1pl" else cast(a)
    c_in = cast(c) if model == "3pl" else None
    value = _loglik(data, cast(theta), a_in, cast(e), c_in, cast).eval()
    want = _core_total(theta, np.ones_like(a) if model == "1pl" else a, e, y,
                       c if model == "3pl" else None)  # fmt: skip
    assert float(value) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("missing", [0.0, 0.7])
def test_the_multidimensional_graph_likelihood_is_the_core(missing):
    import pytensor.tensor as pt

    from bayes_microbench.irt.multidim import _loglik

    rng = np.random.default_rng(8)
    _, _, e, _, y = _world(8, missing=missing)
    ability, disc = rng.normal(size=(9, 3)), rng.normal(size=(12, 3))
    value = _loglik(_data(y), pt.as_tensor_variable(ability), pt.as_tensor_variable(disc),
                    pt.as_tensor_variable(e), "float64", 3).eval()  # fmt: skip
    want = float(rm.loglik(rm.logit_md(ability, disc, e), y).sum())
    assert float(value) == pytest.approx(want, rel=1e-12)

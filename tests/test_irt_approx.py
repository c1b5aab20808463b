"""Tests of the fast approximations' machinery (bayes_microbench.irt.approx).

ADVI's plateau schedule on synthetic losses, ADVI on a conjugate model with a
known posterior, the iteration cap, and the reuse of L-BFGS gradients by
Pathfinder. All fast (tiny models).
"""

from __future__ import annotations

import numpy as np
import pytest

from bayes_microbench.exceptions import ConvergenceWarning
from bayes_microbench.irt import approx


class _Shared:
    def __init__(self, value: np.ndarray) -> None:
        self.value = np.asarray(value, dtype=np.float64)
        self.dtype = self.value.dtype

    def get_value(self) -> np.ndarray:
        return self.value.copy()

    def set_value(self, value: np.ndarray) -> None:
        self.value = np.asarray(value, dtype=self.dtype)


class _Approx:
    def __init__(self) -> None:
        self.params = [_Shared(np.zeros(3)), _Shared(np.ones(2))]


def _drive(schedule: approx._PlateauSchedule, fake: _Approx, losses: np.ndarray) -> int:
    for i in range(1, len(losses) + 1):
        fake.params[0].set_value(np.full(3, float(i)))
        try:
            schedule(fake, losses[:i], i)
        except StopIteration:
            return i
    return -1


def test_plateau_schedule_halves_then_averages():
    rng = np.random.default_rng(0)
    window, halvings = 20, 2
    # steep descent for 100 iterations, then flat noise
    losses = np.concatenate([np.linspace(1000, 100, 100), np.full(400, 100.0)])
    losses = losses + rng.normal(0, 1, losses.size)
    lr = _Shared(np.asarray(0.04))
    sched = approx._PlateauSchedule(lr, window, halvings)
    fake = _Approx()
    stopped = _drive(sched, fake, losses)
    # no plateau during the descent; first plateau at the window after it
    assert sched.plateaus[0] >= 120
    assert sched.n_halved == halvings
    assert float(lr.get_value()) == pytest.approx(0.04 / 2**halvings)
    assert sched.converged and stopped == sched.plateaus[-1] + window
    # the averaged parameters are the mean of the iterates over the last window
    sched.finish(fake)
    expect = np.mean(np.arange(stopped - window + 1, stopped + 1))
    np.testing.assert_allclose(fake.params[0].get_value(), expect)
    np.testing.assert_allclose(fake.params[1].get_value(), 1.0)


def test_plateau_schedule_tolerance_declares_slow_descent_a_plateau():
    window = 20
    losses = 1000.0 - 0.05 * np.arange(400)  # 1 nat per window, noiseless
    strict = approx._PlateauSchedule(_Shared(np.asarray(0.02)), window, 1)
    assert _drive(strict, _Approx(), losses) == -1 and not strict.plateaus
    loose = approx._PlateauSchedule(_Shared(np.asarray(0.02)), window, 1, tolerance=2.0)
    assert _drive(loose, _Approx(), losses) > 0 and loose.converged


def _normal_model(dtype: str = "float64"):  # type: ignore[no-untyped-def]
    import pymc as pm
    import pytensor

    y = np.array([1.2, 0.4, 2.1, 1.7, 0.9, 1.5, 1.1, 0.2])
    with pytensor.config.change_flags(floatX=dtype), pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        sd = pm.HalfNormal("sd", 2.0)
        pm.Normal("y", mu, 0.5, observed=y)
        pm.Normal("z", 0.0, sd, observed=np.array([0.3, -0.2]))
    # exact posterior of mu: conjugate normal with known sd 0.5
    prec = 1 / 100 + len(y) / 0.25
    return model, (y.sum() / 0.25) / prec, prec**-0.5


@pytest.fixture(scope="module")
def conjugate():  # type: ignore[no-untyped-def]
    return _normal_model()


@pytest.mark.long
def test_advi_matches_a_conjugate_posterior_and_is_reproducible(conjugate):
    model, mean, sd = conjugate
    draws, info = approx.advi(model, draws=4000, random_seed=3)
    assert info["converged"] and info["iterations"] < 30000 and info["backend"] == "c"
    mu = draws["mu"].ravel()
    assert draws["mu"].shape == (1, 4000)
    assert abs(mu.mean() - mean) < 0.25 * sd
    assert 0.8 * sd < mu.std() < 1.2 * sd
    again, _ = approx.advi(model, draws=4000, random_seed=3)
    np.testing.assert_array_equal(again["mu"], draws["mu"])


@pytest.mark.long
def test_advi_iteration_cap_warns_and_reports_unconverged(conjugate):
    model, _, _ = conjugate
    with pytest.warns(ConvergenceWarning, match="max_iterations=60"):
        _, info = approx.advi(model, draws=10, random_seed=0, max_iterations=60)
    assert not info["converged"] and info["iterations"] == 60


def test_lbfgs_path_gradients_are_the_gradients_at_the_iterates(conjugate):
    model, mean, _ = conjugate
    density = approx._Density(model, 0)
    path, grads, res = approx._lbfgs(density, density.x0, 200)
    assert res.success and len(path) == len(grads) > 2
    evals = density.n_evals
    for x, g in zip(path, grads, strict=True):
        np.testing.assert_allclose(g, density(x)[1], rtol=1e-10)
    # the reuse saved evaluations: fewer than one fresh evaluation per iterate
    assert evals < res.nfev + len(path)
    out, info = approx.pathfinder(model, draws=200, random_seed=0)
    assert abs(out["mu"].mean() - mean) < 0.2 and info["optimizer_converged"]

"""NUTS chains in forked worker processes (``bayes_microbench.irt._chains``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from .conftest import ROOT

pytest.importorskip("nutpie")


@pytest.mark.long
def test_worker_processes_run_the_chains_reproducibly():
    from .conftest import require_accelerators

    require_accelerators("workers")
    # a fresh interpreter: in this test process JAX may already be running, and
    # then the chains (correctly) run as threads instead of forked workers
    code = textwrap.dedent(
        """
        import sys, warnings
        import numpy as np
        from bayes_microbench import simulate_responses
        from bayes_microbench.exceptions import ConvergenceWarning
        from bayes_microbench.irt import IRTModel
        from bayes_microbench.irt._chains import worker_count

        warnings.simplefilter("ignore", ConvergenceWarning)
        resp = simulate_responses("gpqa", n_llms=30, n_items=40, model="2pl", random_seed=3)
        assert worker_count(2) == 2, worker_count(2)
        fits = [
            IRTModel(resp, "2pl").fit(draws=60, tune=60, chains=2, random_seed=7)
            for _ in range(2)
        ]
        from jax._src import xla_bridge

        assert not xla_bridge.backends_are_initialized()  # JAX ran in the workers only
        a, b = (f.posterior["ability"].values for f in fits)
        assert a.shape[:2] == (2, 60)
        assert np.array_equal(a, b)  # same seed, same draws
        assert not np.array_equal(a[0], a[1])  # the chains have their own seeds
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_worker_count_falls_back_to_threads():
    from bayes_microbench.irt._chains import worker_count

    assert worker_count(1) == 1
    jax = pytest.importorskip("jax")
    jax.numpy.zeros(1).block_until_ready()  # JAX running here: forking is unsafe
    assert worker_count(2) == 1


def _tiny_model():
    import pymc as pm

    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 1.0, shape=5)
        pm.Normal("y", x.sum(), 1.0, observed=3.0)  # no zero gradient at the start
    return model


def _scripted(targets, seen):
    """An Extension whose decide asks for ``targets`` in turn, recording the draws it saw."""
    from bayes_microbench.irt._chains import Extension

    todo = list(targets)

    def decide(raw, stats):
        seen.append((raw["x"].shape[1], stats["diverging"].shape[1]))
        return todo.pop(0) if todo else None

    return Extension(budget=400, decide=decide)


SETTINGS = dict(chains=2, cores=2, seed=5, tune=50, target_accept=0.8, progressbar=False)


def test_continued_chains_are_the_draws_a_longer_fit_makes():
    """Paused at 60 draws and continued to 130: the first 130 draws of a 130-draw fit."""
    import numpy as np

    from bayes_microbench.irt._chains import nutpie_draws

    model, seen = _tiny_model(), []
    raw, stats = nutpie_draws(
        model, draws=60, adaptation="diag", extension=_scripted([130], seen), **SETTINGS
    )
    assert seen == [(60, 60), (130, 130)]  # decide saw each checkpoint, cut to its draws
    assert raw["x"].shape == (2, 130, 5) and stats["diverging"].shape == (2, 130)
    plain, _ = nutpie_draws(model, draws=130, adaptation="diag", **SETTINGS)
    np.testing.assert_array_equal(raw["x"], plain["x"])
    seen.clear()
    raw, _ = nutpie_draws(
        model, draws=60, adaptation="diag", extension=_scripted([], seen), **SETTINGS
    )
    assert seen == [(60, 60)]  # stopped at the first checkpoint
    np.testing.assert_array_equal(raw["x"], plain["x"][:, :60])


def test_continued_chains_run_to_the_budget_from_a_pause():
    """A paused sampler asked for its whole budget runs to the end (it used to wait for ever)."""
    import numpy as np

    from bayes_microbench.irt._chains import nutpie_draws

    model, seen = _tiny_model(), []
    raw, _ = nutpie_draws(
        model, draws=60, adaptation="diag", extension=_scripted([400], seen), **SETTINGS
    )
    assert seen == [(60, 60), (400, 400)] and raw["x"].shape == (2, 400, 5)
    plain, _ = nutpie_draws(model, draws=400, adaptation="diag", **SETTINGS)
    np.testing.assert_array_equal(raw["x"], plain["x"])


@pytest.mark.long
def test_worker_processes_continue_their_chains_at_each_checkpoint():
    from .conftest import require_accelerators

    require_accelerators("workers")
    code = textwrap.dedent(
        """
        import numpy as np
        from tests.test_irt_chains import SETTINGS, _scripted, _tiny_model
        from bayes_microbench.irt._chains import nutpie_in_workers, worker_count

        assert worker_count(2) == 2
        model, seen = _tiny_model(), []
        kw = {k: v for k, v in SETTINGS.items() if k != "cores"}
        raw, stats = nutpie_in_workers(
            model, workers=2, draws=60, adaptation="diag", floatx="float64",
            extension=_scripted([100, 130], seen), **kw,
        )
        assert seen == [(60, 60), (100, 100), (130, 130)], seen
        plain, _ = nutpie_in_workers(
            model, workers=2, draws=130, adaptation="diag", floatx="float64", **kw
        )
        assert raw["x"].shape == (2, 130, 5) and stats["diverging"].shape == (2, 130)
        np.testing.assert_array_equal(raw["x"], plain["x"])
        seen.clear()  # continued to the whole budget from a pause
        raw, _ = nutpie_in_workers(
            model, workers=2, draws=60, adaptation="diag", floatx="float64",
            extension=_scripted([400], seen), **kw,
        )
        assert seen == [(60, 60), (400, 400)] and raw["x"].shape == (2, 400, 5)
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_a_fit_with_a_draws_budget_records_each_checkpoint(monkeypatch):
    import warnings

    from bayes_microbench import simulate_responses
    from bayes_microbench.exceptions import ConvergenceWarning
    from bayes_microbench.irt import IRTModel
    from bayes_microbench.irt import model as M

    asked = []

    def one_more(summary, draws, budget, *, step):  # continue once, whatever the diagnostics
        asked.append((draws, budget, step))
        return 100 if draws < 100 else None

    monkeypatch.setattr(M, "more_draws", one_more)
    resp = simulate_responses("metabench", n_llms=30, n_items=20, random_seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = IRTModel(resp, "1pl").fit(draws=50, tune=50, random_seed=1, draws_budget=100)
    attempts = fit.fit_info["attempts"]
    assert asked == [(50, 100, M.EXTENSION_STEP), (100, 100, M.EXTENSION_STEP)]
    assert [a["draws"] for a in attempts] == [50, 100] == fit.fit_info["draws_tried"]
    assert all(a["continued"] for a in attempts)
    assert fit.posterior.sizes["draw"] == 100 == fit.sampler.draws  # what the chains reached
    assert fit.fit_info["draws_budget"] == 100
    assert fit.diagnostics.max_rhat == pytest.approx(attempts[-1]["max_rhat"])


def test_a_draws_budget_below_the_first_check_is_refused():
    from bayes_microbench import simulate_responses
    from bayes_microbench.irt import IRTModel
    from bayes_microbench.irt.config import SettingError

    resp = simulate_responses("metabench", n_llms=30, n_items=20, random_seed=2)
    with pytest.raises(SettingError, match="draws_budget=60 must be at least draws=100"):
        IRTModel(resp, "1pl").fit(draws=100, draws_budget=60)
    with pytest.raises(SettingError, match="needs method='nuts'"):
        IRTModel(resp, "1pl").fit("advi", draws=100, draws_budget=200)

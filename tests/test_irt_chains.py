"""NUTS chains in forked worker processes (``bayes_microbench.irt._chains``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

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

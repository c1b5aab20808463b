"""The NUTS accelerators behind one switch (``bayes_microbench.irt._accelerators``)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from bayes_microbench.exceptions import ConfigurationError
from bayes_microbench.irt import _accelerators

LOGGER = _accelerators.__name__


@pytest.fixture
def fresh(monkeypatch):
    """This process's accelerator state, cleared for the test and restored after it."""
    monkeypatch.setattr(_accelerators, "_fallen", {})
    monkeypatch.setattr(_accelerators, "_deferred", [False])
    monkeypatch.delenv(_accelerators.SWITCH, raising=False)
    monkeypatch.delenv(_accelerators.OLD_SWITCH, raising=False)
    return monkeypatch


def test_the_switch_takes_auto_off_or_names(fresh):
    assert _accelerators.requested() == set(_accelerators.ACCELERATORS)  # unset: auto
    for value, want in [
        ("auto", set(_accelerators.ACCELERATORS)),
        ("off", set()),
        (" Off ", set()),
        ("workers", {"workers"}),
        ("ffi, workers", {"ffi", "workers"}),
    ]:
        fresh.setenv(_accelerators.SWITCH, value)
        assert _accelerators.requested() == want, value
    fresh.setenv(_accelerators.SWITCH, "ffi,fast")
    with pytest.raises(ConfigurationError, match=r"BAYES_MICROBENCH_ACCELERATE='ffi,fast'.*'fast'"):
        _accelerators.requested()


def test_the_old_ffi_switch_is_named_as_no_longer_read(fresh, caplog):
    fresh.setenv(_accelerators.OLD_SWITCH, "0")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert _accelerators.requested() == set(_accelerators.ACCELERATORS)
        _accelerators.requested()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "BAYES_MICROBENCH_FFI_KERNEL is no longer read" in lines[0]


def test_release_numbers_compare_as_numbers():
    r = _accelerators._release
    assert r("0.12.0.1") == (0, 12, 0, 1)
    assert r("0.16.11") > r("0.16.9")
    assert r("0.13.0rc1") == (0, 13, 0)
    assert r("1.0+local") == (1, 0)


def _version(fake: dict[str, str]):
    real = _accelerators.installed
    return lambda dist: fake.get(dist, real(dist))


def test_an_untested_version_falls_back_with_one_warning(fresh, caplog):
    from bayes_microbench.irt import _chains

    assert _accelerators.untested("ffi") is None, "run with the tested jax/jaxlib/nutpie"
    fresh.setattr(_accelerators, "installed", _version({"nutpie": "0.17.0"}))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert _chains.worker_count(2) == 1  # workers: threads
        assert not _accelerators.enabled("workers")  # asked again: no second line
        assert _accelerators.enabled("ffi")  # jax and jaxlib are still the tested ones
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "nutpie 0.17.0 is outside the tested range >=0.16.11,<0.17" in lines[0]
    assert "NUTS chains in forked pinned worker processes" in lines[0]
    assert "the plain path runs instead" in lines[0]
    assert _accelerators.status()["ffi"] == "active"
    assert "outside the tested range" in _accelerators.status()["workers"]


def test_an_untested_jaxlib_keeps_xla_s_kernel(fresh, caplog):
    pytest.importorskip("pytensor")
    from bayes_microbench.irt._likelihood import _compiled_kernel_applies

    from .test_irt_likelihood import _loglik_node

    fresh.setattr(_accelerators, "installed", _version({"jaxlib": "0.13.1"}))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert not _compiled_kernel_applies(*_loglik_node("float32", 1.0))
    assert "jaxlib 0.13.1 is outside the tested range" in caplog.text
    assert "the one-pass FFI likelihood kernel" in caplog.text


def test_a_failed_check_falls_back_once(fresh, caplog):
    pytest.importorskip("jax")
    from bayes_microbench.irt import _ffi_2pl

    fresh.setattr(_ffi_2pl, "_state", {})
    fresh.setattr(_ffi_2pl, "_header_major", lambda: 1)  # a jaxlib with another FFI layout
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert not _ffi_2pl.available()
        assert not _ffi_2pl.available()
    assert len(caplog.records) == 1
    assert "major version 1" in caplog.records[0].getMessage()


def _jax_not_started(monkeypatch):
    """Make ``worker_count`` see a process whose JAX runtime has not started."""
    jax = pytest.importorskip("jax")
    from jax._src import xla_bridge

    assert jax is not None
    monkeypatch.setattr(xla_bridge, "backends_are_initialized", lambda: False)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="pinned workers: Linux only")
def test_off_gives_the_plain_path(fresh):
    pytest.importorskip("nutpie")
    from bayes_microbench.irt import _chains
    from bayes_microbench.irt._likelihood import _compiled_kernel_applies

    from .test_irt_likelihood import _loglik_node

    _jax_not_started(fresh)
    cores = len(os.sched_getaffinity(0))
    assert _chains.worker_count(2) == min(2, cores)  # auto: forked workers
    assert _compiled_kernel_applies(*_loglik_node("float32", 1.0))  # auto: the FFI kernel
    fresh.setenv(_accelerators.SWITCH, "off")
    assert _chains.worker_count(2) == 1
    assert not _compiled_kernel_applies(*_loglik_node("float32", 1.0))
    assert _accelerators.fallen() == {}  # switched off: nothing fell back
    assert set(_accelerators.status().values()) == {f"switched off by {_accelerators.SWITCH}"}


def _tiny_model():
    from bayes_microbench import simulate_responses
    from bayes_microbench.irt import IRTModel

    resp = simulate_responses("gpqa", n_llms=30, n_items=40, model="2pl", random_seed=3)
    return IRTModel(resp, "2pl").build_model(parameterization="decoupled", float32=True)


def test_both_paths_give_the_same_log_density_and_gradient(fresh):
    pytest.importorskip("nutpie")
    import pytensor

    from bayes_microbench.irt import _chains, _likelihood

    used = []
    real = _likelihood._compiled_kernel_applies
    fresh.setattr(
        _likelihood, "_compiled_kernel_applies", lambda *a: used.append(real(*a)) or used[-1]
    )
    logps = {}
    with pytensor.config.change_flags(floatX="float32"):
        model = _tiny_model()
        for value in ("auto", "off"):
            fresh.setenv(_accelerators.SWITCH, value)
            compiled = _chains.compile_for_nutpie(model)
            logps[value] = compiled._make_logp_func()
            n_dim = compiled.n_dim
    assert used == [True, False]  # the FFI kernel, then XLA's
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.normal(0.0, 0.5, n_dim)
        with warnings.catch_warnings():  # float32: JAX notes 64-bit constants become 32-bit
            warnings.filterwarnings("ignore", message="Explicitly requested dtype")
            (v1, g1), (v2, g2) = logps["auto"](x), logps["off"](x)
        assert np.isfinite(v1) and v1 == pytest.approx(v2, rel=1e-5)
        np.testing.assert_allclose(g1, g2, rtol=1e-3, atol=1e-3 * np.abs(g2).max())


def test_the_accelerators_are_active_on_this_machine(monkeypatch):
    """CI's view: skipped, with the reason, where the plain path runs; else each one works.

    Reads the switch as the environment sets it (``off``: skipped, saying so).
    """
    pytest.importorskip("nutpie")
    pytest.importorskip("jax")
    monkeypatch.setattr(_accelerators, "_fallen", {})
    inactive = {k: v for k, v in _accelerators.status().items() if v != "active"}
    if inactive:
        pytest.skip(
            "accelerators not active here, the plain path runs: "
            + "; ".join(f"{k}: {v}" for k, v in inactive.items())
        )
    from bayes_microbench.irt import _ffi_2pl

    monkeypatch.setattr(_ffi_2pl, "_state", {})
    assert _ffi_2pl.available(), _ffi_2pl._state.get("error")  # its check against numpy
    from jax._src.xla_bridge import backends_are_initialized  # what worker_count asks

    assert isinstance(backends_are_initialized(), bool)
    assert _accelerators.fallen() == {}


@pytest.mark.long
def test_a_worker_s_fallback_is_logged_once_by_the_parent():
    from .conftest import require_accelerators

    require_accelerators("ffi", "workers")
    # a fresh interpreter: forked workers need a process where JAX has not started
    code = textwrap.dedent(
        """
        import logging, warnings
        from bayes_microbench import simulate_responses
        from bayes_microbench.exceptions import ConvergenceWarning
        from bayes_microbench.irt import IRTModel, _accelerators
        from bayes_microbench.irt._chains import worker_count

        logging.basicConfig(level=logging.WARNING, format="LOG %(name)s %(message)s")
        warnings.simplefilter("ignore", ConvergenceWarning)
        real = _accelerators.untested
        # the FFI kernel's gate runs where the model is compiled: in each worker
        _accelerators.untested = lambda n: "pretend" if n == "ffi" else real(n)
        resp = simulate_responses("gpqa", n_llms=30, n_items=40, model="2pl", random_seed=3)
        assert worker_count(2) == 2, worker_count(2)
        IRTModel(resp, "2pl").fit(draws=30, tune=30, chains=2, random_seed=7)
        assert _accelerators.fallen() == {"ffi": "pretend"}, _accelerators.fallen()
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != _accelerators.SWITCH}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")
    lines = [x for x in out.stderr.splitlines() if x.startswith(f"LOG {LOGGER}")]
    assert len(lines) == 1 and "the one-pass FFI likelihood kernel" in lines[0], lines

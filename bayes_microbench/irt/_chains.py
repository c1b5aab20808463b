"""nutpie's NUTS chains, in forked worker processes pinned to one CPU core each.

:func:`nutpie_in_workers` forks one worker per share of the chains (each seeded from
``numpy.random.SeedSequence(seed)``) and gathers their draws and sample statistics;
:func:`worker_count` returns 1 (threads in one process) once JAX has started in the
process, or off Linux. The two paths give other draws for the same seed, each
reproducible. The forked workers are the ``workers`` accelerator of :mod:`._accelerators`
(off, or outside its tested versions: threads); nutpie's own log-density callback is used.

Why: docs/decisions/0017-chains-in-pinned-worker-processes.md (26 s against 39 s for two
chains on two cores; XLA's helper threads); docs/decisions/0027-accelerators-behind-one-switch.md
(the callback patch measured and dropped).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import warnings
from typing import Any

import numpy as np

#: Sample statistics kept from nutpie's output.
STATS = ("diverging", "energy", "n_steps", "tree_depth", "step_size", "lp")


def worker_count(chains: int) -> int:
    """How many worker processes to run ``chains`` chains in (1: run them as threads).

    Threads when the ``workers`` accelerator is off or untested (:mod:`._accelerators`),
    off Linux, or once JAX has started in this process (forking it then is unsafe);
    JAX's private ``backends_are_initialized`` that tells is checked at first use.
    """
    if chains < 2 or not sys.platform.startswith("linux") or not hasattr(os, "sched_getaffinity"):
        return 1
    from . import _accelerators

    if not _accelerators.enabled("workers"):
        return 1
    if "jax" in sys.modules:
        try:
            from jax._src.xla_bridge import backends_are_initialized

            started = bool(backends_are_initialized())
        except Exception as err:  # a JAX without it: whether forking is safe is unknown
            _accelerators.fall_back(
                "workers", f"JAX cannot say whether it has started ({type(err).__name__}: {err})"
            )
            return 1
        if started:
            return 1
    return min(chains, len(os.sched_getaffinity(0)))


def nutpie_draws(
    model: Any,
    *,
    chains: int,
    cores: int,
    seed: int,
    draws: int,
    tune: int,
    target_accept: float,
    progressbar: bool,
    adaptation: str,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Sample ``model`` with nutpie in this process; raw draws and statistics as arrays."""
    import nutpie

    compiled = compile_for_nutpie(model)
    with warnings.catch_warnings():
        # float32 sampling: JAX notes that int64/float64 constants become 32-bit
        warnings.filterwarnings("ignore", message="Explicitly requested dtype")
        tree = nutpie.sample(
            compiled,
            draws=draws,
            tune=tune,
            chains=chains,
            cores=cores,
            seed=seed,
            target_accept=target_accept,
            progress_bar=progressbar,
            adaptation=adaptation,
            save_warmup=False,  # nutpie's default keeps (and expands) every warm-up draw
        )
    return draws_and_stats(tree, model)


def compile_for_nutpie(model: Any) -> Any:
    """``model`` compiled for nutpie as the NUTS workers sample it: JAX, no jitter.

    Every chain starts at the data-driven initial values: nutpie's default
    U(-1, 1) jitter of all unconstrained values (e.g. the ability scale) can
    leave a chain stuck far out in the tails for the whole run (the initial
    values are chosen so that no gradient entry is exactly 0, which nutpie's
    mass-matrix initialization needs).
    """
    import nutpie

    return nutpie.compile_pymc_model(model, backend="jax", gradient_backend="jax", jitter_rvs=set())


def draws_and_stats(tree: Any, model: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The free variables' raw draws and the :data:`STATS` of a sampler's DataTree."""
    post, stats_ds = tree["posterior"], tree["sample_stats"]
    raw = {rv.name: np.asarray(post[rv.name].values) for rv in model.free_RVs}
    return raw, {k: np.asarray(stats_ds[k].values) for k in STATS if k in stats_ds}


def _die_with_parent(parent: int) -> None:
    """Ask Linux to kill this worker when the process that forked it dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not glibc: the pipe's EOF still ends the parent's wait
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _worker(
    conn: Any, model: Any, core: int, floatx: str, kwargs: dict[str, Any], parent: int
) -> None:
    from . import _accelerators

    _die_with_parent(parent)
    _accelerators.defer_notes()  # the parent logs this worker's fallbacks, once
    try:
        os.sched_setaffinity(0, {core})
        import pytensor

        with pytensor.config.change_flags(floatX=floatx):
            raw, stats = nutpie_draws(model, cores=1, **kwargs)
        conn.send(("ok", raw, stats, _accelerators.fallen()))
    except BaseException as err:  # reported by the parent; a worker must not die silently
        conn.send(("error", f"{type(err).__name__}: {err}", None, _accelerators.fallen()))
    finally:
        conn.close()


def nutpie_in_workers(
    model: Any,
    *,
    workers: int,
    chains: int,
    seed: int,
    floatx: str,
    progressbar: bool,
    **kwargs: Any,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Run ``chains`` chains in ``workers`` forked processes, one core each; merge them.

    ``model`` is the PyMC model (inherited by the forked workers). Worker ``k``
    runs its share of the chains with its own seed, drawn from
    ``numpy.random.SeedSequence(seed)``; the chains are concatenated in
    worker order.
    """
    cores = sorted(os.sched_getaffinity(0))
    shares = [len(s) for s in np.array_split(np.arange(chains), workers)]
    seeds = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(workers)]
    ctx = multiprocessing.get_context("fork")
    procs, conns = [], []
    try:
        for k in range(workers):
            recv, send = ctx.Pipe(duplex=False)
            args = dict(kwargs, chains=shares[k], seed=seeds[k], progressbar=progressbar and k == 0)
            proc = ctx.Process(
                target=_worker,
                args=(send, model, cores[k % len(cores)], floatx, args, os.getpid()),
                daemon=True,
            )
            with warnings.catch_warnings():
                # Python 3.12 warns about forking a multi-threaded process (BLAS
                # pools); the workers only build a model and start JAX afresh
                warnings.simplefilter("ignore", DeprecationWarning)
                proc.start()
            send.close()
            procs.append(proc)
            conns.append(recv)
        results = []
        for k, conn in enumerate(conns):
            try:
                results.append(conn.recv())
            except EOFError:
                raise RuntimeError(
                    f"NUTS worker process {k} died without a result "
                    f"(exit code {procs[k].exitcode}; out of memory?)"
                ) from None
        from . import _accelerators

        for _, _, _, fell in results:
            for name, reason in fell.items():
                _accelerators.fall_back(name, reason)
        for status, first, _, _ in results:
            if status != "ok":
                raise RuntimeError(f"NUTS worker process failed: {first}")
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
    raw = {n: np.concatenate([r[1][n] for r in results], axis=0) for n in results[0][1]}
    stats = {n: np.concatenate([r[2][n] for r in results], axis=0) for n in results[0][2]}
    return raw, stats

"""nutpie's NUTS chains, in forked worker processes pinned to one CPU core each.

:func:`nutpie_in_workers` forks one worker per share of the chains (each seeded from
``numpy.random.SeedSequence(seed)``) and gathers their draws and sample statistics;
:func:`worker_count` returns 1 (threads in one process) once JAX has started in the
process, or off Linux. The two paths give other draws for the same seed, each
reproducible. The forked workers are the ``workers`` accelerator of :mod:`._accelerators`
(off, or outside its tested versions: threads); nutpie's own log-density callback is used.
With :class:`Extension`, the chains are paused at checkpoints and continued while the
caller's check asks for more draws (:func:`nutpie_draws`, :func:`nutpie_in_workers`).

Why: docs/decisions/0017-chains-in-pinned-worker-processes.md (26 s against 39 s for two
chains on two cores; XLA's helper threads); docs/decisions/0027-accelerators-behind-one-switch.md
(the callback patch measured and dropped); docs/decisions/0036-default-fit-continues-its-chains.md
(checkpoints instead of refits).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Sample statistics kept from nutpie's output.
STATS = ("diverging", "energy", "n_steps", "tree_depth", "step_size", "lp")
#: How often (seconds) a run with checkpoints looks at its chains' progress.
POLL_SECONDS = 0.005

Draws = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]


@dataclass(frozen=True)
class Extension:
    """Continue the chains past their first ``draws`` while ``decide`` asks for more.

    Attributes
    ----------
    budget
        The most draws per chain; the sampler is started with this many.
    decide
        ``decide(raw, stats)``, given the draws so far of every chain (``(chain, draw,
        ...)`` arrays, the same number of draws in each), returns the draws per chain
        to reach next (more than now, at most ``budget``), or ``None`` to stop there.
    """

    budget: int
    decide: Callable[[dict[str, np.ndarray], dict[str, np.ndarray]], int | None]


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
    extension: Extension | None = None,
) -> Draws:
    """Sample ``model`` with nutpie in this process; raw draws and statistics as arrays.

    With ``extension``, the chains are checked at ``draws`` and continued to the
    draws ``extension.decide`` asks for, until it returns ``None`` or the budget is
    reached; the draws returned are those of the last checkpoint.
    """
    settings: dict[str, Any] = dict(
        chains=chains,
        cores=cores,
        seed=seed,
        tune=tune,
        target_accept=target_accept,
        progressbar=progressbar,
        adaptation=adaptation,
    )
    with _float32_quiet():
        if extension is None:
            run = _Checkpointed(model, draws=draws, checkpoints=False, **settings)
        else:
            run = _Checkpointed(model, draws=max(extension.budget, draws), **settings)
        try:
            if extension is None:
                return run.finish(draws)
            target = draws
            while True:
                raw, stats = run.advance(target)
                following = extension.decide(raw, stats)
                if following is None:
                    return raw, stats
                target = following
        finally:
            run.stop()


@contextlib.contextmanager
def _float32_quiet() -> Iterator[None]:
    """Silence JAX's note that float32 sampling narrows int64/float64 constants.

    It is raised in nutpie's chain threads while they sample, so the filter stays for
    the sampler's whole run (not only while it starts, or while it is waited for).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Explicitly requested dtype")
        yield


class _Checkpointed:
    """One nutpie sampler in the background, paused whenever its chains reach a checkpoint.

    Why: continuing chains costs only the draws added, where a refit with more draws
    also repeats the warm-up and every draw already made (nutpie's draws do not depend
    on how many were asked for, so the draws to a checkpoint equal a fit of that many).
    """

    def __init__(
        self,
        model: Any,
        *,
        draws: int,
        progressbar: bool,
        checkpoints: bool = True,
        **settings: Any,
    ) -> None:
        import nutpie

        self.tune = int(settings["tune"])
        self.draws = int(draws)
        self.model = model
        self._done = [0] * int(settings["chains"])
        self._lock = threading.Lock()
        watch = {"progress_callback": self._progress, "progress_rate": 10} if checkpoints else {}
        self.sampler = nutpie.sample(
            compile_for_nutpie(model),
            draws=self.draws,
            save_warmup=False,  # nutpie's default keeps (and expands) every warm-up draw
            progress_bar=progressbar,
            blocking=False,
            **watch,
            **settings,
        )

    def _progress(self, chains: Any) -> None:
        with self._lock:
            self._done = [int(c.finished_draws) for c in chains]

    def _reached(self, total: int) -> bool:
        with self._lock:
            return min(self._done) >= total

    def advance(self, draws: int) -> Draws:
        """Run every chain to at least ``draws`` draws after warm-up, pause; the first ``draws``.

        At or past the sampler's own draws, it runs to the end (:meth:`finish`).
        """
        if draws >= self.draws:
            return self.finish(draws)
        self.sampler.resume()
        while not self._reached(self.tune + draws):
            if self.finished():  # stopped early: the results, or the chain's error
                return self.finish(draws)
            time.sleep(POLL_SECONDS)
        self.sampler.pause()
        return _first(draws_and_stats(self.sampler.inspect(), self.model), draws)

    def finish(self, draws: int) -> Draws:
        """Run to the end; the first ``draws`` draws of every chain.

        The sampler is resumed first: nutpie 0.16's ``wait`` leaves a paused sampler
        paused, and would wait for ever.
        """
        self.sampler.resume()
        tree = self.sampler.wait()
        return _first(draws_and_stats(tree, self.model), draws)

    def finished(self) -> bool:
        """Whether the sampler has stopped; a failed chain's error is raised here."""
        try:
            return bool(self.sampler.is_finished)
        except TimeoutError:  # nutpie 0.16 raises it for a sampler still running
            return False

    def stop(self) -> None:
        """Discard the rest of the run (never raising: it runs on the way out of errors)."""
        try:
            if not self.finished():
                self.sampler.cancel()
        except Exception:  # the chain's own error, already raised or reported
            pass


def _first(found: Draws, draws: int) -> Draws:
    """The first ``draws`` draws of every chain of ``(raw, stats)``."""
    raw, stats = found
    return (
        {k: v[:, :draws] for k, v in raw.items()},
        {k: v[:, :draws] for k, v in stats.items()},
    )


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
    conn: Any,
    model: Any,
    core: int,
    floatx: str,
    kwargs: dict[str, Any],
    parent: int,
    budget: int | None,
) -> None:
    """Sample this worker's chains; with a ``budget``, send each checkpoint's draws and
    continue to the draws the parent sends back, until it sends ``None``."""
    from . import _accelerators

    _die_with_parent(parent)
    _accelerators.defer_notes()  # the parent logs this worker's fallbacks, once
    run = None
    try:
        os.sched_setaffinity(0, {core})
        import pytensor

        with pytensor.config.change_flags(floatX=floatx), _float32_quiet():
            first = int(kwargs.pop("draws"))
            target: int | None = first
            run = _Checkpointed(
                model,
                draws=max(budget or 0, first),
                cores=1,
                checkpoints=budget is not None,
                **kwargs,
            )
            while target is not None:
                raw, stats = run.advance(target) if budget else run.finish(target)
                conn.send(("ok", raw, stats, _accelerators.fallen()))
                target = conn.recv() if budget else None
    except BaseException as err:  # reported by the parent; a worker must not die silently
        with contextlib.suppress(OSError):  # unless the parent has gone (closed its end)
            conn.send(("error", f"{type(err).__name__}: {err}", None, _accelerators.fallen()))
    finally:
        if run is not None:
            run.stop()
        conn.close()


def nutpie_in_workers(
    model: Any,
    *,
    workers: int,
    chains: int,
    seed: int,
    floatx: str,
    progressbar: bool,
    extension: Extension | None = None,
    **kwargs: Any,
) -> Draws:
    """Run ``chains`` chains in ``workers`` forked processes, one core each; merge them.

    ``model`` is the PyMC model (inherited by the forked workers). Worker ``k``
    runs its share of the chains with its own seed, drawn from
    ``numpy.random.SeedSequence(seed)``; the chains are concatenated in
    worker order. With ``extension``, every worker pauses at each checkpoint,
    ``extension.decide`` sees the merged draws, and the workers continue to the
    draws it asks for (as :func:`nutpie_draws` does in one process).
    """
    cores = sorted(os.sched_getaffinity(0))
    shares = [len(s) for s in np.array_split(np.arange(chains), workers)]
    seeds = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(workers)]
    budget = None if extension is None else extension.budget
    ctx = multiprocessing.get_context("fork")
    procs, conns = [], []
    try:
        for k in range(workers):
            here, there = ctx.Pipe(duplex=True)
            args = dict(kwargs, chains=shares[k], seed=seeds[k], progressbar=progressbar and k == 0)
            proc = ctx.Process(
                target=_worker,
                args=(there, model, cores[k % len(cores)], floatx, args, os.getpid(), budget),
                daemon=True,
            )
            with warnings.catch_warnings():
                # Python 3.12 warns about forking a multi-threaded process (BLAS
                # pools); the workers only build a model and start JAX afresh
                warnings.simplefilter("ignore", DeprecationWarning)
                proc.start()
            there.close()
            procs.append(proc)
            conns.append(here)
        while True:
            raw, stats, fell = _gather(conns, procs)
            target = None if extension is None else extension.decide(raw, stats)
            if extension is not None:
                for conn in conns:
                    conn.send(target)
            if target is None:
                break
        from . import _accelerators

        for name, reason in fell.items():
            _accelerators.fall_back(name, reason)
    finally:
        for conn in conns:  # a worker still waiting for its next target ends at once
            conn.close()
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
    return raw, stats


def _gather(conns: list[Any], procs: list[Any]) -> tuple[Any, Any, dict[str, str]]:
    """One checkpoint's draws from every worker, merged over chains in worker order."""
    results = []
    for k, conn in enumerate(conns):
        try:
            results.append(conn.recv())
        except EOFError:
            raise RuntimeError(
                f"NUTS worker process {k} died without a result "
                f"(exit code {procs[k].exitcode}; out of memory?)"
            ) from None
    for status, first, _, _ in results:
        if status != "ok":
            raise RuntimeError(f"NUTS worker process failed: {first}")
    fell = {name: reason for r in results for name, reason in r[3].items()}
    raw = {n: np.concatenate([r[1][n] for r in results], axis=0) for n in results[0][1]}
    stats = {n: np.concatenate([r[2][n] for r in results], axis=0) for n in results[0][2]}
    return raw, stats, fell

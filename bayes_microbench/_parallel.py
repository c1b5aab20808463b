"""Where an evaluation grid's tasks run: this process, local worker processes, or Dask.

A task is a pure function of the grid's shared data (the response matrix and
the runs, shipped once per worker) and its own small description, so a task
gives the same numbers wherever and in whatever order it runs; the caller
(:func:`bayes_microbench.protocol.evaluate_grid`) writes every result itself.

- ``workers=1``: in this process, in order.
- ``workers=N``: ``N`` local processes (:class:`concurrent.futures.ProcessPoolExecutor`;
  forked on Linux, so the data are shared copy-on-write, spawned elsewhere),
  at most ``2 N`` tasks in flight so that finished results do not pile up. A worker
  exits on its own within a second of its parent's death, killed or not.
- ``scheduler=ADDRESS``: a running ``dask.distributed`` scheduler; ``distributed``
  is imported only then.

Every task runs with BLAS on one thread: workers are the parallelism, and
one thread makes a task's floating point the same in every mode. On a Dask
worker a task also gets glibc's usual heap reuse back (:func:`heap_reuse`).

The output folder is locked (:func:`folder_lock`) while a grid writes into it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from .exceptions import UserInputError

logger = logging.getLogger(__name__)

LOCK_NAME = ".evaluate.lock"
#: seconds to wait for a Dask scheduler to answer, and for its first worker
CONNECT_TIMEOUT_S = 10.0
WORKER_TIMEOUT_S = 60.0
#: seconds between a local worker's checks that the process that started it is alive
PARENT_POLL_S = 1.0

_RESUME = "finished cells are kept; rerun the same command to resume"

# the grid's shared data in a local worker process (set once by the pool's initializer)
_WORKER_DATA: Any = None
# descriptors of the folder locks this process holds (a forked worker closes its copies)
_HELD_LOCKS: set[int] = set()


def default_workers() -> int:
    """The CPU cores this process may run on (the default number of local workers)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _call(fn: Callable[[Any, Any], Any], data: Any, task: Any) -> Any:
    from .selectors._cluster import single_blas_thread

    with single_blas_thread():
        return fn(data, task)


# glibc's mallopt parameters (malloc.h) and the values its dynamic mode would reach
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_TASK_MMAP_THRESHOLD = 32 * 2**20
_TASK_TRIM_THRESHOLD = 64 * 2**20
_GLIBC_MMAP_THRESHOLD = 128 * 2**10


@contextlib.contextmanager
def heap_reuse() -> Iterator[None]:
    """While a task runs, let glibc reuse freed heap memory; hand it back to the system after.

    Only where ``MALLOC_TRIM_THRESHOLD_`` is set (Dask's nanny sets it to 64 KiB for its
    workers): glibc then keeps its mmap threshold at 128 KiB, so every temporary array
    above that is mapped and faulted in afresh. The task runs with the thresholds glibc's
    own dynamic mode reaches (32 / 64 MiB); afterwards the worker's trim threshold is
    restored and free memory trimmed. Does nothing off glibc.

    Why: the selectors' numpy kernels ran 1.8-2.4x slower on a Dask worker than in a
    local process (docs/decisions/0023).
    """
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_")
    libc = _glibc() if trim is not None else None
    if libc is None or trim is None:  # trim None: libc None too
        yield
        return
    libc.mallopt(_M_MMAP_THRESHOLD, _TASK_MMAP_THRESHOLD)
    libc.mallopt(_M_TRIM_THRESHOLD, _TASK_TRIM_THRESHOLD)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            libc.mallopt(_M_TRIM_THRESHOLD, int(trim))
        libc.mallopt(_M_MMAP_THRESHOLD, _GLIBC_MMAP_THRESHOLD)
        libc.malloc_trim(0)


def _glibc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt  # noqa: B018 - absent outside glibc
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def _call_on_dask(fn: Callable[[Any, Any], Any], data: Any, task: Any) -> Any:
    with heap_reuse():
        return _call(fn, data, task)


def _exit_when_orphaned(parent: int) -> None:
    """Poll the parent's pid; leave the process at once when it is gone."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _init_worker(data: Any, parent: int) -> None:
    global _WORKER_DATA
    _WORKER_DATA = data
    # a killed parent (SIGKILL) cannot shut its pool down: the worker would wait for tasks
    # that never come, for ever
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()
    # a forked worker shares the parent's lock; were it to outlive a killed parent, the
    # folder would stay locked
    for fd in list(_HELD_LOCKS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD_LOCKS.clear()


def _call_in_worker(fn: Callable[[Any, Any], Any], task: Any) -> Any:
    return _call(fn, _WORKER_DATA, task)


def run_tasks(
    fn: Callable[[Any, Any], Any],
    data: Any,
    tasks: Sequence[Any],
    *,
    workers: int = 1,
    scheduler: str | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_S,
) -> Generator[tuple[int, Any]]:
    """``fn(data, task)`` for every task, yielded as ``(task index, result)`` when each finishes.

    Parameters
    ----------
    fn
        A module-level function (workers import it by name).
    data
        What every task reads; picklable (sent once per worker).
    tasks
        Small picklable task descriptions.
    workers
        Local processes; 1 runs the tasks here, in order. Ignored with ``scheduler``.
    scheduler
        Address of a ``dask.distributed`` scheduler (``tcp://host:8786``) to send the tasks to.
    connect_timeout
        Seconds to wait for the scheduler.

    Returns
    -------
    iterator of (int, object)
        In completion order; an error in a task is raised here.

    Why: one place decides where work runs, so the grid's code is the same for all three.
    """
    if scheduler is not None:
        yield from _on_dask(fn, data, tasks, scheduler, connect_timeout)
    elif workers <= 1 or len(tasks) <= 1:
        for k, task in enumerate(tasks):
            yield k, _call(fn, data, task)
    else:
        yield from _on_local_processes(fn, data, tasks, min(int(workers), len(tasks)))


def _on_local_processes(
    fn: Callable[[Any, Any], Any], data: Any, tasks: Sequence[Any], workers: int
) -> Iterator[tuple[int, Any]]:
    method = "fork" if sys.platform == "linux" else "spawn"
    context = multiprocessing.get_context(method)
    todo = iter(enumerate(tasks))
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init_worker,
        initargs=(data, os.getpid()),
    )
    pending: dict[Future[Any], int] = {}
    try:
        for k, task in itertools.islice(todo, 2 * workers):
            pending[pool.submit(_call_in_worker, fn, task)] = k
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=pending.__getitem__):
                k = pending.pop(fut)
                result = fut.result()
                for k_next, task in itertools.islice(todo, 1):
                    pending[pool.submit(_call_in_worker, fn, task)] = k_next
                yield k, result
    except BrokenProcessPool:  # from a result, or from a submit once the pool knows
        raise UserInputError(
            "a worker process died while computing (killed, or out of memory); "
            f"{_RESUME}, with fewer workers if memory is short"
        ) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _package_version() -> str:
    from . import __version__

    return __version__


def _on_dask(
    fn: Callable[[Any, Any], Any],
    data: Any,
    tasks: Sequence[Any],
    address: str,
    connect_timeout: float,
) -> Iterator[tuple[int, Any]]:
    try:
        import distributed
    except ImportError:
        raise UserInputError(
            "sending the grid to a Dask scheduler needs the 'distributed' package; install "
            "it with: pip install 'bayes-microbench[cluster]'"
        ) from None
    from . import __version__

    where = f"the Dask scheduler at {address}"
    try:
        client = distributed.Client(address, timeout=connect_timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as err:
        raise UserInputError(
            f"cannot reach {where} ({_first_line(err)}); check the address, or start a "
            "scheduler with 'dask scheduler' and workers with 'dask worker ADDRESS'"
        ) from None
    with client:
        try:
            client.wait_for_workers(1, timeout=WORKER_TIMEOUT_S)
        except TimeoutError:
            raise UserInputError(
                f"{where} has no worker (none joined within {WORKER_TIMEOUT_S:.0f} s); "
                "start some with 'dask worker ADDRESS'"
            ) from None
        try:
            versions = client.run(_package_version)
        except Exception as err:  # the workers cannot import this package
            raise UserInputError(
                f"the workers of {where} cannot run bayes-microbench ({_first_line(err)}); "
                f"install bayes-microbench {__version__} on every worker"
            ) from None
        other = {w: v for w, v in versions.items() if v != __version__}
        if other:
            shown = ", ".join(f"{w} has {v}" for w, v in sorted(other.items())[:3])
            raise UserInputError(
                f"the workers of {where} run another bayes-microbench version ({shown}; this "
                f"client has {__version__}); install the same version everywhere"
            )
        shared = client.scatter(data, broadcast=True, hash=False)
        futures = {
            client.submit(_call_on_dask, fn, shared, task, pure=False): k
            for k, task in enumerate(tasks)
        }
        try:
            for fut in distributed.as_completed(futures, loop=client.loop):
                k = futures.pop(fut)
                try:
                    result = fut.result()
                except distributed.KilledWorker as err:
                    raise UserInputError(
                        f"a worker of {where} died while computing, more often than the "
                        f"scheduler retries a task ({_first_line(err)}); {_RESUME}"
                    ) from None
                except (OSError, CancelledError) as err:  # the scheduler went away
                    raise UserInputError(
                        f"lost {where} while computing ({_first_line(err)}); {_RESUME}"
                    ) from None
                fut.release()
                yield k, result
        finally:
            for fut in futures:
                fut.cancel()


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder/.evaluate.lock`` while writing into ``folder``; a second holder is refused.

    The lock is ``flock`` on the file (released by the system when the holder dies, so
    a killed run never leaves a stale lock); the file records the holder's pid and host
    and is removed on release. Where ``fcntl`` is absent (Windows) nothing is locked.

    Raises
    ------
    UserInputError
        Another process holds the lock.

    Why: two runs writing one folder would interleave cells of one grid with another's.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise UserInputError(
                f"{folder}: another 'evaluate' (pid and host: {holder}) is writing into this "
                f"folder ({LOCK_NAME}); wait for it to finish, or choose another output folder"
            ) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed the file after we opened it: retry
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
    _HELD_LOCKS.add(fd)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        _HELD_LOCKS.discard(fd)
        os.close(fd)

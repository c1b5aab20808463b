"""The evaluation grid on local worker processes and on a Dask cluster: same bytes as serial,
resume after a killed worker or client, the folder lock, unreachable schedulers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bayes_microbench import Responses, save_responses, simulate_responses
from bayes_microbench._parallel import LOCK_NAME, PARENT_POLL_S, folder_lock
from bayes_microbench.cli import main
from bayes_microbench.exceptions import UserInputError
from bayes_microbench.protocol import GridConfig, evaluate_grid


@pytest.fixture(scope="module")
def resp() -> Responses:
    sim = simulate_responses("gpqa", n_llms=50, n_items=80, random_seed=5)
    subtask = np.array(["a"] * 45 + ["b"] * 35)
    return Responses.from_arrays(sim.values, sim.llms, sim.items, subtask=subtask)


def _grid(**kw) -> GridConfig:
    base = dict(
        selectors=("random", "stratified-confidence"),
        sizes=(10, 15),
        source_llms=(8, 20),
        target_llms=10,
        runs=4,
        seed=3,
    )
    base.update(kw)
    return GridConfig(**base)  # type: ignore[arg-type]


def outputs(folder: Path) -> dict[str, object]:
    """Every output file's bytes; cell files without their timing (not a result)."""
    found: dict[str, object] = {}
    for p in sorted(folder.rglob("*")):
        if p.is_dir():
            continue
        rel = p.relative_to(folder).as_posix()
        if rel.startswith("cells/"):
            doc = json.loads(p.read_text())
            doc["metrics"].pop("seconds", None)
            found[rel] = doc
        else:
            found[rel] = p.read_bytes()
    return found


@pytest.fixture(scope="module")
def serial(resp, tmp_path_factory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("serial") / "g"
    report = evaluate_grid(resp, _grid(), out, workers=1)
    assert len(report.computed) == 2 * 2 * 2 + 2 * 2  # two selectors' cells, analytic rows
    return outputs(out)


def test_workers_give_the_serial_bytes_and_resume(resp, serial, tmp_path):
    out = tmp_path / "p"
    report = evaluate_grid(resp, _grid(), out, workers=2)
    assert outputs(out) == serial
    assert not (out / LOCK_NAME).exists()
    # computed is listed in grid order whatever order the workers finished in
    again = evaluate_grid(resp, _grid(), tmp_path / "p2", workers=2)
    assert again.computed == report.computed
    (out / "cells" / "stratified-confidence__n15__s8.json").unlink()
    (out / "cells" / "random-analytic__n10__s20.json").unlink()
    rerun = evaluate_grid(resp, _grid(), out, workers=2)
    assert rerun.computed == ["stratified-confidence__n15__s8"] + [
        f"random-analytic__n10__s{s}" for s in (8, 20)
    ]
    assert outputs(out) == serial


def test_workers_must_be_positive(resp, tmp_path):
    with pytest.raises(UserInputError, match="workers must be at least 1"):
        evaluate_grid(resp, _grid(), tmp_path / "x", workers=0)
    assert not (tmp_path / "x").exists()


def test_second_writer_is_refused_and_a_stale_lock_file_is_not(resp, tmp_path, capsys):
    out = tmp_path / "locked"
    with folder_lock(out):
        with pytest.raises(UserInputError, match=r"another 'evaluate' \(pid and host: \d+ "):
            evaluate_grid(resp, _grid(), out, workers=1)
        assert not (out / "cells").exists()  # nothing written
        data = tmp_path / "r.csv"
        save_responses(resp, data)
        argv = ["evaluate", "--responses", str(data), "--sizes", "10", "--source-llms", "8"]
        assert main([*argv, "--target-llms", "10", "--runs", "2", "--output", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is writing into this folder" in err[0], err
    assert not (out / LOCK_NAME).exists()
    (out / LOCK_NAME).write_text("12345 elsewhere\n")  # left by a killed run: not locked
    evaluate_grid(resp, _grid(selectors=("random",), analytic=False), out, workers=1)
    assert not (out / LOCK_NAME).exists()


def _wait_for_cells(folder: Path, timeout: float = 60.0) -> None:
    t0 = time.monotonic()
    cells = folder / "cells"
    while not (cells.is_dir() and any(cells.glob("*.json"))):
        if time.monotonic() - t0 > timeout:
            raise AssertionError("no cell finished in time")
        time.sleep(0.02)


def _many_blocks(**kw) -> GridConfig:
    # many (selector, source count) blocks, so that work remains when the first cell is written
    return _grid(selectors=("random",), source_llms=tuple(range(4, 40, 3)), analytic=False, **kw)


def test_a_pool_broken_at_a_submit_is_one_line(monkeypatch):
    """A worker's death can surface at the next submit instead of at a result."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    from bayes_microbench import _parallel

    class BreaksAtThirdSubmit:
        def __init__(self, **_: object) -> None:
            self.submitted = 0

        def submit(self, fn, *args):
            self.submitted += 1
            if self.submitted > 2:
                raise BrokenProcessPool("A child process terminated abruptly")
            done: Future = Future()
            done.set_result(self.submitted)
            return done

        def shutdown(self, **_: object) -> None:
            pass

    monkeypatch.setattr(_parallel, "ProcessPoolExecutor", BreaksAtThirdSubmit)
    with pytest.raises(UserInputError, match="a worker process died while computing"):
        list(_parallel.run_tasks(max, 0, list(range(6)), workers=2))


def test_a_killed_local_worker_is_one_line_and_the_rerun_resumes(resp, tmp_path):
    import psutil

    out = tmp_path / "k"
    errors: list[BaseException] = []

    def target() -> None:
        try:
            evaluate_grid(resp, _many_blocks(runs=12), out, workers=2)
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=target)
    thread.start()
    _wait_for_cells(out)
    children = psutil.Process().children()
    assert children, "no worker process"
    os.kill(children[0].pid, signal.SIGKILL)
    thread.join(120)
    assert len(errors) == 1 and isinstance(errors[0], UserInputError), errors
    assert "worker process died" in str(errors[0]) and "rerun the same command" in str(errors[0])
    kept = len(list((out / "cells").glob("*.json")))
    assert kept >= 1 and not (out / "mdad.csv").exists() and not (out / LOCK_NAME).exists()
    rerun = evaluate_grid(resp, _many_blocks(runs=12), out, workers=2)
    assert len(rerun.reused) == kept
    whole = evaluate_grid(resp, _many_blocks(runs=12), tmp_path / "whole", workers=1)
    assert outputs(out) == outputs(tmp_path / "whole") and whole.reused == []


def _gone(proc) -> bool:
    """Whether a ``psutil.Process`` has exited (a zombie waiting to be reaped counts)."""
    import psutil

    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
def test_a_killed_client_leaves_finished_cells_and_the_rerun_resumes(resp, tmp_path):
    import psutil

    data = tmp_path / "r.csv"
    save_responses(resp, data)
    out = tmp_path / "c"
    argv = [sys.executable, "-m", "bayes_microbench.cli", "evaluate", "--responses", str(data)]
    argv += ["--sizes", "10,15", "--source-llms", ",".join(map(str, range(4, 40, 3)))]
    argv += ["--target-llms", "10", "--runs", "12", "--seed", "3", "--no-analytic", "--quiet"]
    argv += ["--workers", "2", "--output", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_cells(out)
        workers = psutil.Process(proc.pid).children()
    finally:
        proc.kill()  # SIGKILL: no clean-up of any kind
        proc.wait()
    kept = len(list((out / "cells").glob("*.json")))
    assert kept >= 1 and not (out / "mdad.csv").exists()
    # the orphaned workers leave on their own
    assert len(workers) >= 2
    deadline = time.monotonic() + 10 * PARENT_POLL_S
    while not all(map(_gone, workers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(map(_gone, workers))
    assert subprocess.run(argv, capture_output=True, check=False).returncode == 0
    whole = tmp_path / "whole"
    argv[argv.index(str(out))] = str(whole)
    assert subprocess.run(argv, capture_output=True, check=False).returncode == 0
    assert outputs(out) == outputs(whole)


# ------------------------------------------------------------------------------------ Dask
@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"
    ) as local:
        yield local


def test_dask_cluster_gives_the_serial_bytes(resp, serial, cluster, tmp_path):
    out = tmp_path / "d"
    report = evaluate_grid(resp, _grid(), out, scheduler=cluster.scheduler_address)
    assert outputs(out) == serial
    assert len(report.computed) == 12 and not (out / LOCK_NAME).exists()
    (out / "cells" / "random__n10__s8.json").unlink()
    again = evaluate_grid(resp, _grid(), out, scheduler=cluster.scheduler_address)
    assert again.computed == ["random__n10__s8"] and outputs(out) == serial


def test_unreachable_scheduler_is_one_line(resp, tmp_path):
    import socket

    pytest.importorskip("distributed")

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UserInputError, match=r"cannot reach the Dask scheduler at tcp://127"):
        evaluate_grid(
            resp, _grid(), tmp_path / "u", scheduler=f"tcp://127.0.0.1:{port}", connect_timeout=1
        )
    assert not (tmp_path / "u" / "cells").exists()
    with pytest.raises(UserInputError, match=r"cannot reach the Dask scheduler at nonsense"):
        evaluate_grid(resp, _grid(), tmp_path / "u", scheduler="nonsense://x", connect_timeout=1)


@pytest.mark.slow
def test_a_dask_worker_killed_mid_cell_is_one_line_and_the_rerun_resumes(resp, tmp_path):
    """A worker process dies while computing; with no retries allowed the client stops with one
    line, keeps the finished cells, and a rerun on the restarted worker resumes."""
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")

    out = tmp_path / "dk"
    cfg = _many_blocks(runs=12)
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as local,
        distributed.Client(local) as probe,
    ):
        errors: list[BaseException] = []

        def target() -> None:
            try:
                evaluate_grid(resp, cfg, out, scheduler=local.scheduler_address)
            except BaseException as err:
                errors.append(err)

        thread = threading.Thread(target=target)
        thread.start()
        _wait_for_cells(out, timeout=120)
        pids = probe.run(os.getpid)
        for pid in pids.values():
            os.kill(pid, signal.SIGKILL)
        thread.join(120)
        assert len(errors) == 1 and isinstance(errors[0], UserInputError), errors
        assert "died while computing" in str(errors[0])
        kept = len(list((out / "cells").glob("*.json")))
        assert kept >= 1 and not (out / "mdad.csv").exists()
        probe.wait_for_workers(1, timeout=60)
        rerun = evaluate_grid(resp, cfg, out, scheduler=local.scheduler_address)
        assert len(rerun.reused) == kept
    evaluate_grid(resp, cfg, tmp_path / "whole", workers=1)
    assert outputs(out) == outputs(tmp_path / "whole")

"""Time py-irt's SVI point fit of a hierarchical IRT model on a wide response CSV.

The speed reference for our IRT engine (issue 4): py-irt fitted the way
tinyBenchmarks fits it (``IrtModelTrainer``, ``priors="hierarchical"``, Adam at
lr 0.1 with decay 0.9999, 2000 epochs, a fixed seed, deterministic torch).

It runs in the throwaway env made by ``setup_pyirt.sh`` (Python 3.11 + torch +
py-irt), NOT in the project's env, so it uses only the standard library, numpy
and py-irt, never ``bayes_microbench``::

    /work/pyirt-env/bin/python benchmarks/reference/run_pyirt.py \\
        --responses ../shared/data/open-llm-leaderboard-v2/gpqa.csv --epochs 2000

Input: the project's wide CSV (first column ``llm``, one column per item,
cells ``1``/``0``/empty for missing). Missing cells are left out of the fit.

Output: ONE JSON line on stdout (everything py-irt, torch or pyro print goes to
stderr) with ``wall_seconds`` (the SVI training loop alone, as py-irt's
``IrtModelTrainer.train`` runs it, including its per-improvement parameter
export), ``cpu_seconds`` (the process's CPU time over the same loop: with
``--threads 1``, a figure less sensitive to other load on the machine),
``total_seconds`` (CSV read, conversion to py-irt's jsonlines, dataset load,
training and export, but not the imports, which ``import_seconds``
gives), the data's size and the peak resident memory. With ``--estimates``,
py-irt's point estimates are written as a long CSV with columns
``parameter,id,dim,value``: ``parameter`` is ``ability`` (``id`` an llm),
``difficulty``, ``discrimination`` or ``guessing`` (``id`` an item), ``dim`` is
the dimension (0 unless ``--model multidim_2pl``). The scale is py-irt's
``logit P(correct) = discrimination * (ability - difficulty)``; the
discrimination is ``exp(loc)`` of its log-normal variational factor.

Exit status: 0 on success, 2 on bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MODELS = ("1pl", "2pl", "3pl", "multidim_2pl")
# py-irt's export keys -> our parameter names.
EXPORT_KEYS = {
    "ability": "ability",
    "diff": "difficulty",
    "disc": "discrimination",
    "lambdas": "guessing",
}


class InputError(Exception):
    """Bad command-line input or a malformed response file."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(
        description="Time py-irt's SVI fit of a hierarchical IRT model on a wide response CSV.",
    )
    p.add_argument("--responses", required=True, type=Path, help="wide CSV: llm, item columns")
    p.add_argument("--epochs", type=int, default=2000, help="SVI epochs (default 2000)")
    p.add_argument("--model", choices=MODELS, default="2pl", help="py-irt model (default 2pl)")
    p.add_argument("--dims", type=int, default=2, help="dimensions for multidim_2pl (default 2)")
    p.add_argument(
        "--priors",
        choices=("hierarchical", "vague"),
        default="hierarchical",
        help="priors for 1pl/2pl (default hierarchical; 3pl and multidim_2pl are hierarchical)",
    )
    p.add_argument("--lr", type=float, default=0.1, help="Adam learning rate (default 0.1)")
    p.add_argument("--lr-decay", type=float, default=0.9999, help="per-epoch lr decay")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="torch.use_deterministic_algorithms, as tinyBenchmarks runs py-irt (default on)",
    )
    p.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's)"
    )
    p.add_argument(
        "--params",
        choices=("best", "last"),
        default="best",
        help="estimates from the lowest-loss epoch (py-irt's best_parameters, default) or the last",
    )
    p.add_argument("--estimates", type=Path, default=None, help="write point estimates here")
    args = p.parse_args(argv)
    if args.epochs < 1:
        raise InputError(f"--epochs must be a positive integer, got {args.epochs}")
    if args.dims < 1:
        raise InputError(f"--dims must be a positive integer, got {args.dims}")
    if args.threads is not None and args.threads < 1:
        raise InputError(f"--threads must be a positive integer, got {args.threads}")
    if not args.lr > 0:
        raise InputError(f"--lr must be positive, got {args.lr}")
    return args


def read_wide_csv(path: Path) -> tuple[list[str], list[str], list[dict[str, int]]]:
    """Read the wide response CSV.

    Returns the llm names, the item ids (column order) and, per llm, a dict
    item id -> 0/1 holding only the observed cells.
    """
    if not path.is_file():
        raise InputError(f"responses file not found: {path}")
    values = {"1": 1, "0": 0, "1.0": 1, "0.0": 0}
    llms: list[str] = []
    rows: list[dict[str, int]] = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header or header[0] != "llm":
            raise InputError(f"{path}: the first column must be 'llm', got {header[:1]}")
        items = header[1:]
        if not items:
            raise InputError(f"{path}: no item columns after 'llm'")
        if len(set(items)) != len(items):
            raise InputError(f"{path}: duplicate item column names")
        seen: set[str] = set()
        for lineno, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise InputError(
                    f"{path}, line {lineno}: {len(row)} fields, the header has {len(header)}"
                )
            llm = row[0]
            if not llm or llm in seen:
                raise InputError(f"{path}, line {lineno}: empty or duplicate llm name {llm!r}")
            seen.add(llm)
            obs: dict[str, int] = {}
            for item, cell in zip(items, row[1:], strict=True):
                cell = cell.strip()
                if cell == "":
                    continue
                if cell not in values:
                    raise InputError(
                        f"{path}, line {lineno}, item {item!r}: cell {cell!r} is not 1, 0 or empty"
                    )
                obs[item] = values[cell]
            llms.append(llm)
            rows.append(obs)
    if not llms:
        raise InputError(f"{path}: no llm rows")
    return llms, items, rows


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to fd 1 (Python or C level) to stderr while inside."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def estimate_rows(params: dict[str, Any]) -> list[tuple[str, str, int, float]]:
    """Flatten py-irt's exported parameters into (parameter, id, dim, value) rows."""
    subject_ids = params["subject_ids"]
    item_ids = params["item_ids"]
    out: list[tuple[str, str, int, float]] = []
    for key, name in EXPORT_KEYS.items():
        if key not in params:
            continue
        ids = subject_ids if name == "ability" else item_ids
        for ix, value in enumerate(params[key]):
            vec = value if isinstance(value, list) else [value]
            for dim, v in enumerate(vec):
                out.append((name, str(ids[ix]), dim, float(v)))
    return out


def write_estimates(path: Path, rows: list[tuple[str, str, int, float]]) -> None:
    """Write the estimates CSV atomically (a temp file in the same folder, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["parameter", "id", "dim", "value"])
            for name, ident, dim, value in rows:
                w.writerow([name, ident, dim, repr(value)])
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Read the data, fit py-irt, optionally write estimates; return the JSON record."""
    # The data are read before the heavy imports so that bad input fails fast;
    # total_seconds adds the read to the post-import work, import_seconds apart.
    t_read = time.perf_counter()
    llms, items, rows = read_wide_csv(args.responses)
    n_cells = sum(len(r) for r in rows)
    observed_items = {i for r in rows for i in r}
    unobserved_items = [i for i in items if i not in observed_items]
    empty_llms = [llm for llm, r in zip(llms, rows, strict=True) if not r]
    if unobserved_items or empty_llms:
        # py-irt silently drops them (they never appear in its jsonlines input).
        print(
            f"run_pyirt: {len(unobserved_items)} item(s) and {len(empty_llms)} llm(s) "
            "have no observed cell and are left out of the fit",
            file=sys.stderr,
        )
    read_seconds = time.perf_counter() - t_read

    t_import = time.perf_counter()
    from importlib.metadata import version

    import pyro
    import torch
    from py_irt.config import IrtConfig
    from py_irt.training import IrtModelTrainer

    import_seconds = time.perf_counter() - t_import

    t_total = time.perf_counter()
    # Seed as py-irt's CLI does for `--seed`: pyro.set_rng_seed seeds torch,
    # random and numpy's global state (py-irt's own code draws from these).
    pyro.set_rng_seed(args.seed)
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory(prefix="run_pyirt.") as tmp:
        data_path = Path(tmp) / "responses.jsonlines"
        with data_path.open("w", encoding="utf-8") as fh:
            for llm, obs in zip(llms, rows, strict=True):
                if obs:
                    fh.write(json.dumps({"subject_id": llm, "responses": obs}) + "\n")
        config = IrtConfig(
            model_type=args.model,
            epochs=args.epochs,
            priors=args.priors,
            dims=args.dims if args.model == "multidim_2pl" else None,
            lr=args.lr,
            lr_decay=args.lr_decay,
            seed=args.seed,
            deterministic=args.deterministic,
        )
        trainer = IrtModelTrainer(data_path=data_path, config=config, verbose=False)
        t_train, c_train = time.perf_counter(), time.process_time()
        trainer.train(epochs=args.epochs, device="cpu")
        wall_seconds = time.perf_counter() - t_train
        cpu_seconds = time.process_time() - c_train
    params = trainer.best_params if args.params == "best" else trainer.last_params
    if params is None:  # every epoch's loss was NaN/inf: py-irt never recorded a best
        raise RuntimeError("py-irt recorded no finite loss: the fit diverged")
    estimates = estimate_rows(params)
    bad = [r for r in estimates if not math.isfinite(r[3])]
    if bad:
        raise RuntimeError(f"py-irt returned {len(bad)} non-finite estimates, e.g. {bad[0]}")
    if args.estimates is not None:
        write_estimates(args.estimates, estimates)
    total_seconds = read_seconds + time.perf_counter() - t_total

    return {
        "tool": "py-irt",
        "version": version("py-irt"),
        "torch": torch.__version__,
        "pyro": version("pyro-ppl"),
        "python": platform.python_version(),
        "model": args.model,
        "priors": args.priors,
        "dims": args.dims if args.model == "multidim_2pl" else 1,
        "epochs": args.epochs,
        "lr": args.lr,
        "lr_decay": args.lr_decay,
        "seed": args.seed,
        "deterministic": args.deterministic,
        "torch_threads": torch.get_num_threads(),
        "params": args.params,
        "wall_seconds": round(wall_seconds, 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "total_seconds": round(total_seconds, 3),
        "import_seconds": round(import_seconds, 3),
        "n_llms": len(llms) - len(empty_llms),
        "n_items": len(items) - len(unobserved_items),
        "n_cells": n_cells,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "responses": str(args.responses),
        "estimates": str(args.estimates) if args.estimates is not None else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point: print one JSON line on stdout; 2 on bad input."""
    try:
        args = parse_args(argv)
        with stdout_to_stderr():
            record = run(args)
    except InputError as exc:
        print(f"run_pyirt: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

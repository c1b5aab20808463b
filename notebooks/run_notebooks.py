"""Execute the notebooks in this folder.

    .venv/bin/python notebooks/run_notebooks.py            # full mode, save outputs in place
    .venv/bin/python notebooks/run_notebooks.py --fast     # fast mode, outputs not saved

Each notebook reads ``BAYES_MICROBENCH_FAST`` (set to ``1`` by ``--fast``) to
shrink its sampler settings and grids, and reads real data from
``../shared/data`` (relative to the repository root). The test suite runs
every notebook in fast mode (``tests/test_notebooks.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def notebooks() -> list[Path]:
    return sorted(HERE.glob("[0-9][0-9]_*.ipynb"))


def execute(path: Path, *, fast: bool, save: bool, timeout: int = 1200) -> float:
    """Run every cell of ``path`` in a fresh kernel; return the wall time."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    env_before = os.environ.get("BAYES_MICROBENCH_FAST")
    os.environ["BAYES_MICROBENCH_FAST"] = "1" if fast else "0"
    try:
        start = time.perf_counter()
        # a first kernel in a fresh checkout on a busy 2-core machine can take
        # longer than nbclient's default 60 s to answer (seen once in a clean-clone run)
        client = NotebookClient(
            nb,
            timeout=timeout,
            startup_timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str(HERE)}},
        )
        client.execute()
        elapsed = time.perf_counter() - start
    finally:
        if env_before is None:
            os.environ.pop("BAYES_MICROBENCH_FAST", None)
        else:
            os.environ["BAYES_MICROBENCH_FAST"] = env_before
    if save:
        tmp = path.with_suffix(".ipynb.tmp")
        nbformat.write(nb, tmp)
        os.replace(tmp, path)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="fast mode; outputs are not saved")
    parser.add_argument("names", nargs="*", help="notebook file names (default: all)")
    args = parser.parse_args(argv)
    paths = [HERE / n for n in args.names] if args.names else notebooks()
    for path in paths:
        seconds = execute(path, fast=args.fast, save=not args.fast)
        print(f"{path.name}: {seconds:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

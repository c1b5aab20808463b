"""Write a benchmark's figures into its own section of benchmarks/README.md.

Each benchmark script owns one section, delimited by
``<!-- BEGIN name -->`` / ``<!-- END name -->``; rerunning the script replaces
its section and leaves the others alone. A file lock keeps concurrent scripts
from overwriting each other's sections.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import os
import platform
import re
import subprocess
from pathlib import Path

REPORT = Path(__file__).resolve().parent / "README.md"
HEADER = """# Benchmark report

Figures written by the scripts in this folder, each into its own section.
Rerun a script to refresh its section; the date and machine are recorded with it.
This machine is noisy (2 shared cores): figures are medians, compared side by
side within one run.
"""


def machine() -> str:
    """A one-line description of the machine the figures come from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gb = float("nan")
    return f"{os.cpu_count()} cores ({cpu}), {mem_gb:.0f} GiB, Python {platform.python_version()}"


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPORT.parent,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_section(name: str, title: str, body: str, *, run: tuple[str, str] | None = None) -> Path:
    """Replace (or append) the section ``name`` of the report with ``body``.

    ``run``: (date, commit) of a saved run the section is rewritten from; the
    header then names that run, and says when and at which commit it was rewritten.
    """
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    if run is None:
        head = f"_Run {stamp} on {machine()}, commit {commit()}, by `benchmarks/{name}.py`._"
    else:
        head = (
            f"_Run {run[0]} on {machine()}, commit {run[1]}, by `benchmarks/{name}.py`; "
            f"section rewritten from the saved runs {stamp}, commit {commit()}._"
        )
    block = f"<!-- BEGIN {name} -->\n## {title}\n\n{head}\n\n{body.strip()}\n<!-- END {name} -->"
    lock_path = REPORT.with_suffix(".lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = REPORT.read_text() if REPORT.exists() else HEADER
        pattern = re.compile(
            rf"<!-- BEGIN {re.escape(name)} -->.*?<!-- END {re.escape(name)} -->", re.S
        )
        if pattern.search(text):
            text = pattern.sub(lambda _: block, text)
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
        tmp = REPORT.with_suffix(".md.tmp")
        tmp.write_text(text)
        os.replace(tmp, REPORT)
    return REPORT

#!/usr/bin/env bash
# Set up bayes_microbench in ./.venv with Python >= 3.12, then run `bayes-microbench ARGS...`.
#
#   bash scripts/setup.sh            # install only
#   bash scripts/setup.sh demo       # install, then run the demo
#
# Python is looked up as $PYTHON, python3.12, python3.13, python3, then pyenv's
# installed 3.12 and 3.13+ versions; the first that is >= 3.12 wins (3.12 is
# what the project is developed and tested on).
set -euo pipefail
cd "$(dirname "$0")/.."

is_ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }

find_python() {
  local cand
  for cand in ${PYTHON:-} python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 && is_ok "$cand"; then command -v "$cand"; return 0; fi
  done
  # pyenv shims refuse versions that are installed but not selected: ask pyenv directly
  local root="${PYENV_ROOT:-$HOME/.pyenv}"
  for cand in "$root"/versions/3.12*/bin/python3 "$root"/versions/3.1[3-9]*/bin/python3; do
    if [ -x "$cand" ] && is_ok "$cand"; then echo "$cand"; return 0; fi
  done
  return 1
}

if [ ! -x .venv/bin/python ] || ! is_ok .venv/bin/python; then
  py=$(find_python) || { echo "setup: no Python >= 3.12 found; install one or set PYTHON=/path/to/python3.12" >&2; exit 2; }
  echo "setup: creating .venv with $py ($("$py" --version))" >&2
  rm -rf .venv
  "$py" -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[dev]"
  touch .venv/.installed
fi
if [ "$#" -gt 0 ]; then
  exec .venv/bin/bayes-microbench "$@"
fi

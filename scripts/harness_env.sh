#!/usr/bin/env bash
# Make (or reuse) the throwaway environment the `harness` test tier runs the real harnesses from.
#
#   bash scripts/harness_env.sh [DIR]      # default /tmp/bmb-harness-venv; prints DIR on success
#
# lm-evaluation-harness and inspect-ai are pinned to the versions the committed fixtures
# were made with (scripts/make_harness_fixtures.py). lm-eval needs torch: the CPU wheel
# this machine kind keeps on disk is for Python 3.11, so the environment is a 3.11 one.
# Installs need PyPI; the harness runs themselves are offline. Exit 1 (and no DIR on
# stdout) when the environment cannot be made: the tier then skips with its reason.
set -uo pipefail
dir=${1:-/tmp/bmb-harness-venv}
pins=(torch==2.13.0 lm-eval==0.4.13 inspect-ai==0.3.285)

ready() { "$dir/bin/python" -c 'import lm_eval, inspect_ai' >/dev/null 2>&1; }

if ready; then echo "$dir"; exit 0; fi
py=""
for cand in python3.11 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.11*/bin/python3 /root/.pyenv/versions/3.11*/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    py=$(command -v "$cand"); break
  fi
done
if [ -z "$py" ]; then echo "harness_env: no Python 3.11 found" >&2; exit 1; fi
rm -rf "$dir"
"$py" -m venv "$dir" || exit 1
if ! timeout 1200 "$dir/bin/pip" install --quiet "${pins[@]}" >&2; then
  echo "harness_env: could not install ${pins[*]} into $dir" >&2
  rm -rf "$dir"
  exit 1
fi
ready || { echo "harness_env: $dir does not import lm_eval and inspect_ai" >&2; exit 1; }
echo "$dir"

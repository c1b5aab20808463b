#!/usr/bin/env bash
# Create the throwaway py-irt environment used as the speed reference for our
# IRT engine (benchmarks/reference/run_pyirt.py runs inside it).
#
# It lives OUTSIDE the repository and is never a dependency of bayes_microbench:
# py-irt needs Python < 3.12 and torch, our package needs Python 3.12.
#
# Usage:
#   bash benchmarks/reference/setup_pyirt.sh [ENV_DIR]
# ENV_DIR defaults to $PYIRT_ENV, else /work/pyirt-env. Set PYIRT_PYTHON to
# choose the Python 3.11 interpreter. Rerunning on an existing env only
# (re)installs what is missing; delete ENV_DIR to start afresh.
set -euo pipefail

ENV_DIR="${1:-${PYIRT_ENV:-/work/pyirt-env}}"
TORCH_VERSION="2.13.0"  # a CPU build for Python 3.11 lies on this machine's disk
PYIRT_VERSION="0.7.1"   # the release this reference was measured with

fail() { echo "setup_pyirt.sh: $*" >&2; exit 1; }

# Refuse to create the env inside the repository (it must never be committed).
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
case "$(realpath -m "$ENV_DIR")/" in
    "$REPO_ROOT"/*) fail "ENV_DIR $ENV_DIR is inside the repository $REPO_ROOT; choose a path outside it (default /work/pyirt-env)" ;;
esac

# py-irt 0.7.1 requires Python >=3.9,<3.12: find a 3.11 interpreter.
PY="${PYIRT_PYTHON:-}"
if [[ -z "$PY" ]]; then
    for cand in /usr/bin/python3.11 /root/.pyenv/versions/3.11.7/bin/python "$(command -v python3.11 || true)"; do
        if [[ -n "$cand" && -x "$cand" ]]; then PY="$cand"; break; fi
    done
fi
[[ -n "$PY" ]] || fail "no Python 3.11 found; set PYIRT_PYTHON=/path/to/python3.11"
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    || fail "$PY is not Python 3.11 (py-irt needs <3.12; torch $TORCH_VERSION's local wheel is cp311)"

if [[ ! -x "$ENV_DIR/bin/python" ]]; then
    echo "creating $ENV_DIR with $PY" >&2
    "$PY" -m venv "$ENV_DIR"
fi
PIP=("$ENV_DIR/bin/python" -m pip)

# 1. torch first, pinned exactly: a looser requirement would let pip fetch a
#    multi-GB CUDA build. The machine's pip config finds the CPU wheel on disk.
"${PIP[@]}" install "torch==$TORCH_VERSION"

# 2. py-irt. Its pins (torch>=2.2,<3; pyro-ppl>=1.8.6,<2) admit the torch just
#    installed, so pip resolves its other dependencies around it without
#    touching torch; the check below fails loudly if that ever changes.
"${PIP[@]}" install "py-irt==$PYIRT_VERSION"

# 3. Verify: the pinned CPU torch is still there and py-irt imports and trains.
"$ENV_DIR/bin/python" - "$TORCH_VERSION" <<'EOF'
import sys
from importlib.metadata import version

import torch

want = sys.argv[1]
if torch.__version__.split("+")[0] != want:
    sys.exit(f"torch {torch.__version__} installed, expected {want}: py-irt's install replaced it")
if torch.version.cuda is not None:
    sys.exit(f"torch {torch.__version__} is a CUDA build; expected the CPU build")

from py_irt.config import IrtConfig  # noqa: E402
from py_irt.training import IrtModelTrainer  # noqa: E402,F401

IrtConfig(model_type="2pl", priors="hierarchical")
print(
    f"ok: python {sys.version.split()[0]}, torch {torch.__version__}, "
    f"pyro-ppl {version('pyro-ppl')}, py-irt {version('py-irt')}"
)
EOF
echo "py-irt env ready: $ENV_DIR/bin/python benchmarks/reference/run_pyirt.py --help" >&2

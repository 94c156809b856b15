#!/usr/bin/env bash
# The XLA plugin's real tests (pytest -m xla) on the CPU, with PJRT_DEVICE=CPU.
#
# torch_xla 2.9 needs torch 2.9, while the project's venv has torch 2.13, so this builds a separate venv
# (.venv-xla, or $XLA_VENV). The CUDA build of torch 2.9 comes with it: about 4 GB to download, 7 GB on
# disk, about 3 minutes to install. Re-running reuses the venv.
#
# Usage: scripts/xla_cpu_check.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${XLA_VENV:-.venv-xla}"
TORCH_VERSION="2.9.0"

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
. "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
python -m pip install --quiet "torch==$TORCH_VERSION" "torch_xla==$TORCH_VERSION"
# fabric-core's own dependencies, except torch (pinned above); then ours without dependencies, so that
# pip never swaps torch for another version.
python -m pip install --quiet "pluggy>=1.5" "structlog>=24.1" "packaging>=23" pytest pytest-timeout numpy
python -m pip install --quiet --no-deps -e . -e plugins/fabric-core-xla

python - <<PY
import torch, torch_xla
assert torch.__version__.startswith("$TORCH_VERSION"), torch.__version__
print(f"torch {torch.__version__}, torch_xla {torch_xla.__version__}")
PY

export PJRT_DEVICE=CPU
python -m pytest plugins/fabric-core-xla/tests -m xla -p no:cacheprovider -q -rA "$@"

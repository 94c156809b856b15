#!/usr/bin/env bash
# LitGPT 0.5.13, unchanged, on Lightning and on fabric-core in zero-edit mode: tests/litgpt (pytest -m litgpt).
#
# LitGPT needs the full `lightning` package, which the project's venv does not have, so this builds a separate
# venv (.venv-litgpt, or $LITGPT_VENV): torch 2.13.0 first, then litgpt with a constraints file that pins
# torch (a dry run checks that nothing would replace it), then fabric-core and its ddp and fsdp plugins
# editable. Offline: the test trains its own tokenizer and writes its own data (HF_HUB_OFFLINE=1).
# Re-running reuses the venv. Prints the wall time of the install and of the test.
#
# Usage: scripts/litgpt_check.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

VENV="${LITGPT_VENV:-.venv-litgpt}"
TORCH_VERSION="2.13.0"
LITGPT_VERSION="0.5.13"

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
. "$VENV/bin/activate"
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==$TORCH_VERSION" > "$constraints"
pip() { python -m pip --disable-pip-version-check "$@" 2> >(grep -v "^WARNING: Location" >&2); }

# setuptools here lets the editable installs below skip building an isolated environment each.
pip install --quiet "torch==$TORCH_VERSION" "setuptools>=68" wheel
# What would be installed must not include another torch (with the constraint pip refuses rather than swaps).
litgpt_reqs=("litgpt==$LITGPT_VERSION" requests pytest pytest-timeout)  # jsonargparse needs requests for litgpt's CLI
fabric_core_reqs=(-e . -e plugins/fabric-core-ddp -e plugins/fabric-core-fsdp)
# lightning.pytorch (imported by `import lightning`, which LitGPT does) imports Lightning Fabric's cuda, mps and xla
# accelerator modules, its deepspeed strategy and precision, its bitsandbytes precision and its tensorboard logger at
# import time. No plugin for those is installed: fabric-core serves those paths itself while their plugins are absent
# (fabric_core/_lightning/paths/absent_plugins.py), which is what a user who runs `pip install litgpt fabric-core` gets.
plan="$(pip install --dry-run --no-build-isolation -c "$constraints" "${litgpt_reqs[@]}" "${fabric_core_reqs[@]}" 2>/dev/null | grep '^Would install' || true)"
if grep -Eq '(^| )torch-[0-9]' <<<"$plan"; then
    echo "litgpt_check: refusing to continue, pip would replace torch: $plan" >&2
    exit 1
fi
pip install --quiet --no-build-isolation -c "$constraints" "${litgpt_reqs[@]}" "${fabric_core_reqs[@]}"

python - <<PY
import importlib.metadata as md
import torch
assert torch.__version__.split("+")[0] == "$TORCH_VERSION", torch.__version__
print("torch", torch.__version__, "| litgpt", md.version("litgpt"), "| lightning", md.version("lightning"),
      "| fabric-core", md.version("fabric-core"))
PY
installed=$SECONDS
echo "litgpt_check: venv ready in $((installed - start)) s"

export HF_HUB_OFFLINE=1
status=0
python -m pytest tests/litgpt -m litgpt -p no:cacheprovider -q -rA -s "$@" || status=$?
echo "litgpt_check: tests took $((SECONDS - installed)) s, $((SECONDS - start)) s in all"
exit "$status"

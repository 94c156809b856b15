#!/usr/bin/env bash
# Every test marked `cuda`, in the core and in every plugin, on a machine with NVIDIA GPUs; then a table.
#
# Run it in the project's venv on a GPU machine after installing a CUDA build of torch, e.g.
#   pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128 && pip install -r requirements-dev.txt
# Usage: scripts/gpu_check.sh [extra pytest arguments]
set -uo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
    echo "gpu_check: no NVIDIA GPU visible (nvidia-smi -L failed); nothing to run." >&2
    exit 2
fi
python - <<'PY'
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s) visible")
if torch.cuda.device_count() == 0:
    raise SystemExit("gpu_check: this torch sees no GPU; install a CUDA build of torch.")
PY
[ $? -eq 0 ] || exit 2

report="$(mktemp -d)/gpu_check.xml"
python -m pytest -m cuda -p no:cacheprovider -q -rA --junitxml="$report" "$@"
status=$?

python - "$report" <<'PY'
import sys
import xml.etree.ElementTree as ET

rows = []
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    outcome, detail = "passed", ""
    for child in case:
        if child.tag in ("failure", "error", "skipped"):
            outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[child.tag]
            detail = (child.get("message") or "").splitlines()[0][:70] if child.get("message") else ""
    name = f"{case.get('classname', '')}::{case.get('name', '')}"
    rows.append((name.rsplit(".", 1)[-1] if "::" in name else name, outcome, float(case.get("time", 0)), detail))
width = max([len(r[0]) for r in rows] + [4])
print()
print(f"{'test':<{width}}  {'result':<8}  {'seconds':>7}  detail")
print(f"{'-' * width}  {'-' * 8}  {'-' * 7}  {'-' * 6}")
for name, outcome, seconds, detail in rows:
    print(f"{name:<{width}}  {outcome:<8}  {seconds:7.1f}  {detail}")
counts = {o: sum(1 for r in rows if r[1] == o) for o in ("passed", "FAILED", "ERROR", "skipped")}
print()
print(", ".join(f"{n} {o.lower()}" for o, n in counts.items()))
PY
exit $status

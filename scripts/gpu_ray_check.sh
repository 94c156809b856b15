#!/usr/bin/env bash
# fabric-core on Ray Train with GPUs: one worker per GPU, NCCL, for ddp, fsdp and deepspeed.
#
# Run it on a machine with 2 or more NVIDIA GPUs, in the project's venv with a CUDA build of torch and
# `pip install -r requirements-dev.txt` (which installs plugins/fabric-core-ray and ray[train]).
# A local Ray cluster is started for each run. Usage: scripts/gpu_ray_check.sh [strategy ...]
set -uo pipefail
cd "$(dirname "$0")/.."

gpus=$(python -c "import torch; print(torch.cuda.device_count())")
if [ "${gpus:-0}" -lt 2 ]; then
    echo "gpu_ray_check: needs 2 or more GPUs visible to torch, found ${gpus:-0}." >&2
    exit 2
fi
out=$(mktemp -d)
status=0
for strategy in "${@:-ddp fsdp deepspeed}"; do
    for s in $strategy; do
        echo "== $s on $gpus Ray workers (cuda, nccl)"
        if fabric-core run --launcher ray --num-workers "$gpus" --accelerator cuda --strategy "$s" \
            --storage-path "$out/ray_results" examples/train_classifier.py --epochs 1 --out "$out/$s" \
            > "$out/$s.log" 2>&1 \
            && grep -q "world size $gpus" "$out/$s.log" && grep -q "distributed_backend=nccl" "$out/$s.log"; then
            echo "   passed ($out/$s.log)"
        else
            echo "   FAILED: see $out/$s.log"; tail -20 "$out/$s.log"; status=1
        fi
    done
done
exit $status

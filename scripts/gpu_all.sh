#!/usr/bin/env bash
# Everything that needs a CUDA GPU, in one call on a GPU machine, ending in a PASS/FAIL table.
#
# The GPU machine has no network: what it lacks travels as wheels in .whl/ (ignored by git). Prepare them here,
# on a machine with pip access, then run the script there from the repository root:
#
#   scripts/gpu_all.sh --prepare     # here: our own wheels (core + the plugins the checks use), structlog,
#                                    # bitsandbytes, torchao, all for CPython 3.12 on x86-64
#   scripts/gpu_all.sh               # there: installs .whl/ into /tmp/site, runs the checks, writes $OUT
#
# It uses the machine's own CUDA build of torch (a CUDA torch 2.13.0 is too large to carry) and its lightning
# for the benchmark's third column. Each check has its own time limit, all of them a common deadline
# (GPU_ALL_SECONDS, default 500), and one line in $OUT/gpu_table.md; logs go to $OUT/*.txt, the benchmark's
# numbers to $OUT/bench.json. Exit status: 0 when every check passed or was skipped with a reason.
#
# Checks: the `cuda`-marked tests (single GPU in 32-true / 16-mixed / bf16-mixed / bf16-true, FSDP on one GPU,
# CPU offload, bitsandbytes layers), ddp over NCCL with one process, examples/fault_tolerant.py killed and
# resumed on CUDA (same digest as uninterrupted), the float8 example (torchao; compute capability >= 8.9), and
# bench/gpu_transformer.py. With one GPU, nothing here runs NCCL across two processes.
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELS=.whl
if [ "${1:-}" = "--prepare" ]; then
    mkdir -p "$WHEELS" && rm -f "$WHEELS"/fabric_core*.whl
    python -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELS" . \
        plugins/fabric-core-cuda plugins/fabric-core-ddp plugins/fabric-core-fsdp plugins/fabric-core-bitsandbytes || exit 1
    rm -rf build plugins/*/build  # setuptools' build trees, left in the sources
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        --platform any -d "$WHEELS" structlog==26.1.0 bitsandbytes==0.50.2 torchao==0.17.0 || exit 1
    ls -la "$WHEELS"
    exit 0
fi

OUT="${OUT:-$(mktemp -d)}"
SITE="${GPU_ALL_SITE:-/tmp/site}"
# GPU_ALL_ACCELERATOR=cpu runs the same plumbing on a machine without a GPU (a dry run of this script).
ACCELERATOR="${GPU_ALL_ACCELERATOR:-cuda}"
DEADLINE=$((SECONDS + ${GPU_ALL_SECONDS:-500}))
TABLE="$OUT/gpu_table.md"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
failures=0

row() {  # check result seconds detail
    printf '| %s | %s | %s | %s |\n' "$1" "$2" "$3" "${4//|/\\|}" >>"$TABLE"
    echo "== $1: $2 ($3 s) $4"
}

limit() {  # the smaller of a check's own limit and what is left before the deadline (at least 10 s)
    local left=$((DEADLINE - SECONDS - 5))
    [ "$left" -lt 10 ] && left=10
    [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}

run_check() {  # name own-limit log command...: PASS on exit 0, FAIL otherwise (TIMEOUT past its limit)
    local name=$1 seconds log=$OUT/$3 started=$SECONDS status
    seconds=$(limit "$2")
    shift 3
    echo "### $name: $*" >>"$log"
    timeout -k 10 "$seconds" "$@" >>"$log" 2>&1
    status=$?
    if [ $status -eq 0 ]; then
        CHECK_RESULT=PASS
    elif [ $status -eq 124 ] || [ $status -eq 137 ]; then
        CHECK_RESULT=TIMEOUT
    else
        CHECK_RESULT=FAIL
    fi
    CHECK_SECONDS=$((SECONDS - started))
    CHECK_STATUS=$status
}

record() {  # name detail: a row from the last run_check
    case "$CHECK_RESULT" in PASS | SKIP) ;; *) failures=$((failures + 1)) ;; esac
    row "$1" "$CHECK_RESULT" "$CHECK_SECONDS" "$2"
}

# -- the machine, and what it lacks ---------------------------------------------------------------------------
{
    nvidia-smi -L
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    python3 --version
} >"$OUT/env.txt" 2>&1
if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "gpu_all: no wheels in $WHEELS; run scripts/gpu_all.sh --prepare first" >&2
    exit 2
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$WHEELS"/*.whl >>"$OUT/env.txt" 2>&1 || { echo "gpu_all: installing the wheels failed" >&2; cat "$OUT/env.txt"; exit 2; }
export PYTHONPATH=$SITE PATH=$SITE/bin:$PATH
python3 - >>"$OUT/env.txt" 2>&1 <<'PY'
import importlib.metadata as md
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s)")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"{p.name}: compute capability {p.major}.{p.minor}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs")
for name in ("fabric-core", "fabric-core-cuda", "lightning", "bitsandbytes", "torchao", "structlog", "pluggy"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "missing")
PY
cat "$OUT/env.txt"
{
    echo "| check | result | seconds | detail |"
    echo "|---|---|---|---|"
} >"$TABLE"

# -- 1. the cuda-marked tests ---------------------------------------------------------------------------------
run_check "pytest -m cuda" 220 cuda_tests.txt python3 -m pytest -m cuda -q -rA -p no:cacheprovider \
    --junitxml="$OUT/cuda_tests.xml" plugins/fabric-core-cuda/tests/test_gpu.py \
    plugins/fabric-core-fsdp/tests/test_fsdp_cuda.py plugins/fabric-core-bitsandbytes/tests/test_bitsandbytes_precision.py
record "pytest -m cuda (single GPU in 4 precisions, FSDP 1 GPU, CPU offload, bitsandbytes)" \
    "$(grep -E ' in [0-9.]+s' "$OUT/cuda_tests.txt" | tail -1 | tr -d '=' | xargs)"

# -- 2. the benchmark -----------------------------------------------------------------------------------------
bench_args=()
[ "$ACCELERATOR" = cuda ] || bench_args=(--device cpu --tiny --steps 4 --rounds 2)
run_check "benchmark" 260 bench.txt python3 bench/gpu_transformer.py --json "$OUT/bench.json" \
    --budget "${GPU_BENCH_BUDGET:-150}" "${bench_args[@]}"
record "bench/gpu_transformer.py (raw / fabric-core / lightning)" "$(python3 - "$OUT/bench.json" 2>&1 <<'PY'
import json, sys
results = [r for r in json.load(open(sys.argv[1]))["results"] if "ratio_to_raw" in r]
for name in ("fabric-core", "lightning"):
    ratios = [r["ratio_to_raw"][name] for r in results if name in r["ratio_to_raw"]]
    if ratios:
        print(f"{name} / raw steps/s {min(ratios):.3f}-{max(ratios):.3f} over {len(ratios)} variants;", end=" ")
print("table in bench.txt")
PY
)"

# -- 3. ddp over NCCL with one process ------------------------------------------------------------------------
job=$(mktemp -d)
run_check "ddp nccl" 90 checks.txt python3 plugins/fabric-core-cuda/tests/_jobs/gpu_job.py "$job" ddp 1 16-mixed "$ACCELERATOR"
detail=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1]+'/rank0.json')); print(r['strategy'], r['backend'], 'world', r['world_size'], r['precision'], 'scaler on', r['scaler_device'], 'loss %.4f->%.4f' % (r['first_loss'], r['last_loss']), 'checkpoint equal', r['checkpoint_equal'])" "$job" 2>&1 | tail -1)
expected="DDPStrategy nccl world 1 MixedPrecision scaler on cuda"
[ "$ACCELERATOR" = cuda ] || expected="DDPStrategy gloo world 1"
if [ "$CHECK_RESULT" = PASS ] && ! grep -q "$expected" <<<"$detail"; then
    CHECK_RESULT=FAIL
fi
record "ddp, 1 process on NCCL, 16-mixed (gpu_job.py)" "$detail"

# -- 4. a run killed and resumed on CUDA ends as an uninterrupted one -----------------------------------------
export CUBLAS_WORKSPACE_CONFIG=:4096:8  # the example turns on deterministic algorithms
export ft_dir ACCELERATOR
ft_dir=$(mktemp -d)
ft() {  # DIR [extra args]: the example under `fabric-core run`, one CUDA process, ddp
    python3 -m fabric_core run --accelerator "$ACCELERATOR" --devices 1 --strategy ddp examples/fault_tolerant.py \
        --steps 40 --every 5 --dir "$@"
}
fault_tolerant() {
    ft "$ft_dir/straight" >"$ft_dir/straight.log" 2>&1 || { cat "$ft_dir/straight.log"; return 1; }
    ft "$ft_dir/killed" --step-seconds 0.2 >"$ft_dir/killed1.log" 2>&1 &
    local pid=$! waited=0
    until grep -q "^step 18 " "$ft_dir/killed1.log"; do
        sleep 0.2
        waited=$((waited + 1))
        if [ $waited -gt 400 ]; then
            echo "never reached step 18"
            cat "$ft_dir/killed1.log"
            pkill -9 -f "$ft_dir/killed"
            return 1
        fi
    done
    pkill -9 -f "$ft_dir/killed"  # the launcher and its worker (both name the run's folder), mid-step: no save
    wait $pid 2>/dev/null
    ft "$ft_dir/killed" >"$ft_dir/killed2.log" 2>&1 || { cat "$ft_dir/killed2.log"; return 1; }
    local a b resumed
    a=$(grep -o 'final digest: [0-9a-f]*' "$ft_dir/straight.log")
    b=$(grep -o 'final digest: [0-9a-f]*' "$ft_dir/killed2.log")
    resumed=$(grep -o 'resumed at step [0-9]*' "$ft_dir/killed2.log")
    echo "uninterrupted: $a; killed at step 18, $resumed, $b"
    [ -n "$a" ] && [ "$a" = "$b" ] && [ -n "$resumed" ]
}
export -f ft fault_tolerant
run_check "fault tolerant" 150 checks.txt bash -c fault_tolerant
record "examples/fault_tolerant.py on CUDA: SIGKILL at step 18, resume" \
    "$(grep -E '^uninterrupted:' "$OUT/checks.txt" | tail -1 | sed 's/final digest: \([0-9a-f]\{12\}\)[0-9a-f]*/\1/g')"

# -- 5. float8 training (torchao) -----------------------------------------------------------------------------
fp8_args=()
[ "$ACCELERATOR" = cuda ] || fp8_args=(--device cpu)
run_check "fp8" 120 checks.txt python3 examples/fp8_transformer.py --steps 30 "${fp8_args[@]}"
fp8_line=$(grep -E '^fp8 check: ' "$OUT/checks.txt" | tail -1)
if [ "$CHECK_RESULT" = PASS ] && [[ "$fp8_line" == "fp8 check: SKIP"* ]]; then
    CHECK_RESULT=SKIP
fi
record "examples/fp8_transformer.py (torchao float8)" "${fp8_line#fp8 check: }"

echo
echo "GPU checks on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "$ACCELERATOR"):"
cat "$TABLE"
sed -n '/^| precision/,$p' "$OUT/bench.txt" 2>/dev/null
exit $((failures > 0))

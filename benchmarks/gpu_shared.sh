#!/usr/bin/env bash
# Issue #20's shared-device floor: four `bench step` processes on one GPU, each within 1.5x
# of one alone. The processes start timing together (`--start-at`) and are compared over
# the window they all ran in (benchmarks/shared_window.py), by plain time slicing and under
# NVIDIA MPS (a private control daemon, started and stopped here; the GPU's settings are
# left as they are). First the capture test and the device's busy time per step.
# Usage: OUT=folder bash benchmarks/gpu_shared.sh   (DEVICE=cpu: the same on the CPU, no MPS)
# SHARING: "plain mps" by default; MODES: "graphs eager"; PROCESSES: 4.
set -uo pipefail
OUT=${OUT:-results/gpu_shared}
DEVICE=${DEVICE:-cuda}
SHARING=${SHARING:-plain mps}
MODES=${MODES:-graphs eager}
PROCESSES=${PROCESSES:-4}
py=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH=.

steps() {  # MODE: iterations to time (about 6 s alone on an H200)
    if [ "$1" = graphs ]; then echo 1500; else echo 500; fi
}

# group MODE NAME COUNT WAIT: COUNT processes that start timing WAIT seconds from now.
group() {
    local mode=$1 name=$2 count=$3 wait=$4 flags=() start i
    [ "$mode" = graphs ] && flags=(--cuda-graphs)
    [ "$DEVICE" = cpu ] && flags=()
    start=$("$py" -c "import time; print(time.time() + $wait)")
    for i in $(seq 1 "$count"); do
        "$py" -m basis bench step --device "$DEVICE" --json --iterations "$(steps "$mode")" --start-at "$start" \
            "${flags[@]}" > "$OUT/$name$i.json" 2> "$OUT/$name$i.err" &
    done
    wait
}

measure() {  # SHARING: one alone, then PROCESSES at once, for every mode
    local mode
    for mode in $MODES; do
        group "$mode" "$1_${mode}_solo" 1 15 && mv "$OUT/$1_${mode}_solo1.json" "$OUT/$1_${mode}_solo.json"
        group "$mode" "$1_${mode}_shared_" "$PROCESSES" 30
        "$py" benchmarks/shared_window.py "$OUT" | grep "^$1_$mode:"
    done
}

{
    if [ "$DEVICE" != cpu ]; then
        nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv,noheader
        "$py" benchmarks/capture_check.py 2>&1 | tail -3
        "$py" -m basis bench step --device "$DEVICE" --json --cuda-graphs --profile > "$OUT/profile.json" 2> "$OUT/profile.err"
        "$py" -c "
import json, sys
result = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print('alone, cuda graphs:', result['ms_per_iteration'], 'device busy ms per step:', result.get('device_busy_ms_per_iteration'))
for kernel in result.get('top_kernels', [])[:8]:
    print('  kernel', json.dumps(kernel))" "$OUT/profile.json" || tail -3 "$OUT/profile.err"
    fi
    for sharing in $SHARING; do
        if [ "$sharing" = mps ]; then
            if [ "$DEVICE" = cpu ] || ! command -v nvidia-cuda-mps-control > /dev/null; then
                echo "mps: not available here"
                continue
            fi
            CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d) CUDA_MPS_LOG_DIRECTORY=$(mktemp -d)
            export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
            trap 'echo quit | nvidia-cuda-mps-control' EXIT
            nvidia-cuda-mps-control -d || { echo "mps: the control daemon did not start"; continue; }
        fi
        measure "$sharing"
        if [ "$sharing" = mps ]; then
            echo quit | nvidia-cuda-mps-control
            trap - EXIT
            unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
        fi
    done
} 2>&1 | tee "$OUT/summary.txt"

#!/usr/bin/env bash
# Issue #23's device check of the persistent worker (basis/launcher.py): its imports leave
# CUDA uninitialised (a forked child could not use it otherwise); Table 1's runs on the
# device one process per seed without the worker, the same through the worker, and all
# seeds in one process (benchmarks/gpu_table1_seeds.sh, both in this call); a CUDA-graph
# `bench step` and two concurrent runs through the worker.
# Usage: OUT=folder bash benchmarks/gpu_launcher.sh   (DEVICE=cpu: the same on the CPU)
set -uo pipefail
OUT=${OUT:-results/gpu_launcher}
DEVICE=${DEVICE:-cuda}
py=${PYTHON:-python3}
export SEEDS=${SEEDS:-0 1 2 3} N_ITER=${N_ITER:-100} METHODS=${METHODS:-basis} DEVICE PYTHON=$py
mkdir -p "$OUT"
{
    "$py" - <<'PY'
import contextlib, importlib
from basis.launcher import PRELOADED
loaded = []
for name in PRELOADED:
    with contextlib.suppress(ImportError):
        importlib.import_module(name)
        loaded.append(name)
import torch
print(f"the worker's {len(loaded)} imports leave CUDA initialised: {torch.cuda.is_initialized()}")
PY
    for worker in off on; do
        echo "== one process per seed with BASIS_WORKER=$worker"
        BASIS_WORKER=$worker OUT="$OUT/worker_$worker" bash benchmarks/gpu_table1_seeds.sh | grep -v "^FAILED reference" | tail -4
    done
    flags=()
    [ "$DEVICE" != cpu ] && flags=(--cuda-graphs)
    "$py" -m basis bench step --device "$DEVICE" --json "${flags[@]}" > "$OUT/step.json" 2> "$OUT/step.err" \
        && echo "bench step through the worker: $(tail -c 300 "$OUT/step.json" | head -c 300)" \
        || echo "FAILED bench step: $(tail -3 "$OUT/step.err")"
    for i in 1 2; do
        "$py" -m basis run --method basis --dataset two_moons --device "$DEVICE" --set n_iter=50 --json \
            --out "$OUT/concurrent$i" > "$OUT/concurrent$i.json" 2> "$OUT/concurrent$i.err" &
    done
    wait
    for i in 1 2; do
        echo "concurrent run $i: $(grep '# timings' "$OUT/concurrent$i.err" | tail -1 || tail -2 "$OUT/concurrent$i.err")"
    done
    cmp -s "$OUT/concurrent1/metrics.json" "$OUT/concurrent2/metrics.json" \
        && echo "the two concurrent runs' metrics.json are identical" || echo "the two concurrent runs differ"
    ls "${TMPDIR:-/tmp}"/basis-worker-"$(id -u)"/*.log 2> /dev/null | wc -l | sed 's/^/worker logs: /'
} 2>&1 | tee "$OUT/summary.txt"

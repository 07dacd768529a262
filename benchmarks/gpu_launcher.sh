#!/usr/bin/env bash
# Issue #23's device check of the persistent worker (basis/launcher.py): its imports leave
# CUDA uninitialised (a forked child could not use it otherwise); Table 1's runs on the
# device one process per seed without the worker, the same through the worker, and all
# seeds in one process (benchmarks/gpu_table1_seeds.sh, both in this call); a CUDA-graph
# `bench step`; the same run twice at once (through the worker, and not) and twice in turn.
# Usage: OUT=folder bash benchmarks/gpu_launcher.sh   (DEVICE=cpu: the same on the CPU; TABLE1=0: without
# Table 1's runs)
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
    for worker in $([ "${TABLE1:-1}" = 1 ] && echo off on); do
        echo "== one process per seed with BASIS_WORKER=$worker"
        BASIS_WORKER=$worker OUT="$OUT/worker_$worker" bash benchmarks/gpu_table1_seeds.sh | grep -v "^FAILED reference" | tail -4
    done
    flags=()
    [ "$DEVICE" != cpu ] && flags=(--cuda-graphs)
    "$py" -m basis bench step --device "$DEVICE" --json "${flags[@]}" > "$OUT/step.json" 2> "$OUT/step.err" \
        && echo "bench step through the worker: $(tail -c 300 "$OUT/step.json" | head -c 300)" \
        || echo "FAILED bench step: $(tail -3 "$OUT/step.err")"
    # The same run twice at once, through the worker and in processes of their own, then
    # twice in turn: which of its metrics, if any, differ between the two.
    for pair in worker_on worker_off in_turn; do
        worker=on
        [ "$pair" = worker_off ] && worker=off
        for i in 1 2; do
            BASIS_WORKER=$worker "$py" -m basis run --method basis --dataset two_moons --device "$DEVICE" \
                --set n_iter=50 --threads 4 --json --out "$OUT/$pair$i" > "$OUT/$pair$i.json" 2> "$OUT/$pair$i.err" &
            [ "$pair" = in_turn ] && wait
        done
        wait
        "$py" - "$OUT/${pair}1/metrics.json" "$OUT/${pair}2/metrics.json" "$pair" <<'PY'
import json, sys
try:
    first, second = (json.load(open(path)) for path in sys.argv[1:3])
except (OSError, ValueError) as err:
    sys.exit(f"{sys.argv[3]}: FAILED ({err})")
differ = {k: (first[k], second.get(k)) for k in first if first[k] != second.get(k)}
print(f"{sys.argv[3]}: the two runs' metrics", "differ in " + json.dumps(differ) if differ else "are identical")
PY
    done
    ls "${TMPDIR:-/tmp}"/basis-worker-"$(id -u)"/*.log 2> /dev/null | wc -l | sed 's/^/worker logs: /'
} 2>&1 | tee "$OUT/summary.txt"

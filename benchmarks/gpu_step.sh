#!/usr/bin/env bash
# Issue #20's device check, old and new in one call: `bench step` of the code before the
# GPU-native step (a copy of its basis/ in $OLD, when given) and of this code (exact and
# subspace eigensolvers, torch's sync debug mode, the top kernels), then four `bench step`
# processes at once on the same device. Writes $OUT/summary.txt.
# Usage: OUT=folder [OLD=folder-with-old-basis] bash benchmarks/gpu_step.sh   (DEVICE=cpu: on the CPU)
set -uo pipefail
OUT=${OUT:-results/gpu_step}
DEVICE=${DEVICE:-cuda}
OLD=${OLD:-}
py=$(command -v "${PYTHON:-python3}")
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")  # absolute: the old code runs from its own folder
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
here=$(pwd)
{
    [ "$DEVICE" != cpu ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    if [ -n "$OLD" ]; then
        (cd "$OLD" && PYTHONPATH=. "$py" -m basis bench step --device "$DEVICE" --json) > "$OUT/old.json" 2> "$OUT/old.err" \
            || echo "FAILED old: $(tail -3 "$OUT/old.err")"
    fi
    (cd "$here" && "$py" -m basis bench step --device "$DEVICE" --json --compare --profile) > "$OUT/new.json" 2> "$OUT/new.err" \
        || echo "FAILED new: $(tail -3 "$OUT/new.err")"
    solo=$SECONDS
    (cd "$here" && "$py" -m basis bench step --device "$DEVICE" --json) > "$OUT/solo.json" 2> "$OUT/solo.err"
    for i in 1 2 3 4; do
        (cd "$here" && "$py" -m basis bench step --device "$DEVICE" --json) > "$OUT/concurrent_$i.json" 2> "$OUT/concurrent_$i.err" &
    done
    wait
    "$py" - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def load(name):
    path = out / f"{name}.json"
    try:
        return json.loads(path.read_text().strip().splitlines()[-1])
    except Exception as err:
        return {"error": repr(err)}
old, new, solo = load("old"), load("new"), load("solo")
print("old (before #20):", json.dumps({k: old.get(k) for k in ("ms_per_iteration", "host_syncs_per_iteration", "device")}))
for solver, timing in new.get("compare", {}).items():
    print(f"new {solver}:", json.dumps(timing))
print("new audit:", json.dumps(new.get("host_syncs_per_iteration")))
print("device:", new.get("device_name"))
for kernel in new.get("top_kernels", []):
    print("  kernel", json.dumps(kernel))
alone = solo.get("ms_per_iteration", {}).get("total")
print("solo ms/step:", alone)
for i in range(1, 5):
    together = load(f"concurrent_{i}").get("ms_per_iteration", {}).get("total")
    print(f"concurrent {i} ms/step:", together, "ratio", together / alone if alone and together else None)
PY
} 2>&1 | tee "$OUT/summary.txt"

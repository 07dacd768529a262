#!/usr/bin/env bash
# Issue #20's device check, old and new in one call: `bench step` of the code before the
# GPU-native step (a copy of its basis/ in $OLD, when given) and of this code (exact and
# subspace eigensolvers, the subspace one with CUDA graphs, torch's sync debug mode, the
# top kernels); the test that the replayed step equals the eager one; a 100-iteration
# BASiS run on raw digits with each code (RANSAC's rounds); then four `bench step`
# processes at once on the same device, eager and with CUDA graphs. Writes $OUT/summary.txt.
# Usage: OUT=folder [OLD=folder-with-old-basis] bash benchmarks/gpu_step.sh   (DEVICE=cpu: on the CPU)
# OLD_GRAPHS=1: the old code (one that has cuda_graphs) also with CUDA graphs, in `bench
# step` and on digits; DIGITS_GRAPHS=1: the digits runs also with CUDA graphs; MODES: the
# concurrent runs' modes (default "eager graphs").
set -uo pipefail
OUT=${OUT:-results/gpu_step}
DEVICE=${DEVICE:-cuda}
OLD=${OLD:-}
OLD_GRAPHS=${OLD_GRAPHS:-}
DIGITS_GRAPHS=${DIGITS_GRAPHS:-}
MODES=${MODES:-eager graphs}
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
        if [ -n "$OLD_GRAPHS" ]; then
            (cd "$OLD" && PYTHONPATH=. "$py" -m basis bench step --device "$DEVICE" --json --cuda-graphs) \
                > "$OUT/old_graphs.json" 2> "$OUT/old_graphs.err" || echo "FAILED old graphs: $(tail -3 "$OUT/old_graphs.err")"
        fi
    fi
    (cd "$here" && "$py" -m basis bench step --device "$DEVICE" --json --compare --profile) > "$OUT/new.json" 2> "$OUT/new.err" \
        || echo "FAILED new: $(tail -3 "$OUT/new.err")"
    # The replayed step against the eager one (tests/test_capture.py's GPU test).
    [ "$DEVICE" != cpu ] && (cd "$here" && PYTHONPATH=. "$py" benchmarks/capture_check.py) 2>&1 | tail -5
    # A real-data step: BASiS on raw digits, where RANSAC needs many rounds per batch
    # (median 450 hypotheses, at most 5,000): the old code and this one, their "# timings".
    runs=(old new)
    [ -n "$OLD_GRAPHS" ] && runs+=(old_graphs)
    [ -n "$DIGITS_GRAPHS" ] && runs+=(new_graphs)
    for run in "${runs[@]}"; do
        dir=$here
        case $run in old*) dir=$OLD ;; esac
        [ -z "$dir" ] && continue
        graphs=()
        case $run in *_graphs) graphs=(--set cuda_graphs=true) ;; esac
        (cd "$dir" && PYTHONPATH=. "$py" -m basis run --method basis --dataset digits --set n_iter=100 "${graphs[@]}" \
            --device "$DEVICE" --json) > "$OUT/digits_$run.json" 2> "$OUT/digits_$run.err" || echo "FAILED digits $run"
        echo "digits, 100 iterations, $run: $(grep '# timings' "$OUT/digits_$run.err" | tail -1)"
    done
    for mode in $MODES; do
        flags=()
        [ "$mode" = graphs ] && flags=(--cuda-graphs)
        (cd "$here" && "$py" -m basis bench step --device "$DEVICE" --json "${flags[@]}") > "$OUT/solo_$mode.json" 2> "$OUT/solo_$mode.err"
        for i in 1 2 3 4; do
            (cd "$here" && "$py" -m basis bench step --device "$DEVICE" --json "${flags[@]}") \
                > "$OUT/concurrent_${mode}_$i.json" 2> "$OUT/concurrent_${mode}_$i.err" &
        done
        wait
    done
    "$py" - "$OUT" "$MODES" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def load(name):
    path = out / f"{name}.json"
    try:
        return json.loads(path.read_text().strip().splitlines()[-1])
    except Exception as err:
        return {"error": repr(err)}
old, new = load("old"), load("new")
print("old:", json.dumps({k: old.get(k) for k in ("ms_per_iteration", "host_syncs_per_iteration", "device")}))
if (out / "old_graphs.json").exists():
    old_graphs = load("old_graphs")
    print("old + cuda graphs:", json.dumps({k: old_graphs.get(k) for k in ("ms_per_iteration", "cuda_graphs")}))
for solver, timing in new.get("compare", {}).items():
    print(f"new {solver}:", json.dumps(timing))
print("new audit:", json.dumps(new.get("host_syncs_per_iteration")))
print("device:", new.get("device_name"))
for kernel in new.get("top_kernels", []):
    print("  kernel", json.dumps(kernel))
for mode in sys.argv[2].split():
    solo = load(f"solo_{mode}")
    alone = solo.get("ms_per_iteration", {}).get("total")
    print(f"{mode} solo ms/step:", alone, solo.get("cuda_graphs"))
    for i in range(1, 5):
        together = load(f"concurrent_{mode}_{i}").get("ms_per_iteration", {}).get("total")
        print(f"{mode} concurrent {i} ms/step:", together, "ratio", together / alone if alone and together else None)
PY
} 2>&1 | tee "$OUT/summary.txt"

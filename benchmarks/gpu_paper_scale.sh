#!/usr/bin/env bash
# Issue #35's device check in one call. (1) `bench step` (with CUDA graphs on a GPU): the
# clustered stand-in three times (floor: 5 ms in each), Siamese-like touching clusters and
# raw digits (floor: within 2x of the stand-in), with RANSAC's draws; given OLD (a folder
# holding an older basis/), that code's stand-in step first, the baseline. (2) Table 1's
# runs of one data set at the paper's protocol on an MNIST-sized stand-in for its Siamese
# features (60,000 + 10,000 16-d points, benchmarks/standin_features.py): the test split's
# reference once, then each method's seeds in one process (the workflow's
# seeds_in_one_job; on CUDA each method's seeds trained together), timed end to end; the
# paper's 160 runs are 4 such sets. (3) BASiS's seeds together against the same seeds in
# turn (the baseline) and one seed alone, and each seed's scores of the two compared.
# (4) with PROJECTION=<config>, that config's wall time projected from a sample of its jobs
# on this device (below), last. PARTS picks the parts: "step" (1), "table1" (2 and 3),
# "projection" (4); all by default, so that a long call can be split in two, the
# projection's alone. Writes $OUT/summary.txt. Usage: OUT=folder [DEVICE=cuda]
# [OLD=folder] [N_ITER=1000] [SEEDS="0 ... 9"] [N_TRAIN=60000 N_TEST=10000] [METHODS="basis
# diffusion_net specnet1 specnet2"] [TOGETHER=auto] [STEP_ITERATIONS=100]
# [PROJECTION=config/config.yaml [TIMINGS=folder]] [PARTS="step table1 projection"]
# bash benchmarks/gpu_paper_scale.sh
set -uo pipefail
OUT=${OUT:-results/gpu_paper_scale}
DEVICE=${DEVICE:-cuda}
N_ITER=${N_ITER:-1000}
SEEDS=${SEEDS:-0 1 2 3 4 5 6 7 8 9}
N_TRAIN=${N_TRAIN:-60000}
N_TEST=${N_TEST:-10000}
METHODS=${METHODS:-basis diffusion_net specnet1 specnet2}
TOGETHER=${TOGETHER:-auto}  # --seeds-together of the Table 1 runs (auto: on CUDA; on: also on the CPU)
OLD=${OLD:-}
STEP_ITERATIONS=${STEP_ITERATIONS:-100}
PARTS=${PARTS-step table1 projection}
[ -n "${PARTS// /}" ] || { echo "PARTS is empty: name at least one of step, table1, projection" >&2; exit 2; }
for part in $PARTS; do
    [[ " step table1 projection " == *" $part "* ]] || { echo "PARTS: unknown part '$part' (step, table1, projection)" >&2; exit 2; }
done
wants() { [[ " $PARTS " == *" $1 "* ]]; }
py=$(command -v "${PYTHON:-python3}")
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")  # absolute: the old code runs from its own folder
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# Each failed part is noted here; the script ends with status 1 if any did.
rm -f "$OUT/failed"
fail() { echo "FAILED $1"; echo "$1" >> "$OUT/failed"; }
graphs=()
[ "$DEVICE" != cpu ] && graphs=(--cuda-graphs)
read -r -a seeds <<< "$SEEDS"
{
    [ "$DEVICE" != cpu ] && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    # step NAME DATA [FOLDER]: one `bench step` of the code in FOLDER (default: this one), into $OUT/step_NAME.json.
    step() {
        (cd "${3:-.}" && PYTHONPATH=. "$py" -m basis bench step --data "$2" --device "$DEVICE" \
            --iterations "$STEP_ITERATIONS" "${graphs[@]}" --json) > "$OUT/step_$1.json" 2> "$OUT/step_$1.err" \
            || fail "step $1: $(tail -1 "$OUT/step_$1.err")"
    }
    if wants step; then
        [ -n "$OLD" ] && step old_clusters clusters "$OLD"
        for name in clusters_1 clusters_2 clusters_3; do step "$name" clusters; done
        for data in touching digits; do step "$data" "$data"; done
        "$py" - "$OUT" <<'PY'
import json, statistics, sys
from pathlib import Path
steps = {}
for name in ("old_clusters", "clusters_1", "clusters_2", "clusters_3", "touching", "digits"):
    try:
        steps[name] = json.loads((Path(sys.argv[1]) / f"step_{name}.json").read_text())
    except (OSError, ValueError):
        continue  # not run, or its failure is printed above
for name, r in steps.items():
    print(f"bench step {name:>12}: {r['ms_per_iteration']['total']:7.2f} ms/step,"
          f" RANSAC hypotheses median {r['ransac_hypotheses']['median']:.0f} (max {r['ransac_hypotheses']['max']:.0f})")
stand_in = [r["ms_per_iteration"]["total"] for name, r in steps.items() if name.startswith("clusters_")]
if stand_in:
    print(f"stand-in: worst of {len(stand_in)} {max(stand_in):.2f} ms (floor 5, goal 2)")
    for name in ("touching", "digits"):
        if name in steps:
            ratio = steps[name]["ms_per_iteration"]["total"] / statistics.median(stand_in)
            print(f"{name}: {ratio:.2f}x the stand-in's median (floor 2x)")
PY
    fi
    if wants table1; then
        "$py" benchmarks/standin_features.py --out "$OUT/mnist.npz" --n-train "$N_TRAIN" --n-test "$N_TEST" \
            || fail "stand-in features"
        start=$SECONDS
        "$py" -m basis reference --dataset mnist --features "$OUT/mnist.npz" --device "$DEVICE" --out "$OUT/reference.npz" \
            --json > "$OUT/reference.json" 2> "$OUT/reference.err" || fail "reference: $(tail -1 "$OUT/reference.err")"
        echo "reference of the ${N_TEST}-point test split: $((SECONDS - start)) s"
        total=$((SECONDS - start))
        # run NAME METHOD SEEDS-TOGETHER SEED...: one `basis run` of SEEDs in one process, into $OUT/runs/NAME.
        run() {
            local name=$1 method=$2 together=$3
            shift 3
            "$py" -m basis run --method "$method" --dataset mnist --features "$OUT/mnist.npz" --reference "$OUT/reference.npz" \
                --device "$DEVICE" --set "n_iter=$N_ITER" --seeds "$@" --seeds-together "$together" \
                --out "$OUT/runs/$name/seed{seed}" --json > "$OUT/$name.json" 2> "$OUT/$name.err" \
                || fail "$name: $(tail -1 "$OUT/$name.err")"
        }
        for method in $METHODS; do
            start=$SECONDS
            run "$method" "$method" "$TOGETHER" "${seeds[@]}"
            took=$((SECONDS - start))
            total=$((total + took))
            echo "$method: ${#seeds[@]} seeds x $N_ITER iterations in one process (--seeds-together $TOGETHER): $took s"
        done
        echo "one data set's Table 1 runs (${#seeds[@]} seeds x $(wc -w <<< "$METHODS") methods): $total s;"
        echo "the paper's 4 data sets: $((4 * total)) s measured as 4 x one set (floor 900 s, goal 300 s)"
    fi
    # Seeds trained together against the baseline (the same seeds in turn) and one seed alone:
    # goal, the seeds together in at most 2x one seed's time; each seed's scores within 1e-6.
    if wants table1 && [[ " $METHODS " == *" basis "* ]]; then
        start=$SECONDS
        run basis_one basis off "${seeds[0]}"
        echo "basis: 1 seed: $((SECONDS - start)) s"
        start=$SECONDS
        run basis_in_turn basis off "${seeds[@]}"
        echo "basis: ${#seeds[@]} seeds in turn: $((SECONDS - start)) s (together: the basis line above, --seeds-together $TOGETHER)"
        "$py" - "$OUT/runs" "${seeds[@]}" <<'PY'
import json, sys
from pathlib import Path
runs, seeds = Path(sys.argv[1]), sys.argv[2:]
worst = {}
for seed in seeds:
    together = json.loads((runs / f"basis/seed{seed}/metrics.json").read_text())
    in_turn = json.loads((runs / f"basis_in_turn/seed{seed}/metrics.json").read_text())
    for key, value in in_turn.items():
        worst[key] = max(worst.get(key, 0.0), abs(together[key] - value) / max(abs(value), 1e-12))
print("seeds together against in turn, largest relative difference per score:")
print("  " + ", ".join(f"{key} {value:.1e}" for key, value in sorted(worst.items())))
PY
    fi
    # (4) Given PROJECTION (a config file; config/config.yaml is the paper), its whole workflow
    # projected from a sample of its jobs run here (benchmarks/paper_projection.py), the image
    # sets as stand-ins of their real shapes; the tables' jobs, which need every run, take
    # their times from TIMINGS (a folder where `make quick` finished on this box) if given.
    if wants projection && [ -n "${PROJECTION:-}" ]; then
        "$py" benchmarks/paper_projection.py --configfile "$PROJECTION" --sample "$OUT/sample" --standins \
            --cores "$(nproc)" --gpus 0 1 ${TIMINGS:+--timings "$TIMINGS"} > "$OUT/projection.txt" \
            2> "$OUT/projection.err" || fail "projection: $(tail -1 "$OUT/projection.err")"
        grep -E "^(projected wall time|the sample|not measured)" "$OUT/projection.txt"
    fi
} 2>&1 | tee "$OUT/summary.txt"
if [ -s "$OUT/failed" ]; then
    echo "$(wc -l < "$OUT/failed") part(s) FAILED: the figures above are not measurements" | tee -a "$OUT/summary.txt" >&2
    exit 1
fi

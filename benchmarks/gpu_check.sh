#!/usr/bin/env bash
# One prepared check of every code path on a CUDA device, a few iterations each:
# every method (and alignment variant) on a features file, every study, `bench step`
# and the whole-set reference. Exits non-zero on any error or non-finite number.
# Usage: OUT=folder bash benchmarks/gpu_check.sh     (DEVICE=cpu runs the same checks on the CPU)
set -uo pipefail
OUT=${OUT:-results/gpu_check}
DEVICE=${DEVICE:-cuda}
py=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
failures=0

if [ "$DEVICE" != cpu ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    "$py" -c "import sys, torch; print('torch', torch.__version__, 'cuda', torch.version.cuda); sys.exit(not torch.cuda.is_available())" \
        || { echo "FAILED: no CUDA device visible to torch"; exit 1; }
fi

# check LABEL COMMAND...: runs `python -m basis COMMAND --device $DEVICE --json`, then
# requires exit 0 and a JSON object whose every number is finite.
check() {
    local label=$1
    shift
    local start=$SECONDS
    if "$py" -m basis "$@" --device "$DEVICE" --json > "$OUT/$label.json" 2> "$OUT/$label.err" \
        && "$py" - "$OUT/$label.json" <<'EOF'
import json, math, sys
def numbers(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from numbers(item)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value
result = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
bad = [v for v in numbers(result) if not math.isfinite(v)]
sys.exit(f"non-finite numbers: {bad}" if bad else 0)
EOF
    then
        echo "ok   $label ($((SECONDS - start)) s): $(tail -c 400 "$OUT/$label.json")"
    else
        echo "FAILED $label ($((SECONDS - start)) s): $(tail -3 "$OUT/$label.err")"
        failures=$((failures + 1))
    fi
}

graph=(--set graph.n_neighbors=15 --set graph.scale=local --set graph.scale_neighbor=7)
short=(--set n_iter=30 --set batch_size=256)
check features features --dataset digits --out "$OUT/digits_features.npz" --set n_steps=100
mkdir -p "$OUT/features_dir" && cp "$OUT/digits_features.npz" "$OUT/features_dir/digits.npz"  # for the variants study
check reference reference --dataset digits --features "$OUT/digits_features.npz" --out "$OUT/digits_reference.npz" "${graph[@]}"
for method in basis diffusion_net specnet1 specnet2; do
    check "run_$method" run --method "$method" --dataset digits --features "$OUT/digits_features.npz" \
        --reference "$OUT/digits_reference.npz" "${graph[@]}" "${short[@]}"
done
for alignment in lstsq none; do
    check "run_basis_$alignment" run --method basis --dataset digits --features "$OUT/digits_features.npz" \
        --reference "$OUT/digits_reference.npz" "${graph[@]}" "${short[@]}" --set alignment=$alignment
done
check run_specnet2_neighbor run --method specnet2 --dataset digits --features "$OUT/digits_features.npz" \
    --reference "$OUT/digits_reference.npz" "${graph[@]}" "${short[@]}" --set gradient=neighbor
check run_basis_two_moons run --method basis --dataset two_moons --set n_iter=30
check run_basis_seeds run --method basis --dataset two_moons --set n_iter=30 --seeds 0 1  # seeds in one process
check reference_faiss reference --dataset digits --features "$OUT/digits_features.npz" \
    --out "$OUT/digits_reference_faiss.npz" "${graph[@]}" --set graph.neighbors=faiss-ivf

for toy in three_moons two_moons circles blobs spirals; do
    check "study_toy_$toy" study toy --out "$OUT/studies/toy_$toy" --set dataset=$toy --set n_samples=1500 --set n_iter=30
done
check study_illustration study illustration --out "$OUT/studies/illustration"
check study_consistency study consistency --out "$OUT/studies/consistency" --set n_samples=3000 --set n_batches=5
check study_bunny study bunny --out "$OUT/studies/bunny" --set n_frames=300 --set n_test=80 --set resolution=24 \
    --set n_iter=30 --set batch_size=120 --set n_anchors=20 --set n_neighbors=10
check study_feature_change_main study feature_change --out "$OUT/studies/fc_main" --set dataset=digits \
    --set n_iter=40 --set spectral_every=5 --set batch_size=128 --set anchors_per_class=5 --set eval_every=20 \
    --set eval_size=150 --set n_components=9 --set 'graph={"n_neighbors": 10, "scale": "local", "scale_neighbor": 7}'
check study_feature_change_subset study feature_change --out "$OUT/studies/fc_subset" --set dataset=digits \
    --set 'classes=[4, 7, 9]' --set n_components=2 --set n_iter=40 --set spectral_every=5 --set batch_size=100 \
    --set anchors_per_class=5 --set ransac_sample_size=5 --set eval_every=20 --set eval_size=100 \
    --set 'graph={"n_neighbors": 10, "scale": "local", "scale_neighbor": 7}'
for dataset in three_moons digits; do  # beyond the paper: every BASiS variant on the device
    check "study_variants_$dataset" study variants --out "$OUT/studies/variants_$dataset" --set dataset=$dataset \
        --set n_seeds=1 --set n_iter=30 --set n_samples=1500 --set features_dir="$OUT/features_dir" \
        --set 'protocol={"batch_size": 256, "anchors_per_class": 10, "graph": {"n_neighbors": 15, "scale": "global"}}'
done
check study_alignment_error study alignment_error --out "$OUT/studies/alignment_error" --set n_pairs=2

check bench_step bench step
check bench_reference bench reference --n 70000
check bench_reference_faiss bench reference --n 70000 --neighbors faiss-ivf
if [ "$DEVICE" != cpu ]; then  # a million points: the exact search on the device, and FAISS (#21's floors)
    check bench_reference_1m bench reference --n 1000000
    check bench_reference_1m_faiss bench reference --n 1000000 --neighbors faiss-ivf
fi

echo "gpu_check on $DEVICE: $failures failure(s)"
[ "$failures" -eq 0 ]

#!/usr/bin/env bash
# The studies at the paper's budget and CPU-vs-GPU timings of one job, on a GPU machine
# without Snakemake or MLflow (plain `python -m basis`, untracked).
# Usage: OUT=folder bash benchmarks/gpu_studies.sh   (results in $OUT/*.json, a log on stdout)
set -uo pipefail
OUT=${OUT:-results/gpu_studies}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

study() {  # name, label, --set options...
    local name=$1 label=$2
    shift 2
    local sets=()
    for option in "$@"; do sets+=(--set "$option"); done
    local start=$SECONDS
    timeout "${STUDY_TIMEOUT:-300}" "$py" -m basis study "$name" --out "$OUT/studies/$label" --device cuda --json \
        "${sets[@]}" > "$OUT/$label.json" \
        2> "$OUT/$label.err" || echo "FAILED: $label ($(tail -1 "$OUT/$label.err"))"
    echo "$label: $((SECONDS - start)) s $(cat "$OUT/$label.json")"
}

for toy in three_moons two_moons circles blobs spirals; do
    study toy "toy_$toy" "dataset=$toy" &
done
wait
study bunny bunny
study consistency consistency
study feature_change feature_change_digits_main dataset=digits n_iter=1500 batch_size=256 anchors_per_class=10 \
    'graph={"n_neighbors": 15, "scale": "local", "scale_neighbor": 7}' eval_size=360 n_components=9 &
study feature_change feature_change_digits_479 dataset=digits n_iter=1500 batch_size=200 anchors_per_class=15 \
    'graph={"n_neighbors": 15, "scale": "local", "scale_neighbor": 7}' eval_size=360 'classes=[4, 7, 9]' \
    n_components=2 &
wait

# One Table-1 job on each device: BASiS on digits, the paper's protocol (1,000 iterations, batch 512).
for device in cpu cuda; do
    start=$SECONDS
    "$py" -m basis run --method basis --dataset digits --device "$device" --json --set anchors_per_class=25 \
        > "$OUT/run_basis_digits_$device.json" 2> "$OUT/run_basis_digits_$device.err" || echo "FAILED: run on $device"
    echo "run basis digits on $device: $((SECONDS - start)) s $(cat "$OUT/run_basis_digits_$device.json")"
done

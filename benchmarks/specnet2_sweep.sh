#!/usr/bin/env bash
# SpecNet2 on two moons under longer budgets and other settings (issue #3's open floor),
# all side by side on one GPU. Usage: [SWEEP_FILE=configs.txt] bash benchmarks/specnet2_sweep.sh > sweep.jsonl
export OMP_NUM_THREADS=2 PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
configs=(
    "n_iter=20000 lr=0.001"
    "n_iter=20000 lr=0.001 gradient=neighbor"
    "n_iter=20000 lr=0.0001"
    "n_iter=5000 lr=0.001 batch_size=2048"
    "n_iter=10000 lr=0.001 drop_trivial=true"
    "n_iter=10000 lr=0.001 graph.n_neighbors=50"
    "n_iter=10000 lr=0.001 graph.scale=local"
    "n_iter=10000 lr=0.01"
)
# SWEEP_FILE: one configuration per line, in place of the list above
if [ -n "${SWEEP_FILE:-}" ]; then mapfile -t configs < "$SWEEP_FILE"; fi
for config in "${configs[@]}"; do
    (
        sets=()
        for option in $config; do sets+=(--set "$option"); done
        result=$(timeout "${RUN_TIMEOUT:-330}" "$py" -m basis run --method specnet2 --dataset two_moons --device "${DEVICE:-cuda}" \
            --json --set eval.probe_epochs=1 "${sets[@]}" 2>/dev/null | tail -1)
        echo "{\"config\": \"$config\", \"result\": ${result:-null}}"
    ) &
done
wait

#!/usr/bin/env bash
# Issue #23's GPU figure: Table 1's runs on one device, one process per seed (the default
# workflow) against all seeds of a method in one process (`basis run --seeds`, the
# workflow's `seeds_in_one_job`), in the same call. The digits set stands in for the image
# sets (they cannot be fetched on the device); runs are untracked (no MLflow there) and
# share one stored test reference, as in the workflow. The paper's table is 160 runs
# (4 methods x 4 sets x 10 seeds); this times METHODS x SEEDS on one set and prints both
# layouts' totals, the per-run mean and whether the seeds' metrics are the same both ways.
# Usage: OUT=folder [DEVICE=cuda] [SEEDS="0 1 2"] [N_ITER=1000] [METHODS="basis specnet2"] \
#        bash benchmarks/gpu_table1_seeds.sh
set -uo pipefail
OUT=${OUT:-results/gpu_table1_seeds}
DEVICE=${DEVICE:-cuda}
SEEDS=${SEEDS:-0 1 2 3 4 5 6 7 8 9}
N_ITER=${N_ITER:-1000}
METHODS=${METHODS:-basis diffusion_net specnet1 specnet2}
py=${PYTHON:-python3}
mkdir -p "$OUT"
read -r -a seeds <<< "$SEEDS"
settings=(--dataset digits --device "$DEVICE" --set "n_iter=$N_ITER" --json)
{
    [ "$DEVICE" != cpu ] && nvidia-smi --query-gpu=name --format=csv,noheader
    "$py" -m basis reference --dataset digits --device "$DEVICE" --out "$OUT/reference.npz" --json \
        > "$OUT/reference.json" 2> "$OUT/reference.err" || echo "FAILED reference: $(tail -1 "$OUT/reference.err")"
    for method in $METHODS; do
        start=$SECONDS
        for seed in "${seeds[@]}"; do
            "$py" -m basis run --method "$method" "${settings[@]}" --reference "$OUT/reference.npz" --seed "$seed" \
                --out "$OUT/per_job/$method/seed{seed}" > /dev/null 2>> "$OUT/per_job_$method.err" \
                || echo "FAILED per job: $method seed $seed ($(tail -1 "$OUT/per_job_$method.err"))"
        done
        echo "per_job $method $((SECONDS - start)) s"
        start=$SECONDS
        "$py" -m basis run --method "$method" "${settings[@]}" --reference "$OUT/reference.npz" --seeds "${seeds[@]}" \
            --out "$OUT/per_process/$method/seed{seed}" > /dev/null 2> "$OUT/per_process_$method.err" \
            || echo "FAILED per process: $method ($(tail -1 "$OUT/per_process_$method.err"))"
        echo "per_process $method $((SECONDS - start)) s"
    done
} 2>&1 | tee "$OUT/log.txt"
"$py" - "$OUT" "${#seeds[@]}" <<'PY' | tee -a "$OUT/log.txt"
import json, pathlib, sys
out, n_seeds = pathlib.Path(sys.argv[1]), int(sys.argv[2])
seconds = {}
for line in (out / "log.txt").read_text().splitlines():
    parts = line.split()
    if len(parts) == 4 and parts[0] in ("per_job", "per_process") and parts[3] == "s":
        seconds.setdefault(parts[0], {})[parts[1]] = int(parts[2])
same = all(
    json.loads(a.read_text()) == json.loads((out / "per_process" / a.relative_to(out / "per_job")).read_text())
    for a in sorted((out / "per_job").glob("*/seed*/metrics.json"))
)
for layout, by_method in seconds.items():
    runs = n_seeds * len(by_method)
    total = sum(by_method.values())
    print(f"{layout}: {total} s for {runs} runs ({total / runs:.1f} s per run; x {160 / runs:g} for Table 1's 160: {total * 160 / runs:.0f} s)")
print("metrics identical per job and per process:", same)
PY

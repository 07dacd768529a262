#!/usr/bin/env bash
# A real-data BASiS step on a device, old code against new in one call: a 100-iteration
# run on raw digits (where RANSAC needs many rounds per batch) with each code folder in
# CODES (a copy of an older basis/ each; "." is this checkout), then where a step's time
# goes (benchmarks/step_parts.py, each code), then Table 1's runs one process per seed
# against seeds in one process (benchmarks/gpu_table1_seeds.sh, SEEDS x N_ITER, BASiS).
# Writes $OUT/log.txt.
# Usage: OUT=folder [CODES="old_09065fe ."] [DEVICE=cuda] bash benchmarks/gpu_digits_rounds.sh
set -uo pipefail
OUT=${OUT:-results/gpu_digits_rounds}
DEVICE=${DEVICE:-cuda}
CODES=${CODES:-.}
SEEDS=${SEEDS:-0 1 2}
N_ITER=${N_ITER:-200}
py=$(command -v "${PYTHON:-python3}")
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")  # absolute: each code runs from its own folder
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
log=$OUT/log.txt
here=$(pwd)
{
    [ "$DEVICE" != cpu ] && nvidia-smi --query-gpu=name --format=csv,noheader
    for code in $CODES; do
        (cd "$code" && PYTHONPATH=. "$py" -m basis run --method basis --dataset digits --set n_iter=100 \
            --device "$DEVICE" --json 2>&1 > /dev/null | grep '# timings' | tail -1 | sed "s|^|digits, 100 iterations, $code: |")
    done
    for code in $CODES; do
        PYTHONPATH=$code "$py" "$here/benchmarks/step_parts.py" --device "$DEVICE" --n-iter 40 --count-iter 10 2>&1 \
            | tail -1 | sed "s|^|step parts, $code: |"
    done
    OUT=$OUT/table1 SEEDS=$SEEDS N_ITER=$N_ITER METHODS=basis DEVICE=$DEVICE PYTHON=$py \
        bash benchmarks/gpu_table1_seeds.sh 2>&1 | tail -4
} 2>&1 | tee "$log"

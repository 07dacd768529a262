#!/usr/bin/env bash
# Issue #21's device check: the whole-set reference at 70k and 1M points (16-d touching
# clusters, k = 50, K = 10), today's path (graph assembled on the host, ARPACK) and the
# device path (graph and Chebyshev eigensolver on the device; also with the two-stage
# top-k) in one call, each in its own process (its own peak memory), then the distance
# between the embeddings. Writes $OUT/reference.txt.
# Usage: OUT=folder bash benchmarks/gpu_reference.sh   (DEVICE=cpu N="20000 70000": on the CPU)
set -uo pipefail
OUT=${OUT:-results/gpu_reference}
DEVICE=${DEVICE:-cuda}
N=${N:-70000 1000000}
BLOCK=${BLOCK:-4096}
py=${PYTHON:-python3}
mkdir -p "$OUT"
work=$(mktemp -d)
{
    for n in $N; do
        for variant in arpack chebyshev chebyshev-block; do
            extra=()
            [ "$variant" = chebyshev-block ] && extra=(--topk-block "$BLOCK")
            "$py" -m basis bench reference --n "$n" --spread 1.5 --device "$DEVICE" --json \
                --reference-eigensolver "${variant%-block}" "${extra[@]}" --save-embedding "$work/$n-$variant.npy" \
                > "$work/$n-$variant.json" 2> "$work/$n-$variant.err" \
                || echo "FAILED $n $variant: $(tail -3 "$work/$n-$variant.err")"
        done
    done
    "$py" - "$work" $N <<'PY'
import json, pathlib, sys
import numpy as np
from basis.metrics import grassmann_distance
work, ns = pathlib.Path(sys.argv[1]), sys.argv[2:]
print("| n | path | kNN s | graph s | eigensolve s | total s | peak device GB | peak RSS GB | d_G to arpack | max abs diff |")
print("|---|---|---|---|---|---|---|---|---|---|")
for n in ns:
    base = work / f"{n}-arpack.npy"
    for variant in ("arpack", "chebyshev", "chebyshev-block"):
        try:
            r = json.loads((work / f"{n}-{variant}.json").read_text())
        except Exception as err:
            print(f"| {n} | {variant} | failed: {err!r} |")
            continue
        U = np.load(work / f"{n}-{variant}.npy")
        d_g = diff = float("nan")
        if base.exists():
            V = np.load(base)
            d_g, diff = grassmann_distance(U, V), float(np.abs(U - V).max())
        print(f"| {n} | {variant} | {r['knn_seconds']:.2f} | {r['graph_seconds']:.2f} | {r['eigen_seconds']:.2f} |"
              f" {r['seconds']:.2f} | {r['peak_device_mb'] / 1024:.2f} | {r['peak_rss_mb'] / 1024:.2f} | {d_g:.2e} | {diff:.2e} |")
    print("device:", r.get("device"), "threads:", r.get("threads"))
PY
} 2>&1 | tee "$OUT/reference.txt"
rm -rf "$work"

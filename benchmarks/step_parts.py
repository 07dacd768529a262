"""Where a BASiS step's time goes on real data (raw digits by default), not the clustered
stand-in of ``bench step``: the median and mean ms of each part of the step over one
run's iterations, RANSAC's hypotheses per batch, and, from a second short run on the CPU
with one torch thread (where the pipeline's stages run on the counting thread; on CUDA
the worker thread's would go uncounted), the ops each iteration dispatches (one launch
each on CUDA) and what makes the host wait (:class:`basis.runtime.syncs.HostSyncCounter`). The
counted run takes the CPU's path: RANSAC's rounds one at a time, where CUDA batches them.

    python benchmarks/step_parts.py --n-iter 40 [--device cuda] [--dataset digits]
"""

from __future__ import annotations

import json
import time

import numpy as np

from basis.catalog.settings import resolve_settings
from basis.cli.parser import OneLineParser
from basis.data import load_inputs
from basis.experiment import build_estimator
from basis.runtime.syncs import HostSyncCounter
from basis.runtime.threads import one_torch_thread

PARTS = ("ms_step", "ms_graph", "ms_eigensolve", "ms_alignment", "ms_gradient", "ransac_hypotheses")


def fit(data, settings: dict, n_iter: int, device: str, callback=None):
    run = {"n_iter": n_iter, "seed": 0, "device": device, "callback": callback}
    return build_estimator("basis", data, settings, **run).fit(data.X_train, data.y_train)


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--n-iter", type=int, default=40)
    parser.add_argument("--count-iter", type=int, default=10, help="iterations of the counted run")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    data, settings = load_inputs(args.dataset), resolve_settings("basis")
    steps: dict[str, list[float]] = {part: [] for part in PARTS}

    def record(step: int, info: dict) -> None:
        for part in PARTS:
            if part in info:
                steps[part].append(float(info[part]))

    start = time.perf_counter()
    fit(data, settings, args.n_iter, args.device, record)
    seconds = time.perf_counter() - start
    with one_torch_thread(), HostSyncCounter() as syncs:
        fit(data, settings, args.count_iter, "cpu")
    per_iteration = 1.0 / args.count_iter
    print(
        json.dumps(
            {
                "dataset": args.dataset,
                "device": args.device,
                "n_iter": args.n_iter,
                "fit_s": round(seconds, 2),
                **{
                    part: {"median": round(float(np.median(v)), 2), "mean": round(float(np.mean(v)), 2)}
                    for part, v in steps.items()
                    if v
                },
                # counted on the CPU (code before the op count had none)
                "ops_per_iteration": round(getattr(syncs, "ops", float("nan")) * per_iteration, 1),
                "host_reads_per_iteration": {k: round(v * per_iteration, 2) for k, v in syncs.counts.items()},
                "checked_decompositions_per_iteration": {
                    k: round(v * per_iteration, 2) for k, v in syncs.linalg_checks.items()
                },
            }
        )
    )


if __name__ == "__main__":
    main()

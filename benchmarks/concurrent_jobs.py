"""N BASiS jobs at once on one host: each job's time per iteration against one job alone.

Each job is ``python -m basis bench step --device cpu --threads T``: the median wall time of
a BASiS iteration (m = 512, K = 10, k = 50) in its own process. With N x T <= cores the
jobs should not slow each other down (goal: within 1.3x of alone); ``--threads 0`` leaves
the thread count to the libraries (every job uses every core), the oversubscribed case.

    python benchmarks/concurrent_jobs.py --jobs 2 --threads 1
    python benchmarks/concurrent_jobs.py --jobs 4 --threads 4      # on a 16-core host
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from basis.cli.parser import OneLineParser


def launch(threads: int, batch_size: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "basis", "bench", "step", "--device", "cpu", "--json", "--m", str(batch_size)]
    if threads:
        command += ["--threads", str(threads)]
    env = dict(os.environ)
    if not threads:  # let every library use every core, as jobs did before --threads
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env.pop(name, None)
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)


def run_jobs(n_jobs: int, threads: int, batch_size: int) -> tuple[list[float], float]:
    start = time.perf_counter()
    processes = [launch(threads, batch_size) for _ in range(n_jobs)]
    outputs = [process.communicate()[0] for process in processes]
    wall = time.perf_counter() - start
    if any(process.returncode for process in processes):
        raise SystemExit("a job failed")
    return [json.loads(out)["ms_per_iteration"]["total"] for out in outputs], wall


def main() -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="per job; 0: no limit (oversubscribed)")
    parser.add_argument("--m", type=int, default=512, help="batch size")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    alone, alone_wall = run_jobs(1, args.threads, args.m)
    together, together_wall = run_jobs(args.jobs, args.threads, args.m)
    ratio = statistics.median(together) / alone[0]
    print(
        json.dumps(
            {
                "cores": cores,
                "jobs": args.jobs,
                "threads_per_job": args.threads or "unlimited",
                "ms_per_iteration_alone": round(alone[0], 1),
                "ms_per_iteration_together": [round(t, 1) for t in together],
                "slowdown": round(ratio, 2),
                "wall_s_alone": round(alone_wall, 1),
                "wall_s_together": round(together_wall, 1),
                "within_1.3x": ratio <= 1.3,
            }
        )
    )


if __name__ == "__main__":
    main()

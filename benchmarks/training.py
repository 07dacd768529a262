"""Training's cost: where a BASiS step's time goes on real data, peak memory against the
number of training points, and a method's seeds trained together against in turn.

    python -m benchmarks training parts --n-iter 40 [--device cuda] [--dataset digits]
    python -m benchmarks training memory --n 70000 1000000 --n-iter 30
    python -m benchmarks training seeds-together --device cuda --seeds 10 --n-iter 200 [--method diffusion_net]
    python -m benchmarks training scaling --n 10000 30000 100000 300000 1000000 [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

from benchmarks.common import timed

#: The parts of a BASiS step its callback reports.
STEP_PARTS = ("ms_step", "ms_graph", "ms_eigensolve", "ms_alignment", "ms_gradient", "ransac_hypotheses")


def add_parts_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--n-iter", type=int, default=40)
    parser.add_argument("--count-iter", type=int, default=10, help="iterations of the counted run")
    parser.add_argument("--device", default="cpu")


def _fit(data, settings: dict, n_iter: int, device: str, callback=None):
    from basis.experiment import build_estimator

    run = {"n_iter": n_iter, "seed": 0, "device": device, "callback": callback}
    return build_estimator("basis", data, settings, **run).fit(data.X_train, data.y_train)


def parts(args: argparse.Namespace) -> int:
    """Where a BASiS step's time goes on real data (raw digits by default): one JSON object.

    The median and mean ms of each part of the step over one run's iterations (not the
    clustered stand-in of ``bench step``), RANSAC's hypotheses per batch, and, from a second
    short run on the CPU with one torch thread (where the pipeline's stages run on the
    counting thread; on CUDA the worker thread's would go uncounted), the ops each iteration
    dispatches (one launch each on CUDA) and what makes the host wait
    (:class:`basis.runtime.syncs.HostSyncCounter`). The counted run takes the CPU's path:
    RANSAC's rounds one at a time, where CUDA batches them.
    """
    from basis.catalog.settings import resolve_settings
    from basis.data import load_inputs
    from basis.runtime.syncs import HostSyncCounter
    from basis.runtime.threads import one_torch_thread

    data, settings = load_inputs(args.dataset), resolve_settings("basis")
    steps: dict[str, list[float]] = {part: [] for part in STEP_PARTS}

    def record(step: int, info: dict) -> None:
        for part in STEP_PARTS:
            if part in info:
                steps[part].append(float(info[part]))

    start = time.perf_counter()
    _fit(data, settings, args.n_iter, args.device, record)
    seconds = time.perf_counter() - start
    with one_torch_thread(), HostSyncCounter() as syncs:
        _fit(data, settings, args.count_iter, "cpu")
    per_iteration = 1.0 / args.count_iter
    report = {
        "dataset": args.dataset,
        "device": args.device,
        "n_iter": args.n_iter,
        "fit_s": round(seconds, 2),
        **{
            part: {"median": round(float(np.median(v)), 2), "mean": round(float(np.mean(v)), 2)}
            for part, v in steps.items()
            if v
        },
        "ops_per_iteration": round(syncs.ops * per_iteration, 1),
        "host_reads_per_iteration": {k: round(v * per_iteration, 2) for k, v in syncs.counts.items()},
        "checked_decompositions_per_iteration": {
            k: round(v * per_iteration, 2) for k, v in syncs.linalg_checks.items()
        },
    }
    print(json.dumps(report))
    return 0


def add_memory_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, nargs="+", default=[70_000, 1_000_000])
    parser.add_argument("--n-iter", type=int, default=50)
    parser.add_argument("--device", default="cpu")


#: One BASiS fit in a fresh process: its peak memory before and after.
ONE_FIT = """
import json, resource, sys
from basis.data.clusters import clustered_data
from basis.estimators import BASiS
n, n_iter = int(sys.argv[1]), int(sys.argv[2])
X, y = clustered_data(n, 16, 10)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
BASiS(10, graph={"n_neighbors": 50}, batch_size=512, n_iter=n_iter, device=sys.argv[3], seed=0).fit(X, y)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"n": n, "features_mb": X.nbytes / 2**20, "peak_rss_mb_before_fit": before, "peak_rss_mb": peak}))
"""


def memory(args: argparse.Namespace) -> int:
    """Peak memory of BASiS training against the number of training points: one JSON line per n.

    BASiS sees one batch at a time, so its memory should not grow with n beyond the
    features themselves (n x 16 floats). Each n runs in a fresh process.
    """
    for n in args.n:
        command = [sys.executable, "-c", ONE_FIT, str(n), str(args.n_iter), args.device]
        print(subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip())
    return 0


def add_seeds_together_arguments(parser: argparse.ArgumentParser) -> None:
    from basis.catalog import method_names

    parser.add_argument("--device", default="cpu")
    parser.add_argument("--method", default="basis", choices=sorted(method_names()))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--n-iter", type=int, default=200)
    parser.add_argument("--n", type=int, default=60000)
    parser.add_argument("--batch-size", type=int, default=512)


def seeds_together(args: argparse.Namespace) -> int:
    """A method's seeds trained together against the same seeds in turn and one seed alone.

    Training only (no start-up, no evaluation): one seed's ``fit``, then ``--seeds`` seeds
    fitted in turn, then the same seeds through :func:`basis.estimators.together.fit_together`,
    on Siamese-like clustered features of MNIST's shape (``--n`` points, 16-d). Prints each
    time, the together/one ratio (the goal: 10 seeds in at most 2x one seed's time) and the
    largest difference between a seed's embedding trained together and in turn, beside the
    largest that one unit in the last place of a seed's initial weights makes in its solo
    run (the training's own amplification of rounding, the yardstick for the first).
    """
    from basis.data.clusters import low_rank_clusters
    from basis.estimators import METHODS
    from basis.estimators.together import fit_together, nudged_fit

    X, y = low_rank_clusters(args.n)
    settings = dict(n_components=10, batch_size=args.batch_size, n_iter=args.n_iter, device=args.device)

    def make(seed: int):
        return METHODS[args.method](seed=seed, **settings)

    seeds = list(range(args.seeds))
    make(0).fit(X, y)  # warm-up: kernels, allocator, lazy imports
    one, _ = timed(lambda: make(0).fit(X, y), args.device)
    in_turn, alone = timed(lambda: [make(seed).fit(X, y) for seed in seeds], args.device)
    together, joint = timed(lambda: fit_together([make(seed) for seed in seeds], [(X, y)] * len(seeds)), args.device)
    sample = X[:2000]

    def difference(a, b) -> float:
        expected = a.transform(sample)
        return float(np.abs(b.transform(sample) - expected).max() / np.abs(expected).max())

    report = {
        "method": args.method,
        "device": args.device,
        "seeds": args.seeds,
        "n_iter": args.n_iter,
        "one_seed_s": round(one, 2),
        "in_turn_s": round(in_turn, 2),
        "together_s": round(together, 2),
        "together_over_one": round(together / one, 2),
        "together_over_in_turn": round(together / in_turn, 2),
        "largest_relative_embedding_difference": max(difference(a, b) for a, b in zip(alone, joint)),
        "one_ulp_in_the_initial_weights_relative_embedding_difference": max(
            difference(solo, nudged_fit(make(seed), X, y)) for seed, solo in zip(seeds, alone)
        ),
    }
    print(json.dumps(report))
    return 0


def add_scaling_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 30_000, 100_000, 300_000, 1_000_000])
    parser.add_argument("--n-iter", type=int, default=1000, help="BASiS's fixed budget at every n (the protocol's)")
    parser.add_argument("--n-test", type=int, default=5000, help="held-out points scored at every n")
    parser.add_argument("--exact-up-to", type=int, default=100_000, help="largest n for the exact neighbours")
    parser.add_argument("--device", default="cpu")


#: One n in a fresh process: BASiS fitted at a fixed budget on n touching-cluster points,
#: its embedding of the n points against a bare forward pass of its network, then the exact
#: embedding of the n + n_test points (the ground truth at that n) and d_G on the held-out
#: rows. Peak RSS is read per phase (``clear_refs`` restarts it from the current RSS).
ONE_SCALE = """
import json, sys, time
import numpy as np, torch
from basis.catalog.settings import EVALUATION_KEYS, resolve_settings
from basis.data.clusters import clustered_data
from basis.estimators import BASiS
from basis.metrics import grassmann_distance, orthogonality
from basis.references import analytic_embedding
from basis.runtime import device as devices
n, n_test, n_iter, device, backend = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]

def peak_gb():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 2**20

def restart_peak():
    open("/proc/self/clear_refs", "w").write("5")

X, y = clustered_data(n + n_test, 16, 10, 0, spread=1.5)
settings = resolve_settings("basis")
options = {k: v for k, v in settings.items() if k not in EVALUATION_KEYS} | {"n_iter": n_iter}
restart_peak()
estimator = BASiS(10, device=device, seed=0, **options)
start = time.perf_counter()
estimator.fit(X[:n], y[:n])
devices.synchronize(estimator.device_)
fit_s = time.perf_counter() - start
estimator.transform(X[:1000])  # warm-up: both timings below start warm
start = time.perf_counter()
estimator.transform(X[:n])
transform_s = time.perf_counter() - start
chunks = [torch.from_numpy(X[i : i + 8192]).to(estimator.device_) for i in range(0, n, 8192)]
with torch.no_grad():  # the same network on the same points in the same chunks, nothing else
    start = time.perf_counter()
    for chunk in chunks:
        estimator.model_.embed(chunk)
    devices.synchronize(estimator.device_)
    forward_s = time.perf_counter() - start
fit_peak = peak_gb()
restart_peak()
graph = dict(settings["graph"], neighbors=backend)
start = time.perf_counter()
truth = analytic_embedding(X, dict(settings, graph=graph), 10, device=device)[n:]
exact_s = time.perf_counter() - start
held_out = estimator.transform(X[n:])
print(json.dumps({"n": n, "fit_s": fit_s, "transform_s": transform_s, "forward_s": forward_s,
    "fit_peak_gb": fit_peak, "exact_s": exact_s, "exact_peak_gb": peak_gb(), "neighbors": backend,
    "d_G": grassmann_distance(held_out, truth), "d_perp_colnorm": orthogonality(held_out, variant="colnorm")}))
"""


def _slope(ns: list[int], values: list[float]) -> float:
    """The log-log least-squares slope of ``values`` against ``ns``."""
    return float(np.polyfit(np.log(ns), np.log(values), 1)[0])


def scaling(args: argparse.Namespace) -> int:
    """BASiS's cost and accuracy as the training set grows, at a fixed iteration budget.

    Per n (a fresh process each): fit seconds, the out-of-sample embedding of the n points
    (``transform``) against one bare forward pass of the network on the same points, peak
    RSS of the fit, the exact whole-set embedding's seconds and peak (exact neighbours up to
    ``--exact-up-to``, FAISS IVF beyond), and d_G of the held-out points against the exact
    embedding of all n + n_test points, on touching 16-d clusters (Siamese-like, one graph
    component). Prints a markdown table, the log-log slopes and the floors of the scale
    study: fit slope <= 0.1, transform <= 2x the forward pass, d_G at the largest n <= 1.25x
    at the smallest, fit peak <= 8 GB.
    """
    rows = []
    print(
        "| n | BASiS fit s | transform s | forward s | fit peak RSS GB | exact s | exact peak RSS GB | neighbours"
        " | d_G | d_perp (colnorm) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in args.n:
        backend = "exact" if n <= args.exact_up_to else "faiss-ivf"
        command = [sys.executable, "-c", ONE_SCALE, str(n), str(args.n_test), str(args.n_iter), args.device, backend]
        row = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip())
        rows.append(row)
        print(
            f"| {n:,} | {row['fit_s']:.1f} | {row['transform_s']:.2f} | {row['forward_s']:.2f}"
            f" | {row['fit_peak_gb']:.2f} | {row['exact_s']:.1f} | {row['exact_peak_gb']:.2f} | {backend}"
            f" | {row['d_G']:.3f} | {row['d_perp_colnorm']:.3f} |",
            flush=True,
        )
    ns = [row["n"] for row in rows]
    fit_slope, exact_slope = _slope(ns, [r["fit_s"] for r in rows]), _slope(ns, [r["exact_s"] for r in rows])
    worst_transform = max(r["transform_s"] / r["forward_s"] for r in rows)
    d_g_ratio = rows[-1]["d_G"] / rows[0]["d_G"]
    print(f"\nlog-log slope: BASiS fit {fit_slope:.3f} (floor <= 0.1), exact embedding {exact_slope:.3f}")
    print(f"transform / forward pass, worst n: {worst_transform:.2f}x (floor <= 2)")
    print(f"d_G at n = {ns[-1]:,} / at n = {ns[0]:,}: {d_g_ratio:.2f}x (floor <= 1.25)")
    print(f"largest fit peak: {max(r['fit_peak_gb'] for r in rows):.2f} GB (floor <= 8)")
    return 0


PARTS = {
    "parts": (add_parts_arguments, parts),
    "memory": (add_memory_arguments, memory),
    "seeds-together": (add_seeds_together_arguments, seeds_together),
    "scaling": (add_scaling_arguments, scaling),
}

"""The whole-set reference's cost as n grows: time per phase and peak memory, by neighbour
backend (one process per point, so that each peak is its own).

    python -m benchmarks reference scaling --n 70000 300000 1000000 --exact-up-to 300000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def bench(n: int, backend: str, threads: int | None) -> dict:
    """``python -m basis bench reference``'s figures for ``n`` points on ``backend``'s neighbours."""
    command = [sys.executable, "-m", "basis", "bench", "reference", "--n", str(n), "--neighbors", backend, "--json"]
    if threads:
        command += ["--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def reference_distance(n: int, backend: str) -> float:
    """d_G between the references on ``backend``'s neighbours and on exact ones."""
    from basis.data.clusters import clustered_data
    from basis.graph import GraphConfig, sparse_affinity
    from basis.metrics import grassmann_distance
    from basis.spectral import sparse_spectral_embedding

    X, _ = clustered_data(n, 16, 10, 0)
    embeddings = [
        sparse_spectral_embedding(
            sparse_affinity(X, GraphConfig(n_neighbors=50, neighbors=b)), 10, on_disconnected="ignore"
        )[0]
        for b in ("exact", backend)
    ]
    return grassmann_distance(*embeddings)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (time_ax, memory_ax) = plt.subplots(1, 2, figsize=(9, 3.5))
    for backend in sorted({r["neighbors"] for r in rows}):
        mine = sorted((r for r in rows if r["neighbors"] == backend), key=lambda r: r["settings"]["n"])
        ns = [r["settings"]["n"] for r in mine]
        time_ax.loglog(ns, [r["seconds"] for r in mine], "o-", label=backend)
        memory_ax.loglog(ns, [r["peak_rss_mb"] / 1024 for r in mine], "o-", label=backend)
    time_ax.set(xlabel="n", ylabel="seconds", title="reference: total time")
    memory_ax.set(xlabel="n", ylabel="GB", title="peak RSS")
    time_ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def add_scaling_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, nargs="+", default=[70_000, 300_000, 1_000_000])
    parser.add_argument("--backend", default="faiss-ivf")
    parser.add_argument("--exact-up-to", type=int, default=300_000, help="largest n for the exact search")
    parser.add_argument("--threads", type=int, help="threads per run (default: every core)")
    parser.add_argument("--plot", type=Path, default=Path("results/bench/reference_scaling.png"))


def scaling(args: argparse.Namespace) -> int:
    """The analytic reference embedding's cost as n grows, by neighbour backend.

    Each (n, backend) runs as its own ``python -m basis bench reference`` process, so that
    its peak RSS is its own: clustered 16-d points, k = 50, K = 10. Prints a markdown table
    (kNN, graph, eigensolve, total, peak RSS, recall@k) and writes a log-log plot of time and
    memory against n. At the smallest n it also compares the two references: d_G between
    the embedding on FAISS neighbours and the one on exact neighbours.
    """
    rows = []
    print("| n | neighbours | kNN s | graph s | eigensolve s | total s | peak RSS GB | recall@50 |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.n:
        for backend in ("exact", args.backend):
            if backend == "exact" and n > args.exact_up_to:
                continue
            row = bench(n, backend, args.threads)
            rows.append(row)
            print(
                f"| {n:,} | {backend} | {row['knn_seconds']:.1f} | {row['graph_seconds']:.1f}"
                f" | {row['eigen_seconds']:.1f} | {row['seconds']:.1f} | {row['peak_rss_mb'] / 1024:.2f}"
                f" | {row['neighbor_recall']:.4f} |",
                flush=True,
            )
    plot(rows, args.plot)
    smallest = min(args.n)
    print(f"\nd_G between the {smallest:,}-point references on {args.backend} and exact neighbours:", end=" ")
    print(f"{reference_distance(smallest, args.backend):.2e}")
    print(f"plot: {args.plot}")
    return 0


def add_table_load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--columns", type=int, default=64)
    parser.add_argument("--formats", nargs="+", default=["npy", "npz"], choices=["npy", "npz", "csv"])
    parser.add_argument("--folder", type=Path, default=Path("results/bench/tables"))


#: One load in a fresh process: its seconds and its peak RSS above the RSS it starts from, as JSON.
ONE_LOAD = """
import json, sys, time
import numpy as np
from basis.catalog.data_sources import data_source
from basis.data.feature_tables import load_feature_table
from basis.data.own_sets import load_source
path, how = sys.argv[1], sys.argv[2]
label_column = "label" if path.endswith(".csv") else None

def rss(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field)) / 1024

open("/proc/self/clear_refs", "w").write("5")  # the peak RSS starts again from the current RSS
before = rss("VmRSS:")
start = time.perf_counter()
if how == "numpy":
    X = np.load(path)["X"] if path.endswith(".npz") else np.load(path)
elif how == "table":
    X = load_feature_table(path, label_column).X
else:  # as a run or the reference reads a data set of one's own: checked, split, hashed
    declaration = {"path": path, "n_components": 10, **({"label_column": label_column} if label_column else {})}
    data = load_source(data_source("table", declaration))
    X = (data.X_train, data.X_test)
for part in X if how == "source" else (X,):
    total = float(part.sum(dtype=np.float64))  # one pass over the points, as any use makes
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "peak_mb": rss("VmHWM:") - before}))
"""


def table_load(args: argparse.Namespace) -> int:
    """A large feature table loaded as the workflow loads one, against a bare ``numpy.load``.

    Writes a ``--rows`` x ``--columns`` float32 table (clustered points) in each format, then
    in fresh processes (best of 5), the page cache warm, times ``numpy.load`` of the array (plus one pass
    over it, as any use makes), :func:`basis.data.feature_tables.load_feature_table` (its
    checks included, plus the same pass) and :func:`basis.data.own_sets.load_source`, as the
    reference and the runs load a declared table (checked, split 80/20, its content hashed,
    then the pass over both splits), with each one's peak RSS above the interpreter's.
    The floor: at most 2x numpy's time and 2x the array's bytes.
    """
    import numpy as np

    from basis.data.clusters import clustered_data

    args.folder.mkdir(parents=True, exist_ok=True)
    X, y = clustered_data(args.rows, args.columns, 10, seed=0)
    X = X.astype(np.float32)
    array_mb = X.nbytes / 2**20
    print(f"| format | how | s | x numpy | peak MB | x array ({array_mb:.0f} MB) |")
    print("|---|---|---|---|---|---|")
    for name in args.formats:
        path = args.folder / f"table.{name}"
        if name == "npy":
            np.save(path, X)
        elif name == "npz":
            np.savez(path, X=X, y=y)
        else:
            import pandas as pd

            frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(args.columns)]).assign(label=y)
            frame.to_csv(path, index=False)
        base = float("nan")
        for how in ("numpy", "table", "source") if name != "csv" else ("table", "source"):
            runs = [subprocess.run([sys.executable, "-c", ONE_LOAD, str(path), how], capture_output=True, text=True,
                                   check=True) for _ in range(5)]  # fmt: skip
            best = min((json.loads(run.stdout) for run in runs), key=lambda r: r["seconds"])
            base = best["seconds"] if how == "numpy" else base
            print(
                f"| {name} | {how} | {best['seconds']:.2f} | {best['seconds'] / base:.2f} | {best['peak_mb']:.0f}"
                f" | {best['peak_mb'] / array_mb:.2f} |",
                flush=True,
            )
    return 0


PARTS = {"scaling": (add_scaling_arguments, scaling), "table-load": (add_table_load_arguments, table_load)}

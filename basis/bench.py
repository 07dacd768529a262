"""Speed benchmarks that print figures (not tests): ``python -m basis bench``."""

from __future__ import annotations

import resource
import time
from typing import Any

import numpy as np
import torch

from basis.device import resolve_device
from basis.estimators import BASiS
from basis.graph import GraphConfig, sparse_affinity
from basis.spectral import sparse_spectral_embedding


def clustered_data(n: int, dim: int = 16, n_clusters: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping Gaussian clusters, a stand-in for 16-d Siamese features."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(n_clusters, dim))
    labels = rng.integers(0, n_clusters, n)
    return (centres[labels] + rng.normal(size=(n, dim))).astype(np.float32), labels


def _fit_basis(
    batch_size: int, n_components: int, dim: int, n_neighbors: int, n_iter: int, device: str, seed: int, callback
) -> None:
    """BASiS on the benchmarks' clustered stand-in for Siamese features (25 anchors per class)."""
    X, y = clustered_data(max(20 * batch_size, 10_000), dim, n_components, seed)
    BASiS(
        n_components,
        graph=GraphConfig(n_neighbors=n_neighbors),
        batch_size=batch_size,
        n_iter=n_iter,
        anchors_per_class=25,
        device=device,
        seed=seed,
        callback=callback,
    ).fit(X, y)


def bench_step(
    batch_size: int = 512,
    n_components: int = 10,
    dim: int = 16,
    n_neighbors: int = 50,
    n_iter: int = 110,
    warmup: int = 10,
    device: str = "auto",
    seed: int = 0,
) -> dict[str, Any]:
    """Median wall time of one BASiS iteration and of its parts, in milliseconds, and what
    an iteration would make a CUDA host wait for (:func:`count_host_syncs`)."""
    records: list[dict[str, float]] = []
    record = lambda step, info: records.append(info)  # noqa: E731
    _fit_basis(batch_size, n_components, dim, n_neighbors, n_iter, device, seed, record)
    kept = records[warmup:]
    parts = sorted(k for k in kept[0] if k.startswith("ms_") and k != "ms_step")
    return {
        "host_syncs_per_iteration": count_host_syncs(batch_size, n_components, dim, n_neighbors, seed=seed),
        "ms_per_iteration": {
            "total": float(np.median([r["ms_step"] for r in kept])),
            **{k[3:]: float(np.median([r[k] for r in kept])) for k in parts},
        },
        "device": str(resolve_device(device)),
        "settings": {
            "batch_size": batch_size,
            "n_components": n_components,
            "dim": dim,
            "n_neighbors": n_neighbors,
            "iterations_timed": len(kept),
        },
        "note": "graph, eigensolve and alignment of batch t+1 run in a worker thread while the gradient step of"
        " batch t runs; total is the wall time per iteration",
    }


def count_host_syncs(
    batch_size: int = 512, n_components: int = 10, dim: int = 16, n_neighbors: int = 50, n_iter: int = 12, seed: int = 0
) -> dict[str, Any]:
    """What each BASiS iteration would make a CUDA host wait for (:mod:`basis.syncs`),
    counted on the CPU with one thread, so that the pipeline's stages run on this thread:
    the median over iterations of the total, and the kinds of the median iteration. The
    last iteration prepares no next batch and is left out."""
    from collections import Counter

    from basis.syncs import HostSyncCounter

    snapshots: list[Counter] = []
    budget = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with HostSyncCounter() as syncs:
            _fit_basis(
                batch_size,
                n_components,
                dim,
                n_neighbors,
                n_iter,
                "cpu",
                seed,
                lambda step, info: snapshots.append(Counter(syncs.counts)),
            )
    finally:
        torch.set_num_threads(budget)
    per_iteration = [after - before for before, after in zip(snapshots, snapshots[1:])][:-1]
    totals = [sum(c.values()) for c in per_iteration]
    median = sorted(range(len(totals)), key=totals.__getitem__)[len(totals) // 2]
    return {"total": totals[median], "by_kind": dict(sorted(per_iteration[median].items()))}


def bench_reference(
    n: int = 70_000,
    dim: int = 16,
    n_neighbors: int = 50,
    n_components: int = 10,
    device: str = "auto",
    seed: int = 0,
    neighbors: str = "exact",
) -> dict[str, Any]:
    """Wall time and peak memory of the whole-set analytic embedding, by stage, with the
    neighbour search's backend and (approximate backends) its recall@k."""
    X, _ = clustered_data(n, dim, n_components, seed)
    device_name = str(resolve_device(device))
    config = GraphConfig(n_neighbors=n_neighbors, neighbors=neighbors)
    report: dict[str, Any] = {}
    start = time.perf_counter()
    W = sparse_affinity(X, config, device=device_name, report=report)
    graph_seconds = time.perf_counter() - start
    start = time.perf_counter()
    sparse_spectral_embedding(W, n_components, operator="normalized", seed=seed)
    eigen_seconds = time.perf_counter() - start
    peak_device_mb = torch.cuda.max_memory_allocated() / 2**20 if device_name.startswith("cuda") else 0.0
    return {
        "seconds": graph_seconds + eigen_seconds,
        "knn_seconds": report["knn_seconds"],
        "graph_seconds": graph_seconds,
        "eigen_seconds": eigen_seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "peak_device_mb": peak_device_mb,
        "neighbors": neighbors,
        "neighbor_recall": report.get("neighbor_recall", 1.0),
        "device": device_name,
        "settings": {"n": n, "dim": dim, "n_neighbors": n_neighbors, "n_components": n_components},
        "note": "seconds = graph (kNN + kernel + CSR assembly) + eigensolve (ARPACK on the CPU); recall@k of the"
        " neighbour lists on 1,000 rows against the exact search (1.0: exact)",
    }

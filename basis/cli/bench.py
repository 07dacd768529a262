"""Speed benchmarks that print figures (not tests): ``python -m basis bench``."""

from __future__ import annotations

import resource
import time
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch

from basis.data.clusters import clustered_data, step_data
from basis.estimators import BASiS
from basis.graph import GraphConfig
from basis.references import analytic_embedding
from basis.runtime import device as devices
from basis.runtime.device import resolve_device
from basis.runtime.threads import one_torch_thread


def _basis_on_clusters(
    batch_size: int,
    n_components: int,
    dim: int,
    n_neighbors: int,
    n_iter: int,
    device: str,
    seed: int,
    callback,
    eigensolver: str = "auto",
    cuda_graphs: bool = False,
    data: str = "clusters",
) -> tuple[BASiS, np.ndarray, np.ndarray]:
    """BASiS (25 anchors per class) and ``bench step``'s data ``data`` (the clustered stand-in
    for Siamese features by default; :func:`step_data`)."""
    X, y = step_data(data, batch_size, dim, n_components, seed)
    estimator = BASiS(
        n_components,
        graph=GraphConfig(n_neighbors=n_neighbors),
        batch_size=batch_size,
        n_iter=n_iter,
        anchors_per_class=25,
        device=device,
        seed=seed,
        callback=callback,
        eigensolver=eigensolver,
        cuda_graphs=cuda_graphs,
    )
    return estimator, X, y


def _fit_basis(estimator: BASiS, X: np.ndarray, y: np.ndarray, window: dict[str, Any] | None = None) -> BASiS:
    """``estimator`` fitted on ``X``, ``y`` (from :func:`_basis_on_clusters`).

    With ``window`` (``{"start_at": unix time, "warmup": steps}``), the warm-up steps run
    first, then the estimator waits until ``start_at`` and times the remaining steps on
    the wall clock; ``window`` receives ``start``, ``end`` and ``step_ends`` (unix times),
    so that processes started together can be compared over the time they all ran."""
    step_ms: list[float] = []
    if window is not None:
        outer = estimator.callback

        def callback(step: int, info: dict[str, float]) -> None:
            step_ms.append(info["ms_step"])
            if outer is not None:
                outer(step, info)

        estimator.set_params(callback=callback)
    if window is None:
        return estimator.fit(X, y)
    estimator.start(X, y)
    estimator.fit_steps(window["warmup"])
    devices.synchronize(estimator.device_)
    time.sleep(max(0.0, window["start_at"] - time.time()))
    start = time.time()
    estimator.fit_steps(estimator.n_iter - window["warmup"])
    devices.synchronize(estimator.device_)
    end = time.time()
    # Each step's wall time is measured in the loop; their running sum, scaled to the
    # window's measured length, places each step's end on the clock.
    ms = np.array(step_ms[window["warmup"] :])
    ends = start + np.cumsum(ms) * (end - start) / max(ms.sum(), 1e-9)
    window.update(start=start, end=end, step_ends=ends.tolist())
    return estimator.finish()


def bench_step(
    batch_size: int = 512,
    n_components: int = 10,
    dim: int = 16,
    n_neighbors: int = 50,
    n_iter: int = 110,
    warmup: int = 10,
    device: str = "auto",
    seed: int = 0,
    eigensolver: str = "auto",
    cuda_graphs: bool = False,
    compare: bool = False,
    profile: bool = False,
    start_at: float | None = None,
    data: str = "clusters",
) -> dict[str, Any]:
    """Median wall time of one BASiS iteration and of its parts, in milliseconds, on
    ``data`` (:data:`basis.catalog.STEP_DATA`), with RANSAC's hypotheses per batch (median and most), the
    solver used, the parts replayed from CUDA graphs, what an iteration would make a CUDA
    host wait for (:func:`count_host_syncs`) and, on CUDA, the waits torch's sync debug
    mode reports per iteration. ``compare`` times the exact and the subspace eigensolver
    (and on CUDA the subspace one with ``cuda_graphs``) one after the other in this
    process; ``profile`` adds the top device kernels (torch.profiler). ``start_at`` (a
    unix time) times the steps after the warm-up from that moment on, for processes
    started together (see :func:`_fit_basis`)."""
    resolved = resolve_device(device)
    variants = [(eigensolver, cuda_graphs)]
    if compare:
        variants = [("exact", False), ("subspace", False)] + [("subspace", True)] * devices.captures_on(resolved)
    timings = {
        solver + " + cuda graphs" * graphs: _time_steps(
            batch_size,
            n_components,
            dim,
            n_neighbors,
            n_iter,
            warmup,
            str(resolved),
            seed,
            solver,
            graphs,
            start_at,
            data,
        )
        for solver, graphs in variants
    }
    result: dict[str, Any] = {
        "host_syncs_per_iteration": count_host_syncs(batch_size, n_components, dim, n_neighbors, seed=seed),
        **(next(iter(timings.values())) if not compare else {"compare": timings}),
        "device": str(resolved),
        "device_name": devices.device_name(resolved),
        "settings": {
            "data": data,
            "batch_size": batch_size,
            "n_components": n_components,
            "dim": dim,
            "n_neighbors": n_neighbors,
            "iterations_timed": n_iter - warmup,
        },
        "note": "graph, eigensolve and alignment of batch t+1 run in a worker thread while the gradient step of"
        " batch t runs; total is the wall time per iteration; parts are device time (CUDA events) on CUDA",
    }
    if profile and devices.is_cuda(resolved):
        result.update(_top_kernels(batch_size, n_components, dim, n_neighbors, str(resolved), seed, *variants[-1]))
    return result


def _time_steps(
    batch_size: int,
    n_components: int,
    dim: int,
    n_neighbors: int,
    n_iter: int,
    warmup: int,
    device: str,
    seed: int,
    eigensolver: str,
    cuda_graphs: bool = False,
    start_at: float | None = None,
    data: str = "clusters",
) -> dict[str, Any]:
    """ms per iteration and part, RANSAC's hypotheses, the solver used, the parts replayed from CUDA graphs,
    on CUDA the sync-debug waits and, with ``start_at``, the timed window's clock. A
    window runs as users do, without torch's sync debug mode, whose warnings cost host
    time at every wait and would leave other processes gaps that users do not."""
    import warnings

    records: list[dict[str, float]] = []
    window = None if start_at is None else {"start_at": start_at, "warmup": warmup}
    debug = devices.is_cuda(device) and window is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with devices.warn_on_syncs(torch.device(device)) if debug else nullcontext():
            model = _fit_basis(
                *_basis_on_clusters(
                    batch_size,
                    n_components,
                    dim,
                    n_neighbors,
                    n_iter,
                    device,
                    seed,
                    lambda step, info: records.append(info),
                    eigensolver,
                    cuda_graphs,
                    data,
                ),
                window,
            )
    kept = records[warmup:]
    parts = sorted(k for k in kept[0] if k.startswith("ms_") and k != "ms_step")
    waits = [w for w in caught if "synchroniz" in str(w.message).lower()]
    return {
        "ms_per_iteration": {
            "total": float(np.median([r["ms_step"] for r in kept])),
            **{k[3:]: float(np.median([r[k] for r in kept])) for k in parts},
        },
        "ransac_hypotheses": {
            "median": float(np.median([r.get("ransac_hypotheses", 0.0) for r in kept])),
            "max": float(max(r.get("ransac_hypotheses", 0.0) for r in kept)),
        },
        "eigensolver": "subspace" if model.subspace_solver_ is not None else "exact",
        "exact_redos": model.n_exact_redos_,
        "cuda_graphs": {
            name: segment.failure or f"{segment.replays} replays" for name, segment in model.captured_segments().items()
        },
        "cuda_sync_warnings_per_iteration": len(waits) / n_iter if debug else None,
        "cuda_sync_warning_sources": sorted({str(w.message).split("\n")[0][:120] for w in waits})[:10],
        **({"window": {k: window[k] for k in ("start", "end", "step_ends")}} if window else {}),
    }


def _top_kernels(
    batch_size: int,
    n_components: int,
    dim: int,
    n_neighbors: int,
    device: str,
    seed: int,
    eigensolver: str = "auto",
    cuda_graphs: bool = False,
) -> dict[str, Any]:
    """The 15 device kernels with the most CUDA time over 30 iterations after 10 of
    warm-up, and the device's busy time per iteration (every kernel's own time summed):
    what processes sharing one device have to fit into its time."""
    from torch.profiler import ProfilerActivity, profile

    steps = 30
    estimator, X, y = _basis_on_clusters(
        batch_size, n_components, dim, n_neighbors, steps + 10, device, seed, None, eigensolver, cuda_graphs
    )
    estimator.start(X, y)
    estimator.fit_steps(10)
    devices.synchronize(estimator.device_)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        estimator.fit_steps(steps)
        devices.synchronize(estimator.device_)
    events = prof.key_averages()
    busy_ms = sum(getattr(e, "self_device_time_total", 0.0) for e in events) / 1e3
    top = sorted(events, key=lambda e: getattr(e, "self_device_time_total", 0.0), reverse=True)[:15]
    return {
        "device_busy_ms_per_iteration": busy_ms / steps,
        "top_kernels": [
            {"name": e.key[:80], "calls": e.count, "device_ms": getattr(e, "self_device_time_total", 0.0) / 1e3}
            for e in top
        ],
    }


def count_host_syncs(
    batch_size: int = 512, n_components: int = 10, dim: int = 16, n_neighbors: int = 50, n_iter: int = 12, seed: int = 0
) -> dict[str, Any]:
    """What the BASiS iterations would make a CUDA host wait for (:mod:`basis.runtime.syncs`),
    counted on the CPU with one thread, so that the pipeline's stages run on this thread,
    on the path CUDA takes (``eigensolver="subspace"``, what ``auto`` picks there). The
    counts of every iteration after the first (set-up) are summed and divided by their
    number: losses are read in blocks (:attr:`~basis.estimators.base.SpectralEstimator.LOSS_BLOCK`
    steps), so a per-iteration median would hide them. ``total`` is the issue's audit
    (value reads, data-dependent shapes, copies to the host, numpy); ``linalg_checks`` the
    decompositions that wait for the device to check convergence; ``exempt`` the host-side
    step counters of ``torch.optim``'s non-fused Adam (none: the estimators use neither)."""
    from basis.runtime.syncs import HostSyncCounter

    marks: list[tuple] = []

    def mark(syncs: HostSyncCounter) -> None:
        marks.append((sum(syncs.counts.values()), dict(syncs.counts), dict(syncs.linalg_checks), dict(syncs.exempt)))

    with one_torch_thread(), HostSyncCounter() as syncs:
        estimator, X, y = _basis_on_clusters(
            batch_size, n_components, dim, n_neighbors, n_iter, "cpu", seed, None, eigensolver="subspace"
        )
        estimator.start(X, y)
        estimator.step()  # the first step, which sets up the subspace solver's cut
        mark(syncs)
        estimator.fit_steps(n_iter - 1)
        mark(syncs)
    steps = n_iter - 1
    (before, kinds_before, linalg_before, exempt_before), (after, kinds, linalg, exempt) = marks

    def per_step(now: dict, then: dict) -> dict[str, float]:
        return {k: (v - then.get(k, 0)) / steps for k, v in sorted(now.items()) if v - then.get(k, 0)}

    return {
        "total": (after - before) / steps,
        "by_kind": per_step(kinds, kinds_before),
        "linalg_checks": per_step(linalg, linalg_before),
        "exempt": per_step(exempt, exempt_before),
        "iterations": steps,
        "exact_redos": estimator.n_exact_redos_,
    }


def bench_reference(
    n: int = 70_000,
    dim: int = 16,
    n_neighbors: int = 50,
    n_components: int = 10,
    device: str = "auto",
    seed: int = 0,
    neighbors: str = "exact",
    eigensolver: str = "auto",
    topk_block: int | None = None,
    spread: float = 3.0,
    save_embedding: str | None = None,
) -> dict[str, Any]:
    """Wall time and peak memory of the whole-set analytic embedding
    (:func:`~basis.references.analytic_embedding`), by stage, with the neighbour search's
    backend and (approximate backends) its recall@k, and the eigensolver; the embedding
    is written to ``save_embedding`` (.npy) when given, to compare solvers."""
    X, _ = clustered_data(n, dim, n_components, seed, spread)
    resolved = resolve_device(device)
    device_name = str(resolved)
    devices.reset_peak_memory(resolved)
    settings = {
        "graph": GraphConfig(n_neighbors=n_neighbors, neighbors=neighbors).to_dict(),
        "operator": "normalized",
        "drop_trivial": False,
    }
    report: dict[str, Any] = {}
    U = analytic_embedding(
        X, settings, n_components, device=device_name, report=report, eigensolver=eigensolver, topk_block=topk_block
    )
    if save_embedding:
        np.save(save_embedding, U)
    peak_device_mb = devices.peak_memory_mb(resolved)
    return {
        "seconds": report["graph_seconds"] + report["eigen_seconds"],
        "knn_seconds": report["knn_seconds"],
        "graph_seconds": report["graph_seconds"],
        "eigen_seconds": report["eigen_seconds"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "peak_device_mb": peak_device_mb,
        "neighbors": neighbors,
        "neighbor_recall": report.get("neighbor_recall", 1.0),
        "eigensolver": report["eigensolver"],
        "certified_by": report["certificate"]["solver"],
        "certificate_eigengap": report["certificate"]["eigengap"],
        "topk_block": topk_block,
        "device": device_name,
        "settings": {"n": n, "dim": dim, "n_neighbors": n_neighbors, "n_components": n_components, "spread": spread},
        "note": "seconds = graph (kNN + kernel + assembly, on the host for arpack, on the device for chebyshev)"
        " + eigensolve (with its certificate, and a second solver where the first fails it); recall@k of the"
        " neighbour lists on 1,000 rows against the exact search (1.0: exact)",
    }

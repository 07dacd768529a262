"""Gaussian kNN affinity graphs, dense on a batch and sparse for a whole data set.

The paper builds the adjacency matrix with a Gaussian kernel (``Gaussian kernel``),
restricted to each node's k nearest neighbours. The authors' code differs from the
printed equation in the kernel's denominator and in how sigma is chosen; every such
choice is a field of :class:`GraphConfig`.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from basis.errors import InputError
from basis.graph.config import GraphConfig
from basis.runtime import device as devices

#: Largest block of scores one chunk of the kNN holds on the host (bytes): the chunk of
#: rows shrinks as n grows so that memory stays flat (at 1M points, 2,048 rows would be 8 GB
#: of scores). Sets of up to ~130k float32 points keep full 2,048-row chunks.
KNN_BLOCK_BYTES = 2**30
#: Share of a GPU's free memory one chunk's scores may take (top-k and the rest need room too).
DEVICE_BLOCK_SHARE = 0.25


def score_block_bytes(device: torch.device) -> int:
    """Bytes one kNN chunk's scores may take on ``device``: a quarter of the memory free on
    a GPU now (so that a 1M-point set gets chunks of thousands of rows, not hundreds), and
    :data:`KNN_BLOCK_BYTES` on the host, or less when the host has less available."""
    free = devices.free_memory(device)
    if free is not None:
        return int(free * DEVICE_BLOCK_SHARE)
    import psutil

    return int(min(KNN_BLOCK_BYTES, psutil.virtual_memory().available // 4))


def knn(
    X: torch.Tensor,
    n_neighbors: int,
    *,
    queries: torch.Tensor | None = None,
    chunk_size: int = 2048,
    max_block_bytes: int | None = None,
    topk_block: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact k nearest neighbours among the rows of ``X`` of every row (or of the rows
    ``queries``), the row itself included, first.

    Brute force in chunks of rows through one matrix product per chunk, so it runs on
    whatever device ``X`` lives on; a chunk has at most ``chunk_size`` rows and its scores
    at most ``max_block_bytes`` (default: :func:`score_block_bytes`); ``topk_block``
    selects in two stages (:func:`smallest_k`). Returns Euclidean
    distances and int64 indices, both of shape (number of queries, n_neighbors), sorted by
    distance.
    """
    n = X.shape[0]
    if n_neighbors > n:
        raise InputError(f"n_neighbors={n_neighbors} exceeds the number of points {n}")
    queries = torch.arange(n, device=X.device) if queries is None else queries.to(X.device)
    max_block_bytes = score_block_bytes(X.device) if max_block_bytes is None else max_block_bytes
    chunk_size = max(1, min(chunk_size, max_block_bytes // (n * X.element_size())))
    sq_norms = (X * X).sum(dim=1)
    dists, indices = [], []
    for start in range(0, len(queries), chunk_size):
        chunk = queries[start : start + chunk_size]
        # ||y||^2 - 2 x.y in one fused pass; ||x||^2 is constant along a row, so it is
        # added to the k winners only.
        scores = torch.addmm(sq_norms[None, :], X[chunk], X.T, alpha=-2.0)
        # A point is its own nearest neighbour even where rounding says otherwise (the
        # value a device tensor: a Python scalar is copied from the host, which a CUDA
        # graph cannot hold).
        scores.index_put_((torch.arange(len(chunk), device=X.device), chunk), scores.new_full((), -torch.inf))
        values, idx = smallest_k(scores, n_neighbors, topk_block)
        values = values + sq_norms[chunk, None]
        values[:, 0] = 0.0
        dists.append(values.clamp_min_(0.0).sqrt_())
        indices.append(idx)
    return torch.cat(dists), torch.cat(indices)


def smallest_k(scores: torch.Tensor, k: int, block: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` smallest entries of every row of ``scores`` and their columns, sorted.

    With ``block`` (at least k), in two stages: the k smallest of every run of ``block``
    columns, then the k smallest of those candidates. The result is the same set (a
    row's k smallest are each among their block's k smallest; among equal scores the
    columns may differ), from a selection over n / block * k candidates instead of n
    columns: the second stage is short when a row is a million columns wide."""
    c, n = scores.shape
    if block is None or n < 2 * block:
        return torch.topk(scores, k, dim=1, largest=False, sorted=True)
    if block < k:
        raise InputError(f"topk_block={block} must be at least the number of neighbours {k}")
    whole = n // block * block
    values, columns = torch.topk(scores.unfold(1, block, block), k, dim=2, largest=False, sorted=False)
    columns = columns + torch.arange(0, whole, block, device=scores.device)[None, :, None]
    values, columns = values.reshape(c, -1), columns.reshape(c, -1)
    if whole < n:
        rest_values, rest_columns = torch.topk(scores[:, whole:], min(k, n - whole), dim=1, largest=False)
        values, columns = torch.cat([values, rest_values], 1), torch.cat([columns, rest_columns + whole], 1)
    values, position = torch.topk(values, k, dim=1, largest=False, sorted=True)
    return values, columns.gather(1, position)


def faiss_knn(
    X: np.ndarray,
    n_neighbors: int,
    backend: str,
    *,
    probe: int | None = None,
    lists: int | None = None,
    device: torch.device | None = None,
    report: dict[str, Any] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Approximate k nearest neighbours of every row of ``X`` through a FAISS index
    (``backend`` ``faiss-ivf`` or ``faiss-hnsw``, see :class:`GraphConfig`), in the format
    of :func:`knn`: the row itself first (at distance 0), then its neighbours by distance.
    A row whose probed lists held fewer than k points gets its exact neighbours.

    The IVF index runs on ``device`` when it is a GPU and FAISS's GPU build is installed
    (``faiss-gpu``: FAISS has no GPU HNSW); otherwise on the CPU, with the threads this
    process may use. ``report["faiss_device"]`` says which."""
    try:
        import faiss
    except ImportError:
        raise InputError(
            f"graph.neighbors={backend} needs FAISS: pip install '.[faiss]' (faiss-cpu), or use neighbors=exact"
        ) from None
    faiss.omp_set_num_threads(torch.get_num_threads())
    X = np.ascontiguousarray(X, dtype=np.float32)
    n, dim = X.shape
    if backend == "faiss-ivf":
        lists = lists or max(1, min(n // 39, round(4 * np.sqrt(n))))  # FAISS wants >= 39 points per list
        index = faiss.IndexIVFFlat(faiss.IndexFlatL2(dim), dim, lists)
    else:
        index = faiss.IndexHNSWFlat(dim, 32)
        index.hnsw.efSearch = max(probe or 128, n_neighbors)
    index, gpu_resources = _faiss_on_gpu(faiss, index, device, backend)
    if report is not None:
        report["faiss_device"] = "cpu" if gpu_resources is None else str(device)
    if backend == "faiss-ivf":
        index.train(X)  # k-means on a seeded sample: the same lists every time
        index.nprobe = min(probe or 64, lists)
    index.add(X)
    # One neighbour more than asked, so that the row itself can be set first and dropped
    # from the rest wherever the index returns it.
    squared, found = index.search(X, n_neighbors + 1)
    own = np.arange(n)[:, None]
    squared = np.where(found == own, np.inf, squared)
    order = np.argsort(squared, axis=1, kind="stable")[:, : n_neighbors - 1]
    found = np.concatenate([own, np.take_along_axis(found, order, axis=1)], axis=1)
    squared = np.concatenate([np.zeros((n, 1), np.float32), np.take_along_axis(squared, order, axis=1)], axis=1)
    dists, idx = torch.from_numpy(squared).clamp_min_(0.0).sqrt_(), torch.from_numpy(found.astype(np.int64))
    short = np.flatnonzero((found < 0).any(axis=1) | ~np.isfinite(squared).all(axis=1))
    if short.size:
        dists[short], idx[short] = knn(torch.from_numpy(X), n_neighbors, queries=torch.from_numpy(short))
    return dists, idx


def _faiss_on_gpu(faiss, index, device: torch.device | None, backend: str):
    """``index`` moved to the GPU ``device`` where FAISS's GPU build can take it, with the
    resources that must outlive it; ``(index, None)`` otherwise."""
    gpu_build = hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    if device is None or not devices.is_cuda(device) or backend != "faiss-ivf" or not gpu_build:
        return index, None
    resources = faiss.StandardGpuResources()
    return faiss.index_cpu_to_gpu(resources, device.index or 0, index), resources


def neighbor_recall(X: torch.Tensor, idx: torch.Tensor, *, sample: int = 1000, seed: int = 0) -> float:
    """Recall@k of neighbour lists ``idx`` against the exact ones, on ``sample`` random rows:
    the mean share of each row's k exact neighbours that the list holds."""
    n, k = idx.shape
    rows = torch.from_numpy(np.random.default_rng(seed).choice(n, min(sample, n), replace=False))
    _, exact = knn(X, k, queries=rows.to(X.device))
    found = idx[rows.to(idx.device)].to(exact.device)
    hits = (found.unsqueeze(2) == exact.unsqueeze(1)).any(dim=2).sum()
    return float(hits) / (len(rows) * k)


def kernel_bandwidth(neighbor_dists: torch.Tensor, config: GraphConfig) -> torch.Tensor:
    """sigma per node (shape (n, 1)) from the sorted neighbour distances."""
    n = neighbor_dists.shape[0]
    if config.scale == "fixed":
        return torch.full((n, 1), float(config.sigma), dtype=neighbor_dists.dtype, device=neighbor_dists.device)
    scale_dist = neighbor_dists[:, config.scale_neighbor]
    if config.scale == "global":
        scale_dist = scale_dist.median().expand(n)
    # Duplicate points give a zero scale; fall back to the smallest positive one (to 1
    # where none is positive), with no data-dependent shape.
    floor = torch.where(scale_dist > 0, scale_dist, torch.inf).min()
    floor = torch.where(torch.isinf(floor), torch.ones_like(floor), floor)
    return torch.where(scale_dist > 0, scale_dist, floor).unsqueeze(1)


def gaussian_weights(neighbor_dists: torch.Tensor, sigma: torch.Tensor, kernel: str) -> torch.Tensor:
    """Edge weights of the Gaussian kernel (``Gaussian kernel``) on kNN distances.

    ``kernel="paper"`` is exp(-d^2 / (2 sigma^2)) as in the equation, ``"code"`` is
    exp(-d^2 / sigma^2) as in the authors' code.
    """
    denom = 2.0 * sigma**2 if kernel == "paper" else sigma**2
    return torch.exp(-(neighbor_dists**2) / denom)


def dense_affinity(X: torch.Tensor, config: GraphConfig) -> torch.Tensor:
    """Symmetric kNN Gaussian affinity of a batch as a dense (m, m) tensor."""
    m = X.shape[0]
    if config.n_neighbors >= m:
        raise InputError(f"n_neighbors={config.n_neighbors} must be smaller than the batch size {m}")
    # One chunk holds the whole batch (m x m scores): no need to ask the device for room.
    dists, idx = knn(X, config.n_neighbors, chunk_size=m, max_block_bytes=m * m * X.element_size())
    weights = gaussian_weights(dists, kernel_bandwidth(dists, config), config.kernel)
    W = torch.zeros((m, m), dtype=X.dtype, device=X.device)
    W.scatter_(1, idx, weights)
    W = (W + W.T) / 2 if config.symmetrize == "mean" else torch.maximum(W, W.T)
    if not config.self_loops:
        W.fill_diagonal_(0.0)
    return W


def _neighbor_weights(
    X: np.ndarray | torch.Tensor,
    config: GraphConfig,
    device: str,
    report: dict[str, Any] | None,
    topk_block: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every node's kNN edges of the whole set: float64 Gaussian weights and int64 target
    nodes, both (n, k) on ``device``, by ``config.neighbors``; fills ``report`` (see
    :func:`sparse_affinity`)."""
    X_t = torch.as_tensor(np.asarray(X, dtype=np.float32), device=device)
    n = X_t.shape[0]
    if config.n_neighbors >= n:
        raise InputError(f"n_neighbors={config.n_neighbors} must be smaller than the number of points {n}")
    start = time.perf_counter()
    if config.neighbors == "exact":
        dists, idx = knn(X_t, config.n_neighbors, topk_block=topk_block)
    else:
        dists, idx = faiss_knn(
            X_t.cpu().numpy(),
            config.n_neighbors,
            config.neighbors,
            probe=config.faiss_probe,
            lists=config.faiss_lists,
            device=X_t.device,
            report=report,
        )
        dists, idx = dists.to(X_t.device), idx.to(X_t.device)
    devices.synchronize(X_t.device)  # the timer stops when the device has finished
    if report is not None:
        report["knn_seconds"] = time.perf_counter() - start
        report["neighbors"] = config.neighbors
        if config.neighbors != "exact":
            report["neighbor_recall"] = neighbor_recall(X_t, idx)
    dists = dists.double()
    return gaussian_weights(dists, kernel_bandwidth(dists, config), config.kernel), idx


def sparse_affinity(
    X: np.ndarray | torch.Tensor,
    config: GraphConfig,
    *,
    device: str = "cpu",
    report: dict[str, Any] | None = None,
    topk_block: int | None = None,
) -> sp.csr_matrix:
    """Symmetric kNN Gaussian affinity of a whole data set as a scipy CSR matrix.

    The neighbours come from ``config.neighbors``: the exact kNN in float32 chunks on
    ``device`` (a GPU where present), or a FAISS index on the CPU; the graph itself is
    assembled in float64 on the CPU (:func:`device_affinity` keeps it on the device).
    ``report``, when given, receives ``knn_seconds``, ``neighbors`` and, for an
    approximate search, ``neighbor_recall`` (recall@k on 1,000 rows against the exact
    search). ``topk_block``: see :func:`knn`.
    """
    weights, idx = _neighbor_weights(X, config, device, report, topk_block)
    n = weights.shape[0]
    rows = np.repeat(np.arange(n, dtype=np.int64), config.n_neighbors)
    W = sp.csr_matrix((weights.cpu().numpy().ravel(), (rows, idx.cpu().numpy().ravel())), shape=(n, n))
    W = (W + W.T) / 2 if config.symmetrize == "mean" else W.maximum(W.T)
    W = W.tocsr()
    if not config.self_loops:
        W.setdiag(0.0)
        W.eliminate_zeros()
    return W


def device_affinity(
    X: np.ndarray | torch.Tensor,
    config: GraphConfig,
    *,
    device: str = "cpu",
    report: dict[str, Any] | None = None,
    topk_block: int | None = None,
) -> torch.Tensor:
    """:func:`sparse_affinity` assembled on ``device``: the same graph (to rounding) as a
    float64 sparse CSR tensor, built with no host round trip. Each directed kNN edge and
    its reverse get one int64 key (row * n + column); one sort of the keys merges the two
    directions, whose weights are averaged (``symmetrize="mean"``: each adds half, which
    is exact) or maxed, by a scatter over the merged keys. ``topk_block``: see
    :func:`knn`."""
    weights, idx = _neighbor_weights(X, config, device, report, topk_block)
    n, k = weights.shape
    rows = torch.arange(n, device=idx.device).repeat_interleave(k)
    cols = idx.reshape(-1)
    keys = torch.cat([rows * n + cols, cols * n + rows])
    values = weights.reshape(-1)
    values = torch.cat([values, values]) / (2.0 if config.symmetrize == "mean" else 1.0)
    del rows, cols, idx, weights
    keys, merged = torch.unique(keys, sorted=True, return_inverse=True)
    reduce = "sum" if config.symmetrize == "mean" else "amax"
    values = torch.zeros(len(keys), dtype=values.dtype, device=values.device).scatter_reduce_(
        0, merged, values, reduce, include_self=False
    )
    del merged
    rows, cols = keys // n, keys % n
    if not config.self_loops:
        off_diagonal = rows != cols
        rows, cols, values = rows[off_diagonal], cols[off_diagonal], values[off_diagonal]
    row_starts = torch.zeros(n + 1, dtype=torch.int64, device=values.device)
    row_starts[1:] = torch.bincount(rows, minlength=n).cumsum(0)
    return csr_tensor(row_starts, cols, values, (n, n))


def csr_rows(W: torch.Tensor) -> torch.Tensor:
    """The row of every stored entry of a sparse CSR tensor (its COO row indices)."""
    return torch.repeat_interleave(torch.arange(W.shape[0], device=W.device), W.crow_indices().diff())


def csr_tensor(row_starts: torch.Tensor, columns: torch.Tensor, values: torch.Tensor, shape) -> torch.Tensor:
    """A torch sparse CSR tensor from parts built here (valid by construction, so its
    invariants are not checked again), without torch's notice that CSR is in beta."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)
        return torch.sparse_csr_tensor(row_starts, columns, values, shape, check_invariants=False)

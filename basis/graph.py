"""Gaussian kNN affinity graphs, dense on a batch and sparse for a whole data set.

The paper builds the adjacency matrix with a Gaussian kernel (``Gaussian kernel``),
restricted to each node's k nearest neighbours. The authors' code differs from the
printed equation in the kernel's denominator and in how sigma is chosen; every such
choice is a field of :class:`GraphConfig`.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
import torch

from basis.errors import InputError
from basis.settings import GraphConfig

#: Largest block of scores one chunk of the kNN holds (bytes): the chunk of rows shrinks as
#: n grows so that memory stays flat (at 1M points, 2,048 rows would be 8 GB of scores).
#: Sets of up to ~130k float32 points keep full 2,048-row chunks.
KNN_BLOCK_BYTES = 2**30


def knn(
    X: torch.Tensor, n_neighbors: int, *, chunk_size: int = 2048, max_block_bytes: int = KNN_BLOCK_BYTES
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact k nearest neighbours of every row of ``X`` (itself included, first).

    Brute force in chunks of rows through one matrix product per chunk, so it runs on
    whatever device ``X`` lives on; a chunk has at most ``chunk_size`` rows and its scores
    at most ``max_block_bytes``. Returns Euclidean distances and int64 indices, both of
    shape (n, n_neighbors), sorted by distance.
    """
    n = X.shape[0]
    if n_neighbors > n:
        raise InputError(f"n_neighbors={n_neighbors} exceeds the number of points {n}")
    chunk_size = max(1, min(chunk_size, max_block_bytes // (n * X.element_size())))
    sq_norms = (X * X).sum(dim=1)
    dists, indices = [], []
    for start in range(0, n, chunk_size):
        rows = X[start : start + chunk_size]
        # ||y||^2 - 2 x.y in one fused pass; ||x||^2 is constant along a row, so it is
        # added to the k winners only.
        scores = torch.addmm(sq_norms[None, :], rows, X.T, alpha=-2.0)
        # A point is its own nearest neighbour even where rounding says otherwise.
        own = torch.arange(rows.shape[0], device=X.device)
        scores[own, own + start] = -torch.inf
        values, idx = torch.topk(scores, n_neighbors, dim=1, largest=False, sorted=True)
        values = values + sq_norms[start : start + chunk_size, None]
        values[:, 0] = 0.0
        dists.append(values.clamp_min_(0.0).sqrt_())
        indices.append(idx)
    return torch.cat(dists), torch.cat(indices)


def kernel_bandwidth(neighbor_dists: torch.Tensor, config: GraphConfig) -> torch.Tensor:
    """sigma per node (shape (n, 1)) from the sorted neighbour distances."""
    n = neighbor_dists.shape[0]
    if config.scale == "fixed":
        return torch.full((n, 1), float(config.sigma), dtype=neighbor_dists.dtype, device=neighbor_dists.device)
    scale_dist = neighbor_dists[:, config.scale_neighbor]
    if config.scale == "global":
        scale_dist = scale_dist.median().expand(n)
    # Duplicate points give a zero scale; fall back to the smallest positive one.
    positive = scale_dist[scale_dist > 0]
    floor = positive.min() if positive.numel() else torch.ones((), dtype=scale_dist.dtype, device=scale_dist.device)
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
    dists, idx = knn(X, config.n_neighbors, chunk_size=m)
    weights = gaussian_weights(dists, kernel_bandwidth(dists, config), config.kernel)
    W = torch.zeros((m, m), dtype=X.dtype, device=X.device)
    W.scatter_(1, idx, weights)
    W = (W + W.T) / 2 if config.symmetrize == "mean" else torch.maximum(W, W.T)
    if not config.self_loops:
        W.fill_diagonal_(0.0)
    return W


def sparse_affinity(
    X: np.ndarray | torch.Tensor, config: GraphConfig, *, device: str = "cpu", timings: dict[str, float] | None = None
) -> sp.csr_matrix:
    """Symmetric kNN Gaussian affinity of a whole data set as a scipy CSR matrix.

    The exact kNN runs in float32 chunks on ``device`` (a GPU where present); the
    graph itself is assembled in float64 on the CPU.
    """
    X_t = torch.as_tensor(np.asarray(X, dtype=np.float32), device=device)
    n = X_t.shape[0]
    if config.n_neighbors >= n:
        raise InputError(f"n_neighbors={config.n_neighbors} must be smaller than the number of points {n}")
    start = time.perf_counter()
    dists, idx = knn(X_t, config.n_neighbors)
    if timings is not None:
        timings["knn_seconds"] = time.perf_counter() - start
    dists = dists.double()
    weights = gaussian_weights(dists, kernel_bandwidth(dists, config), config.kernel)
    rows = np.repeat(np.arange(n, dtype=np.int64), config.n_neighbors)
    W = sp.csr_matrix((weights.cpu().numpy().ravel(), (rows, idx.cpu().numpy().ravel())), shape=(n, n))
    W = (W + W.T) / 2 if config.symmetrize == "mean" else W.maximum(W.T)
    W = W.tocsr()
    if not config.self_loops:
        W.setdiag(0.0)
        W.eliminate_zeros()
    return W

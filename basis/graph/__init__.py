"""Gaussian kNN affinity graphs, dense on a batch and sparse for a whole data set.

:class:`GraphConfig` (:mod:`basis.graph.config`) says how a graph is built and imports no
torch, so that a config is checked at the workflow's parse time; the graphs themselves
(:mod:`basis.graph.affinity`) load on first use.
"""

from importlib import import_module

from basis.graph.config import NEIGHBOR_BACKENDS, GraphConfig

_AFFINITY = (
    "csr_rows",
    "csr_tensor",
    "dense_affinity",
    "device_affinity",
    "faiss_knn",
    "gaussian_weights",
    "kernel_bandwidth",
    "knn",
    "neighbor_recall",
    "score_block_bytes",
    "smallest_k",
    "sparse_affinity",
)
__all__ = ["NEIGHBOR_BACKENDS", "GraphConfig", *_AFFINITY]


def __getattr__(name: str):
    if name not in _AFFINITY:
        raise AttributeError(f"module 'basis.graph' has no attribute {name!r}")
    return getattr(import_module("basis.graph.affinity"), name)

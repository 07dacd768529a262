"""Stand-ins of Siamese features for benchmarks and tests: Gaussian clusters in 16
dimensions, each its own component of a kNN graph or touching (nearly piecewise-constant
embeddings, as real Siamese features give), and scikit-learn's digits."""

from __future__ import annotations

import numpy as np


def clustered_data(
    n: int, dim: int = 16, n_clusters: int = 10, seed: int = 0, spread: float = 3.0
) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian clusters of unit variance around centres drawn with scale ``spread``, a
    stand-in for 16-d Siamese features. At the default the clusters of a 50-NN graph are
    its connected components; at 1.5 they touch (one component, ten small eigenvalues)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=spread, size=(n_clusters, dim))
    labels = rng.integers(0, n_clusters, n)
    return (centres[labels] + rng.normal(size=(n, dim))).astype(np.float32), labels


def step_data(data: str, batch_size: int, dim: int, n_components: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Points and labels of ``bench step``'s data ``data`` (:data:`basis.catalog.STEP_DATA`); the digits
    have their own 64 dimensions and 10 classes."""
    if data == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        return (digits.data / 16.0).astype(np.float32), digits.target
    spread = {"clusters": 3.0, "touching": 1.5}[data]
    return clustered_data(max(20 * batch_size, 10_000), dim, n_components, seed, spread)


def low_rank_clusters(n: int, n_clusters: int = 10, dim: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Tight clusters (noise 0.1) whose centres span 4 of ``dim`` dimensions, the classes in
    turn: Siamese-like float32 features with a rank-deficient spread of centres."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, 4)) @ rng.normal(size=(4, dim))
    y = np.arange(n) % n_clusters
    return (centres[y] + 0.1 * rng.normal(size=(n, dim))).astype(np.float32), y


def separated_clusters(
    n_clusters: int, per_cluster: int, separation: float, dim: int = 16, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Tight clusters (noise 0.1) whose nearest centres are ``separation`` apart: the
    features of a well-trained Siamese network. With fewer points per cluster than a kNN
    graph's neighbours, its cross-cluster weights fall from ~1e-2 (separation 2.5) through
    ~1e-28 (8) to exactly 0 (underflow, 30): K nearly equal eigenvalues near 0, then a
    large gap."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, dim))
    distances = np.linalg.norm(centres[:, None] - centres[None], axis=2)[np.triu_indices(n_clusters, 1)]
    centres *= separation / distances.min()
    y = np.repeat(np.arange(n_clusters), per_cluster)
    return (centres[y] + 0.1 * rng.normal(size=(len(y), dim))).astype(np.float32), y

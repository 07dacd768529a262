"""The alternatives a user would otherwise pick to the exact embedding of a whole data set,
in this project's convention (the leading eigenvectors of D^-1/2 W D^-1/2, trivial vector
first): a Nyström extension from landmarks, and scikit-learn's ``SpectralEmbedding``.

Both run on the host on every box. This module imports scikit-learn at its top, so that
the cost measured of a first call is the computation, not the import.
"""

from __future__ import annotations

import time

import numpy as np
from sklearn.kernel_approximation import Nystroem
from sklearn.manifold import SpectralEmbedding
from sklearn.neighbors import NearestNeighbors

#: Rows of the feature map computed at a time: memory is O(chunk x landmarks).
CHUNK = 65_536


def nystrom_embedding(
    X_fit: np.ndarray, X_new: np.ndarray, n_components: int, n_landmarks: int, sigma: float, seed: int
) -> tuple[np.ndarray, float]:
    """The leading eigenvectors of the symmetric operator D^-1/2 K D^-1/2 of the Gaussian
    kernel exp(-d^2 / (2 sigma^2)) (the ``Gaussian kernel`` equation, paper variant) on
    ``X_fit``, approximated from ``n_landmarks`` landmarks (K ~ Z Z^T, Z scikit-learn's
    ``Nystroem`` map) and extended to ``X_new``; returns the rows of ``X_new`` and the
    fit's seconds. Memory is O(chunk x landmarks): ``X_fit``'s rows are never embedded."""
    start = time.perf_counter()
    feature_map = Nystroem(kernel="rbf", gamma=1.0 / (2.0 * sigma**2), n_components=n_landmarks, random_state=seed)
    feature_map.fit(X_fit)
    chunks = range(0, len(X_fit), CHUNK)
    # Two passes over X_fit, the degrees first: one pass would hold the n x L map.
    total = sum(feature_map.transform(X_fit[i : i + CHUNK]).astype(np.float64).sum(axis=0) for i in chunks)
    gram = np.zeros((n_landmarks, n_landmarks))
    for i in chunks:  # Z_n^T Z_n of the degree-normalised map, a chunk at a time
        Z = _degree_normalised(feature_map.transform(X_fit[i : i + CHUNK]), total)
        gram += Z.T @ Z
    values, vectors = np.linalg.eigh(gram)
    values, vectors = values[::-1][:n_components], vectors[:, ::-1][:, :n_components]
    projection = vectors / np.sqrt(np.maximum(values, np.finfo(np.float64).tiny))
    fit_s = time.perf_counter() - start
    return _degree_normalised(feature_map.transform(X_new), total) @ projection, fit_s


def _degree_normalised(Z: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Rows of the feature map divided by the square root of their degree Z z_total."""
    Z = Z.astype(np.float64)
    Z /= np.sqrt(np.maximum(Z @ total, np.finfo(np.float64).tiny))[:, None]
    return Z


def sklearn_embedding(X: np.ndarray, n_components: int, n_neighbors: int, seed: int) -> np.ndarray:
    """scikit-learn's ``SpectralEmbedding`` with its own graph (binary k-nearest-neighbour
    connectivity, symmetrised) in this project's convention: it drops the trivial vector and
    returns D^-1/2 u, so its K - 1 vectors are scaled back by D^1/2 and D^1/2 1 (unit norm)
    is put first, the eigenvectors of the same operator D^-1/2 W D^-1/2 as the exact
    embedding's. It has no ``transform``: new points are embedded by refitting on all."""
    fitted = SpectralEmbedding(
        n_components - 1, affinity="nearest_neighbors", n_neighbors=n_neighbors, random_state=seed
    )
    vectors = fitted.fit_transform(X)
    root = np.sqrt(np.asarray(fitted.affinity_matrix_.sum(axis=1), dtype=np.float64).ravel())
    return np.column_stack([root / np.linalg.norm(root), vectors * root[:, None]])


def sample_bandwidth(X: np.ndarray, scale_neighbor: int, seed: int, sample: int = 2000) -> float:
    """A global bandwidth by the project's rule (the median distance to the
    ``scale_neighbor``-th neighbour) on a seeded sample of ``X``'s rows."""
    rows = np.random.default_rng(seed).choice(len(X), min(sample, len(X)), replace=False)
    dists, _ = NearestNeighbors(n_neighbors=scale_neighbor + 1).fit(X).kneighbors(X[rows])
    return float(np.median(dists[:, scale_neighbor]))

"""Generated toy data sets of the paper's Figs. 1-3, seeded."""

from __future__ import annotations

import numpy as np
from sklearn.datasets import make_blobs, make_circles, make_moons

from basis import catalog

#: The authors' toy graph: k = 15 with one global scale; L = D - W, trivial vector dropped.
TOY_GRAPH = {"n_neighbors": 15, "scale": "global", "scale_neighbor": 7}


def three_moons(n_per_moon: int = 3330, noise: float = 0.07, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The authors' three moons: radius 1 at the origin, radius 1.5 inverted around
    (1.5, 0), radius 1 shifted by +3; Gaussian noise of std ``noise``."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.0, np.pi, size=(3, n_per_moon))
    moons = [
        np.stack([np.cos(t[0]), np.sin(t[0])], axis=1),
        np.stack([1.5 + 1.5 * np.cos(t[1]), -1.5 * np.sin(t[1])], axis=1),
        np.stack([3.0 + np.cos(t[2]), np.sin(t[2])], axis=1),
    ]
    X = np.concatenate(moons) + noise * rng.standard_normal((3 * n_per_moon, 2))
    return X.astype(np.float32), np.repeat(np.arange(3), n_per_moon)


def three_moons_anchors(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Nine anchors, three per moon (its two ends and its middle along x), like the
    authors' hand-placed ones."""
    chosen = []
    for label in np.unique(y):
        members = np.flatnonzero(y == label)
        order = members[np.argsort(X[members, 0])]
        chosen += [order[len(order) // 20], order[len(order) // 2], order[-len(order) // 20]]
    return np.asarray(chosen)


def two_moons(n: int = 9000, noise: float = 0.07, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    X, y = make_moons(n_samples=n, noise=noise, random_state=seed)
    return X.astype(np.float32), y


def circles(n: int = 9000, noise: float = 0.04, factor: float = 0.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    X, y = make_circles(n_samples=n, noise=noise, factor=factor, random_state=seed)
    return X.astype(np.float32), y


def blobs(
    n: int = 9000, centers: int = 4, std: float = 0.5, radius: float = 4.0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian blobs with centres evenly spaced on a circle of ``radius`` (turned by a
    seeded angle), so that the clusters are separated as in the usual toy example."""
    turn = np.random.default_rng(seed).uniform(0, 2 * np.pi)
    angles = turn + 2 * np.pi * np.arange(centers) / centers
    centres = radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    X, y = make_blobs(n_samples=n, centers=centres, cluster_std=std, random_state=seed)
    return X.astype(np.float32), y


def spirals(n: int = 9000, noise: float = 0.05, turns: float = 1.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved Archimedean spirals."""
    rng = np.random.default_rng(seed)
    half = n // 2
    t = np.sqrt(rng.uniform(0.05, 1.0, size=(2, half))) * turns * 2 * np.pi
    arms = []
    for arm in range(2):
        r = t[arm] / (turns * 2 * np.pi)
        angle = t[arm] + arm * np.pi
        arms.append(np.stack([r * np.cos(angle), r * np.sin(angle)], axis=1))
    X = np.concatenate(arms) + noise * rng.standard_normal((2 * half, 2))
    return X.astype(np.float32), np.repeat(np.arange(2), half)


#: Name -> generator, for the names of :data:`basis.catalog.TOY_SETS`.
TOY_SETS = dict(zip(catalog.TOY_SETS, (three_moons, two_moons, circles, blobs, spirals), strict=True))

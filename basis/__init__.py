"""basis: learned spectral embeddings with batch alignment (BASiS, CVPR 2023) and baselines."""

from basis.alignment import AlignmentResult, affine_least_squares, apply_affine, global_transform, ransac_affine
from basis.estimators import BASiS, DiffusionNet, SpecNet2, SpectralEstimator, SpectralNet, make_estimator
from basis.graph import GraphConfig, dense_affinity, sparse_affinity
from basis.spectral import sparse_spectral_embedding, spectral_embedding

__all__ = [
    "AlignmentResult",
    "BASiS",
    "DiffusionNet",
    "GraphConfig",
    "SpectralNet",
    "SpecNet2",
    "SpectralEstimator",
    "affine_least_squares",
    "apply_affine",
    "dense_affinity",
    "global_transform",
    "make_estimator",
    "ransac_affine",
    "sparse_affinity",
    "sparse_spectral_embedding",
    "spectral_embedding",
]
__version__ = "0.1.0"

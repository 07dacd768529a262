"""basis: learned spectral embeddings with batch alignment (BASiS, CVPR 2023) and baselines.

The public names below load on first use, so that the import-light modules
(``basis.catalog``, ``basis.catalog.settings``, ``basis.tracking``) can be imported without
torch, as the workflow does at parse time.
"""

from importlib import import_module

_PUBLIC = {
    "AlignmentResult": "basis.alignment",
    "affine_least_squares": "basis.alignment",
    "apply_affine": "basis.alignment",
    "global_transform": "basis.alignment",
    "ransac_affine": "basis.alignment",
    "BASiS": "basis.estimators",
    "DiffusionNet": "basis.estimators",
    "SpecNet2": "basis.estimators",
    "SpectralEstimator": "basis.estimators",
    "SpectralNet": "basis.estimators",
    "make_estimator": "basis.estimators",
    "GraphConfig": "basis.graph",
    "dense_affinity": "basis.graph",
    "sparse_affinity": "basis.graph",
    "sparse_spectral_embedding": "basis.spectral",
    "spectral_embedding": "basis.spectral",
}
__all__ = sorted(_PUBLIC)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'basis' has no attribute {name!r}")
    return getattr(import_module(_PUBLIC[name]), name)

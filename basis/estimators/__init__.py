"""Learned spectral embeddings as scikit-learn estimators: BASiS and the baselines of Table 1.

:class:`BASiS` (the paper's Algorithm 1) and :class:`DiffusionNet`, :class:`SpectralNet`
(the paper's SpecNet1) and :class:`SpecNet2` share one training loop and step API
(:class:`~basis.estimators.base.SpectralEstimator`), one network family
(:class:`~basis.models.SpectralMLP`) and one graph builder. A method is declared by its
parameters class in :mod:`basis.estimators.parameters` (torch-free, so that a config is
checked without torch) and computed by one module here whose class inherits it.

The names below load on first use: ``basis.estimators.parameters`` imports no torch.
"""

from importlib import import_module

_PUBLIC = {
    "BASiS": "basis.estimators.basis",
    "basis_loss": "basis.estimators.basis",
    "DiffusionNet": "basis.estimators.diffusion_net",
    "SpectralNet": "basis.estimators.spectralnet",
    "spectralnet_loss": "basis.estimators.spectralnet",
    "SpecNet2": "basis.estimators.specnet2",
    "deflate_trivial": "basis.estimators.specnet2",
    "specnet2_loss": "basis.estimators.specnet2",
    "specnet2_rotation": "basis.estimators.specnet2",
    "PublishedSpectralNet": "basis.estimators.spectralnet_published",
    "PublishedSpectralNetOnPaperGraph": "basis.estimators.spectralnet_published",
    "METHODS": "basis.estimators.base",
    "SpectralEstimator": "basis.estimators.base",
    "check_features": "basis.estimators.base",
    "default_parameter": "basis.estimators.base",
    "make_estimator": "basis.estimators.base",
    "register": "basis.estimators.base",
    "StepTimer": "basis.estimators.training",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'basis.estimators' has no attribute {name!r}")
    return getattr(import_module(_PUBLIC[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])

"""Learned spectral embeddings as scikit-learn estimators: BASiS and the baselines of Table 1.

:class:`BASiS` (the paper's Algorithm 1) and :class:`DiffusionNet`, :class:`SpectralNet`
(the paper's SpecNet1) and :class:`SpecNet2` share one training loop and step API
(:class:`~basis.estimators.base.SpectralEstimator`), one network family
(:class:`~basis.models.SpectralMLP`) and one graph builder. A new method is one module
here whose class joins :data:`METHODS` with ``@register("name")``, plus its import below.
"""

from basis.estimators.base import (
    METHODS,
    SpectralEstimator,
    check_features,
    default_parameter,
    make_estimator,
    register,
)
from basis.estimators.basis import BASiS, basis_loss
from basis.estimators.diffusion_net import DiffusionNet
from basis.estimators.specnet2 import SpecNet2, deflate_trivial, specnet2_loss, specnet2_rotation
from basis.estimators.spectralnet import SpectralNet, spectralnet_loss
from basis.estimators.spectralnet_published import PublishedSpectralNet, PublishedSpectralNetOnPaperGraph
from basis.estimators.training import StepTimer

__all__ = [
    "BASiS",
    "METHODS",
    "DiffusionNet",
    "PublishedSpectralNet",
    "PublishedSpectralNetOnPaperGraph",
    "SpecNet2",
    "SpectralEstimator",
    "SpectralNet",
    "StepTimer",
    "basis_loss",
    "check_features",
    "default_parameter",
    "deflate_trivial",
    "make_estimator",
    "register",
    "specnet2_loss",
    "specnet2_rotation",
    "spectralnet_loss",
]

"""SpectralNet as its authors' maintained package runs it (PyPI ``spectralnet`` 1.1.0), for
Table 1's "published code" rows beside this project's re-implementation (``specnet1``).

The paper ran each baseline from its authors' code with that code's defaults; this project's
``specnet1`` is SpectralNet's algorithm on the paper's graph with an exact float64
orthonormalisation. These estimators hand the same features to the package instead and
score its network with the same metrics and protocol, so that a reader can see which of the
two the paper's SpectralNet numbers resemble. ``pip install '.[published]'`` installs it.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import torch

from basis.errors import InputError
from basis.estimators.base import SpectralEstimator
from basis.estimators.parameters import PublishedOnPaperGraphParameters, PublishedSpectralNetParameters
from basis.runtime.device import global_draws_seeded, resolve_device

#: What the package's training splits off for validation (``random_split``, 90/10).
TRAIN_SHARE = 0.9
#: The package's own graph (its ``SpectralNet`` defaults): k, the scale's neighbour (used by
#: a global scale only) and a local scale, which is each point's median distance to its k
#: nearest points, itself included.
PACKAGE_GRAPH = {"n_nbg": 30, "scale_k": 15, "is_local_scale": True}


def _package():
    try:
        import spectralnet
    except ImportError:
        raise InputError(
            "the published SpectralNet needs the spectralnet package: pip install '.[published]'"
        ) from None
    return spectralnet


class PublishedNetwork(torch.nn.Module):
    """The package's trained network (``SpectralNetModel``) with the orthonormalisation
    weights of its last training step as a buffer, so that it is saved and loaded as the
    project's own networks are; :meth:`embed` is the package's forward pass without a new
    orthonormalisation (what its ``predict`` runs)."""

    def __init__(self, network: torch.nn.Module, n_components: int):
        super().__init__()
        self.network = network
        self.register_buffer("orthonorm_weights", torch.zeros(n_components, n_components))

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        self.network.orthonorm_weights = self.orthonorm_weights
        return self.network(x, should_update_orth_weights=False).double()


class PublishedSpectralNet(PublishedSpectralNetParameters, SpectralEstimator):
    """SpectralNet through the ``spectralnet`` package, on the package's own graph.

    The package trains its spectral network for ``n_epochs`` epochs over 90 % of the training
    points (10 % held out for its learning-rate schedule, ``ReduceLROnPlateau``, which may
    stop it early), in shuffled batches of ``batch_size``, each step orthonormalising by the
    QR of another batch; its loss is the unnormalised Laplacian's (its only choice), on a
    Gaussian kernel exp(-d^2 / sigma_i^2). Its graph is its own (:data:`PACKAGE_GRAPH`), or
    with ``graph_from="protocol"`` the protocol's k and scale rule (its local scale stays the
    package's median distance: the API has no k-th-neighbour scale). ``n_iter``, ``operator``
    and the rest of ``graph`` are not the package's to take. Every random draw of the
    package (split, shuffles, initialisation) follows ``seed``.

    Parameters
    ----------
    n_epochs : int
        The package's ``spectral_epochs``.
    graph_from : {"package", "protocol"}
        Whose graph: the package's defaults, or ``graph``'s k and scale rule.
    **common
        As :class:`~basis.estimators.base.SpectralEstimator` (``batch_size``, ``lr``,
        ``hidden``, ``device``, ``seed``).
    """

    def package_graph(self) -> dict[str, Any]:
        """The graph arguments the package gets (``n_nbg``, ``scale_k``, ``is_local_scale``)."""
        if self.graph_from == "package":
            return dict(PACKAGE_GRAPH)
        return {
            "n_nbg": self.graph_.n_neighbors,
            "scale_k": self.graph_.scale_neighbor,
            "is_local_scale": self.graph_.scale == "local",
        }

    def _validate(self, n_samples: int) -> None:
        super()._validate(n_samples)
        if self.graph_from == "protocol" and self.graph_.scale == "fixed":
            raise InputError("the spectralnet package computes its own scale: graph.scale must be local or global")
        # its last training batch orthonormalises by the QR of as many rows: fewer than K
        # rows make R singular and the package fails mid-training
        last = int(TRAIN_SHARE * n_samples) % self.batch_size
        if 0 < last < self.n_components:
            raise InputError(
                f"the spectralnet package's last batch would hold {last} points, fewer than n_components="
                f"{self.n_components}: choose a batch_size that leaves none or at least {self.n_components}"
            )

    def _build_model(self, in_dim: int) -> PublishedNetwork:
        from spectralnet._models import SpectralNetModel

        _package()
        return PublishedNetwork(SpectralNetModel([*self.hidden_, self.n_components], in_dim), self.n_components)

    def fit(self, X: Any, y: Any = None) -> PublishedSpectralNet:
        """Train the package's network on ``X`` (``y`` unused: the package's labels only
        feed its clustering metrics)."""
        X, _ = self.check_input(X, y)
        spectralnet = _package()
        self.device_ = resolve_device(self.device)
        self.n_features_in_ = X.shape[1]
        package = spectralnet.SpectralNet(
            n_clusters=self.n_components,
            spectral_hiddens=[*self.hidden_, self.n_components],
            spectral_epochs=self.n_epochs,
            spectral_lr=self.lr,
            spectral_batch_size=self.batch_size,
            **{f"spectral_{key}": value for key, value in self.package_graph().items()},
        )
        package.device = self.device_  # it picks CUDA by itself; the project's policy decides
        # its progress bar and prints are not this job's log; its errors still reach it
        quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
        with global_draws_seeded(self.device_, self.seed), quiet[0], quiet[1]:
            package.fit(torch.from_numpy(X))
        network = package.spec_net
        self.model_ = PublishedNetwork(network, self.n_components).to(self.device_)
        self.model_.orthonorm_weights.copy_(network.orthonorm_weights.detach())
        self.model_.eval()
        self.loss_curve_: list[float] = []  # the package keeps no per-step losses
        self.n_steps_ = 0
        return self


class PublishedSpectralNetOnPaperGraph(PublishedOnPaperGraphParameters, PublishedSpectralNet):
    """:class:`PublishedSpectralNet` with ``graph_from="protocol"`` by default: the paper's k
    and scale rule, as far as the package's API takes them."""

"""SpectralNet (Shaham et al.; the paper's SpecNet1), a baseline of Table 1."""

from __future__ import annotations

import numpy as np
import torch

from basis.estimators.base import SpectralEstimator
from basis.estimators.parameters import SpectralNetParameters
from basis.estimators.training import FeaturesOf, StepTimer
from basis.graph import dense_affinity
from basis.models import SpectralMLP


class SpectralNet(SpectralNetParameters, SpectralEstimator):
    """SpectralNet (Shaham et al.): ratio-cut loss with an orthonormalisation layer.

    Each step computes the orthonormalisation weights W_orth = sqrt(m) R^-1 from the QR
    of the net's output on a separate batch (sign fixed so that diag R > 0; gradients
    flow through it, as in the PyTorch package 1.1.0), then minimises ``spectralnet_loss``
    (1/m^2) sum_ij W_ij ||y_i - y_j||^2 on the training
    batch. For L_N the outputs are divided by sqrt(degree) inside the loss. The last
    W_orth is stored for inference. SpectralNet learns the K smallest eigenvectors
    including the trivial one. Its last layer is bounded by ``output_activation``
    (tanh, as in SpectralNet) before the orthonormalisation. The paper calls it
    SpecNet1; its method key is ``specnet1``.
    """

    def _build_model(self, in_dim: int) -> SpectralMLP:
        return SpectralMLP(in_dim, self.n_components, self.hidden_, output_activation=self.output_activation)

    def _orthonormal_weights(self, X_orth: torch.Tensor) -> torch.Tensor:
        """W_orth of the net's output on ``X_orth`` (:func:`orthonormal_weights`); the
        stored copy for inference is detached."""
        # float64 on every device: R^-1 of a nearly collinear output (early training, a
        # clustered batch) squares its condition number, and its (m x K) size makes
        # float64 cost nothing next to the network's float32 forward pass.
        w_orth = orthonormal_weights(self.model_(X_orth).double())
        with torch.no_grad():
            self.model_.output_map.copy_(w_orth)
        return w_orth

    def orthonormalize(self, X_batch: torch.Tensor) -> torch.Tensor:
        """Recompute W_orth from ``X_batch`` and return the orthonormal output Y (m x K)
        with Y^T Y / m = I."""
        with torch.no_grad():
            w_orth = self._orthonormal_weights(X_batch)
            return self.model_(X_batch).double() @ w_orth

    def _next_batch(self, features_of: FeaturesOf, n_train: int, timer: StepTimer) -> tuple[torch.Tensor, ...]:
        X_orth = features_of(self._sample(n_train, self.batch_size))
        X_batch = features_of(self._sample(n_train, self.batch_size))
        with timer("graph"):
            W = dense_affinity(X_batch, self.graph_)
        return X_orth, X_batch, W

    def _batch_loss(self, batch, timer: StepTimer) -> tuple[torch.Tensor, dict[str, float]]:
        X_orth, X_batch, W = batch
        with timer("gradient"):
            # As in the PyTorch package, the gradient also flows through W_orth (the QR of
            # the orthonormalisation batch); with W_orth held fixed the net can lower the
            # loss by shrinking its output, which the next W_orth undoes, and it collapses.
            loss = self._ratio_cut(self.model_(X_batch).double() @ self._orthonormal_weights(X_orth), W)
        return loss, {}

    def _loss_tensors(self, batch) -> tuple[tuple[torch.Tensor, ...], dict[str, float]]:
        return batch, {}

    def _loss_with(
        self, network, X_orth: torch.Tensor, X_batch: torch.Tensor, W: torch.Tensor
    ) -> tuple[torch.Tensor, dict]:
        # Trained together, the stored W_orth is left to _finish, which sets it anyway.
        return self._ratio_cut(network(X_batch).double() @ orthonormal_weights(network(X_orth).double()), W), {}

    def _ratio_cut(self, Y: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
        W = W.double()
        if self.operator == "normalized":
            Y = Y / W.sum(dim=1, keepdim=True).sqrt()
        return spectralnet_loss(Y, W)

    def _finish(self, features_of: FeaturesOf, n_train: int) -> None:
        self.orthonormalize(features_of(self._sample(n_train, self.batch_size)))


def orthonormal_weights(Y_orth: torch.Tensor) -> torch.Tensor:
    """W_orth = sqrt(m) R^-1 from the QR of the net's output ``Y_orth`` (m x K, float64),
    signs fixed so that diag R > 0; differentiable. The inverse is taken without its
    singularity check (``inv_ex``: the same values, no host wait on CUDA); a singular R
    makes the loss non-finite, which the training loop stops at."""
    _, r = torch.linalg.qr(Y_orth)
    signs = torch.sign(torch.diagonal(r)).detach()
    signs = torch.where(signs == 0, torch.ones_like(signs), signs)
    return np.sqrt(Y_orth.shape[0]) * torch.linalg.inv_ex(r * signs[:, None]).inverse


def spectralnet_loss(Y: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """(1/m^2) sum_ij W_ij ||y_i - y_j||^2 = (2/m^2) tr(Y^T L Y) (``spectralnet_loss``)."""
    m = Y.shape[0]
    degrees = W.sum(dim=1)
    return 2.0 / m**2 * ((Y * (degrees[:, None] * Y)).sum() - (Y * (W @ Y)).sum())

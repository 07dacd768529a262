"""Diffusion Net's encoder (Mishne et al.), the first baseline of Table 1."""

from __future__ import annotations

import numpy as np
import torch

from basis.errors import InputError
from basis.estimators.base import SpectralEstimator
from basis.estimators.parameters import DiffusionNetParameters
from basis.estimators.training import FeaturesOf, StepTimer
from basis.graph import dense_affinity
from basis.spectral import operator_matrix, spectral_embedding


class DiffusionNet(DiffusionNetParameters, SpectralEstimator):
    """Diffusion Net's encoder (Mishne et al.), trained as in the BASiS paper.

    One sample of ``sample_size`` training points (default: one batch) is drawn per
    run; its analytic embedding is the target; the loss is
    ``diffusion_net_encoder_loss``: MSE to the target + (mu/2) sum of squared weights
    of all but the output layer + (eta/2m) sum_j ||(P - gamma_j I) o_j||^2, trained
    full-batch on that sample. With ``operator="diffusion"`` (its own paper) P is the
    row-stochastic D^-1 W, whose right eigenvectors are the diffusion coordinates (the
    BASiS paper prints the transpose W D^-1); for the Table 1 protocol the target is the
    L_N embedding and P, gamma are replaced by L_N and its eigenvalues.
    """

    def _validate(self, n_samples: int) -> None:
        super()._validate(n_samples)
        if self.sample_size is not None and not self.batch_size <= self.sample_size <= n_samples:
            raise InputError(f"sample_size must be between batch_size and {n_samples}, got {self.sample_size}")

    def _prepare(self, X: torch.Tensor, y: np.ndarray | None) -> None:
        size = self.sample_size or self.batch_size
        self.sample_indices_ = self._sample(X.shape[0], size)
        W = dense_affinity(X[self.sample_indices_.to(X.device)], self.graph_)
        self.target_, self.eigenvalues_ = spectral_embedding(
            W,
            self.n_components,
            operator=self.operator,
            drop_trivial=self.drop_trivial,
            diffusion_time=self.diffusion_time,
            on_disconnected="warn",
        )
        # The operator whose eigenvectors the targets are, for the eigen-regulariser.
        self.operator_matrix_ = operator_matrix(W, self.operator)

    def _next_batch(self, features_of: FeaturesOf, n_train: int, timer: StepTimer) -> torch.Tensor:
        return features_of(self.sample_indices_)  # full-batch training on the one sample

    def _loss_tensors(self, X_sample: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], dict[str, float]]:
        return (X_sample, self.target_, self.eigenvalues_, self.operator_matrix_), {}

    def _loss_with(
        self, network, X_sample: torch.Tensor, target: torch.Tensor, eigenvalues: torch.Tensor, operator: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``diffusion_net_encoder_loss`` of ``network`` on the sample, with its data and
        eigen terms."""
        Z = network(X_sample)
        n = Z.shape[0]
        data_term = ((Z - target) ** 2).sum() / (2 * n)
        decay = self.mu / 2 * sum((w**2).sum() for w in network.weight_matrices()[:-1])
        # (P - gamma_j I) z_j for every output column j at once.
        residual = operator @ Z - Z * eigenvalues[None, :]
        eigen_term = self.eta / (2 * n) * (residual**2).sum()
        return data_term + decay + eigen_term, {"data_term": data_term.detach(), "eigen_term": eigen_term.detach()}

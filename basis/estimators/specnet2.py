"""SpecNet2 (Chen et al.), a baseline of Table 1: the pencil (W, D) learnt by an
unconstrained loss, then a Rayleigh-Ritz post-processing."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg
import torch

from basis.estimators.base import SpectralEstimator, check_features
from basis.estimators.parameters import SpecNet2Parameters
from basis.estimators.training import FeaturesOf, StepTimer
from basis.graph import dense_affinity, sparse_affinity


def specnet2_loss(
    Y: torch.Tensor, W: torch.Tensor, degrees: torch.Tensor, Y_neighbours: torch.Tensor | None = None
) -> torch.Tensor:
    """(1/m^2) tr(-2 Y^T W Y + (1/m^2) Y^T D Y Y^T D Y) (``specnet2_loss``).

    With ``Y_neighbours``, ``W`` holds the batch's rows of a larger graph over the nodes
    whose outputs those are, and W Y is estimated from them (SpecNet2's neighbour
    gradient); otherwise ``W`` is the batch's own graph.
    """
    m = Y.shape[0]
    ydy = Y.T @ (degrees[:, None] * Y)
    cross = (Y * (W @ (Y if Y_neighbours is None else Y_neighbours))).sum()
    return (-2.0 * cross + (ydy * ydy.T).sum() / m**2) / m**2


def deflate_trivial(W: torch.Tensor) -> torch.Tensor:
    """W - D 1 1^T D / vol: removes the trivial pair (1, 1) of the pencil (W, D)."""
    degrees = W.sum(dim=1)
    return W - torch.outer(degrees, degrees) / degrees.sum()


class SpecNet2(SpecNet2Parameters, SpectralEstimator):
    """SpecNet2 (Chen et al.): the pencil (W, D) by an unconstrained loss, then a
    Rayleigh-Ritz post-processing.

    ``gradient="local"`` uses the batch's own graph; ``"neighbor"`` evaluates the
    network on the batch's neighbours in the whole training graph as well. After
    training, ``specnet2_ev_mat_calc`` (Y^T W Y) O = (Y^T D Y) O Lambda is solved on
    ``postprocess_set`` (call :meth:`postprocess` with the set; the paper used the
    whole test set) and U = Y O is the embedding. ``drop_trivial`` deflates W.

    ``operator`` only says what the output is compared with: the pencil's eigenvectors
    are the random walk's, D^-1/2 U for the eigenvectors U of L_N, so ``"normalized"``
    (Table 1) leaves a d_G floor (see :func:`basis.metrics.own_basis_grassmann_distance`)
    and ``"unnormalized"`` is refused. ``gradient`` defaults to ``"local"`` (the batch's
    own graph, cost independent of n; the BASiS paper does not say which SpecNet2 used).
    """

    def _prepare(self, X: torch.Tensor, y: np.ndarray | None) -> None:
        if self.gradient == "neighbor":
            W = sparse_affinity(X.cpu().numpy(), self.graph_, device=str(X.device))
            self.full_graph_ = W
            self.full_degrees_ = torch.from_numpy(np.asarray(W.sum(axis=1)).ravel())

    def _batch_graph(self, X_batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        W = dense_affinity(X_batch, self.graph_)
        if self.drop_trivial:
            return deflate_trivial(W), W.sum(dim=1)
        return W, W.sum(dim=1)

    def _next_batch(self, features_of: FeaturesOf, n_train: int, timer: StepTimer) -> dict[str, torch.Tensor]:
        # The neighbour gradient's graph is held on the host (SciPy): its batch is drawn
        # there, so that the host indexes it with host indices whatever the device.
        batch = self._sample(n_train, self.batch_size, on_host=self.gradient == "neighbor")
        with timer("graph"):
            if self.gradient == "local":
                X_batch = features_of(batch)
                W, degrees = self._batch_graph(X_batch)
                return {"X_batch": X_batch, "W": W, "degrees": degrees}
            rows, union, inverse = self._neighbour_rows(batch)
            X_union = features_of(torch.from_numpy(union))
            dtype = X_union.dtype
            W_rows = torch.zeros((len(batch), len(union)), dtype=dtype)  # on the host, as the graph
            W_rows[torch.from_numpy(rows.row), torch.from_numpy(inverse[len(batch) :])] = torch.from_numpy(
                rows.data
            ).to(dtype)
            degrees = self.full_degrees_[batch].to(dtype)
            if self.drop_trivial:
                union_degrees = self.full_degrees_[torch.from_numpy(union)].to(dtype)
                W_rows = W_rows - torch.outer(degrees, union_degrees) / self.full_degrees_.sum()
            return {
                "X_union": X_union,
                "batch_position": torch.from_numpy(inverse[: len(batch)]).to(X_union.device),
                "W_rows": W_rows.to(X_union.device),
                "degrees": degrees.to(X_union.device),
            }

    def _neighbour_rows(self, batch: torch.Tensor) -> tuple[Any, np.ndarray, np.ndarray]:
        """The rows of the whole training graph (on the host) for the host-drawn ``batch``,
        over the batch's nodes and their neighbours (``union``, sorted), and where each node
        of the batch and each entry's column fall in ``union`` (``inverse``)."""
        rows = self.full_graph_[batch.numpy()].tocoo()
        union, inverse = np.unique(np.concatenate([batch.numpy(), rows.col]), return_inverse=True)
        return rows, union, inverse

    def _loss_tensors(self, batch: dict) -> tuple[tuple[torch.Tensor, ...], dict[str, float]]:
        if self.gradient == "local":
            return (batch["X_batch"], batch["W"], batch["degrees"]), {}
        return (batch["X_union"], batch["batch_position"], batch["W_rows"], batch["degrees"]), {}

    def _loss_with(self, network, *tensors: torch.Tensor) -> tuple[torch.Tensor, dict]:
        if self.gradient == "local":
            X_batch, W, degrees = tensors
            return specnet2_loss(network(X_batch), W, degrees), {}
        X_union, batch_position, W_rows, degrees = tensors
        Y_union = network(X_union)
        return specnet2_loss(Y_union[batch_position], W_rows, degrees, Y_neighbours=Y_union), {}

    def postprocess(self, X_set: Any) -> SpecNet2:
        """Solve ``specnet2_ev_mat_calc`` on ``X_set`` and store O for :meth:`transform`."""
        self._check_fitted()
        X_set = check_features(X_set, "X_set")
        with torch.no_grad():
            Y = self.model_(torch.from_numpy(X_set).to(self.device_)).double().cpu().numpy()
        W = sparse_affinity(X_set, self.graph_, device=str(self.device_))
        degrees = np.asarray(W.sum(axis=1)).ravel()
        ywy = Y.T @ (W @ Y)
        if self.drop_trivial:
            dy = degrees @ Y
            ywy = ywy - np.outer(dy, dy) / degrees.sum()
        ydy = Y.T @ (degrees[:, None] * Y)
        O = specnet2_rotation(ywy, ydy)
        self.model_.output_map.copy_(torch.from_numpy(O))
        return self

    def _finish(self, features_of: FeaturesOf, n_train: int) -> None:
        # Until postprocess() is called on the evaluation set, use a training batch.
        self.postprocess(features_of(self._sample(n_train, self.batch_size)).cpu().numpy())


def specnet2_rotation(ywy: np.ndarray, ydy: np.ndarray) -> np.ndarray:
    """O of (Y^T W Y) O = (Y^T D Y) O Lambda, eigenvalues descending (``specnet2_ev_mat_calc``)."""
    vals, O = scipy.linalg.eigh(ywy, ydy, driver="gv")
    return O[:, np.argsort(vals)[::-1]]

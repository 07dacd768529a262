"""Baselines: each loss against a direct NumPy evaluation of its formula, and their layers."""

import numpy as np
import pytest
import scipy.linalg
import torch
from conftest import random_connected_graph

from basis import metrics
from basis.estimators import (
    DiffusionNet,
    SpecNet2,
    SpectralEstimator,
    SpectralNet,
    basis_loss,
    deflate_trivial,
    make_estimator,
    specnet2_loss,
    specnet2_rotation,
    spectralnet_loss,
)


@pytest.fixture
def case(rng):
    W = random_connected_graph(rng, n=40, k=6)
    Y = torch.as_tensor(rng.normal(size=(40, 3)))
    return W, Y, W.numpy(), Y.numpy()


def test_spectralnet_loss_matches_formula(case):
    W, Y, Wn, Yn = case
    m = len(Yn)
    direct = sum(Wn[i, j] * np.sum((Yn[i] - Yn[j]) ** 2) for i in range(m) for j in range(m)) / m**2
    assert float(spectralnet_loss(Y, W)) == pytest.approx(direct, rel=1e-6)
    L = np.diag(Wn.sum(1)) - Wn
    assert direct == pytest.approx(2 / m**2 * np.trace(Yn.T @ L @ Yn), rel=1e-6)


def test_specnet2_loss_matches_formula(case):
    W, Y, Wn, Yn = case
    m = len(Yn)
    D = np.diag(Wn.sum(1))
    direct = np.trace(-2 * Yn.T @ Wn @ Yn + Yn.T @ D @ Yn @ Yn.T @ D @ Yn / m**2) / m**2
    assert float(specnet2_loss(Y, W, W.sum(1))) == pytest.approx(direct, rel=1e-6)


def test_basis_loss_matches_formula(case):
    _, Y, _, Yn = case
    phi = Y.flip(0)
    assert float(basis_loss(Y, phi)) == pytest.approx(np.mean(np.sum((Yn - phi.numpy()) ** 2, axis=1)), rel=1e-6)


def test_deflation_removes_the_trivial_pair(case):
    W, _, Wn, _ = case
    d = Wn.sum(1)
    deflated = deflate_trivial(W).numpy()
    assert np.abs(deflated @ np.ones(len(d))).max() < 1e-10  # (W - D11^TD/vol) 1 = 0


def test_diffusion_net_loss_matches_formula(rng):
    X = rng.normal(size=(120, 3)).astype(np.float32)
    model = DiffusionNet(
        2,
        graph={"n_neighbors": 10, "scale_neighbor": 5},
        batch_size=60,
        n_iter=1,
        mu=0.01,
        eta=0.5,
        device="cpu",
        hidden=(8, 8),
    )
    model.start(X)
    Xs = torch.from_numpy(X)[model.sample_indices_]
    with torch.no_grad():
        Z = model.model_(Xs).double().numpy()
    weights = [w.detach().double().numpy() for w in model.model_.weight_matrices()[:-1]]
    loss = model.step()["loss"]  # the loss of the network before its step
    target, gamma, P = (
        model.target_.double().numpy(),
        model.eigenvalues_.double().numpy(),
        model.operator_matrix_.double().numpy(),
    )
    n = len(Z)
    direct = (
        np.sum((Z - target) ** 2) / (2 * n)
        + 0.01 / 2 * sum(np.sum(w**2) for w in weights)
        + 0.5 / (2 * n) * sum(np.sum(((P - g * np.eye(n)) @ Z[:, j]) ** 2) for j, g in enumerate(gamma))
    )
    assert loss == pytest.approx(direct, rel=1e-5)
    # with the diffusion operator P is row stochastic
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-6)


def test_spectralnet_output_is_orthonormal_on_its_batch(rng):
    X = rng.normal(size=(300, 4)).astype(np.float32)
    model = SpectralNet(3, graph={"n_neighbors": 10, "scale_neighbor": 5}, batch_size=100, n_iter=3, device="cpu").fit(
        X
    )
    batch = torch.from_numpy(X[:100])
    Y = model.orthonormalize(batch).numpy()
    np.testing.assert_allclose(Y.T @ Y / 100, np.eye(3), atol=1e-5)
    # inference uses the stored weights: same output on the same batch
    np.testing.assert_allclose(model.transform(X[:100]), Y, atol=1e-4)
    with pytest.raises(ValueError, match="including the trivial one"):
        SpectralNet(3, drop_trivial=True, batch_size=100, graph={"n_neighbors": 10, "scale_neighbor": 5}).fit(X)


def test_specnet2_postprocessing_recovers_the_eigenvectors(rng):
    W = random_connected_graph(rng, n=80, k=8).numpy()
    D = np.diag(W.sum(1))
    # exact top generalized eigenvectors of (W, D), mixed by a random invertible matrix
    _, vecs = scipy.linalg.eigh(W, D)
    exact = vecs[:, ::-1][:, :3]
    mixed = exact @ (rng.normal(size=(3, 3)) + 3 * np.eye(3))
    O = specnet2_rotation(mixed.T @ W @ mixed, mixed.T @ D @ mixed)
    recovered = mixed @ O
    assert metrics.grassmann_distance(recovered, exact) < 1e-6
    cosines = np.abs(np.sum(metrics._normalize_columns(recovered) * metrics._normalize_columns(exact), axis=0))
    np.testing.assert_allclose(cosines, 1.0, atol=1e-6)  # column by column, not just the span


@pytest.mark.parametrize("gradient", ["local", "neighbor"])
def test_specnet2_trains_and_transform_is_deterministic(rng, gradient):
    X = rng.normal(size=(300, 4)).astype(np.float32)
    model = SpecNet2(
        3,
        gradient=gradient,
        graph={"n_neighbors": 10, "scale_neighbor": 5},
        batch_size=64,
        n_iter=5,
        drop_trivial=True,
        device="cpu",
    ).fit(X)
    model.postprocess(X[:200])
    np.testing.assert_array_equal(model.transform(X), model.transform(X))
    assert np.isfinite(model.loss_curve_).all()


def test_make_estimator_names_valid_choices():
    with pytest.raises(
        ValueError,
        match="valid: \\['basis', 'diffusion_net', 'specnet1', 'specnet1_published',"
        " 'specnet1_published_paper_graph', 'specnet2'\\]",
    ):
        make_estimator("spectralnet3")
    with pytest.raises(ValueError, match="unknown parameter\\(s\\) \\['anchors'\\]"):
        make_estimator("specnet1", anchors="random")


@pytest.mark.parametrize("method", ["diffusion_net", "specnet1", "specnet2"])
def test_baselines_save_and_load(tmp_path, rng, method):
    X = rng.normal(size=(200, 4)).astype(np.float32)
    model = make_estimator(
        method, n_components=2, graph={"n_neighbors": 10, "scale_neighbor": 5}, batch_size=64, n_iter=3, device="cpu"
    ).fit(X)
    model.save(tmp_path / "m.pt")
    np.testing.assert_array_equal(
        SpectralEstimator.load(tmp_path / "m.pt", device="cpu").transform(X), model.transform(X)
    )

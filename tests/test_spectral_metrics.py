import numpy as np
import pytest
import scipy.sparse as sp
import torch
from conftest import random_connected_graph

from basis import metrics
from basis.graph import GraphConfig, dense_affinity, sparse_affinity
from basis.spectral import (
    DisconnectedGraphWarning,
    laplacian,
    normalized_laplacian,
    random_walk_matrix,
    sparse_spectral_embedding,
    spectral_embedding,
)


@pytest.mark.parametrize("operator", ["unnormalized", "normalized", "diffusion"])
@pytest.mark.parametrize("drop_trivial", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sparse_solver_agrees_with_dense(operator, drop_trivial, seed):
    W = random_connected_graph(np.random.default_rng(seed))
    dense, dense_vals = spectral_embedding(W, 4, operator=operator, drop_trivial=drop_trivial)
    sparse, sparse_vals = sparse_spectral_embedding(
        sp.csr_matrix(W.numpy()), 4, operator=operator, drop_trivial=drop_trivial
    )
    assert metrics.grassmann_distance(dense.numpy(), sparse) < 1e-6
    np.testing.assert_allclose(dense_vals.numpy(), sparse_vals, atol=1e-7)
    # deterministic signs: the same vectors, not just the same subspace
    np.testing.assert_allclose(dense.numpy(), sparse, atol=1e-5)


def test_operators_match_their_definitions(rng):
    W = random_connected_graph(rng, n=30, k=5)
    D = torch.diag(W.sum(1))
    assert torch.allclose(laplacian(W), D - W)
    D_is = torch.diag(W.sum(1).rsqrt())
    assert torch.allclose(normalized_laplacian(W), torch.eye(30, dtype=W.dtype) - D_is @ W @ D_is)
    assert torch.allclose(random_walk_matrix(W), W @ torch.linalg.inv(D))
    U, vals = spectral_embedding(W, 3, operator="normalized")
    assert torch.allclose(normalized_laplacian(W) @ U, U * vals, atol=1e-10)


def test_trivial_vector_dropped_even_on_a_disconnected_graph():
    # three separated blobs: eigenvalue 0 has multiplicity 3
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(loc=c, scale=0.1, size=(60, 2)) for c in (0, 5, 10)]).astype(np.float32)
    W = sparse_affinity(X, GraphConfig(n_neighbors=8, scale_neighbor=3))
    with pytest.warns(DisconnectedGraphWarning, match="3 connected components"):
        U, vals = sparse_spectral_embedding(W, 2, operator="unnormalized", drop_trivial=True)
    np.testing.assert_allclose(vals, 0.0, atol=1e-8)
    assert np.abs(U.sum(axis=0)).max() < 1e-8  # orthogonal to the constant vector
    labels = np.repeat(np.arange(3), 60)
    assert metrics.clustering_accuracy(labels, metrics.kmeans_labels(U, 3)) == 1.0
    with pytest.raises(ValueError, match="3 connected components"):
        sparse_spectral_embedding(W, 1, operator="unnormalized", drop_trivial=False)


def test_grassmann_distance_properties(rng):
    Y = rng.normal(size=(100, 4))
    R = rng.normal(size=(4, 4)) + 3 * np.eye(4)
    assert metrics.grassmann_distance(Y, Y @ R) < 1e-10
    Q = np.linalg.qr(rng.normal(size=(100, 8)))[0]
    assert metrics.grassmann_distance(Q[:, :4], Q[:, 4:]) == pytest.approx(4.0, abs=1e-10)
    for _ in range(20):
        d = metrics.grassmann_distance(rng.normal(size=(50, 4)), rng.normal(size=(50, 4)))
        assert 0.0 <= d <= 4.0


def test_orthogonality_measure():
    Q = np.linalg.qr(np.random.default_rng(0).normal(size=(50, 3)))[0]
    # column scale counts in the paper's equation only: (5^2 - 1)^2 + (0.2^2 - 1)^2
    assert metrics.orthogonality(Q * [1.0, 5.0, 0.2]) == pytest.approx(24.0**2 + 0.96**2)
    assert metrics.orthogonality(Q * [1.0, 5.0, 0.2], variant="colnorm") < 1e-20
    Y = np.array([[1.0, 1.0], [0.0, 1.0]])
    # normalised columns (1,0), (1,1)/sqrt2: off-diagonal 1/sqrt2 twice
    assert metrics.orthogonality(Y, variant="colnorm") == pytest.approx(1.0)
    assert metrics.orthogonality(Y, variant="code") == pytest.approx(1.0)
    # raw: Y^T Y - I = [[0, 1], [1, 1]]
    assert metrics.orthogonality(Y) == pytest.approx(3.0)
    Y3 = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])
    assert metrics.orthogonality(Y3, variant="code") == pytest.approx(
        np.sqrt(metrics.orthogonality(Y3, variant="colnorm"))
    )


def test_acc_of_a_label_permutation_is_one():
    truth = np.repeat(np.arange(5), 20)
    permuted = np.array([3, 0, 4, 1, 2])[truth]
    assert metrics.clustering_accuracy(truth, permuted) == 1.0
    assert metrics.nmi(truth, permuted) == pytest.approx(1.0)


def test_nmi_matches_hand_computed_case():
    truth = np.array([0, 0, 1, 1])
    predicted = np.array([0, 0, 0, 1])
    # I = H(pred) - H(pred|truth) = H(.75,.25) - 0.5*1 ; H(truth)=1 (bits), max normaliser = 1
    h = lambda p: -sum(x * np.log(x) for x in p if x > 0)  # noqa: E731
    mutual = h([0.75, 0.25]) - 0.5 * h([0.5, 0.5])
    expected = mutual / max(h([0.5, 0.5]), h([0.75, 0.25]))
    assert metrics.nmi(truth, predicted) == pytest.approx(expected)
    arithmetic = mutual / ((h([0.5, 0.5]) + h([0.75, 0.25])) / 2)
    assert metrics.nmi(truth, predicted, variant="code") == pytest.approx(arithmetic)


def test_authors_linear_probe_separates_separable_classes(rng):
    X = np.concatenate([rng.normal(-2, 0.3, size=(100, 2)), rng.normal(2, 0.3, size=(100, 2))])
    y = np.repeat([0, 1], 100)
    # one batch per epoch here, so the probe needs more epochs than on MNIST (229 steps each)
    assert metrics.authors_linear_probe_accuracy(X, y, X, y, epochs=300, lr=5e-2) == 100.0
    assert metrics.authors_linear_probe_accuracy(X, y, X, y, epochs=300, lr=5e-2, seed=1) == 100.0


def test_authors_probe_runs_on_one_thread_whatever_the_jobs_pool(rng, monkeypatch):
    """Its floats then do not depend on --threads (MKL splits the batch's gradient sum over
    threads from about 16 dimensions), and its tiny steps skip the pool's overhead."""
    import torch

    seen = []
    train = metrics._train_authors_probe

    def recording(*args):
        seen.append(torch.get_num_threads())
        return train(*args)

    monkeypatch.setattr(metrics, "_train_authors_probe", recording)
    X, y = rng.normal(size=(300, 16)).astype(np.float32), rng.integers(0, 10, 300)
    budget = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        metrics.authors_linear_probe_accuracy(X, y, X, y, epochs=2)
        assert seen == [1] and torch.get_num_threads() == 2  # restored after it
    finally:
        torch.set_num_threads(budget)


def _blobs_analytic_embedding(rng, n_per_blob=150):
    """The analytic L_N embedding of four well-separated blobs (entries of size 1/sqrt(n))."""
    centres = np.array([[0, 0], [8, 0], [0, 8], [8, 8]], dtype=float)
    X = np.concatenate([c + rng.normal(size=(n_per_blob, 2)) for c in centres])
    y = np.repeat(np.arange(4), n_per_blob)
    W = sparse_affinity(X.astype(np.float32), GraphConfig(n_neighbors=10))
    W = W + 1e-6 * sp.csr_matrix(np.ones(W.shape))  # connect the blobs, barely
    U, _ = sparse_spectral_embedding(W, 4)
    return U, y


def test_converged_probe_reads_the_analytic_embedding_of_separated_blobs(rng):
    U, y = _blobs_analytic_embedding(rng)
    train = rng.permutation(len(y))[: len(y) // 2]
    test = np.setdiff1d(np.arange(len(y)), train)
    assert np.abs(U).max() < 0.2  # entries of size 1/sqrt(n): the scale the authors' probe cannot train on
    accuracy = metrics.linear_probe_accuracy(U[train], y[train], U[test], y[test])
    assert accuracy >= 99.0
    # no seed, and the embedding's scale does not matter
    assert metrics.linear_probe_accuracy(1e-3 * U[train], y[train], 1e-3 * U[test], y[test]) == accuracy
    # the authors' probe, on the same embedding, stays far below (the defect the converged probe fixes)
    assert metrics.authors_linear_probe_accuracy(U[train], y[train], U[test], y[test], epochs=20) < 90.0


def test_evaluate_embedding_reports_every_variant_of_each_measure(rng):
    Y = rng.normal(size=(60, 3)) + np.repeat(np.eye(3) * 5, 20, axis=0)
    labels = np.repeat(np.arange(3), 20)
    reference = Y[:, ::-1] + rng.normal(size=Y.shape)
    result = metrics.evaluate_embedding(Y, labels, reference)
    assert result["d_G"] == pytest.approx(metrics.grassmann_distance(Y, reference))
    assert result["d_G_colnorm"] == pytest.approx(metrics.grassmann_distance(Y, reference, variant="colnorm"))
    assert "d_G_code" not in result  # the authors' d_G needs their protocol: authors_grassmann_distance
    for variant, suffix in (("paper", ""), ("colnorm", "_colnorm"), ("code", "_code")):
        assert result[f"d_perp{suffix}"] == pytest.approx(metrics.orthogonality(Y, variant=variant))
    assert result["d_perp_colnorm"] == pytest.approx(result["d_perp_code"] ** 2)
    assert result["d_G"] != pytest.approx(result["d_G_colnorm"])  # a non-orthogonal basis tells them apart


def test_the_papers_orthogonality_measures_the_output_as_it_is(rng):
    """Eq. (d_perp) on Y itself: an orthonormal basis scores 0, the same basis scaled by 2
    scores K (2^2 - 1)^2; normalising the columns hides the scale, not the angles."""
    Q = np.linalg.qr(rng.normal(size=(50, 4)))[0]
    assert metrics.orthogonality(Q) == pytest.approx(0.0, abs=1e-20)
    assert metrics.orthogonality(2 * Q) == pytest.approx(4 * 9.0)
    assert metrics.orthogonality(2 * Q, variant="colnorm") == pytest.approx(0.0, abs=1e-20)
    skew = Q + 0.3 * Q[:, :1]
    assert metrics.orthogonality(skew, variant="colnorm") > 0.01


def test_own_basis_score_removes_specnet2s_d_g_floor(rng):
    """An exact SpecNet2 output spans D^-1/2 U: scored against U it keeps a floor, mapped by
    D^1/2 it scores zero."""
    W = sparse_affinity(rng.normal(size=(300, 3)).astype(np.float32), GraphConfig(n_neighbors=10))
    degrees = np.asarray(W.sum(axis=1)).ravel()
    U, _ = sparse_spectral_embedding(W, 4)
    exact_specnet2 = U / np.sqrt(degrees)[:, None]
    assert metrics.grassmann_distance(exact_specnet2, U) > 1e-3
    assert metrics.own_basis_grassmann_distance(exact_specnet2, U, degrees) == pytest.approx(0.0, abs=1e-10)


def test_graph_options(rng):
    X = torch.as_tensor(rng.normal(size=(50, 3)))
    for options in (
        {"scale": "global"},
        {"scale": "fixed", "sigma": 1.0},
        {"kernel": "code"},
        {"symmetrize": "max"},
        {"self_loops": False},
    ):
        W = dense_affinity(X, GraphConfig(n_neighbors=6, scale_neighbor=3, **options))
        assert torch.allclose(W, W.T)
        assert ((W > 0).sum(1) >= 5).all()
    with pytest.raises(ValueError, match="kernel must be one of"):
        GraphConfig(kernel="laplace")
    with pytest.raises(ValueError, match="unknown graph option"):
        GraphConfig.from_dict({"k": 3})
    with pytest.raises(ValueError, match="smaller than the batch size"):
        dense_affinity(X, GraphConfig(n_neighbors=50))
    # kernel forms: exp(-d^2/2s^2) vs exp(-d^2/s^2) on the same edge
    paper = dense_affinity(X, GraphConfig(n_neighbors=6, scale="fixed", sigma=1.0, symmetrize="max", self_loops=False))
    code = dense_affinity(
        X, GraphConfig(n_neighbors=6, scale="fixed", sigma=1.0, kernel="code", symmetrize="max", self_loops=False)
    )
    edge = paper > 0
    assert torch.allclose(code[edge], paper[edge] ** 2)


def test_sparse_affinity_matches_dense(rng):
    X = rng.normal(size=(120, 4)).astype(np.float32)
    config = GraphConfig(n_neighbors=10)
    dense = dense_affinity(torch.as_tensor(X, dtype=torch.float64), config).numpy()
    np.testing.assert_allclose(sparse_affinity(X, config).toarray(), dense, atol=1e-5)


def test_knn_memory_bound_shrinks_the_chunks_not_the_answer():
    """A chunk of the kNN holds at most max_block_bytes of scores, so memory stays flat as n
    grows (1M points would be 8 GB per 2,048-row chunk); the neighbours are the same."""
    from basis.graph import knn

    X = torch.as_tensor(np.random.default_rng(0).normal(size=(500, 8)), dtype=torch.float32)
    dists, indices = knn(X, 10)
    # 500 points x 4 bytes: 7 rows per chunk at 16 kB
    small_dists, small_indices = knn(X, 10, max_block_bytes=16_000)
    assert torch.equal(indices, small_indices)
    assert torch.allclose(dists, small_dists, atol=1e-5)


def test_a_probe_that_did_not_converge_is_an_error(rng):
    X = rng.normal(size=(300, 5))
    y = (X[:, 0] + 0.5 * rng.normal(size=300) > 0).astype(int)
    assert metrics.linear_probe_accuracy(X, y, X, y) > 50.0
    with pytest.raises(metrics.ProbeNotConvergedError, match="did not converge in probe_max_iter=2"):
        metrics.linear_probe_accuracy(X, y, X, y, max_iter=2)


def _autograd_probe(X, y, epochs, lr, batch_size, seed):
    """The authors' probe as they wrote it: nn.Linear, cross_entropy, backward, Adam."""
    generator = torch.Generator().manual_seed(seed)
    X, y = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(np.unique(y, return_inverse=True)[1])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        probe = torch.nn.Linear(X.shape[1], int(y.max()) + 1)
    optimizer = torch.optim.Adam(probe.parameters(), lr=lr)
    for _ in range(epochs):
        order = torch.randperm(len(X), generator=generator)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(probe(X[idx]), y[idx]).backward()
            optimizer.step()
    return probe.weight.detach(), probe.bias.detach()


@pytest.mark.parametrize("n, dim, n_classes, scale", [(700, 2, 3, 0.01), (531, 10, 10, 1.0), (300, 4, 2, 30.0)])
def test_authors_probe_trains_to_the_same_floats_as_autograd_and_torch_adam(rng, n, dim, n_classes, scale):
    # Batches of 100 leave a short last batch each epoch (700 % 100 == 0 does not: both kinds).
    X = (scale * rng.standard_normal((n, dim))).astype(np.float32)
    y = rng.integers(0, n_classes, n) * 3 + 1  # labels that are not 0..C-1
    expected = _autograd_probe(X, y, epochs=7, lr=1e-2, batch_size=100, seed=4)
    weight, bias = metrics._train_authors_probe(X, y, epochs=7, lr=1e-2, batch_size=100, seed=4)
    assert torch.equal(weight, expected[0]) and torch.equal(bias, expected[1])


def test_knn_of_chosen_queries_equals_those_rows_of_the_full_search():
    from basis.graph import knn

    X = torch.as_tensor(np.random.default_rng(1).normal(size=(300, 6)), dtype=torch.float32)
    dists, indices = knn(X, 8)
    rows = torch.tensor([0, 17, 299, 5])
    some_dists, some_indices = knn(X, 8, queries=rows)
    assert torch.equal(some_indices, indices[rows]) and torch.allclose(some_dists, dists[rows])


@pytest.mark.parametrize("backend", ["faiss-ivf", "faiss-hnsw"])
def test_faiss_neighbours_come_in_the_exact_searchs_format_and_recall(backend):
    pytest.importorskip("faiss")
    from basis.graph import faiss_knn, knn, neighbor_recall

    X = np.random.default_rng(2).normal(size=(3000, 8)).astype(np.float32)
    X[10] = X[11]  # a duplicate: each is the other's neighbour at distance 0, itself still first
    dists, indices = faiss_knn(X, 15, backend)
    exact_dists, exact_indices = knn(torch.from_numpy(X), 15)
    assert indices.dtype == torch.int64 and dists.shape == indices.shape == (3000, 15)
    assert torch.equal(indices[:, 0], torch.arange(3000)) and float(dists[:, 0].abs().max()) == 0.0
    assert bool((dists[:, 1:] >= dists[:, :-1]).all())  # sorted
    assert (indices[10] == 11).any() and (indices[11] == 10).any()
    recall = neighbor_recall(torch.from_numpy(X), indices, sample=500)
    assert 0.9 <= recall <= 1.0 and neighbor_recall(torch.from_numpy(X), exact_indices, sample=500) == 1.0


def test_an_exhaustive_ivf_search_gives_the_exact_graph():
    pytest.importorskip("faiss")
    X = np.random.default_rng(3).normal(size=(1500, 5)).astype(np.float32)
    report = {}
    # probing every list scans every point: the neighbours, so the graph, are the exact ones
    faiss_graph = sparse_affinity(X, GraphConfig(n_neighbors=12, neighbors="faiss-ivf", faiss_probe=38), report=report)
    exact_graph = sparse_affinity(X, GraphConfig(n_neighbors=12))
    assert report["neighbors"] == "faiss-ivf" and report["neighbor_recall"] == 1.0
    assert abs(faiss_graph - exact_graph).max() < 1e-6


def test_a_faiss_graph_without_faiss_installed_names_the_extra(monkeypatch):
    import builtins

    from basis.errors import InputError

    real_import = builtins.__import__

    def without_faiss(name, *args, **kwargs):
        if name == "faiss":
            raise ImportError("No module named 'faiss'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_faiss)
    with pytest.raises(InputError, match=r"pip install '\.\[faiss\]'"):
        sparse_affinity(
            np.zeros((50, 2), np.float32) + np.arange(50)[:, None],
            GraphConfig(n_neighbors=5, scale_neighbor=2, neighbors="faiss-ivf"),
        )


def test_the_neighbour_fields_at_their_defaults_leave_the_recorded_settings_as_they_were():
    # Stored references and checkpoints from before the fields compare their settings with these.
    assert GraphConfig().to_dict() == {
        "n_neighbors": 50,
        "scale": "local",
        "scale_neighbor": 7,
        "sigma": None,
        "kernel": "paper",
        "symmetrize": "mean",
        "self_loops": True,
    }
    assert GraphConfig(neighbors="faiss-ivf", faiss_probe=8).to_dict()["neighbors"] == "faiss-ivf"
    with pytest.raises(Exception, match="faiss_probe"):
        GraphConfig(faiss_probe=0)


def test_the_knn_score_block_follows_the_memory_the_host_has(monkeypatch):
    import psutil

    from basis.graph import affinity as graph

    class Scarce:
        available = 40_000_000  # 40 MB free: a quarter of it, not the 1 GiB cap

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Scarce)
    assert graph.score_block_bytes(torch.device("cpu")) == 10_000_000
    monkeypatch.undo()
    assert graph.score_block_bytes(torch.device("cpu")) <= graph.KNN_BLOCK_BYTES


def _batch_laplacian(X: np.ndarray, seed: int, n_neighbors: int = 50) -> torch.Tensor:
    from basis.graph import GraphConfig, dense_affinity
    from basis.spectral import normalized_laplacian

    rows = np.random.default_rng(seed).choice(len(X), 512, replace=False)
    W = dense_affinity(torch.from_numpy(X[rows]), GraphConfig(n_neighbors=n_neighbors))
    return normalized_laplacian(W).double()


def _largest_sine(U: torch.Tensor, V: torch.Tensor) -> float:
    """sin of the largest principal angle between the column spans of orthonormal U and V."""
    return float(torch.linalg.matrix_norm(V - U @ (U.T @ V), ord=2))


def test_the_subspace_solver_finds_the_clustered_subspace_to_1e_8():
    """The batches Table 1 aligns (clustered, Siamese-like features): every solve after the
    first (exact) one converges, its subspace is eigh's to a principal angle below 1e-8 and
    its eigenvalues are eigh's."""
    from basis.data.clusters import clustered_data
    from basis.spectral import SubspaceEigensolver

    X, _ = clustered_data(10_000)
    solver = SubspaceEigensolver(10)
    for seed in range(6):
        M = _batch_laplacian(X, seed)
        vals, vecs, converged = solver.solve(M, 2.0)
        exact_vals, exact_vecs = torch.linalg.eigh(M)
        assert bool(converged)
        assert _largest_sine(exact_vecs[:, :10], vecs) < 1e-8
        assert torch.allclose(vals, exact_vals[:10], atol=1e-8)


def test_a_small_eigengap_fails_the_subspace_check_and_basis_redoes_the_batch_exactly():
    """Raw digits at k = 10: lambda_10 - lambda_9 is ~0.03 and the filtered block does not
    reach the bound in its budget, so the check fails (it never passes a subspace that is
    off), and BASiS re-solves those batches exactly: its targets are then the exact ones."""
    from sklearn.datasets import load_digits

    from basis.estimators import BASiS
    from basis.spectral import SubspaceEigensolver

    X = load_digits().data.astype(np.float32)
    solver = SubspaceEigensolver(10)
    verdicts = []
    for seed in range(4):
        M = _batch_laplacian(X, seed, n_neighbors=10)
        _, vecs, converged = solver.solve(M, 2.0)
        exact = torch.linalg.eigh(M).eigenvectors[:, :10]
        verdicts.append(bool(converged))
        if converged:
            assert _largest_sine(exact, vecs) < 1e-8
    assert not all(verdicts[1:])
    options = dict(graph={"n_neighbors": 10}, batch_size=256, n_iter=6, seed=0, device="cpu")
    y = load_digits().target
    subspace = BASiS(eigensolver="subspace", **options).fit(X, y)
    exact = BASiS(eigensolver="exact", **options).fit(X, y)
    assert subspace.n_exact_redos_ > 0
    assert subspace.loss_curve_ == pytest.approx(exact.loss_curve_, rel=1e-6)

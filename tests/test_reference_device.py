"""The whole-set reference on the graph's device (#21): the graph assembled with sparse
tensors, components by FastSV over the edges, the Chebyshev-filtered eigensolver, and the
two-stage top-k; all run here on the CPU and are held to the host path (scipy, ARPACK)
and to dense ``eigh``."""

import warnings

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.csgraph
import torch

from basis import metrics
from basis.data.clusters import clustered_data
from basis.graph import GraphConfig, device_affinity, knn, smallest_k, sparse_affinity
from basis.references import analytic_embedding
from basis.spectral import (
    DisconnectedGraphWarning,
    chebyshev_eigensolve,
    fix_signs,
    laplacian_operator,
    sparse_component_labels,
    sparse_spectral_embedding,
    spectral_embedding,
)


def to_scipy(W: torch.Tensor) -> sp.csr_matrix:
    return sp.csr_matrix((W.values().numpy(), W.col_indices().numpy(), W.crow_indices().numpy()), shape=W.shape)


def touching_clusters(n: int = 3000, seed: int = 0) -> np.ndarray:
    """Ten Gaussian clusters that touch: one component, ten small eigenvalues, clustered
    like Siamese features."""
    return clustered_data(n, 16, 10, seed, spread=1.5)[0]


def curve(n: int = 3000, seed: int = 0) -> np.ndarray:
    """A noisy arc: a path-like graph whose eigenvalues come in close pairs."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 9, n)
    return (np.c_[np.cos(t), np.sin(t)] + 0.05 * rng.standard_normal((n, 2))).astype(np.float32)


@pytest.mark.parametrize("symmetrize", ["mean", "max"])
@pytest.mark.parametrize("self_loops", [True, False])
def test_the_device_graph_is_the_host_graph(symmetrize, self_loops):
    X = clustered_data(2000, 16, 10, 0)[0]
    config = GraphConfig(n_neighbors=15, symmetrize=symmetrize, self_loops=self_loops)
    host = sparse_affinity(X, config)
    device = to_scipy(device_affinity(X, config))
    assert device.nnz == host.nnz
    assert abs(device - host).max() == 0.0  # halves are exact; a max is a max


def test_device_components_are_scipys():
    rng = np.random.default_rng(0)
    for n_blobs in (1, 3, 7):
        X = np.concatenate([rng.normal(loc=10 * c, size=(150, 3)) for c in range(n_blobs)]).astype(np.float32)
        W = device_affinity(X, GraphConfig(n_neighbors=6, scale_neighbor=3))
        count, labels = sparse_component_labels(W)
        expected_count, expected = scipy.sparse.csgraph.connected_components(to_scipy(W), directed=False)
        assert count == expected_count == n_blobs
        # the same partition: each label is its component's smallest node
        _, relabelled = np.unique(labels.numpy(), return_inverse=True)
        assert metrics.clustering_accuracy(expected, relabelled) == 1.0
        assert (labels.numpy() <= np.arange(len(X))).all()


@pytest.mark.parametrize("data", [touching_clusters, curve])
@pytest.mark.parametrize("operator", ["normalized", "unnormalized"])
def test_the_chebyshev_solver_finds_the_eigenpairs_of_dense_eigh(data, operator):
    W = device_affinity(data(), GraphConfig(n_neighbors=15))
    apply, degrees, upper = laplacian_operator(W, operator)
    dense = torch.diag(degrees) - W.to_dense()
    if operator == "normalized":
        dense = torch.eye(len(degrees), dtype=torch.float64) - dense.neg().add(torch.diag(degrees)) * (
            degrees.rsqrt()[:, None] * degrees.rsqrt()[None, :]
        )
    expected_vals, expected_vecs = scipy.linalg.eigh(dense.numpy(), subset_by_index=[0, 9])
    vals, vecs = chebyshev_eigensolve(apply, len(degrees), 10, upper)
    np.testing.assert_allclose(vals.numpy(), expected_vals, atol=1e-10 * upper)
    np.testing.assert_allclose(fix_signs(vecs.numpy()), fix_signs(expected_vecs), atol=1e-8)


@pytest.mark.parametrize("operator", ["normalized", "unnormalized", "diffusion"])
@pytest.mark.parametrize("drop_trivial", [False, True])
def test_the_device_reference_is_the_dense_embedding_on_touching_clusters(operator, drop_trivial):
    """Held to the dense solver (``eigh`` of the whole matrix) to 1e-8, and to ARPACK's
    eigenvalues; ARPACK's own vectors are up to 1.6e-7 from dense here (its tolerance)."""
    X = touching_clusters()
    config = GraphConfig(n_neighbors=15)
    W = device_affinity(X, config)
    options = {"operator": operator, "drop_trivial": drop_trivial}
    dense, dense_vals = spectral_embedding(W.to_dense(), 10, **options)
    device, device_vals = sparse_spectral_embedding(W, 10, solver="chebyshev", **options)
    host, host_vals = sparse_spectral_embedding(sparse_affinity(X, config), 10, **options)
    np.testing.assert_allclose(device, dense.numpy(), atol=1e-8)
    np.testing.assert_allclose(device_vals, dense_vals.numpy(), atol=1e-10)
    np.testing.assert_allclose(device_vals, host_vals, atol=1e-10)
    np.testing.assert_allclose(device, host, atol=1e-6)


def test_arpack_is_the_less_exact_of_the_two_on_close_eigenvalue_pairs():
    """On the arc, ARPACK at its tolerance of 1e-8 is 3e-8 from dense eigh; the Chebyshev
    solver stays within 1e-9 (its residual tolerance is 1e-10 of the spectrum's bound)."""
    W = device_affinity(curve(), GraphConfig(n_neighbors=15))
    host = to_scipy(W)
    d = np.asarray(host.sum(axis=1)).ravel()
    L_N = np.eye(len(d)) - host.toarray() / np.sqrt(d)[:, None] / np.sqrt(d)[None, :]
    exact = fix_signs(scipy.linalg.eigh(L_N, subset_by_index=[0, 9])[1])
    device, _ = sparse_spectral_embedding(W, 10, solver="chebyshev")
    arpack, _ = sparse_spectral_embedding(host, 10)
    assert np.abs(device - exact).max() < 1e-9
    assert np.abs(device - exact).max() < np.abs(arpack - exact).max()


@pytest.mark.parametrize("operator", ["normalized", "unnormalized"])
def test_a_disconnected_graph_solved_on_the_device_keeps_its_null_space_out_of_the_block(operator):
    """Ten separate clusters and one eigenvector beyond the null space: the filter grows
    the null space fastest, so rounding that re-enters it must be projected out at every
    degree, or the solver converges to a larger eigenvalue (4.48 for 2.52 before)."""
    X = clustered_data(3000, 16, 10, 0)[0]
    config = GraphConfig(n_neighbors=15)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DisconnectedGraphWarning)
        host, host_vals = sparse_spectral_embedding(
            sparse_affinity(X, config), 10, operator=operator, drop_trivial=True
        )
        device, device_vals = sparse_spectral_embedding(
            device_affinity(X, config), 10, operator=operator, drop_trivial=True, solver="chebyshev"
        )
    np.testing.assert_allclose(device_vals, host_vals, atol=1e-10)
    assert device_vals[-1] > 0.1  # the first non-null eigenvalue (0.28 for L_N, 2.52 for L), not 0
    # the null space's basis is arbitrary: compare subspaces
    assert metrics.grassmann_distance(device, host) < 1e-7


def test_the_reference_on_the_device_path_is_the_host_reference():
    X = touching_clusters(4000, seed=1)
    settings = {"graph": GraphConfig(n_neighbors=20).to_dict(), "operator": "normalized", "drop_trivial": False}
    reports = {}
    embeddings = {}
    for solver in ("arpack", "chebyshev"):
        reports[solver] = {}
        embeddings[solver] = analytic_embedding(X, settings, 10, report=reports[solver], eigensolver=solver)
    assert reports["chebyshev"]["eigensolver"] == "chebyshev"
    assert metrics.grassmann_distance(embeddings["arpack"], embeddings["chebyshev"]) < 1e-7
    np.testing.assert_allclose(embeddings["chebyshev"], embeddings["arpack"], atol=1e-8)
    # auto is ARPACK on the CPU: the stored references keep their numbers
    auto = analytic_embedding(X, settings, 10, report=(report := {}))
    assert report["eigensolver"] == "arpack"
    assert np.array_equal(auto, embeddings["arpack"])


def test_the_two_stage_top_k_selects_what_one_stage_does():
    X = torch.as_tensor(clustered_data(5000, 16, 10, 0)[0])
    for block in (64, 1000, 4999):
        one_dists, one_idx = knn(X, 50)
        two_dists, two_idx = knn(X, 50, topk_block=block)
        assert torch.equal(one_dists, two_dists)
        # the same neighbours, but for the order among equal distances (float32 ties)
        differ = one_idx != two_idx
        tied = torch.zeros_like(differ)
        tied[:, 1:] |= one_dists[:, 1:] == one_dists[:, :-1]
        tied[:, :-1] |= one_dists[:, 1:] == one_dists[:, :-1]
        assert differ.sum() < 0.001 * differ.numel() and not (differ & ~tied).any()
    scores = torch.randn(3, 777, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="at least the number of neighbours"):
        smallest_k(scores, 50, 20)


def test_faiss_takes_the_gpu_index_only_where_a_gpu_and_its_gpu_build_are(monkeypatch):
    """FAISS's CPU build has no GPU API: the index stays on the host. With a GPU build (here
    its API stands in, handing back the host index) an IVF index moves to the job's GPU;
    HNSW, which FAISS cannot move, stays."""
    faiss = pytest.importorskip("faiss")
    from basis.graph import faiss_knn

    X = clustered_data(2000, 8, 5, 0)[0]
    expected = faiss_knn(X, 10, "faiss-ivf", report=(report := {}))
    assert report["faiss_device"] == "cpu"
    gpu = torch.device("cuda", 1)
    faiss_knn(X, 10, "faiss-ivf", device=gpu, report=(report := {}))
    assert report["faiss_device"] == "cpu"  # the pinned extra is FAISS's CPU build

    moved = []
    monkeypatch.setattr(faiss, "StandardGpuResources", lambda: "resources", raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 2, raising=False)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", lambda res, dev, index: moved.append(dev) or index, raising=False)
    dists, idx = faiss_knn(X, 10, "faiss-ivf", device=gpu, report=(report := {}))
    assert moved == [1] and report["faiss_device"] == "cuda:1"
    assert torch.equal(idx, expected[1]) and torch.equal(dists, expected[0])
    faiss_knn(X, 10, "faiss-hnsw", device=gpu, report=(report := {}))
    faiss_knn(X, 10, "faiss-ivf", device=torch.device("cpu"), report=(report := {}))
    assert moved == [1] and report["faiss_device"] == "cpu"

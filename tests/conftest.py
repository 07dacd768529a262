import numpy as np
import pytest
import torch

# Subprocesses get a hang guard, not a speed limit: speed is measured by the benchmarks,
# and a busy machine may take many times longer than an idle one.
HANG_GUARD_S = 3600


@pytest.fixture(autouse=True)
def _quiet_threads():
    torch.manual_seed(0)
    yield


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def random_connected_graph(rng, n=200, k=10):
    """Dense symmetric kNN-Gaussian adjacency of random points, connected by a ring."""
    from basis.graph import GraphConfig, dense_affinity

    X = torch.as_tensor(rng.normal(size=(n, 3)))
    W = dense_affinity(X, GraphConfig(n_neighbors=k, scale="global", scale_neighbor=k - 1))
    ring = torch.zeros_like(W)
    idx = torch.arange(n)
    ring[idx, (idx + 1) % n] = 0.01
    return W + ring + ring.T

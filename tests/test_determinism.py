"""basis.runtime.determinism: the sums that CUDA would add in an order of its threads' choosing,
counted on the CPU, and the code paths that run on a GPU kept free of them."""

import numpy as np
import pytest
import torch
from sklearn.datasets import make_moons

from basis.estimators import make_estimator
from basis.features import SiameseFeatures
from basis.graph import GraphConfig, device_affinity
from basis.models import SiameseCNN
from basis.runtime.determinism import OrderDependentSums
from basis.runtime.threads import one_torch_thread
from basis.spectral import sparse_spectral_embedding

LONG = torch.int64


def _index_add(index):
    return lambda: torch.zeros(3).index_add_(0, torch.tensor(index), torch.ones(len(index)))


def _scatter_sum(index, reduce="sum"):
    return lambda: torch.zeros(3).scatter_reduce_(
        0, torch.tensor(index), torch.ones(len(index)), reduce, include_self=False
    )


def _scatter_add_rows(index):
    return lambda: torch.zeros(2, 2).scatter_add_(1, torch.tensor(index), torch.ones(2, 2))


def _index_put(index, accumulate):
    return lambda: torch.zeros(3, 2).index_put_(
        (torch.tensor(index),), torch.ones(len(index), 2), accumulate=accumulate
    )


def _indexing_backward(index):
    def run():
        x = torch.zeros(4, requires_grad=True)
        x[torch.tensor(index)].sum().backward()

    return run


CASES = {
    # three addends in one slot (its own value and two from the index): order-dependent
    "index_add_ twice into a slot": (_index_add([0, 0, 1]), "index_add_"),
    "index_add_ once per slot": (_index_add([0, 2, 1]), None),
    "index_add_ of integers": (
        lambda: torch.zeros(3, dtype=LONG).index_add_(0, torch.tensor([0, 0, 0]), torch.ones(3, dtype=LONG)),
        None,
    ),
    # two addends commute: the edge-and-reverse merge of device_affinity
    "scatter sum of two, without the slot": (_scatter_sum([0, 0, 1]), None),
    "scatter sum of three, without the slot": (_scatter_sum([0, 0, 0]), "scatter_reduce_"),
    "scatter max of three": (_scatter_sum([0, 0, 0], "amax"), None),
    # slots are told apart by their other coordinates too
    "scatter_add_ twice into one row's slot": (_scatter_add_rows([[0, 0], [1, 0]]), "scatter_add_"),
    "scatter_add_ once per slot, rows alike": (_scatter_add_rows([[0, 1], [0, 1]]), None),
    "index_put_ accumulating twice": (_index_put([0, 0], True), "index_put_"),
    "index_put_ without accumulating": (_index_put([0, 0], False), None),
    "indexing's backward, one node thrice": (_indexing_backward([1, 1, 1]), "index_put"),
    "indexing's backward, distinct nodes": (_indexing_backward([0, 1, 2]), None),
    "bincount with weights": (lambda: torch.bincount(torch.tensor([1, 1, 1]), weights=torch.ones(3)), "bincount"),
    "bincount without weights": (lambda: torch.bincount(torch.tensor([1, 1, 1])), None),
}


@pytest.mark.parametrize("case", CASES)
def test_counts_the_sums_whose_order_cuda_leaves_open(case):
    run, flagged = CASES[case]
    with OrderDependentSums() as sums:
        run()
    assert dict(sums.counts) == ({flagged: 1} if flagged else {})


def test_the_device_reference_sums_every_slot_in_a_fixed_order():
    """The whole-set reference on a GPU (kNN graph and Chebyshev eigensolver, each built on
    the device) must give the same bytes on every run: today's degrees were an index_add_
    of every row's entries, which CUDA adds by atomics in a run-dependent order."""
    X = np.random.default_rng(0).normal(size=(600, 5))
    with OrderDependentSums() as sums:
        for operator in ("normalized", "unnormalized", "diffusion"):
            W = device_affinity(X, GraphConfig(n_neighbors=10))
            sparse_spectral_embedding(W, 3, operator=operator, solver="chebyshev")
    assert dict(sums.counts) == {}


@pytest.mark.parametrize("method", ["basis", "diffusion_net", "specnet1", "specnet2"])
def test_training_sums_every_slot_in_a_fixed_order(method):
    """Each method's training and inference, with one torch thread (the pipeline's stages
    then run on the counting thread)."""
    X, y = make_moons(400, noise=0.05, random_state=0)
    X = X.astype(np.float32)
    estimator = make_estimator(method, n_components=2, n_iter=5, batch_size=128, device="cpu", seed=0)
    with one_torch_thread(), OrderDependentSums() as sums:
        estimator.fit(X, y).transform(X)
    assert dict(sums.counts) == {}


def test_siamese_features_convolve_in_a_fixed_order_and_restore_cudnns_settings():
    """The feature network's convolutions (training and inference) run with cuDNN held to
    its deterministic algorithms, and the caller's cuDNN settings come back after each."""
    rng = np.random.default_rng(0)
    images = rng.random((24, 1, 28, 28), dtype=np.float32)
    labels = np.arange(24) % 3
    before = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True  # a caller's own choice
    try:
        with OrderDependentSums() as sums:
            SiameseFeatures(4, n_steps=2, pairs_per_step=8, device="cpu").fit(images, labels).transform(images)
        assert (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark) == (before[0], True)
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before
    assert dict(sums.counts) == {}
    with OrderDependentSums() as sums:  # the counter sees a convolution outside the setting
        torch.nn.functional.conv2d(torch.ones(1, 1, 3, 3), torch.ones(1, 1, 2, 2))
    assert dict(sums.counts) == {"convolution": 1}


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32), (1, 8, 8), (1, 16, 16), (3, 17, 23), (1, 9, 9)])
def test_the_feature_network_sizes_its_head_to_its_convolutions_output(shape):
    network = SiameseCNN(shape)
    with torch.no_grad():
        assert network(torch.zeros(2, *shape)).shape == (2, 16)
        assert network.conv(torch.zeros(1, *shape)).shape[1] == network.head[0].in_features


def test_a_figure_is_the_same_bytes_whenever_it_is_drawn(tmp_path, monkeypatch):
    """A PDF carries no creation date (matplotlib's default would date it, so a rerun of the
    same results would write other bytes)."""
    from basis.studies.figures import plt, save_figure

    drawn = []
    for epoch in ("1700000000", "1800000000"):  # what matplotlib dates a PDF by, when set
        monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0])
        save_figure(fig, tmp_path / epoch / "figure.png")
        drawn.append([(tmp_path / epoch / f"figure.{suffix}").read_bytes() for suffix in ("png", "pdf")])
    assert drawn[0] == drawn[1]

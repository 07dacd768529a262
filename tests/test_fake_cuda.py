"""The CUDA side of the code on fake CUDA tensors (``torch._subclasses.fake_tensor``).

A fake tensor has a device, a shape and a dtype but no values: torch's CUDA-built wheel
fakes ``device="cuda"`` without a driver. Each method's batch preparation and loss, BASiS's
captured parts and the reference's device path run on such tensors here; the fake mode
raises where a CPU tensor meets a CUDA one and where a value is read on the host (a
``DataDependentOutputException``), so what passes keeps everything on the device and
reads nothing but at the designed places, which run outside the fake mode: the estimators'
set-up (on the emulated CUDA side, :func:`basis.runtime.device.emulating_cuda`), draws
meant for the host (SpecNet2's neighbour gradient indexes a graph held by SciPy) and that
graph's rows.

What the fake mode cannot do, and is left to the emulated CUDA side (tests/test_cuda_side.py)
and the device gate on a GPU: make a CUDA generator (draws here use a CPU generator with
``device="cuda"``, whose output is a fake CUDA tensor), run backward through a vmap, and
a read's value (BASiS's one read per iteration is where its batch preparation stops here).
"""

import numpy as np
import pytest
import torch
from test_together import diffusion_net, estimator, siamese_like, specnet2, spectralnet
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily

from basis.estimators.training import StepTimer
from basis.runtime.device import emulating_cuda

CUDA = torch.device("cuda", 0)
HOST_TIMER_DEVICE = torch.device("cpu")  # a host-timed StepTimer: CUDA events need a driver


def _on_fake_cuda(value):
    if isinstance(value, torch.Tensor):
        return value.to(CUDA)
    if isinstance(value, tuple):
        return tuple(_on_fake_cuda(item) for item in value)
    return value


def _on_the_host(function):
    """``function`` run outside the fake mode: a designed host step."""

    def host(*args, **kwargs):
        with unset_fake_temporarily():
            return function(*args, **kwargs)

    return host


def _fake_cuda_estimator(make, X, y):
    """An estimator set up on the emulated CUDA side, then moved onto fake CUDA tensors
    (network, training data, anchors, targets, ...), inside the fake mode returned."""
    fitted = make(0)
    with emulating_cuda():
        fitted.start(X, y)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    mode.__enter__()
    fitted.model_.to(CUDA)
    pool = getattr(fitted, "_sample_pool", None)
    for name, value in list(vars(fitted).items()):
        if name != "model_":
            setattr(fitted, name, _on_fake_cuda(value))
    if pool is not None:  # the pool of non-anchor nodes is built once, at set-up
        fitted._sample_pool = (fitted.anchor_indices_, pool[1], _on_fake_cuda(pool[2]))
    fitted.device_ = CUDA
    fitted.device_generator_ = torch.Generator().manual_seed(0)  # no CUDA generator without a driver
    fitted._prepare_stream = None
    host_sample = fitted._sample
    fitted._sample = lambda *a, on_host=False, **k: (
        _on_the_host(host_sample)(*a, on_host=True, **k) if on_host else host_sample(*a, **k)
    )
    if hasattr(fitted, "_neighbour_rows"):
        fitted._neighbour_rows = _on_the_host(fitted._neighbour_rows)
    return fitted, mode


def _all_on_cuda(values) -> None:
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    assert tensors and all(isinstance(v, FakeTensor) and v.device == CUDA for v in tensors), [
        (type(v).__name__, v.device) for v in tensors
    ]


@pytest.fixture(scope="module")
def data():
    return siamese_like(n=600)


@pytest.mark.parametrize(
    "make",
    [spectralnet, diffusion_net, specnet2, lambda seed: specnet2(seed, gradient="neighbor")],
    ids=["spectralnet", "diffusion net", "specnet2 local", "specnet2 neighbour"],
)
@pytest.mark.filterwarnings("ignore::basis.spectral.dense.DisconnectedGraphWarning")
def test_each_baselines_batch_and_loss_stay_on_the_device(make, data):
    X, y = data
    fitted, mode = _fake_cuda_estimator(make, X, y)
    try:
        batch = fitted._next_batch(fitted._training_features, len(X), StepTimer(HOST_TIMER_DEVICE))
        tensors, _ = fitted._loss_tensors(batch)
        _all_on_cuda(tensors)
        loss, terms = fitted._loss_with(fitted.model_, *tensors)
        _all_on_cuda([loss, *terms.values()])
        assert loss.shape == ()
    finally:
        mode.__exit__(None, None, None)


@pytest.mark.filterwarnings("ignore::basis.spectral.dense.DisconnectedGraphWarning")
def test_basis_batch_embedding_alignment_and_loss_stay_on_the_device(data):
    """BASiS's batch up to its one designed read: the draw, the batch graph and its
    components, the subspace embedding, RANSAC's first round and the loss (each of them a
    part that ``cuda_graphs`` records)."""
    X, y = data
    fitted, mode = _fake_cuda_estimator(lambda seed: estimator(seed, eigensolver="subspace"), X, y)
    try:
        batch, X_batch = fitted._draw_batch(len(X), fitted._training_features, corrupt=True)
        _all_on_cuda([batch, X_batch])
        W, settled, labels = fitted._graph_and_components(X_batch)
        _all_on_cuda([W, settled, labels])
        embedded = fitted._embed_batch(X_batch, StepTimer(HOST_TIMER_DEVICE), exact=False)
        _all_on_cuda([embedded.phi, embedded.settled, embedded.converged])
        clean = batch[: len(fitted.anchor_indices_)] == fitted.anchor_indices_
        aligned, readings, search, _ = fitted._readings_or_none(embedded.phi, clean)
        _all_on_cuda([aligned, readings, search.pending])
        loss, terms = fitted._loss_with(fitted.model_, X_batch, aligned)
        _all_on_cuda([loss, *terms.values()])
    finally:
        mode.__exit__(None, None, None)


def test_the_reference_builds_its_graph_on_the_device():
    """The reference's device path (``eigensolver="chebyshev"``): the kNN graph assembled
    on the device where the points are."""
    from basis.graph import GraphConfig
    from basis.graph.affinity import knn

    X = torch.as_tensor(siamese_like(n=300)[0])
    with FakeTensorMode(allow_non_fake_inputs=True):
        X_cuda = X.to(CUDA)
        dists, idx = knn(X_cuda, GraphConfig(n_neighbors=10).n_neighbors, max_block_bytes=2**20)
        _all_on_cuda([dists, idx])
    assert np.asarray(X).shape == (300, 16)

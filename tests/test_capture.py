"""CUDA-graph capture of the step's fixed-shape parts (basis.runtime.capture, BASiS ``cuda_graphs``).

The CPU cannot record a CUDA graph, so the tests here check what capture relies on: the
segments read nothing back to the host (a captured function may not), the buffer
handling (emulated: the function replayed on the segment's own buffers) leaves every
number of a seeded run unchanged, and, on a GPU, the replayed step equals the eager one.
"""

import numpy as np
import pytest
import torch

from basis.data.clusters import clustered_data
from basis.errors import InputError
from basis.estimators import BASiS
from basis.graph import GraphConfig
from basis.runtime.capture import CapturedSegment, SegmentedCapture, checked
from basis.runtime.device import emulating_cuda
from basis.runtime.syncs import HostSyncCounter


def _basis(**params) -> BASiS:
    settings = dict(
        graph=GraphConfig(n_neighbors=10),
        batch_size=128,
        n_iter=12,
        anchors_per_class=6,
        device="cpu",
        seed=3,
        eigensolver="subspace",
    )
    return BASiS(4, **{**settings, **params})


def _data():
    return clustered_data(2000, 8, 4, seed=1)


def test_a_segment_warms_up_records_once_and_returns_copies():
    calls = []

    def double(x, y):
        calls.append(x.shape)
        return (2 * x + y,)

    segment = CapturedSegment(double, warmup=2, emulate=True)
    a, b = torch.arange(3.0), torch.ones(3)
    outputs = [segment(a + i, b)[0] for i in range(5)]
    assert [o.tolist() for o in outputs] == [[2 * (v + i) + 1 for v in range(3)] for i in range(5)]
    assert segment.replays == 3  # two eager calls, then the recording call and two more
    assert len({o.data_ptr() for o in outputs}) == 5  # each call its own copy, not the buffer
    outputs[-1].fill_(0)
    assert segment(a, b)[0].tolist() == [1.0, 3.0, 5.0]
    assert segment(torch.arange(4.0), torch.ones(4))[0].tolist() == [1.0, 3.0, 5.0, 7.0]  # new shape: eager
    assert segment.replays == 4 and segment.failure is None


def test_a_segment_runs_eagerly_on_the_cpu_unless_emulated():
    segment = CapturedSegment(lambda x: (x + 1,))
    for _ in range(4):
        assert segment(torch.zeros(2))[0].tolist() == [1.0, 1.0]
    assert segment.replays == 0


def _split_twice(x, y):
    """A function with two decompositions between three stretches of tensor work."""
    U, S, Vh = checked(torch.linalg.svd, x + 1.0, full_matrices=False)
    vals, vecs = checked(torch.linalg.eigh, (U * S) @ (U * S).mT + y)
    return (vecs @ vals.diag_embed() @ vecs.mT - y, Vh.abs().sum())


def test_a_segmented_capture_replays_around_its_decompositions():
    segment = SegmentedCapture(_split_twice, warmup=1, emulate=True)
    inputs = [
        (torch.randn(5, 3, generator=torch.Generator().manual_seed(i)).double(), torch.eye(5).double() * i)
        for i in range(4)
    ]
    outputs = [segment(*x) for x in inputs]
    for (x, y), got in zip(inputs, outputs):
        expected = _split_twice(x, y)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
    assert segment.replays == 3 and segment.splits == 2  # one eager call, then the recording and two replays
    assert len({o[0].data_ptr() for o in outputs}) == 4  # each call its own copy


def test_a_segmented_capture_refuses_a_function_whose_decompositions_change():
    """A chain of graphs replays the recorded decompositions: a function that picks them
    by a host value (which no graph could hold) must fail, not replay the wrong ones."""

    def steered(x):
        if float(x.sum()) > 0:
            return (checked(torch.linalg.eigh, x @ x.mT)[0],)
        return (checked(torch.linalg.svd, x)[1],)

    segment = SegmentedCapture(steered, warmup=0, emulate=True)
    segment(torch.ones(3, 3))
    with pytest.raises(RuntimeError, match="decompositions changed"):
        segment(-torch.ones(3, 3))


def test_outside_a_recording_checked_is_a_plain_call():
    A = torch.randn(4, 3, generator=torch.Generator().manual_seed(0)).double()
    for got, expected in zip(
        checked(torch.linalg.svd, A, full_matrices=False), torch.linalg.svd(A, full_matrices=False)
    ):
        assert torch.equal(got, expected)


def test_the_captured_parts_read_nothing_back_to_the_host():
    """A CUDA graph cannot hold a host read: the graph and components, the subspace
    embedding, RANSAC's first round with the aligned batch and the gradient step must make
    none; the decompositions that check on the host (the Rayleigh-Ritz eigh, the first
    round's three SVDs) are the splits between a recorded chain's graphs."""
    X, y = _data()
    estimator = _basis(cuda_graphs=True)
    with emulating_cuda():
        estimator.start(X, y)
        batch = estimator.prepare_batch()
    segments = estimator.captured_segments()
    assert set(segments) == {"graph", "eigensolve", "alignment", "gradient"}
    X_batch, phi, _ = batch.content
    W, _, _ = estimator._graph_and_components(X_batch)
    with HostSyncCounter() as syncs:
        segments["graph"].function(X_batch)
        segments["gradient"].function(X_batch, phi)
    assert syncs.total == 0 and not syncs.linalg_checks, (syncs.counts, syncs.linalg_checks)
    with HostSyncCounter() as syncs:
        segments["eigensolve"].function(W, torch.tensor(0.5, dtype=torch.float64))
    assert syncs.total == 0 and syncs.linalg_checks == {"eigh": 1}, (syncs.counts, syncs.linalg_checks)
    n_anchors = len(estimator.anchor_indices_)
    noise = torch.rand(estimator.ransac_iter, n_anchors, generator=torch.Generator().manual_seed(0))
    reference, clean = estimator.reference_anchor_embedding_, torch.ones(n_anchors, dtype=torch.bool)
    with HostSyncCounter() as syncs:
        segments["alignment"].function(phi, reference, clean, noise)
    assert syncs.total == 0 and syncs.linalg_checks == {"svd": 3}, (syncs.counts, syncs.linalg_checks)


def test_seeded_runs_are_the_same_with_the_parts_replayed():
    X, y = _data()
    # The CUDA side (emulated) both ways: its optimiser, draws and solvers, graphs or not.
    with emulating_cuda():
        replayed = _basis(cuda_graphs=True).fit(X, y)
        eager = _basis().fit(X, y)
    assert eager.captured_segments() == {}
    assert {name: s.replays for name, s in replayed.captured_segments().items()} == {
        "graph": 1 + 12 - 2,  # the reference batch and 12 steps' batches, less 2 eager warm-up calls
        "eigensolve": 12 - 1 - 2,  # the first subspace solve is exact (it sets the filter's cut)
        "alignment": 12 - 2,
        "gradient": 12 - 2,
    }
    # RANSAC's first round is recorded as four graphs around its three SVDs: the anchors'
    # rank and fallback, the samples' fits, the first refit
    assert replayed.captured_segments()["alignment"].splits == 3
    assert replayed.loss_curve_ == eager.loss_curve_
    np.testing.assert_array_equal(replayed.transform(X), eager.transform(X))


def test_cuda_graphs_takes_a_boolean():
    X, y = _data()
    with pytest.raises(InputError, match=r"cuda_graphs='yes' \(str\) is not valid: expected bool"):
        _basis(cuda_graphs="yes").fit(X, y)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the device gate checks it)")
def test_on_a_gpu_the_replayed_step_equals_the_eager_one():
    X, y = _data()
    settings = dict(device="cuda", n_iter=30)
    replayed = _basis(cuda_graphs=True, **settings).fit(X, y)
    eager = _basis(**settings).fit(X, y)
    segments = replayed.captured_segments()
    assert {name: s.failure for name, s in segments.items()} == {
        "graph": None,
        "eigensolve": None,
        "alignment": None,
        "gradient": None,
    }
    assert min(s.replays for s in segments.values()) > 20
    np.testing.assert_allclose(replayed.loss_curve_, eager.loss_curve_, rtol=1e-6)
    np.testing.assert_allclose(replayed.transform(X), eager.transform(X), rtol=1e-5, atol=1e-6)


def test_at_the_papers_size_the_replayed_chain_takes_the_small_design_branch(monkeypatch):
    """250 anchors (25 per class, Table 1's protocol) with stratified RANSAC samples: on
    CUDA every design taller than 32 rows is reduced to its triangular factor first, inside
    the recorded chain; replayed (emulated) on the CUDA side it gives the eager run's numbers."""
    X, y = clustered_data(3000, 16, 10, seed=2)
    reductions = []
    qr = torch.linalg.qr

    def counted_qr(A, *args, **kwargs):
        reductions.append(A.shape[-2])
        return qr(A, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "qr", counted_qr)
    settings = dict(n_components=10, batch_size=512, anchors_per_class=25, ransac_sampling="stratified", n_iter=8)
    with emulating_cuda():
        replayed = BASiS(**settings, graph=GraphConfig(n_neighbors=15), device="cpu", seed=1, cuda_graphs=True)
        replayed.fit(X, y)
        eager = BASiS(**settings, graph=GraphConfig(n_neighbors=15), device="cpu", seed=1).fit(X, y)
    assert len(replayed.anchor_indices_) == 250 and max(reductions) >= 250
    assert {name: s.failure for name, s in replayed.captured_segments().items()} == dict.fromkeys(
        ("graph", "eigensolve", "alignment", "gradient")
    )
    assert min(s.replays for s in replayed.captured_segments().values()) >= 8 - 3
    assert replayed.loss_curve_ == eager.loss_curve_ and replayed.n_unsure_ == eager.n_unsure_
    np.testing.assert_array_equal(replayed.transform(X), eager.transform(X))

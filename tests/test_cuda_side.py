"""The CUDA side of every device decision, run on the CPU (basis.runtime.device.emulating_cuda).

No test machine has a GPU, so the device policy can take the CUDA side for CPU tensors:
the fused Adam as CUDA runs it, draws from a device generator, a stand-in side stream and
stand-in events, the GPU's solver defaults and emulated capture. On that side the suite's
properties must hold as on the CPU's: seeds trained together are their solo runs, a seeded
run gives the same bytes twice, host reads per iteration stay as counted, and every method
and study runs. A job bound to a second GPU does all its work there.
"""

from functools import partial

import numpy as np
import pytest
import torch
import yaml
from test_together import ROOT, SEEDS, diffusion_net, estimator, siamese_like, specnet2, spectralnet

from basis.estimators.together import fit_together, nudged_fit
from basis.runtime import device as devices
from basis.runtime.device import emulating_cuda
from basis.runtime.syncs import HostSyncCounter

METHODS = [estimator, partial(estimator, average_tail=0.4), spectralnet, diffusion_net, specnet2]
IDS = ["basis", "basis, averaged weights", "spectralnet", "diffusion net", "specnet2"]
pytestmark = pytest.mark.filterwarnings("ignore::basis.spectral.dense.DisconnectedGraphWarning")


def test_every_device_decision_takes_the_cuda_side_when_emulated():
    cpu = torch.device("cpu")
    assert not devices.is_cuda(cpu) and devices.side_stream(cpu) is None
    assert not devices.seeds_together_by_default("cpu") and devices.sparse_solver_by_default("cpu") == "arpack"
    with emulating_cuda():
        assert devices.is_cuda(cpu) and devices.captures_on(cpu) and devices.subspace_by_default(cpu)
        assert devices.seeds_together_by_default("cpu") and devices.sparse_solver_by_default("cpu") == "chebyshev"
        assert isinstance(devices.side_stream(cpu), devices.StandInStream)
        fitted = estimator(0, n_iter=2).fit(*siamese_like(n=300))
        assert isinstance(fitted.optimizer_, torch.optim.Adam)
        assert fitted.optimizer_.param_groups[0]["fused"]
    assert not devices.is_cuda(cpu)


@pytest.mark.parametrize("make", METHODS, ids=IDS)
def test_seeds_trained_together_are_their_solo_runs_with_the_fused_optimiser(make):
    """The gradients of the batched step come transposed from vmap; the fused Adam reads a
    gradient in its parameter's layout, so unless they are laid out as the parameters it
    moves the wrong weights (the seeds' embeddings then differ from solo by their scale)."""
    X, y = siamese_like()
    with emulating_cuda():
        solo = [make(seed).fit(X, y) for seed in SEEDS]
        together = fit_together([make(seed) for seed in SEEDS], [(X, y)] * len(SEEDS))
        one_ulp = max(_difference(X, alone, nudged_fit(make(seed), X, y)) for seed, alone in zip(SEEDS, solo))
    assert all(fitted.optimizer_.param_groups[0]["fused"] for fitted in solo)
    for alone, joint in zip(solo, together):
        np.testing.assert_allclose(joint.loss_curve_, alone.loss_curve_, rtol=1e-5)
        assert _difference(X, alone, joint) <= max(1e-5, 2 * one_ulp)
    assert not np.allclose(together[0].transform(X), together[1].transform(X))


def _difference(X, a, b) -> float:
    expected = a.transform(X)
    return float(np.abs(b.transform(X) - expected).max() / np.abs(expected).max())


@pytest.mark.parametrize("make", [*METHODS, partial(specnet2, gradient="neighbor")], ids=[*IDS, "specnet2 neighbour"])
def test_a_seeded_run_gives_the_same_bytes_twice_on_the_cuda_side(make):
    X, y = siamese_like(seed=4)
    with emulating_cuda():
        first, second = make(1).fit(X, y), make(1).fit(X, y)
    assert first.loss_curve_ == second.loss_curve_
    assert first.transform(X).tobytes() == second.transform(X).tobytes()


@pytest.mark.parametrize("make", METHODS, ids=IDS)
def test_host_reads_per_iteration_on_the_cuda_side(make):
    """BASiS: its one designed read per iteration (at most 1.1); a baseline: its losses once
    per block of LOSS_BLOCK steps. Counted as the difference of two runs that differ in
    their number of iterations only, with one torch thread (the counter is per thread)."""
    X, y = siamese_like(seed=2)
    reads = {}
    with emulating_cuda(), _one_thread():
        for n_iter in (100, 200):
            with HostSyncCounter() as syncs:
                make(0, n_iter=n_iter).fit(X, y)
            reads[n_iter] = syncs.total
    per_iteration = (reads[200] - reads[100]) / 100
    is_basis = getattr(make, "func", make) is estimator
    assert per_iteration <= (1.1 if is_basis else 2 / 100 + 0.01), reads


def test_the_siamese_features_read_their_loss_once_per_block():
    from basis.features import SiameseFeatures

    rng = np.random.default_rng(0)
    images = rng.normal(size=(64, 1, 8, 8)).astype(np.float32)
    labels = np.arange(64) % 2
    reads, curves = {}, {}
    with emulating_cuda(), _one_thread():
        for n_steps in (50, 100):
            features = SiameseFeatures(4, n_steps=n_steps, pairs_per_step=16, device="cpu", progress=False)
            with HostSyncCounter() as syncs:
                features.fit(images, labels)
            reads[n_steps], curves[n_steps] = syncs.total, features.loss_curve_
    assert reads[100] - reads[50] <= 1, reads
    assert len(curves[100]) == 100 and curves[100][:50] == curves[50]


class _one_thread:
    def __enter__(self):
        self.threads = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.threads)


def test_every_study_runs_on_the_cuda_side(tmp_path):
    """Each study of the tiny test config, run as its job runs it, on the emulated CUDA
    side (the variants study on a Siamese-like features file)."""
    from basis.plan.registry import study_names, study_parameters, study_runs
    from basis.studies import study_function

    X, y = siamese_like(n=1500, classes=10)
    np.savez(
        tmp_path / "digits.npz",
        X_train=X[:1200],
        y_train=y[:1200],
        X_test=X[1200:],
        y_test=y[1200:],
        dataset="digits",
        data_seed=0,
    )
    config = yaml.safe_load((ROOT / "tests/configs/tiny.yaml").read_text())
    ran = []
    for name in study_names():
        for run, settings in study_runs(name, config["experiments"][name]).items():
            if "features_dir" in settings:
                settings = {**settings, "features_dir": str(tmp_path)}
            accepted = study_parameters(name, include_common=True)
            with emulating_cuda() as cuda:
                metrics, _ = study_function(name)(**settings, **({"device": "auto"} if "device" in accepted else {}))
            assert metrics and all(np.isfinite(v) or np.isnan(v) for v in metrics.values()), (name, run)
            ran.append((name, run, bool(cuda.calls)))
    assert {name for name, _, _ in ran} == set(study_names())
    # The studies that train take the device's side (streams, events); the others train nothing.
    assert {name for name, _, touched in ran if touched} >= {"toy", "bunny", "feature_change", "variants"}, ran


def test_a_job_bound_to_the_second_gpu_does_all_its_work_there():
    """Two GPUs, the second with more free memory: ``auto`` takes it, and the training, its
    step timer, side stream, capture and memory accounting all use it; nothing touches the
    first."""
    from basis.cli.bench import bench_reference

    X, y = siamese_like(n=600)
    with emulating_cuda(devices=2, free=[2**30, 8 * 2**30]) as cuda:
        assert devices.resolve_device("auto") == torch.device("cpu")  # emulated: CPU tensors
        estimator(0, n_iter=6, cuda_graphs=True).fit(X, y)
        bench_reference(n=2000, dim=8, n_components=4, n_neighbors=10, device="auto")
    touched = {index for _, index in cuda.calls}
    assert touched == {1}, sorted(set(cuda.calls))
    kinds = {what for what, _ in cuda.calls}
    assert {"bind", "side_stream", "record_event", "max_memory_allocated"} <= kinds, kinds


def test_auto_takes_the_freest_gpu_without_opening_a_context_on_each(monkeypatch):
    """The real CUDA branch of ``auto`` with the policy reporting two GPUs: free memory from
    NVML's view (``nvidia-smi``), never ``torch.cuda.mem_get_info``, which opens a context on
    every device it asks; the chosen one becomes the current device."""
    bound = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", bound.append)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *_: pytest.fail("a CUDA context was opened to probe"))
    monkeypatch.setattr(devices, "_free_memory_from_smi", lambda count: [10 * 2**20, 70 * 2**20][:count])
    assert devices.resolve_device("auto") == torch.device("cuda", 1)
    assert bound == [1]


def test_free_memory_is_read_in_torchs_numbering_of_the_visible_devices():
    answer = "0, GPU-aaaa, 100\n1, GPU-bbbb, 300\n2, GPU-cccc, 200\n"
    assert devices.free_memory_by_visibility(answer, None, 3) == [100 * 2**20, 300 * 2**20, 200 * 2**20]
    assert devices.free_memory_by_visibility(answer, "2,0", 2) == [200 * 2**20, 100 * 2**20]
    assert devices.free_memory_by_visibility(answer, "GPU-bbbb", 1) == [300 * 2**20]
    assert devices.free_memory_by_visibility(answer, "5", 1) is None  # not a device it lists
    assert devices.free_memory_by_visibility("garbage", None, 1) is None
    assert devices.free_memory_by_visibility("0, GPU-aaaa, 0\n", None, 1) == [0]  # a full GPU is still listed


def _batches():
    """512-node batch graphs of the data that breaks things: well-separated clusters,
    touching clusters (one component, ten small eigenvalues) and Siamese-like features."""
    from basis.data.clusters import clustered_data
    from basis.graph.affinity import dense_affinity
    from basis.graph.config import GraphConfig

    graph = GraphConfig(n_neighbors=20, scale_neighbor=10)
    rng = np.random.default_rng(0)
    for name, X in (
        ("clusters", clustered_data(6000, 16, 10, 0, 3.0)[0]),
        ("touching", clustered_data(6000, 16, 10, 0, 1.5)[0]),
        ("siamese", siamese_like(n=6000, classes=10)[0]),
    ):
        for _ in range(4):
            yield name, dense_affinity(torch.as_tensor(X[rng.choice(len(X), 512, replace=False)]), graph)


def _largest_angle(A: torch.Tensor, B: torch.Tensor) -> float:
    """The largest principal angle between the column spaces of A and B, in radians."""
    cosines = torch.linalg.svdvals(torch.linalg.qr(A.double()).Q.T @ torch.linalg.qr(B.double()).Q)
    return float(torch.arccos(cosines.clamp(max=1.0)).max())


def test_the_batch_eigenproblem_is_solved_in_float32_on_the_cuda_side_and_keeps_its_subspace():
    """BASiS's hot loop, the batch's subspace solve, runs in the graph's float32 on a GPU
    (float64 on the CPU, for LAPACK): its subspace is float64's to 1e-5 rad where the
    eigengap after the K-th eigenvalue is wide, and it meets its tolerance, which follows
    the precision (1e-8 would send every float32 batch to the exact redo)."""
    from basis.spectral import SubspaceEigensolver, embed_graph
    from basis.spectral.dense import normalized_laplacian

    K = 10
    with emulating_cuda():
        solver = SubspaceEigensolver(K)
        for name, W in _batches():
            phi, _, converged = embed_graph(W, K, solver=solver)
            exact = torch.linalg.eigh(normalized_laplacian(W).double()).eigenvectors[:, :K]
            assert solver.start is None or solver.start.dtype == torch.float32, solver.start.dtype
            assert phi.dtype == torch.float32 and bool(converged), name
            assert _largest_angle(phi, exact) < 1e-5, name
        assert solver.start.dtype == torch.float32
    assert devices.eigensolver_dtype(W) == torch.float64  # the CPU's side: LAPACK in float64
    assert solver.tolerance_for(torch.float64) == 1e-8


def test_basis_on_the_cuda_side_in_float32_embeds_as_the_cpu_does_in_float64():
    """A whole BASiS fit with the float32 subspace solve against the CPU's float64 one, on
    Siamese-like features: d_G to the analytic embedding within 10 %, and no more exact
    redos than the CPU's."""
    from basis.metrics import grassmann_distance
    from basis.references import analytic_embedding

    X, y = siamese_like(n=1200, classes=6, seed=3)
    make = partial(estimator, 0, n_iter=150, eigensolver="subspace")
    settings = {"graph": {"n_neighbors": 10, "scale_neighbor": 7}, "operator": "normalized", "drop_trivial": False}
    reference = analytic_embedding(X, settings, 6)
    cpu = make().fit(X, y)
    with emulating_cuda():
        cuda_side = make().fit(X, y)
        assert cuda_side.subspace_solver_.start.dtype == torch.float32
    d_cpu, d_cuda = (grassmann_distance(fitted.transform(X), reference) for fitted in (cpu, cuda_side))
    assert abs(d_cuda - d_cpu) <= 0.1 * d_cpu, (d_cpu, d_cuda)
    assert cuda_side.n_exact_redos_ <= cpu.n_exact_redos_, (cpu.n_exact_redos_, cuda_side.n_exact_redos_)

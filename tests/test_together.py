"""Seeds trained together (basis.estimators.together): each seed's numbers are its solo run's."""

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_GUARD_S

from basis.errors import InputError
from basis.estimators import BASiS, DiffusionNet, SpecNet2, SpectralNet
from basis.estimators.together import fit_together, nudged_fit

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (0, 1, 2)


def siamese_like(n=900, classes=6, dim=16, seed=0):
    """Tight clusters on a low-dimensional subspace: nearly piecewise-constant features,
    as Siamese features are, whose batch graphs are close to disconnected."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, 3)) @ rng.normal(size=(3, dim))
    y = np.arange(n) % classes
    X = centres[y] + 0.05 * rng.normal(size=(n, dim))
    return X.astype(np.float32), y


def estimator(seed, **extra):
    settings = dict(
        n_components=6,
        batch_size=128,
        n_iter=25,
        graph={"n_neighbors": 10, "scale_neighbor": 7},
        anchors_per_class=5,
        hidden=(64, 64),
        lr=1e-3,
        device="cpu",
    )
    return BASiS(seed=seed, **{**settings, **extra})


def spectralnet(seed, **extra):
    settings = dict(n_components=6, batch_size=128, n_iter=25, graph={"n_neighbors": 10}, hidden=(64, 64), lr=1e-3)
    return SpectralNet(seed=seed, device="cpu", **{**settings, **extra})


def diffusion_net(seed, **extra):
    settings = dict(n_components=6, batch_size=128, n_iter=25, graph={"n_neighbors": 10}, hidden=(64, 64), lr=1e-3)
    return DiffusionNet(seed=seed, device="cpu", operator="normalized", drop_trivial=False, **{**settings, **extra})


def specnet2(seed, **extra):
    settings = dict(n_components=6, batch_size=128, n_iter=25, graph={"n_neighbors": 10}, hidden=(64, 64), lr=1e-3)
    return SpecNet2(seed=seed, device="cpu", operator="normalized", **{**settings, **extra})


@pytest.mark.parametrize(
    "make",
    [estimator, partial(estimator, average_tail=0.4), spectralnet, diffusion_net, specnet2],
    ids=["basis, last weights", "basis, averaged weights", "spectralnet", "diffusion net", "specnet2"],
)
@pytest.mark.filterwarnings("ignore::basis.spectral.dense.DisconnectedGraphWarning")
def test_each_seed_trained_together_is_its_solo_run(make, tmp_path):
    X, y = siamese_like()
    solo = [make(seed).fit(X, y) for seed in SEEDS]
    together = fit_together([make(seed) for seed in SEEDS], [(X, y)] * len(SEEDS))

    def difference(a, b):
        expected = a.transform(X)
        return np.abs(b.transform(X) - expected).max() / np.abs(expected).max()

    # The batched matrix products sum in another order than the solo ones: float rounding,
    # which training amplifies (SpecNet2's Rayleigh-Ritz step most) as it amplifies one ulp
    # in the initial weights.
    one_ulp = max(difference(alone, nudged_fit(make(seed), X, y)) for seed, alone in zip(SEEDS, solo))
    for alone, joint in zip(solo, together):
        # The batches, graphs, targets and alignments do not depend on the network: the same.
        np.testing.assert_array_equal(getattr(alone, "alignment_errors_", []), getattr(joint, "alignment_errors_", []))
        np.testing.assert_allclose(joint.loss_curve_, alone.loss_curve_, rtol=1e-5)
        assert difference(alone, joint) <= max(1e-5, 2 * one_ulp)
        assert joint.n_steps_ == alone.n_steps_ == 25
    # Different seeds stay different networks (no parameter shared by mistake).
    assert not np.allclose(together[0].transform(X), together[1].transform(X))
    # A saved seed holds its own weights, not the storage of every seed's.
    alone_file, joint_file = tmp_path / "alone.pt", tmp_path / "joint.pt"
    solo[1].save(alone_file)
    together[1].save(joint_file)
    assert joint_file.stat().st_size == alone_file.stat().st_size


def test_each_seeds_callback_sees_its_own_steps():
    X, y = siamese_like(seed=1)
    seen = {seed: [] for seed in SEEDS}
    estimators = [
        estimator(seed, callback=lambda step, info, seed=seed: seen[seed].append((step, info))) for seed in SEEDS
    ]
    fit_together(estimators, [(X, y)] * len(SEEDS))
    for seed, fitted in zip(SEEDS, estimators):
        assert [step for step, _ in seen[seed]] == list(range(25))
        assert [info["loss"] for _, info in seen[seed]] == fitted.loss_curve_
        assert all(info["seeds_together"] == len(SEEDS) and info["ms_gradient"] > 0 for _, info in seen[seed])


@pytest.mark.filterwarnings("ignore::basis.spectral.dense.DisconnectedGraphWarning")
def test_each_seed_logs_its_own_loss_terms():
    """Diffusion Net logs its data and eigen terms per step: trained together, each seed's
    callback gets its own, as alone (to float rounding)."""
    X, y = siamese_like(seed=3)
    logged = {}

    def make(seed, how):
        return diffusion_net(seed, callback=lambda step, info: logged.setdefault((how, seed), []).append(info))

    for seed in SEEDS:
        make(seed, "alone").fit(X, y)
    fit_together([make(seed, "together") for seed in SEEDS], [(X, y)] * len(SEEDS))
    for seed in SEEDS:
        for term in ("data_term", "eigen_term"):
            alone = [info[term] for info in logged["alone", seed]]
            together = [info[term] for info in logged["together", seed]]
            assert len(together) == 25 and all(type(value) is float for value in alone + together)
            np.testing.assert_allclose(together, alone, rtol=1e-5)
    # Seeds differ: the terms are not one seed's handed to all.
    assert logged["together", 0][-1]["data_term"] != logged["together", 1][-1]["data_term"]


def test_losses_are_read_from_the_device_in_blocks_not_per_step():
    """On CUDA a read makes the host wait; the joint step reads the seeds' losses once per
    LOSS_BLOCK steps, as a solo run does (counted on the CPU)."""
    from basis.runtime.syncs import HostSyncCounter

    X, y = siamese_like(seed=2)
    solo = estimator(0, n_iter=60)
    with HostSyncCounter() as alone:
        solo.fit(X, y)
    estimators = [estimator(seed, n_iter=60) for seed in SEEDS]
    with HostSyncCounter() as joint:
        fit_together(estimators, [(X, y)] * len(SEEDS))
    # Each seed's preparation reads what its solo run reads; the losses add no read per step.
    assert joint.total <= len(SEEDS) * alone.total, (joint.counts, alone.counts)


@pytest.mark.filterwarnings("ignore::basis.spectral.dense.DisconnectedGraphWarning")
def test_logged_terms_ride_with_the_losses_not_one_read_per_step():
    """Diffusion Net's data and eigen terms are read with the losses once per block, alone
    and trained together: a read per step would make a CUDA host wait at every step."""
    from basis.runtime.syncs import HostSyncCounter

    X, y = siamese_like(seed=2)
    with HostSyncCounter() as joint:
        fit_together([diffusion_net(seed, n_iter=60) for seed in SEEDS], [(X, y)] * len(SEEDS))
    # Set-up and post-processing read a few values per seed; a read per step would add 60.
    assert joint.total < 60, joint.counts
    reads = {}
    for n_iter in (60, 120):  # the same set-up; 60 more steps add one block's read
        with HostSyncCounter() as alone:
            diffusion_net(0, n_iter=n_iter).fit(X, y)
        reads[n_iter] = alone.total
    assert reads[120] - reads[60] <= 2, reads


def test_what_cannot_train_together_is_refused_before_training():
    X, y = siamese_like()
    neighbour_gradient = specnet2(0, gradient="neighbor")
    with pytest.raises(InputError, match="SpecNet2 cannot train its seeds together: with gradient='neighbor'"):
        fit_together([neighbour_gradient, specnet2(1, gradient="neighbor")], [(X, y)] * 2)
    assert not hasattr(neighbour_gradient, "model_")
    with pytest.raises(InputError, match="differ only in their seed, not in lr"):
        fit_together([estimator(0), estimator(1, lr=1e-2)], [(X, y)] * 2)
    unfitted = estimator(0)
    with pytest.raises(InputError, match="2 estimators but 1 training sets"):
        fit_together([unfitted, estimator(1)], [(X, y)])
    assert not hasattr(unfitted, "model_")


def _basis(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "basis", *args], capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=cwd
    )


def test_the_cli_trains_seeds_together_with_a_run_per_seed(tmp_path):
    common = ["run", "--method", "basis", "--dataset", "two_moons", "--device", "cpu", "--json", "--seeds", "0", "1"]
    common += ["--set", "n_iter=20", "--set", "eval.authors_probe_epochs=1"]
    store = tmp_path / "store"
    tracked = ["--track", "t", "--store", str(store)]
    on = _basis(*common, "--seeds-together", "on", "--out", str(tmp_path / "on/{seed}"), *tracked)
    off = _basis(*common, "--seeds-together", "off", "--out", str(tmp_path / "off/{seed}"))
    assert on.returncode == 0 and off.returncode == 0, on.stderr[-2000:] + off.stderr[-2000:]
    for seed in ("0", "1"):
        joint = json.loads((tmp_path / f"on/{seed}/metrics.json").read_text())
        alone = json.loads((tmp_path / f"off/{seed}/metrics.json").read_text())
        assert joint.keys() == alone.keys()
        for key, value in alone.items():
            assert joint[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    from basis.tracking import client

    mlflow_client = client(store)
    experiment = mlflow_client.get_experiment_by_name("t")
    runs = mlflow_client.search_runs([experiment.experiment_id])
    assert sorted(run.data.tags["seed"] for run in runs) == ["0", "1"]
    assert {run.info.status for run in runs} == {"FINISHED"}
    for run in runs:
        assert len(mlflow_client.get_metric_history(run.info.run_id, "train/loss")) == 20
    # The CPU's default keeps each seed's solo path: the same bytes as one process per seed.
    auto = _basis(*common, "--out", str(tmp_path / "auto/{seed}"))
    assert auto.returncode == 0, auto.stderr[-2000:]
    for name in ("metrics.json", "embedding.npz", "model.pt"):
        assert (tmp_path / "auto/0" / name).read_bytes() == (tmp_path / "off/0" / name).read_bytes()


def test_seeds_together_where_the_method_cannot_is_refused_in_one_line(tmp_path):
    done = _basis(
        "run", "--method", "specnet2", "--dataset", "two_moons", "--device", "cpu", "--seeds", "0", "1",
        "--set", "gradient=neighbor", "--seeds-together", "on", "--out", str(tmp_path / "out/{seed}"),
        "--track", "t", "--store", str(tmp_path / "s"),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    message = "error: --seeds-together on: specnet2 cannot train its seeds together: with gradient='neighbor'"
    assert done.stderr.startswith(message) and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "s").exists()

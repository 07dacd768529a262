"""Data sets: real torchvision loaders on tiny files in the true formats, offline errors,
the rendered bunny, and Siamese features."""

import gzip
import json
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest
import scipy.io
from conftest import HANG_GUARD_S

from basis.data import DatasetUnavailableError, load_dataset
from basis.data.rendered_bunny import circular_correlation, render_turntable
from basis.errors import InputError
from basis.graph import GraphConfig, sparse_affinity
from basis.spectral import sparse_spectral_embedding


def _idx(path, array):
    """IDX file as published by LeCun (big-endian header), gzipped."""
    magic = {3: 0x00000803, 1: 0x00000801}[array.ndim]
    with gzip.open(path, "wb") as handle:
        handle.write(
            struct.pack(">I", magic)
            + b"".join(struct.pack(">I", d) for d in array.shape)
            + array.astype(np.uint8).tobytes()
        )


def _write_mnist(folder, rng, n_train=12, n_test=6):
    folder.mkdir(parents=True)
    arrays = {
        "train-images-idx3-ubyte.gz": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte.gz": np.arange(n_train) % 10,
        "t10k-images-idx3-ubyte.gz": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte.gz": np.arange(n_test) % 10,
    }
    for name, array in arrays.items():
        _idx(folder / name, array)
    return arrays


@pytest.mark.parametrize("name, folder", [("mnist", "MNIST/raw"), ("fashion_mnist", "FashionMNIST/raw")])
def test_mnist_family_reads_idx_gz_files(tmp_path, rng, name, folder):
    arrays = _write_mnist(tmp_path / folder, rng)
    data = load_dataset(name, root=tmp_path, download=False, verify=False)
    assert data.X_train.shape == (12, 1, 28, 28) and data.X_test.shape == (6, 1, 28, 28)
    np.testing.assert_allclose(data.X_train[3, 0] * 255, arrays["train-images-idx3-ubyte.gz"][3])
    np.testing.assert_array_equal(data.y_test, arrays["t10k-labels-idx1-ubyte.gz"])


def test_cifar10_reads_python_batches(tmp_path, rng):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (4, 3072)).astype(np.uint8), "labels": list(rng.integers(0, 10, 4))}
        batches[name] = batch
        with open(folder / name, "wb") as handle:
            pickle.dump(batch, handle)
    with open(folder / "batches.meta", "wb") as handle:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)]}, handle)
    data = load_dataset("cifar10", root=tmp_path, download=False, verify=False)
    assert data.X_train.shape == (20, 3, 32, 32) and data.X_test.shape == (4, 3, 32, 32)
    # CIFAR rows are channel-major 3x32x32
    np.testing.assert_allclose(data.X_test[1] * 255, batches["test_batch"]["data"][1].reshape(3, 32, 32))
    np.testing.assert_array_equal(data.y_test, batches["test_batch"]["labels"])


def test_svhn_reads_mat_files(tmp_path, rng):
    for split, n in (("train", 5), ("test", 3)):
        X = rng.integers(0, 256, (32, 32, 3, n)).astype(np.uint8)
        y = np.array([[10], [1], [2], [3], [4]][:n], dtype=np.uint8)
        scipy.io.savemat(tmp_path / f"{split}_32x32.mat", {"X": X, "y": y})
        if split == "test":
            expected = X
    data = load_dataset("svhn", root=tmp_path, download=False, verify=False)
    assert data.X_train.shape == (5, 3, 32, 32)
    assert data.y_train[0] == 0  # SVHN's label 10 is the digit 0
    np.testing.assert_allclose(data.X_test[2] * 255, expected[..., 2].transpose(2, 0, 1))


@pytest.mark.parametrize("name, folder_part", [("mnist", "MNIST/raw"), ("cifar10", ""), ("svhn", "")])
def test_offline_download_error_names_the_folder(tmp_path, name, folder_part, monkeypatch):
    import urllib.request

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("network unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    with pytest.raises(DatasetUnavailableError) as err:
        load_dataset(name, root=tmp_path, download=True)
    message = str(err.value)
    assert str((tmp_path / folder_part).resolve()) in message
    assert "http" in message and "place them in" in message


def test_incomplete_archive_is_not_taken_for_a_good_one(tmp_path):
    folder = tmp_path / "MNIST" / "raw"
    folder.mkdir(parents=True)
    (folder / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b half a download")
    with pytest.raises(DatasetUnavailableError, match="incomplete or corrupt"):
        load_dataset("mnist", root=tmp_path, download=False)
    assert not (folder / "train-images-idx3-ubyte").exists()


def test_unknown_dataset_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid: .*three_moons.*digits.*mnist"):
        load_dataset("imagenet")


@pytest.mark.parametrize("name", ["three_moons", "two_moons", "circles", "blobs", "spirals"])
def test_toy_sets_are_seeded(name):
    a, b, c = (load_dataset(name, seed=s) for s in (0, 0, 1))
    np.testing.assert_array_equal(a.X_train, b.X_train)
    assert not np.array_equal(a.X_train, c.X_train)
    assert len(a.X_train) + len(a.X_test) >= 9000


def test_rendered_bunny_diffusion_map_tracks_the_rotation():
    images, angles = render_turntable(500, resolution=48, seed=0)
    assert images.shape == (500, 48, 48) and 0.05 < images.mean() < 0.5
    W = sparse_affinity(images.reshape(500, -1), GraphConfig(n_neighbors=20))
    U, _ = sparse_spectral_embedding(W, 2, operator="diffusion", drop_trivial=True)
    assert circular_correlation(np.arctan2(U[:, 1], U[:, 0]), angles) >= 0.95
    # and a meaningless angle does not
    assert circular_correlation(np.random.default_rng(123).uniform(0, 2 * np.pi, 500), angles) < 0.2


def test_siamese_features_of_digits_via_the_cli(tmp_path):
    out = tmp_path / "digits.npz"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "basis",
            "features",
            "--dataset",
            "digits",
            "--out",
            str(out),
            "--json",
            "--device",
            "cpu",
            "--set",
            "n_steps=600",
            "--checkpoint",
            str(tmp_path / "siamese.pt"),
        ],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["dim"] == 16
    assert result["knn_accuracy"] >= 0.95
    with np.load(out) as features:
        assert features["X_train"].shape[1] == 16 and len(features["X_test"]) == len(features["y_test"])
    from basis.features import SiameseFeatures

    reloaded = SiameseFeatures.load(tmp_path / "siamese.pt", device="cpu")
    assert reloaded.transform(np.zeros((2, 1, 8, 8), np.float32)).shape == (2, 16)


def test_features_cli_rejects_unknown_option(tmp_path):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "basis",
            "features",
            "--dataset",
            "digits",
            "--out",
            str(tmp_path / "x.npz"),
            "--set",
            "epochs=3",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert completed.returncode == 2 and "unknown option" in completed.stderr


def _raw(folder, name):
    """The extracted IDX file beside a written .gz."""
    with gzip.open(folder / f"{name}.gz") as handle:
        (folder / name).write_bytes(handle.read())
    return folder / name


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda f: f.write_bytes(b"\x00\x00\x08\x04" + f.read_bytes()[4:]), "magic number 2052, expected 2051"),
        (lambda f: f.write_bytes(f.read_bytes()[:-100]), "truncated or corrupt"),
    ],
)
def test_damaged_extracted_mnist_files_are_named(tmp_path, rng, damage, message):
    folder = tmp_path / "MNIST" / "raw"
    _write_mnist(folder, rng)
    damage(_raw(folder, "train-images-idx3-ubyte"))
    _raw(folder, "train-labels-idx1-ubyte")
    with pytest.raises(DatasetUnavailableError, match=message) as err:
        load_dataset("mnist", root=tmp_path, download=False, verify=False)
    assert "train-images-idx3-ubyte" in str(err.value) and "place the original file again" in str(err.value)


def test_mnist_with_fewer_labels_than_images_or_a_partial_split_is_refused(tmp_path, rng):
    folder = tmp_path / "MNIST" / "raw"
    arrays = _write_mnist(folder, rng, n_train=50)
    _idx(folder / "train-labels-idx1-ubyte.gz", arrays["train-labels-idx1-ubyte.gz"][:40])
    with pytest.raises(DatasetUnavailableError, match="holds 50 images but .* 40 labels"):
        load_dataset("mnist", root=tmp_path, download=False, verify=False)
    _idx(folder / "train-labels-idx1-ubyte.gz", arrays["train-labels-idx1-ubyte.gz"])
    (folder / "train-labels-idx1-ubyte").unlink()
    # real data is checked against the known size of each split (MD5s of the .gz aside)
    for name in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        _raw(folder, name)
    from basis import data as data_module

    with pytest.raises(DatasetUnavailableError, match="holds 50 images, the train split has 60000"):
        data_module._check_idx_files(folder, verify=True)


# -- stand-ins of the image sets ------------------------------------------------------------
def test_standins_are_read_by_the_real_loaders_in_the_real_shapes(tmp_path):
    from basis.catalog import IMAGE_SETS, IMAGE_SHAPES
    from basis.data.standins import write_standins

    write_standins(tmp_path / "small", list(IMAGE_SETS), n_train=40, n_test=20)
    for name in IMAGE_SETS:
        data = load_dataset(name, root=tmp_path / "small", download=False)
        shape = IMAGE_SHAPES[name][2]
        assert data.standin and data.X_train.shape == (40, *shape) and data.X_test.shape == (20, *shape), name
        assert data.X_train.dtype == np.float32 and 0 <= data.X_train.min() and data.X_train.max() <= 1, name
        assert set(np.unique(data.y_train)) <= set(range(10)) and data.n_classes > 1, name
    write_standins(tmp_path / "full", ["mnist"])  # the official split sizes by default
    data = load_dataset("mnist", root=tmp_path / "full", download=False)
    assert (len(data.X_train), len(data.X_test)) == IMAGE_SHAPES["mnist"][:2]
    images = tmp_path / "full/MNIST/raw/train-images-idx3-ubyte"
    written = images.stat().st_mtime_ns
    write_standins(tmp_path / "full", ["mnist"])  # held whole: kept as it is
    assert images.stat().st_mtime_ns == written
    write_standins(tmp_path / "full", ["mnist"], n_test=30)  # other sizes: written again
    assert len(load_dataset("mnist", root=tmp_path / "full", download=False).X_test) == 30
    assert not load_dataset("digits").standin


def test_standin_images_are_clusters_that_touch():
    """Siamese features of them should be what trained features are (clusters joined by a
    few points between them): so the pixels already are, ten small eigenvalues then a gap."""
    from scipy.sparse.csgraph import connected_components, laplacian
    from sklearn.neighbors import kneighbors_graph

    from basis.data.standins import _class_patterns, standin_images

    rng = np.random.default_rng(0)
    images, _ = standin_images(2000, (1, 28, 28), rng, _class_patterns((1, 28, 28), rng))
    graph = kneighbors_graph(images.reshape(len(images), -1) / 255.0, 10)
    graph = graph.maximum(graph.T)
    eigenvalues = np.linalg.eigvalsh(laplacian(graph.astype(float), normed=True).toarray())
    assert connected_components(graph)[0] == 1
    assert eigenvalues[9] < 0.02 and eigenvalues[10] > 0.2


def test_a_changed_or_missing_standin_file_is_refused_in_one_line(tmp_path):
    from basis.data.standins import write_standins

    write_standins(tmp_path, ["svhn", "cifar10"], n_train=20, n_test=10)
    download = [sys.executable, "-m", "basis", "download", "--data-root", str(tmp_path), "--json", "--dataset"]
    done = subprocess.run([*download, "svhn"], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0 and json.loads(done.stdout)["standin"] is True, done.stderr
    assert "synthetic stand-ins" in done.stderr
    mat = tmp_path / "test_32x32.mat"
    mat.write_bytes(mat.read_bytes()[:-1] + b"\x01")
    (tmp_path / "cifar-10-batches-py" / "test_batch").unlink()
    for name, state in (("svhn", f"{mat} has MD5"), ("cifar10", "test_batch is missing")):
        done = subprocess.run([*download, name], capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert state in done.stderr and "write the stand-ins again" in done.stderr


def test_a_manifest_covers_only_the_sets_it_lists(tmp_path, rng):
    """Stand-ins of one set do not lift the checks of another in the same root: hand-placed
    files of a set the manifest does not list are checked against the published sums."""
    from basis.data.standins import write_standins

    write_standins(tmp_path, ["mnist"], n_train=20, n_test=10)
    for split, n in (("train", 5), ("test", 3)):
        X = rng.integers(0, 256, (32, 32, 3, n)).astype(np.uint8)
        scipy.io.savemat(tmp_path / f"{split}_32x32.mat", {"X": X, "y": np.ones((n, 1), np.uint8)})
    with pytest.raises(DatasetUnavailableError):
        load_dataset("svhn", root=tmp_path, download=False)
    for manifest in ("[1, 2]", '{"sets": {"mnist": {"files": ["a"]}}}', "{"):
        (tmp_path / "STANDINS.json").write_text(manifest)
        with pytest.raises(InputError, match="is not a stand-in manifest"):
            load_dataset("mnist", root=tmp_path, download=False)

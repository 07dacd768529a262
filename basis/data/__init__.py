"""Every data set of the workflow behind one registry: :func:`load_dataset`.

Image sets come through torchvision's own classes (official train/test splits). Where
they cannot be downloaded, the error names the URLs and the exact folder for placing
the files by hand. Toy sets and the rendered bunny are generated; ``digits`` is
scikit-learn's bundled 8x8 digits, so the whole pipeline runs offline.
"""

from __future__ import annotations

import dataclasses
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from basis.catalog import (  # noqa: F401 (the names, re-exported)
    DATASETS,
    FEATURE_SETS,
    IMAGE_SETS,
    IMAGE_SHAPES,
    TEST_FRACTION,
)
from basis.catalog.data_sources import DataSource
from basis.data import rendered_bunny, standins, toy_sets
from basis.data.dataset import Dataset  # noqa: F401 (re-exported)
from basis.errors import InputError
from basis.runtime.inputs import MAX_FEATURE_MAGNITUDE, check_path_length, file_md5

DEFAULT_ROOT = Path("resources/data")


class DatasetUnavailableError(InputError):
    """An image data set is neither on disk nor downloadable."""


# -- image sets through torchvision ---------------------------------------------------------
def _torchvision_spec(name: str) -> dict[str, Any]:
    from torchvision import datasets

    specs = {
        "mnist": (
            datasets.MNIST,
            "MNIST/raw",
            [(f"{datasets.MNIST.mirrors[0]}{f}", f, md5) for f, md5 in datasets.MNIST.resources],
        ),
        "fashion_mnist": (
            datasets.FashionMNIST,
            "FashionMNIST/raw",
            [(f"{datasets.FashionMNIST.mirrors[0]}{f}", f, md5) for f, md5 in datasets.FashionMNIST.resources],
        ),
        "cifar10": (
            datasets.CIFAR10,
            ".",
            [(datasets.CIFAR10.url, datasets.CIFAR10.filename, datasets.CIFAR10.tgz_md5)],
        ),
        "svhn": (datasets.SVHN, ".", [tuple(datasets.SVHN.split_list[s]) for s in ("train", "test")]),
    }
    cls, folder, files = specs[name]
    return {"cls": cls, "folder": folder, "files": files}


def _unavailable(name: str, root: Path, spec: dict[str, Any], cause: BaseException) -> DatasetUnavailableError:
    folder = (root / spec["folder"]).resolve()
    listing = "\n".join(f"  {url}  ->  {folder / filename}" for url, filename, _ in spec["files"])
    return DatasetUnavailableError(
        f"could not download data set {name!r} ({type(cause).__name__}: {str(cause).strip()[:300]}).\n"
        f"Download these files by hand and place them in {folder}:\n{listing}\nthen run again."
    )


def _prepare_mnist_files(root: Path, spec: dict[str, Any], verify: bool) -> None:
    """Extract hand-placed .gz files; a wrong checksum means an incomplete download."""
    from torchvision.datasets.utils import extract_archive

    folder = root / spec["folder"]
    for _, filename, md5 in spec["files"]:
        archive, extracted = folder / filename, folder / Path(filename).stem
        if archive.exists() and not extracted.exists():
            if verify and file_md5(archive) != md5:
                raise DatasetUnavailableError(
                    f"{archive} is incomplete or corrupt (MD5 {file_md5(archive)}, expected {md5});"
                    " delete it and download it again"
                )
            extract_archive(str(archive), str(folder))
    _check_idx_files(folder, verify)


#: Images per split of MNIST and Fashion-MNIST.
IDX_COUNTS = {"train": IMAGE_SHAPES["mnist"][0], "t10k": IMAGE_SHAPES["mnist"][1]}


def _idx_header(path: Path, magic: int, dims: int) -> tuple[int, ...]:
    """The shape an IDX file declares, after checking its magic number and its size."""
    with open(path, "rb") as handle:
        header = handle.read(4 + 4 * dims)
    if len(header) < 4 + 4 * dims or int.from_bytes(header[:4], "big") != magic:
        found = int.from_bytes(header[:4], "big") if len(header) >= 4 else None
        raise DatasetUnavailableError(
            f"{path} is not an IDX file of this kind (magic number {found}, expected {magic}); delete it, and"
            f" its .gz if that is bad too, then place the original file again"
        )
    shape = tuple(int.from_bytes(header[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    expected = len(header) + int(np.prod(shape))
    if path.stat().st_size != expected:
        raise DatasetUnavailableError(
            f"{path} holds {path.stat().st_size} bytes, its header declares {shape} ({expected} bytes): it is"
            " truncated or corrupt; delete it, and its .gz if that is bad too, then place the original file again"
        )
    return shape


def _check_idx_files(folder: Path, verify: bool) -> None:
    """Check the extracted files torchvision reads (they are never checksummed): IDX
    headers, sizes, as many labels as images and, for real data (``verify``), the known
    number of images per split."""
    for split, known in IDX_COUNTS.items():
        images, labels = folder / f"{split}-images-idx3-ubyte", folder / f"{split}-labels-idx1-ubyte"
        if not (images.exists() and labels.exists()):
            continue
        n_images, n_labels = _idx_header(images, 2051, 3)[0], _idx_header(labels, 2049, 1)[0]
        if n_images != n_labels:
            raise DatasetUnavailableError(f"{images} holds {n_images} images but {labels} {n_labels} labels")
        if verify and n_images != known:
            raise DatasetUnavailableError(
                f"{images} holds {n_images} images, the {split} split has {known}: place the original files again"
            )


def _without_checksums(cls: type) -> type:
    """The same torchvision class with its MD5 sums blanked (existence checks only).

    MNIST takes its folder from the class name and checks existence only, so it is
    returned as it is."""
    if cls.__name__ in ("MNIST", "FashionMNIST"):
        return cls
    blank = lambda files: [[name, None] for name, _ in files]  # noqa: E731
    overrides = {"__module__": cls.__module__}
    if hasattr(cls, "train_list"):
        overrides |= {
            "train_list": blank(cls.train_list),
            "test_list": blank(cls.test_list),
            "meta": {**cls.meta, "md5": None},
        }
    if hasattr(cls, "split_list"):
        overrides["split_list"] = {k: [url, name, None] for k, (url, name, _) in cls.split_list.items()}
    return type(cls.__name__, (cls,), overrides)


def _as_images(data: Any, channels_last: bool) -> np.ndarray:
    images = np.asarray(data, dtype=np.float32) / 255.0
    if images.ndim == 3:
        return images[:, None]
    return images.transpose(0, 3, 1, 2) if channels_last else images


def load_image_dataset(
    name: str, root: str | Path = DEFAULT_ROOT, *, download: bool = True, verify: bool = True
) -> Dataset:
    """MNIST, Fashion-MNIST, SVHN or CIFAR-10 through torchvision, images in [0, 1].

    ``verify=False`` skips the MD5 checks of files already on disk (torchvision's
    integrity check included); it exists so tests can read tiny files in the true
    formats, and should not be used for real data. A root that holds stand-ins of
    ``name`` (:mod:`basis.data.standins`) is checked against their manifest's MD5 sums
    instead, and read with a note on stderr.
    """
    root = Path(root)
    standin = standins.check_standins(root, name)
    if standin:
        print(f"note: {root / standins.MANIFEST} declares the {name} files synthetic stand-ins", file=sys.stderr)
        verify = False
    spec = _torchvision_spec(name)
    cls = spec["cls"] if verify else _without_checksums(spec["cls"])
    if name in ("mnist", "fashion_mnist"):
        _prepare_mnist_files(root, spec, verify)
    try:
        if name == "svhn":
            parts = [cls(str(root), split=split, download=download) for split in ("train", "test")]
            arrays = [(_as_images(p.data, False), np.asarray(p.labels)) for p in parts]
        else:
            parts = [cls(str(root), train=train, download=download) for train in (True, False)]
            data = [p.data.numpy() if hasattr(p.data, "numpy") else p.data for p in parts]
            arrays = [(_as_images(d, name == "cifar10"), np.asarray(p.targets)) for d, p in zip(data, parts)]
    except (RuntimeError, OSError) as err:  # URLError is an OSError
        raise _unavailable(name, root, spec, err) from err
    (X_train, y_train), (X_test, y_test) = arrays
    return Dataset(name, X_train, y_train.astype(np.int64), X_test, y_test.astype(np.int64), standin)


# -- generated and bundled sets -------------------------------------------------------------
def _split(
    name: str, X: np.ndarray, y: np.ndarray, seed: int, test_size: float | int, stratify: bool = True
) -> Dataset:
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=test_size, random_state=seed, stratify=y if stratify else None
    )
    return Dataset(name, X_train, y_train, X_test, y_test)


def load_toy(name: str, *, n_samples: int | None = None, seed: int = 0, test_size: float = TEST_FRACTION) -> Dataset:
    """A toy set of Figs. 1 and 3 (9,000 nodes by default; three moons: 3 x 3,330)."""
    generator = toy_sets.TOY_SETS[name]
    if name == "three_moons":
        X, y = generator(n_per_moon=(n_samples or 9990) // 3, seed=seed)
    else:
        X, y = generator(n=n_samples or 9000, seed=seed)
    return _split(name, X, y, seed, test_size)


def load_digits_dataset(*, seed: int = 0, test_size: float = TEST_FRACTION) -> Dataset:
    """scikit-learn's 1,797 bundled 8x8 digits as (n, 1, 8, 8) images in [0, 1]."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    return _split("digits", images, digits.target, seed, test_size)


def load_bunny(
    *,
    n_frames: int = 2000,
    n_test: int = 500,
    resolution: int = 64,
    frames_dir: str | Path | None = None,
    seed: int = 0,
) -> Dataset:
    """Turntable frames as (n, 1, h, w) images; labels are the rotation angles.

    With ``frames_dir`` the real snapshot set is loaded (angles unknown: NaN);
    otherwise frames are rendered. The paper trains on 1,500 frames and tests on 500.
    """
    if frames_dir is not None:
        frames = rendered_bunny.load_frames(frames_dir, resolution)
        angles = np.full(len(frames), np.nan)
    else:
        frames, angles = rendered_bunny.render_turntable(n_frames, resolution, seed=seed)
    return _split("bunny", frames[:, None], angles, seed, n_test, stratify=False)


def load_dataset(
    name: str,
    *,
    root: str | Path = DEFAULT_ROOT,
    seed: int = 0,
    download: bool = True,
    source: DataSource | None = None,
    **options: Any,
) -> Dataset:
    """Load any registered data set by name, or the data set of one's own that ``source``
    declares (:mod:`basis.data.own_sets`); ``options`` go to its loader."""
    if source is not None:
        from basis.data.own_sets import load_source

        if source.name != name:
            raise InputError(f"--data {source.path} is declared as {source.name!r}, not {name!r}")
        return load_source(source, seed)
    if name not in DATASETS:
        raise InputError(f"unknown data set {name!r}; valid: {list(DATASETS)}")
    if name in IMAGE_SETS:
        return load_image_dataset(name, root, download=download, **options)
    if name == "digits":
        return load_digits_dataset(seed=seed, **options)
    if name == "bunny":
        return load_bunny(seed=seed, **options)
    return load_toy(name, seed=seed, **options)


def load_npz(
    path: str | Path, keys: tuple[str, ...], what: str, optional: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """The arrays ``keys`` (and those of ``optional`` that it holds) of an ``.npz`` written
    by this package, or an InputError that names the file, what it should be and what is
    wrong with it (missing, not an .npz, empty or truncated, keys missing). Pickled objects
    are refused."""
    path = Path(path)
    check_path_length(path, what)
    if not path.is_file():
        raise InputError(f"{what} {path} does not exist")
    try:
        stored = np.load(path, allow_pickle=False)
        if not isinstance(stored, np.lib.npyio.NpzFile):
            raise InputError(f"{what} {path} is a single .npy array; expected an .npz with {list(keys)}")
        with stored:
            missing = sorted(set(keys) - set(stored.files))
            if missing:
                raise InputError(f"{what} {path} lacks {missing} (it has {sorted(stored.files)})")
            return {key: stored[key] for key in (*keys, *optional) if key in stored.files}
    except InputError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise InputError(f"{what} {path} is empty, truncated or not an .npz ({type(err).__name__}: {err})") from None


def _check_feature_arrays(features: str | Path, data: dict[str, np.ndarray]) -> None:
    """The types a features file's arrays must have: numeric points, integer labels of at
    least two classes, points that are not all one value, a data set name and an integer
    data seed."""
    where = f"features file {features}"
    if data["dataset"].ndim != 0 or data["dataset"].dtype.kind not in "US":
        raise InputError(
            f"{where}: dataset must be one name, got {data['dataset'].dtype} of shape {data['dataset'].shape}"
        )
    if data["data_seed"].ndim != 0 or data["data_seed"].dtype.kind not in "iu":
        raise InputError(
            f"{where}: data_seed must be one integer, got {data['data_seed'].dtype} of shape {data['data_seed'].shape}"
        )
    for split in ("train", "test"):
        X, y = data[f"X_{split}"], data[f"y_{split}"]
        if X.dtype.kind not in "iuf":
            raise InputError(f"{where}: X_{split} holds {X.dtype} values; expected numbers")
        if y.dtype.kind not in "iu":
            raise InputError(f"{where}: y_{split} holds {y.dtype} values; expected integer class labels")
    if len(np.unique(data["y_train"])) < 2:
        raise InputError(f"{where}: y_train holds one class; a clustering needs at least two")
    if data["X_train"].size and np.ptp(data["X_train"], axis=0).max() == 0:
        raise InputError(f"{where}: every point of X_train is the same; the feature network learnt nothing")


def load_inputs(
    dataset: str,
    features: str | Path | None = None,
    seed: int = 0,
    root: str | Path = "resources/data",
    source: DataSource | None = None,
) -> Dataset:
    """A data set's flat features: a features ``.npz`` (from ``basis features``), checked
    to belong to ``dataset`` and its split (``seed``), or the raw set (the catalog's, or
    the one ``source`` declares)."""
    if features is not None:
        data = load_npz(features, ("X_train", "y_train", "X_test", "y_test", "dataset", "data_seed"), "features file")
        _check_feature_arrays(features, data)
        if str(data["dataset"]) != dataset or int(data["data_seed"]) != seed:
            raise InputError(
                f"features file {features} holds {str(data['dataset'])!r} (data seed {int(data['data_seed'])}),"
                f" not {dataset!r} (data seed {seed})"
            )
        for split in ("train", "test"):
            X, y = data[f"X_{split}"], data[f"y_{split}"]
            if X.ndim != 2 or y.shape != (len(X),) or not len(X):
                raise InputError(
                    f"features file {features}: X_{split} must be (n, d) and y_{split} (n,),"
                    f" got {X.shape} and {y.shape}"
                )
            if not np.isfinite(X).all() or np.abs(X).max() > MAX_FEATURE_MAGNITUDE:
                raise InputError(
                    f"features file {features}: X_{split} must be finite and at most {MAX_FEATURE_MAGNITUDE:g} in"
                    f" magnitude (larger values overflow the graph's distances); largest {np.abs(X).max():g}"
                )
        if data["X_train"].shape[1] != data["X_test"].shape[1]:
            raise InputError(
                f"features file {features}: X_train has {data['X_train'].shape[1]} features and X_test"
                f" {data['X_test'].shape[1]}; both splits must come from one feature network"
            )
        # Siamese features of one's own images keep the declaration's dimension
        declared = None if source is None else source.n_components
        return Dataset(
            dataset, data["X_train"], data["y_train"], data["X_test"], data["y_test"], declared_components=declared
        )
    data = load_dataset(dataset, seed=seed, root=root, source=source)
    X_train, X_test = data.flat()
    return dataclasses.replace(data, X_train=X_train, X_test=X_test)

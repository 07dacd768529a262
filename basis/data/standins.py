"""Synthetic stand-ins for the image sets, in their real shapes and on-disk formats.

A box without the image sets (a GPU box offline, say) can still run the workflow's jobs at
the paper's sizes, to time them: :func:`write_standins` writes each set's official split
sizes and image shape in the files torchvision reads (IDX for MNIST and Fashion-MNIST,
Python batches for CIFAR-10, ``.mat`` for SVHN) into a data root, with a manifest,
``STANDINS.json``, that names them stand-ins and holds their MD5 sums.
:func:`basis.data.load_image_dataset` checks such files against the manifest instead of
the real sets' published sums and says on stderr that it reads stand-ins. They are not
the data sets: their scores mean nothing, only the time spent on them does.

Each class is a blocky random pattern and each image its class's pattern under noise; a
few images lie halfway to another class, so that a Siamese network's features of them
form clusters that touch (one connected graph), as trained features of the real sets do.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np

from basis.catalog import IMAGE_SETS, IMAGE_SHAPES
from basis.errors import InputError
from basis.runtime.inputs import file_md5

MANIFEST = "STANDINS.json"
N_CLASSES = 10
#: Images halfway between their class's pattern and another's.
AMBIGUOUS_FRACTION = 0.02
#: The share of each pixel that is noise rather than the class's pattern.
NOISE = 0.3
#: Pixels per block of a class's pattern.
BLOCK = 4
_CHUNK = 8192


def standin_images(
    n: int, shape: tuple[int, int, int], rng: np.random.Generator, templates: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` uint8 images (n, c, h, w) of the classes whose patterns are ``templates``, and
    their labels."""
    labels = rng.integers(0, len(templates), n)
    images = np.empty((n, *shape), dtype=np.uint8)
    for start in range(0, n, _CHUNK):  # a float copy of SVHN's 73,257 images would take 0.9 GB
        part = slice(start, min(start + _CHUNK, n))
        size = part.stop - part.start
        other = rng.integers(0, len(templates), size)
        halfway = np.where(rng.random(size) < AMBIGUOUS_FRACTION, 0.5, 0.0)[:, None, None, None]
        pattern = (1 - halfway) * templates[labels[part]] + halfway * templates[other]
        pixels = (1 - NOISE) * pattern + NOISE * rng.random((size, *shape))
        images[part] = np.round(pixels * 255).astype(np.uint8)
    return images, labels


def _class_patterns(shape: tuple[int, int, int], rng: np.random.Generator) -> np.ndarray:
    channels, height, width = shape
    coarse = rng.random((N_CLASSES, channels, -(-height // BLOCK), -(-width // BLOCK)))
    return coarse.repeat(BLOCK, axis=2).repeat(BLOCK, axis=3)[:, :, :height, :width]


def _idx(path: Path, array: np.ndarray, magic: int) -> None:
    with open(path, "wb") as handle:
        handle.write(magic.to_bytes(4, "big"))
        for size in array.shape:
            handle.write(int(size).to_bytes(4, "big"))
        handle.write(np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def _write_set(root: Path, name: str, splits: dict[str, tuple[np.ndarray, np.ndarray]]) -> list[Path]:
    """The files torchvision reads for ``name``, holding ``splits`` ('train', 'test')."""
    if name in ("mnist", "fashion_mnist"):
        folder = root / ("MNIST" if name == "mnist" else "FashionMNIST") / "raw"
        folder.mkdir(parents=True, exist_ok=True)
        files = []
        for split, prefix in (("train", "train"), ("test", "t10k")):
            images, labels = splits[split]
            files += [folder / f"{prefix}-images-idx3-ubyte", folder / f"{prefix}-labels-idx1-ubyte"]
            _idx(files[-2], images[:, 0], 2051)
            _idx(files[-1], labels, 2049)
        return files
    if name == "cifar10":
        folder = root / "cifar-10-batches-py"
        folder.mkdir(parents=True, exist_ok=True)
        train_images, train_labels = splits["train"]
        rows = np.array_split(np.arange(len(train_labels)), 5)  # the training split in five batches
        batches = {f"data_batch_{i + 1}": (train_images[r], train_labels[r]) for i, r in enumerate(rows)}
        files = []
        for batch, (images, labels) in {**batches, "test_batch": splits["test"]}.items():
            files.append(folder / batch)
            with open(files[-1], "wb") as handle:
                pickle.dump({"data": images.reshape(len(images), -1), "labels": labels.tolist()}, handle)
        files.append(folder / "batches.meta")
        with open(files[-1], "wb") as handle:
            pickle.dump({"label_names": [f"class{c}" for c in range(N_CLASSES)]}, handle)
        return files
    import scipy.io

    files = []
    for split, (images, labels) in splits.items():
        files.append(root / f"{split}_32x32.mat")
        # SVHN's layout: (32, 32, 3, n) images, labels 1-10 with 10 for the digit 0
        scipy.io.savemat(
            files[-1], {"X": images.transpose(2, 3, 1, 0), "y": np.where(labels == 0, 10, labels)[:, None]}
        )
    return files


def write_standins(
    root: str | Path, names: list[str], *, seed: int = 0, n_train: int | None = None, n_test: int | None = None
) -> Path:
    """Write stand-ins of the image sets ``names`` into the data root ``root`` and record
    them in its manifest; returns the manifest's path. A set the manifest already holds
    whole at these sizes and seed is kept. ``n_train``/``n_test`` replace the official
    split sizes (tests); the image shapes are always the real ones."""
    root = Path(root)
    unknown = sorted(set(names) - set(IMAGE_SETS))
    if unknown:
        raise InputError(f"no stand-in for {unknown}: stand-ins are of the image sets {list(IMAGE_SETS)}")
    root.mkdir(parents=True, exist_ok=True)
    manifest_path = root / MANIFEST
    manifest = read_manifest(root) or {
        "what": "synthetic stand-ins of the image sets, in their real shapes and formats, for timing only;"
        " not the data sets",
        "sets": {},
    }
    for name in names:
        train, test, shape = IMAGE_SHAPES[name]
        wanted = {"seed": seed, "n_train": n_train or train, "n_test": n_test or test}
        if _held_whole(root, name, wanted):
            continue  # written before: the same bytes again
        rng = np.random.default_rng([seed, IMAGE_SETS.index(name)])
        templates = _class_patterns(shape, rng)
        splits = {
            "train": standin_images(n_train or train, shape, rng, templates),
            "test": standin_images(n_test or test, shape, rng, templates),
        }
        files = _write_set(root, name, splits)
        manifest["sets"][name] = wanted | {"files": {str(path.relative_to(root)): file_md5(path) for path in files}}
        manifest_path.write_text(json.dumps(manifest, indent=2))  # each set recorded once it is whole
    return manifest_path


def _held_whole(root: Path, name: str, wanted: dict) -> bool:
    """Whether the manifest of ``root`` holds ``name`` with the settings ``wanted`` and its
    files are unchanged."""
    held = (read_manifest(root) or {"sets": {}})["sets"].get(name, {})
    try:
        return {key: held.get(key) for key in wanted} == wanted and check_standins(root, name)
    except InputError:  # a file changed or went missing: written again
        return False


def read_manifest(root: str | Path) -> dict | None:
    """The data root's stand-in manifest, or None where the root holds none."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
        if not isinstance(manifest.get("sets"), dict):
            raise ValueError("no 'sets' object")
        for name, held in manifest["sets"].items():
            files = held.get("files") if isinstance(held, dict) else None
            if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
                raise ValueError(f"set {name!r} lists no files with their MD5 sums")
        return manifest
    except (OSError, ValueError, AttributeError) as err:
        raise InputError(
            f"{path} is not a stand-in manifest ({err}); delete it and write the stand-ins again"
        ) from None


def check_standins(root: str | Path, name: str) -> bool:
    """Whether ``root`` holds stand-ins of ``name``, after checking each of their files
    against the manifest's MD5 sum (an InputError names a missing or changed file)."""
    manifest = read_manifest(root)
    if manifest is None or name not in manifest["sets"]:
        return False
    for relative, md5 in manifest["sets"][name]["files"].items():
        path = Path(root) / relative
        if not path.is_file() or file_md5(path) != md5:
            state = "is missing" if not path.is_file() else f"has MD5 {file_md5(path)}, its manifest {md5}"
            raise InputError(
                f"stand-in file {path} {state}: write the stand-ins again (basis.data.standins.write_standins)"
            )
    return True

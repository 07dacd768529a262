"""A data set of one's own (:class:`basis.catalog.data_sources.DataSource`), loaded and split.

An image folder gives images (n, c, h, w), which the workflow embeds through Siamese
features like the catalog's image sets; a feature table gives points (n, d), used as they
are. The test split is the declared fraction (stratified by class when labelled) or the
declared second folder or table. The content hash covers every file read, names and bytes,
so that MLflow's dataset input changes exactly when the data does. A split is made in
place where the points are in memory (one extra copy of the test split only), so that a
large table's peak stays near its own size.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from basis.catalog.data_sources import DataSource, files_below
from basis.data.dataset import Dataset
from basis.data.feature_tables import load_feature_table
from basis.data.image_folders import load_image_folder
from basis.errors import InputError

#: Bytes read at a time by the content hash, and bytes of rows a split swaps at a time (its
#: two buffers stay in the core's cache).
HASH_BLOCK = 1 << 20
SWAP_BYTES = 1 << 20


def content_hash(source: DataSource) -> str:
    """MD5 over the data set's files: each one's path below its root, then its bytes."""
    digest = hashlib.md5()
    for root in map(Path, source.roots()):
        for path in files_below(root):
            digest.update(str(path.relative_to(root) if root.is_dir() else path.name).encode() + b"\0")
            with open(path, "rb") as handle:
                while block := handle.read(HASH_BLOCK):
                    digest.update(block)
    return digest.hexdigest()


def _read(source: DataSource, path: str, classes: tuple[str, ...] | None = None):
    """(points or images, labels or None, class names or None) of one folder or table."""
    if source.is_images:
        folder = load_image_folder(path, source.image_size, classes)
        return folder.images, folder.labels, folder.classes
    table = load_feature_table(path, source.label_column, memory_map=False)  # split in place below
    return table.X, table.y, table.classes


def _split(source: DataSource, X: np.ndarray, y: np.ndarray | None, seed: int):
    """The declared fraction held out, stratified by class when labelled."""
    n_test = int(np.ceil(source.test_fraction * len(X)))
    if n_test < 2 or len(X) - n_test < 2:
        raise InputError(
            f"data set {source.name} ({source.path}): {len(X)} points leave {n_test} for a test fraction of"
            f" {source.test_fraction:g}; it needs at least two in each split"
        )
    if y is not None and min(np.bincount(y)) < 2:
        rare = int(np.argmin(np.bincount(y)))
        raise InputError(f"data set {source.name} ({source.path}): class {rare} has one point; a split needs two")
    held_out = held_out_rows(len(X), n_test, y, source.test_seed if source.test_seed is not None else seed)
    pairs = trading_places(held_out)
    X_train, X_test = _split_at(X, pairs, len(X) - n_test)
    if y is None:
        return X_train, None, X_test, None
    y_train, y_test = _split_at(y.copy(), pairs, len(X) - n_test)
    return X_train, y_train, X_test, y_test


def held_out_rows(n: int, n_test: int, y: np.ndarray | None, seed: int) -> np.ndarray:
    """The marks (a boolean per row) of the ``n_test`` rows a seeded split holds out;
    stratified by ``y`` (codes 0..C-1): each class gives its share, rounded by largest
    remainder, from its points in a random order. Linear in n, as a large table needs."""
    order = np.random.default_rng(seed).permutation(n)
    held_out = np.zeros(n, dtype=bool)
    if y is None:
        held_out[order[:n_test]] = True
        return held_out
    codes = y.astype(np.min_scalar_type(max(int(y.max()), 0)))  # small codes sort by radix
    grouped = order[np.argsort(codes[order], kind="stable")]  # class by class, each in random order
    counts = np.bincount(y)
    share = counts * n_test / n
    take = np.floor(share).astype(np.int64)
    take[np.argsort(take - share, kind="stable")[: n_test - take.sum()]] += 1
    take = np.minimum(take, counts - 1)  # every class keeps a training point
    first_of_class = np.repeat(np.tile([True, False], len(counts)), np.column_stack([take, counts - take]).ravel())
    held_out[grouped[first_of_class]] = True
    return held_out


def trading_places(held_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How a split stores its rows: the training rows first, then the held-out ones. Rows
    stay where they are but for the held-out rows among the first n - n_test, which trade
    places, in ascending order, with the training rows beyond them: (those held-out rows,
    those training rows). So few move (about n p (1 - p) pairs for a fraction p) that a
    large table splits in place."""
    n_train = len(held_out) - int(np.count_nonzero(held_out))
    return np.flatnonzero(held_out[:n_train]), n_train + np.flatnonzero(~held_out[n_train:])


def _split_at(X: np.ndarray, pairs: tuple[np.ndarray, np.ndarray], n_train: int) -> tuple[np.ndarray, np.ndarray]:
    """``X``'s training rows and held-out rows after the rows of ``pairs`` trade places:
    views of ``X`` rearranged in place where it is an array of its own in memory (a block
    of pairs at a time, so the buffers stay in cache), else copies."""
    out_front, in_tail = pairs
    if isinstance(X, np.memmap) or not X.flags.writeable or not X.flags.c_contiguous:
        X = np.array(X, order="C")
    rows = X.reshape(len(X), -1).view(np.dtype((np.void, X[0].nbytes))).ravel()  # a row moves as one item
    block = max(1, SWAP_BYTES // X[0].nbytes)
    for start in range(0, len(out_front), block):
        front, tail = out_front[start : start + block], in_tail[start : start + block]
        rows[front], rows[tail] = rows[tail], rows[front]  # the right side is copied first
    return X[:n_train], X[n_train:]


def load_source(source: DataSource, seed: int = 0) -> Dataset:
    """The :class:`basis.data.Dataset` of ``source``, split (``seed``: the data seed, used
    unless the declaration gives its own), with its class names. Its content hash is
    :func:`content_hash`'s, computed where it is recorded (a data summary, an MLflow run)."""
    X, y, classes = _read(source, source.path)
    if y is None and source.n_components is None:
        raise InputError(
            f"data set {source.name} ({source.path}) has no labels: declare its n_components (its embedding's size)"
        )
    if y is not None and len(np.unique(y)) < 2:
        raise InputError(f"data set {source.name} ({source.path}): its labels name one class; it needs two")
    if source.test_path is None:
        X_train, y_train, X_test, y_test = _split(source, X, y, seed)
    else:
        X_test, y_test, test_classes = _read(source, source.test_path, classes if source.is_images else None)
        X_train, y_train = X, y
        if (y is None) != (y_test is None):
            raise InputError(
                f"data set {source.name}: {source.path} and {source.test_path} must both be labelled or not"
            )
        if X_test.shape[1:] != X_train.shape[1:]:
            raise InputError(
                f"data set {source.name}: {source.test_path} has points of shape {X_test.shape[1:]},"
                f" {source.path} {X_train.shape[1:]}"
            )
        if classes is not None and test_classes is not None and test_classes != classes:
            raise InputError(f"data set {source.name}: {source.test_path}'s labels are not those of {source.path}")
    return Dataset(
        source.name,
        X_train,
        y_train,
        X_test,
        y_test,
        classes=classes,
        declared_components=source.n_components,
    )


def load_points_of(path: str | Path, label_column: str | None = None, image_size: tuple[int, int] | None = None):
    """Every point of a feature table (its label column left out), or every image of an
    image folder: what ``embed --data`` embeds."""
    if Path(path).is_dir():
        return load_image_folder(path, image_size).images
    return load_feature_table(path, label_column).X

"""The sizes of one's own data sets, read with the config (a dry run reads them): each data
set's training split by class, and every setting of the config that does not fit them,
named all at once, before any job starts (the jobs would stop one at a time, some after a
long features job).

Only the files' shapes and labels are read: a folder's images are counted, a table's label
column (or its row count) is read, an ``.npz``'s ``X`` header and ``y``. Torch-free.
"""

from __future__ import annotations

import math
import zipfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from basis.catalog import method_defaults
from basis.catalog.data_sources import DataSource, files_below
from basis.errors import InputError
from basis.plan.registry import study_defaults


@dataclass(frozen=True)
class SourceSize:
    """A data set's training split: its number of points and, if labelled, its points per class."""

    name: str
    n_train: int
    class_counts: tuple[int, ...] | None

    @property
    def n_classes(self) -> int | None:
        return None if self.class_counts is None else len(self.class_counts)


def _npz_rows(path: Path) -> tuple[int, list | None]:
    """An ``.npz``'s number of rows (from ``X``'s header, not its data) and its labels."""
    import numpy as np

    with zipfile.ZipFile(path) as archive, archive.open("X.npy") as handle:
        version = np.lib.format.read_magic(handle)
        shape = np.lib.format._read_array_header(handle, version)[0]
    with np.load(path, allow_pickle=False) as arrays:
        labels = arrays["y"].tolist() if "y" in arrays.files else None
    return int(shape[0]), labels


def _rows_and_labels(source: DataSource, path: str) -> tuple[int, list | None]:
    """The number of points of one folder or table, and its labels (None: unlabelled)."""
    if Path(path).is_dir():
        labels = [image.parent.name for image in files_below(path)]
        return len(labels), labels
    suffix = Path(path).suffix.lower()
    if suffix == ".npz":
        return _npz_rows(Path(path))
    if suffix == ".npy":
        import numpy as np

        return int(np.load(path, mmap_mode="r").shape[0]), None
    import pandas as pd

    if suffix == ".parquet":
        columns = [source.label_column] if source.label_column else None
        frame = pd.read_parquet(path, columns=columns)
    else:
        frame = pd.read_csv(path, usecols=[source.label_column] if source.label_column else [0])
    labels = frame[source.label_column].tolist() if source.label_column else None
    return len(frame), labels


def source_size(source: DataSource) -> SourceSize:
    """``source``'s training split: its declared test set apart, or the declared fraction
    held out (stratified: each class keeps about ``1 - fraction`` of its points)."""
    try:
        n_points, labels = _rows_and_labels(source, source.path)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        raise InputError(f"data_sources.{source.name}: {source.path} cannot be read for its size") from None
    keep = 1.0 if source.test_path else 1.0 - source.test_fraction
    counts = None
    if labels is not None:
        by_class = Counter(labels)
        counts = tuple(math.floor(by_class[label] * keep) for label in sorted(by_class))
    return SourceSize(source.name, math.floor(n_points * keep), counts)


def _batch_fits(where: str, batch: int | None, size: SourceSize) -> list[str]:
    if batch is not None and batch > size.n_train:
        return [f"{where} {batch} exceeds the training split of {size.name} (about {size.n_train} points)"]
    return []


def _anchors_fit(where: str, per_class: int, batch: int, size: SourceSize, n_components: int | None) -> list[str]:
    """BASiS's stratified anchors against the classes, the batch and the map (K+1 anchors)."""
    if size.class_counts is None:
        return []
    n_anchors, n_classes = per_class * size.n_classes, size.n_classes
    misfits = []
    if n_anchors >= batch:
        misfits.append(
            f"{where} {per_class} x {n_classes} classes of {size.name} = {n_anchors} anchors leave no room in a"
            f" batch of {batch}"
        )
    if per_class > min(size.class_counts):
        misfits.append(
            f"{where} {per_class} exceeds {size.name}'s smallest class (about {min(size.class_counts)} training points)"
        )
    dim = n_components or n_classes
    if n_anchors < dim + 1:
        misfits.append(f"{where} {per_class} gives {n_anchors} anchors, too few to fix a map in K={dim} (K+1 needed)")
    return misfits


def size_misfits(
    config: Mapping[str, Any], runs: Mapping[str, Mapping[str, dict]], sources: Mapping[str, DataSource]
) -> list[str]:
    """Every setting that does not fit the size of a data set of one's own it runs on."""
    sizes = {name: source_size(source) for name, source in sources.items()}
    protocol, studies, misfits = config["protocol"], config["experiments"], []
    on_protocol = [*config["datasets"], studies["knn"]["dataset"], *studies["ablation"]["datasets"]]
    for dataset in dict.fromkeys(d for d in on_protocol if d in sizes):
        misfits += _batch_fits(f"protocol.batch_size (data set {dataset})", protocol["batch_size"], sizes[dataset])
    if "basis" in config["methods"]:
        basis = config["methods"]["basis"] or {}
        per_class = basis.get("anchors_per_class", method_defaults("basis")["anchors_per_class"])
        for dataset in (d for d in config["datasets"] if d in sizes):
            components = sources[dataset].n_components
            where = "methods.basis.anchors_per_class"
            misfits += _anchors_fit(where, per_class, protocol["batch_size"], sizes[dataset], components)
    for run, settings in runs.get("feature_change", {}).items():
        size = sizes.get(settings.get("dataset"))
        if size is None or settings.get("batch_size") is None:
            continue
        classes = settings.get("classes")
        if classes and size.class_counts is not None:
            points = sum(size.class_counts[c] for c in classes if 0 <= c < size.n_classes)
            size = SourceSize(f"{size.name}, classes {list(classes)}", points, None)
        misfits += _batch_fits(f"experiments.feature_change ({run}): batch_size", settings["batch_size"], size)
    defaults = study_defaults("alignment_error")
    for run, settings in runs.get("alignment_error", {}).items():
        size = sizes.get(settings.get("dataset"))
        if size is None or size.class_counts is None:
            continue
        value = {**defaults, **settings}
        shared = value["anchors_per_class"] * size.n_classes + value["n_held_out"]
        unfit = [m for m in value["batch_sizes"] if not shared < m <= size.n_train]
        if unfit:
            misfits.append(
                f"experiments.alignment_error ({run}): batch_sizes {unfit} must hold the {shared} shared nodes"
                f" (anchors and held out) and at most about {size.n_train} points of {size.name}'s training split"
            )
    for run, settings in runs.get("variants", {}).items():
        size = sizes.get(settings.get("dataset"))
        batch = (settings.get("protocol") or {}).get("batch_size")
        if size is not None:
            misfits += _batch_fits(f"experiments.variants ({run}): protocol.batch_size", batch, size)
    return misfits


def check_sizes(
    config: Mapping[str, Any], runs: Mapping[str, Mapping[str, dict]], sources: Mapping[str, DataSource]
) -> None:
    """Refuse, all at once in one line, the settings :func:`size_misfits` finds."""
    misfits = size_misfits(config, runs, sources)
    if misfits:
        raise InputError(f"config: {len(misfits)} setting(s) do not fit the data: {'; '.join(misfits)}")

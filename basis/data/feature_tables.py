"""A feature table of one's own: points as rows, features as columns, labels optional.

The formats: ``.npy`` (a 2-D array, memory-mapped; no labels), ``.npz`` (``X`` and
optionally ``y``), ``.csv`` (a header row; the label column named, or none) and
``.parquet`` (the same, with the optional extra ``pyarrow``). Every problem is an
:class:`~basis.errors.InputError` naming the file and, for a bad value, its row and column,
raised before anything is computed: a missing or empty file, a symlink loop, something
that is not a regular file, a non-numeric or non-finite value, a missing label column,
labels that are neither integers nor strings.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from basis.catalog.data_sources import TABLE_SUFFIXES
from basis.errors import InputError
from basis.runtime.inputs import MAX_FEATURE_MAGNITUDE

#: Rows checked at a time, so that a memory-mapped table is never read whole for its checks.
CHECK_ROWS = 65_536


@dataclass(frozen=True)
class FeatureTable:
    """A table's points ``X`` (float32, rows are points), its labels ``y`` (0..C-1) or None,
    and the label names ``classes`` (strings, sorted) when the labels were strings."""

    X: np.ndarray
    y: np.ndarray | None
    classes: tuple[str, ...] | None = None


def check_regular_file(path: str | Path, what: str = "feature table") -> Path:
    """``path`` resolved, refused unless it is a non-empty regular file."""
    path = Path(path)
    try:
        resolved = path.resolve(strict=True)
    except RuntimeError:  # Path.resolve's "Symlink loop"
        raise InputError(f"{what} {path}: its symbolic links form a loop") from None
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(f"{what} {path} does not exist") from None
    mode = resolved.stat().st_mode
    if stat.S_ISDIR(mode):
        raise InputError(f"{what} {path} is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise InputError(f"{what} {path} is not a regular file (a device, a pipe or a socket)")
    if resolved.stat().st_size == 0:
        raise InputError(f"{what} {path} is empty (0 bytes)")
    return resolved


def _check_values(path: Path, X: np.ndarray, columns: list[str] | None = None) -> None:
    """Refuse a non-finite or out-of-range value, naming the first one's row and column."""
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise InputError(f"feature table {path} holds an array of shape {X.shape}; expected points x features")
    if not np.issubdtype(X.dtype, np.number) or np.issubdtype(X.dtype, np.complexfloating):
        raise InputError(f"feature table {path} holds {X.dtype} values; expected real numbers")
    for start in range(0, len(X), CHECK_ROWS):
        block = np.asarray(X[start : start + CHECK_ROWS])
        if -MAX_FEATURE_MAGNITUDE <= block.min() and block.max() <= MAX_FEATURE_MAGNITUDE:  # NaN fails: it propagates
            continue
        bad = ~np.isfinite(block) | (np.abs(block) > MAX_FEATURE_MAGNITUDE)
        if bad.any():
            row, column = (int(i) for i in np.argwhere(bad)[0])
            name = f"column {columns[column]!r}" if columns else f"column {column}"
            value = float(block[row, column])
            what = "not finite" if not np.isfinite(value) else f"beyond {MAX_FEATURE_MAGNITUDE:g} in magnitude"
            raise InputError(f"feature table {path}: row {start + row}, {name} is {value!r}, {what}")


def encode_labels(path: Path, labels: np.ndarray) -> tuple[np.ndarray, tuple[str, ...] | None]:
    """Labels as codes 0..C-1 (integers in their order, strings sorted) and the string names."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise InputError(f"labels of {path} have shape {labels.shape}; expected one label per point")
    if labels.dtype.kind in "iu":
        if len(labels) and labels.min() >= 0 and labels.max() < 4 * len(labels):  # a table's lookup: linear in n
            present = np.flatnonzero(np.bincount(labels))
            lookup = np.zeros(int(labels.max()) + 1, dtype=np.int64)
            lookup[present] = np.arange(len(present))
            return lookup[labels], None
        _, codes = np.unique(labels, return_inverse=True)
        return codes.astype(np.int64), None
    if labels.dtype.kind in "UO" and all(isinstance(value, str) for value in labels.tolist()):
        names, codes = np.unique(labels.astype(str), return_inverse=True)
        return codes.astype(np.int64), tuple(names.tolist())
    first = next((i for i, value in enumerate(labels.tolist()) if not isinstance(value, (int, str))), 0)
    raise InputError(f"labels of {path}: row {first} is {labels.tolist()[first]!r}; labels are integers or strings")


def _read_columns(path: Path, suffix: str):
    if suffix == ".csv":
        import pandas as pd

        try:
            return pd.read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
            raise InputError(f"feature table {path} is not a readable CSV: {str(err).splitlines()[0]}") from None
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"feature table {path}: Parquet needs the optional extra: pip install pyarrow") from None
    try:
        return pq.read_table(path).to_pandas()
    except Exception as err:  # noqa: BLE001 (pyarrow's errors have no common public base)
        raise InputError(f"feature table {path} is not a readable Parquet file: {err}") from None


def _from_columns(path: Path, frame, label_column: str | None) -> FeatureTable:
    import pandas as pd

    if label_column is not None and label_column not in frame.columns:
        raise InputError(
            f"feature table {path} has no label column {label_column!r} (its columns: {list(frame.columns)[:8]})"
        )
    features = frame.drop(columns=[label_column]) if label_column is not None else frame
    for name in features.columns:
        if not pd.api.types.is_numeric_dtype(features[name]) or pd.api.types.is_bool_dtype(features[name]):
            numbers = pd.to_numeric(features[name], errors="coerce")
            row = int(np.flatnonzero(numbers.isna() & features[name].notna())[0]) if numbers.isna().any() else 0
            raise InputError(
                f"feature table {path}: row {row}, column {name!r} is {features[name].iloc[row]!r}, not a number"
            )
    X = features.to_numpy(dtype=np.float64)
    _check_values(path, X, [str(name) for name in features.columns])
    if label_column is None:
        return FeatureTable(X.astype(np.float32), None)
    labels = frame[label_column]
    if labels.isna().any():
        raise InputError(f"feature table {path}: row {int(np.flatnonzero(labels.isna())[0])} has no label")
    codes, names = encode_labels(path, labels.to_numpy(dtype=object if labels.dtype == object else None))
    return FeatureTable(X.astype(np.float32), codes, names)


def load_feature_table(path: str | Path, label_column: str | None = None, memory_map: bool = True) -> FeatureTable:
    """The table at ``path`` checked and loaded (see the module's docs for the formats).

    ``label_column`` names the labels' column of a CSV or Parquet table (None: unlabelled);
    an ``.npz`` holds its labels as ``y``. A ``.npy`` table stays memory-mapped when it is
    float32 already (unless ``memory_map`` is false), so that a large one is read once, by
    what uses it."""
    resolved = check_regular_file(path)
    suffix = resolved.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise InputError(
            f"feature table {path}: unknown format {suffix or '(no suffix)'}; expected {', '.join(TABLE_SUFFIXES)}"
        )
    if suffix in (".csv", ".parquet"):
        return _from_columns(Path(path), _read_columns(resolved, suffix), label_column)
    if label_column is not None:
        raise InputError(f"feature table {path}: label_column is for CSV and Parquet; an .npz holds its labels as y")
    try:
        if suffix == ".npy":
            X, y = np.load(resolved, mmap_mode="r" if memory_map else None, allow_pickle=False), None
        else:
            with np.load(resolved, allow_pickle=False) as archive:
                if "X" not in archive.files:
                    raise InputError(f"feature table {path} holds no array X (it holds {sorted(archive.files)})")
                X, y = archive["X"], archive["y"] if "y" in archive.files else None
    except (ValueError, OSError, EOFError) as err:
        raise InputError(f"feature table {path} is not a readable {suffix} file: {str(err).splitlines()[0]}") from None
    _check_values(Path(path), X)
    if y is not None and len(y) != len(X):
        raise InputError(f"feature table {path}: {len(y)} labels for {len(X)} points")
    codes, names = (None, None) if y is None else encode_labels(Path(path), y)
    return FeatureTable(X if X.dtype == np.float32 else X.astype(np.float32), codes, names)

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

import csv
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from basis.catalog.data_sources import TABLE_SUFFIXES
from basis.errors import InputError
from basis.runtime.inputs import MAX_FEATURE_MAGNITUDE

#: Bytes checked at a time: a block stays in the core's cache between its copy and its
#: check, and a memory-mapped table is never read whole for its checks.
CHECK_BYTES = 1 << 20
#: Below this sum of squares a block holds no value beyond MAX_FEATURE_MAGNITUDE (a margin
#: for the sum's rounding); a NaN or an infinity makes the sum fail it too.
_SQUARES_BOUND = (MAX_FEATURE_MAGNITUDE * (1 - 1e-6)) ** 2


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


def _within_range(block: np.ndarray) -> bool:
    """Whether every value of ``block`` is finite and at most MAX_FEATURE_MAGNITUDE in
    magnitude: a float block's sum of squares bounds each square (one pass through BLAS);
    another block, or one whose sum says no, is decided by its minimum and maximum."""
    if block.dtype in (np.float32, np.float64) and block.flags.c_contiguous:
        flat = block.ravel()
        if float(np.dot(flat, flat)) <= _SQUARES_BOUND:
            return True
    return bool(-MAX_FEATURE_MAGNITUDE <= block.min() and block.max() <= MAX_FEATURE_MAGNITUDE)  # NaN fails


def _checked(path: Path, X: np.ndarray, columns: list[str] | None = None, read_rows=None) -> np.ndarray:
    """``X`` once no value is non-finite or out of range; else an error naming the first
    one's row and column. With ``read_rows`` (a function filling rows [start, stop) of ``X``
    from its file), each block is checked as it is read, while it is in the core's cache."""
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise InputError(f"feature table {path} holds an array of shape {X.shape}; expected points x features")
    if not np.issubdtype(X.dtype, np.number) or np.issubdtype(X.dtype, np.complexfloating):
        raise InputError(f"feature table {path} holds {X.dtype} values; expected real numbers")
    rows = max(1, CHECK_BYTES // (X.shape[1] * X.dtype.itemsize))
    first, varies = None, False
    for start in range(0, len(X), rows):
        if read_rows is not None:
            read_rows(start, min(start + rows, len(X)))
        block = np.asarray(X[start : start + rows])
        first = np.array(block[0]) if first is None else first
        varies = varies or bool((block != first).any())
        if _within_range(block):
            continue
        bad = ~np.isfinite(block) | (np.abs(block) > MAX_FEATURE_MAGNITUDE)
        if bad.any():
            row, column = (int(i) for i in np.argwhere(bad)[0])
            name = f"column {columns[column]!r}" if columns else f"column {column}"
            value = float(block[row, column])
            what = "not finite" if not np.isfinite(value) else f"beyond {MAX_FEATURE_MAGNITUDE:g} in magnitude"
            raise InputError(f"feature table {path}: row {start + row}, {name} is {value!r}, {what}")
    if not varies:  # no distances, no graph, nothing to embed
        raise InputError(f"feature table {path}: all {len(X)} points are the same point")
    return X


def _npy_in_memory(path: Path, resolved: Path) -> np.ndarray | None:
    """A C-ordered float32 ``.npy`` read into memory and checked a block at a time (one read
    of the file, none of it mapped beside the copy); None for another layout, left to
    ``numpy.load``."""
    from numpy.lib import format as npy_format

    with open(resolved, "rb") as handle:
        try:
            version = npy_format.read_magic(handle)
            read_header = {(1, 0): npy_format.read_array_header_1_0, (2, 0): npy_format.read_array_header_2_0}
            if version not in read_header:
                return None
            shape, fortran_order, dtype = read_header[version](handle)
        except ValueError as err:
            raise InputError(f"feature table {path} is not a readable .npy file: {str(err).splitlines()[0]}") from None
        if fortran_order or dtype != np.float32 or len(shape) != 2:
            return None
        X = np.empty(shape, dtype)
        flat, row_bytes = X.reshape(-1).view(np.uint8), shape[1] * dtype.itemsize

        def read_rows(start: int, stop: int) -> None:
            got = handle.readinto(flat[start * row_bytes : stop * row_bytes])
            if got != (stop - start) * row_bytes:
                where = f"in row {start + got // row_bytes} of its {shape[0]}"
                raise InputError(f"feature table {path} is not a readable .npy file: it ends {where}")

        return _checked(path, X, read_rows=read_rows)


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
            frame = pd.read_csv(path)
            with open(path, newline="", encoding="utf-8") as file:  # pandas renames a repeated name silently
                header = next(csv.reader(file), [])
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
            raise InputError(f"feature table {path} is not a readable CSV: {str(err).splitlines()[0]}") from None
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:
            raise InputError(f"feature table {path}: its header names the column(s) {repeated} more than once")
        return frame
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"feature table {path}: Parquet needs the optional extra: pip install pyarrow") from None
    try:
        return pq.read_table(path).to_pandas()
    except Exception as err:  # noqa: BLE001 (pyarrow's errors have no common public base)
        raise InputError(f"feature table {path} is not a readable Parquet file: {err}") from None


#: Column names that say a table's column holds its classes, not a coordinate.
LABEL_NAMES = ("label", "labels", "class", "classes", "target", "category")


def _refuse_unnamed_labels(path: Path, frame) -> None:
    """A table read without a label column whose column is named as labels are (or holds
    words): it would be embedded as a feature, and the run then said the table had no labels."""
    import pandas as pd

    for name in frame.columns:
        named = str(name).strip().lower() in LABEL_NAMES
        if (
            named
            or not pd.api.types.is_numeric_dtype(frame[name])
            and pd.to_numeric(frame[name], errors="coerce").isna().all()
        ):
            raise InputError(
                f"feature table {path}: column {str(name)!r} looks like its labels; name it with --label-column"
                f" {name} (label_column: {name} in a data source), or rename it to embed it as a feature"
            )


def _from_columns(path: Path, frame, label_column: str | None) -> FeatureTable:
    import pandas as pd

    if len(frame) == 0:
        raise InputError(f"feature table {path} has a header and no rows")
    if frame.columns.duplicated().any():
        raise InputError(
            f"feature table {path}: the column(s) {sorted(set(frame.columns[frame.columns.duplicated()]))}"
            " appear more than once"
        )
    if label_column is not None and label_column not in frame.columns:
        raise InputError(
            f"feature table {path} has no label column {label_column!r} (its columns: {list(frame.columns)[:8]})"
        )
    if label_column is None:
        _refuse_unnamed_labels(path, frame)
    features = frame.drop(columns=[label_column]) if label_column is not None else frame
    for name in features.columns:
        column = features[name]
        if pd.api.types.is_bool_dtype(column):
            raise InputError(f"feature table {path}: row 0, column {name!r} is {column.iloc[0]!r}, not a number")
        if not pd.api.types.is_numeric_dtype(column):
            numbers = pd.to_numeric(column, errors="coerce")
            words = np.flatnonzero(numbers.isna() & column.notna())
            if len(words):
                row = int(words[0])
                raise InputError(
                    f"feature table {path}: row {row}, column {name!r} is {column.iloc[row]!r}, not a number"
                )
            features = features.assign(**{name: numbers})  # numbers beyond int64 and empty cells: read as floats
    X = features.to_numpy(dtype=np.float64)
    X = _checked(path, X, [str(name) for name in features.columns])
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
    float32 already, so that a large one is read once, by what uses it; with ``memory_map``
    false it is read into memory as it is checked (one read of the file), for a caller that
    rearranges it in place."""
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
    if suffix == ".npy" and not memory_map and (X := _npy_in_memory(Path(path), resolved)) is not None:
        return FeatureTable(X, None)
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
    X = _checked(Path(path), X)
    if y is not None and len(y) != len(X):
        raise InputError(f"feature table {path}: {len(y)} labels for {len(X)} points")
    codes, names = (None, None) if y is None else encode_labels(Path(path), y)
    return FeatureTable(X if X.dtype == np.float32 else X.astype(np.float32), codes, names)

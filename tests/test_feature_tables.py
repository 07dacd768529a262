"""Feature tables of one's own (basis.data.feature_tables): each format read as written, and
every bad file refused in one line naming the file and, for a bad value, its row and column."""

import os

import numpy as np
import pandas as pd
import pytest

from basis.data.clusters import clustered_data
from basis.data.feature_tables import FeatureTable, check_regular_file, load_feature_table
from basis.errors import InputError


@pytest.fixture
def points():
    """Siamese-like clustered points, translated far from the origin (a design that is not centred)."""
    X, y = clustered_data(300, 8, 3, seed=0, spread=1.5)
    return (X + 1e3).astype(np.float32), y


def _csv(path, X, labels=None, header=None):
    header = header or [f"f{i}" for i in range(X.shape[1])]
    rows = [",".join(header + (["label"] if labels is not None else []))]
    for i, row in enumerate(X):
        rows.append(",".join([repr(float(v)) for v in row] + ([str(labels[i])] if labels is not None else [])))
    path.write_text("\n".join(rows) + "\n")
    return path


def test_each_format_gives_the_same_points_and_labels(tmp_path, points):
    X, y = points
    np.save(tmp_path / "t.npy", X)
    np.savez(tmp_path / "t.npz", X=X, y=y)
    names = np.array(["cat", "dog", "emu"])[y]
    tables = {
        "npy": load_feature_table(tmp_path / "t.npy"),
        "npz": load_feature_table(tmp_path / "t.npz"),
        "csv": load_feature_table(_csv(tmp_path / "t.csv", X, y), label_column="label"),
        "csv strings": load_feature_table(_csv(tmp_path / "s.csv", X, names), label_column="label"),
        "csv unlabelled": load_feature_table(_csv(tmp_path / "u.csv", X)),
    }
    for name, table in tables.items():
        assert isinstance(table, FeatureTable) and table.X.dtype == np.float32, name
        np.testing.assert_array_equal(table.X, X, err_msg=name)
    assert tables["npy"].y is None and tables["csv unlabelled"].y is None
    for name in ("npz", "csv", "csv strings"):
        np.testing.assert_array_equal(tables[name].y, y, err_msg=name)
    assert tables["csv strings"].classes == ("cat", "dog", "emu") and tables["npz"].classes is None
    assert isinstance(tables["npy"].X, np.memmap)  # float32 .npy: read by what uses it, not copied


def _refused(path, **options) -> str:
    with pytest.raises(InputError) as refused:
        load_feature_table(path, **options)
    message = str(refused.value)
    assert len(message.splitlines()) == 1 and str(path) in message
    return message


def test_bad_values_are_named_by_row_and_column(tmp_path, points):
    X, y = points
    bad = X.copy()
    bad[17, 5] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    assert "row 17, column 5 is nan, not finite" in _refused(tmp_path / "nan.npy")
    bad[17, 5], bad[3, 2] = 0.0, np.inf
    assert "row 3, column 'f2' is inf" in _refused(_csv(tmp_path / "inf.csv", bad, y), label_column="label")
    text = (tmp_path / "inf.csv").read_text().replace("inf", "1.0").splitlines()
    text[9] = text[9].replace(text[9].split(",")[4], "abc", 1)
    (tmp_path / "word.csv").write_text("\n".join(text) + "\n")
    assert "row 8, column 'f4' is 'abc', not a number" in _refused(tmp_path / "word.csv", label_column="label")
    np.save(tmp_path / "huge.npy", np.full((4, 2), 1e30))
    assert "row 0, column 0" in _refused(tmp_path / "huge.npy")
    np.save(tmp_path / "flat.npy", np.ones(5))
    assert "shape (5,)" in _refused(tmp_path / "flat.npy")
    np.save(tmp_path / "complex.npy", np.ones((4, 2), dtype=complex))
    assert "complex128" in _refused(tmp_path / "complex.npy")


def test_labels_must_be_there_and_be_integers_or_strings(tmp_path, points):
    X, y = points
    path = _csv(tmp_path / "t.csv", X, y)
    assert "no label column 'class'" in _refused(path, label_column="class")
    floats = _csv(tmp_path / "f.csv", X, y + 0.5)
    assert "row 0 is 0.5; labels are integers or strings" in _refused(floats, label_column="label")
    np.savez(tmp_path / "short.npz", X=X, y=y[:-1])
    assert "299 labels for 300 points" in _refused(tmp_path / "short.npz")
    np.savez(tmp_path / "nox.npz", features=X)
    assert "holds no array X" in _refused(tmp_path / "nox.npz")
    np.save(tmp_path / "t.npy", X)
    assert "label_column is for CSV and Parquet" in _refused(tmp_path / "t.npy", label_column="label")


def test_files_that_are_not_tables_are_refused(tmp_path, points):
    X, _ = points
    np.save(tmp_path / "t.npy", X)
    (tmp_path / "cut.npy").write_bytes((tmp_path / "t.npy").read_bytes()[:200])
    assert "not a readable .npy file" in _refused(tmp_path / "cut.npy")
    (tmp_path / "empty.csv").write_bytes(b"")
    assert "is empty (0 bytes)" in _refused(tmp_path / "empty.csv")
    (tmp_path / "t.txt").write_text("1,2\n")
    assert "unknown format .txt" in _refused(tmp_path / "t.txt")
    assert "does not exist" in _refused(tmp_path / "missing.npy")
    os.symlink(tmp_path / "b.npy", tmp_path / "a.npy")
    os.symlink(tmp_path / "a.npy", tmp_path / "b.npy")
    assert "symbolic links form a loop" in _refused(tmp_path / "a.npy")
    assert "is a folder" in _refused(tmp_path)
    with pytest.raises(InputError, match="not a regular file"):
        check_regular_file("/dev/null")


def test_a_table_read_for_an_in_place_split_is_checked_block_by_block_as_it_is_read(tmp_path, points, monkeypatch):
    from basis.data import feature_tables

    X, _ = points
    monkeypatch.setattr(feature_tables, "CHECK_BYTES", 7 * X.shape[1] * 4)  # blocks of seven rows
    np.save(tmp_path / "t.npy", X)
    copied = load_feature_table(tmp_path / "t.npy", memory_map=False).X
    assert not isinstance(copied, np.memmap) and copied.flags.writeable and copied.flags.c_contiguous
    np.testing.assert_array_equal(copied, X)
    (tmp_path / "cut.npy").write_bytes((tmp_path / "t.npy").read_bytes()[:-10])
    assert "not a readable .npy file: it ends in row 299 of its 300" in _refused(tmp_path / "cut.npy", memory_map=False)
    for layout in (np.asfortranarray(X), X.astype(np.float64)):  # read by numpy.load, then copied
        np.save(tmp_path / "other.npy", layout)
        other = load_feature_table(tmp_path / "other.npy", memory_map=False).X
        assert other.dtype == np.float32 and not isinstance(other, np.memmap)
        np.testing.assert_array_equal(other, X)
    for row in (0, 6, 7, 299):  # a block's first and last rows, and the table's last
        bad = X.copy()
        bad[row, 3] = np.nan
        np.save(tmp_path / "nan.npy", bad)
        for memory_map in (True, False):
            assert f"row {row}, column 3 is nan" in _refused(tmp_path / "nan.npy", memory_map=memory_map)


@pytest.mark.parametrize("suffix", [".npy", ".csv"])
def test_points_that_are_all_one_point_are_refused(tmp_path, monkeypatch, suffix):
    """Nothing to embed: no distance, no graph (a constant table ran to NMI 0). The check
    follows the blocks of a large table: the one point that differs is in its last block."""
    from basis.data import feature_tables

    monkeypatch.setattr(feature_tables, "CHECK_BYTES", 64)  # blocks of a few rows
    X = np.ones((40, 2))
    path = tmp_path / f"t{suffix}"
    np.save(path, X) if suffix == ".npy" else pd.DataFrame(X, columns=["a", "b"]).to_csv(path, index=False)
    assert "all 40 points are the same point" in _refused(path)
    X[-1, 1] = 2.0
    np.save(path, X) if suffix == ".npy" else pd.DataFrame(X, columns=["a", "b"]).to_csv(path, index=False)
    assert load_feature_table(path).X.shape == (40, 2)


@pytest.mark.parametrize(
    "text, words",
    [
        ("a,b,label\n", "has a header and no rows"),
        ("a,a,label\n1,2,0\n3,4,1\n", "its header names the column(s) ['a'] more than once"),
    ],
    ids=["header-only", "repeated-name"],
)
def test_a_csv_with_a_header_and_no_rows_or_a_name_twice_is_refused_in_one_line(tmp_path, text, words):
    (tmp_path / "t.csv").write_text(text)
    assert words in _refused(tmp_path / "t.csv", label_column="label")


def test_the_range_check_is_exact_at_the_limit_whichever_way_a_block_is_decided(tmp_path):
    limit = 1e15
    cases = {  # values, the row and column named or None
        "at the limit": (np.array([[limit, -limit], [-limit, limit]] * 2), None),
        "squares past the sum's bound, every value within it": (np.array([[0.9 * limit, 0.9 * limit], [0, 0]]), None),
        "one ulp beyond": (np.array([[0.0, 1.0], [np.nextafter(limit, np.inf), 0.0]]), "row 1, column 0"),
        "below minus the limit": (np.array([[0.0, -2 * limit]]), "row 0, column 1"),
        "integers beyond it, whose squares would overflow": (np.array([[1, 2], [3, 2**62]]), "row 1, column 1"),
        "integers within it": (np.array([[3_000_000_000, -7], [-7, 3_000_000_000]] * 2), None),
        "a Fortran-ordered array": (np.asfortranarray(np.array([[1.0, 2.0], [np.inf, 0.0]])), "row 1, column 0"),
    }
    for name, (values, named) in cases.items():
        np.save(tmp_path / "t.npy", values)
        if named is None:
            np.testing.assert_array_equal(load_feature_table(tmp_path / "t.npy").X, values.astype(np.float32), name)
        else:
            assert f"{named} is" in _refused(tmp_path / "t.npy"), name


@pytest.mark.parametrize(
    "header, rows",
    [("a,b,label", ["1,2,0", "3,4,1"]), ("a,b,Class", ["1,2,0", "3,4,1"]), ("a,kind,b", ["1,cat,2", "3,dog,4"])],
)
def test_a_table_read_without_its_label_column_names_the_column_to_give(tmp_path, header, rows):
    """A column named as labels are, or of words, read as features would make the run say the
    table has no labels; the refusal names the flag and the key that take it."""
    path = tmp_path / "t.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    column = next(name for name in header.split(",") if name not in ("a", "b"))
    refusal = f"column '{column}' looks like its labels; name it with --label-column {column}"
    with pytest.raises(InputError, match=refusal):
        load_feature_table(path)
    assert load_feature_table(path, label_column=column).y is not None

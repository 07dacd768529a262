"""Data sets of one's own (basis.catalog.data_sources, basis.data.own_sets, basis.data.image_folders):
declared, checked at the door, loaded, split, hashed and run by the commands, labelled or not."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import refused
from own_data import write_image_folder, write_tables
from PIL import Image

from basis.catalog.data_sources import UNLABELLED_UNAVAILABLE, data_source
from basis.cli import launcher
from basis.data import load_inputs
from basis.data.image_folders import load_image_folder
from basis.data.own_sets import content_hash, load_source
from basis.errors import InputError
from basis.paper import NOT_AVAILABLE, comparison_markdown, not_available, summarize, table_markdown


@pytest.fixture(autouse=True)
def local_store(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """An image folder of three digit classes and the digits as three tables."""
    root = tmp_path_factory.mktemp("own")
    return {"images": write_image_folder(root / "images", per_class=40), **write_tables(root / "tables")}


# -- the declaration ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "declaration", "words"),
    [
        ("digits", {"path": "{images}"}, "'digits' is a data set of the catalog"),
        ("Mine", {"path": "{images}"}, "lower-case letters"),
        ("mine", {"path": "{images}", "colour": True}, "unknown keys ['colour']"),
        ("mine", {}, "path is missing"),
        ("mine", {"path": "nowhere/at/all"}, "data_sources.mine.path nowhere/at/all: does not exist"),
        ("mine", {"path": "{images}/../README"}, "neither an image folder nor a feature table"),
        ("mine", {"path": "{npz}", "label_column": "y"}, "label_column is for a CSV or Parquet table"),
        ("mine", {"path": "{labelled}", "image_size": [16, 16]}, "image_size is for an image folder"),
        ("mine", {"path": "{images}", "image_size": [2, 16]}, "each 4 to 1024 pixels"),
        ("mine", {"path": "{images}", "test": {"path": "{images}", "fraction": 0.1}}, "a path or a fraction"),
        ("mine", {"path": "{images}", "test": {"path": "{labelled}"}}, "is not in the layout of"),
        ("mine", {"path": "{images}", "test": {"fraction": 1.5}}, "between 0 and 1"),
        ("mine", {"path": "{unlabelled}", "n_components": 0}, "positive integer"),
        # read when the config is (a dry run), not at the first job that embeds it
        ("mine", {"path": "{unlabelled}"}, "data_sources.mine: {unlabelled} has no labels: declare its n_components"),
    ],
)
def test_a_bad_declaration_is_refused_in_one_line(own, name, declaration, words):
    filled = json.loads(json.dumps(declaration).replace("{images}", str(own["images"])))
    for key in ("npz", "labelled", "unlabelled"):
        filled = json.loads(json.dumps(filled).replace("{" + key + "}", str(own[key])))
    (own["images"].parent / "README").write_text("not data")
    with pytest.raises(InputError) as refusal:
        data_source(name, filled)
    words = words.replace("{unlabelled}", str(own["unlabelled"]))
    assert words in str(refusal.value) and "\n" not in str(refusal.value)


# -- image folders --------------------------------------------------------------------------------
def test_an_image_folder_loads_resized_with_its_classes_codes_in_folder_order(own):
    folder = load_image_folder(own["images"], (16, 12))
    assert folder.images.shape == (120, 1, 16, 12) and folder.images.dtype == np.float32
    assert folder.classes == ("digit_0", "digit_1", "digit_2")
    assert np.bincount(folder.labels).tolist() == [40, 40, 40]
    assert 0 <= folder.images.min() and folder.images.max() <= 1 and folder.images.max() > 0.5


def test_images_of_several_sizes_need_a_declared_size(own):
    with pytest.raises(InputError, match="declare image_size to resize them"):
        load_image_folder(own["images"])


def _bad_folder(root: Path, kind: str) -> Path:
    """An image folder with one thing wrong (``kind``), else two classes of two images."""
    for digit in ("a", "b"):
        (root / digit).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((8, 8), 40 * i + 10, np.uint8)).save(root / digit / f"{i}.png")
    target = root / "a" / "bad.png"
    if kind == "empty":
        for path in sorted(root.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
    elif kind == "empty class":
        (root / "c").mkdir()
    elif kind == "one class":
        for path in (root / "b").iterdir():
            path.unlink()
        (root / "b").rmdir()
    elif kind == "corrupt":
        target.write_bytes(os.urandom(300))
    elif kind == "truncated":
        Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64), dtype=np.uint8)).save(target)
        target.write_bytes(target.read_bytes()[:400])
    elif kind == "not an image":
        (root / "a" / "notes.txt").write_text("hello")
    elif kind == "mixed channels":
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(target)
    elif kind == "0 bytes":
        target.write_bytes(b"")
    elif kind == "symlink loop":
        target.symlink_to(root / "a" / "loop.png")
        (root / "a" / "loop.png").symlink_to(target)
    elif kind == "device":
        target.symlink_to("/dev/null")
    return root


BAD_FOLDERS = {
    "empty": "has no class folders",
    "empty class": "(a class) holds no image",
    "one class": "has one class (a)",
    "corrupt": "bad.png is not an image PIL can read",
    "truncated": "bad.png is corrupt or truncated",
    "not an image": "notes.txt is not an image",
    "mixed channels": "mixes grey and colour images",
    "0 bytes": "bad.png is empty (0 bytes)",
    "symlink loop": "symbolic links form a loop",
    "device": "is not a regular file",
}


@pytest.mark.parametrize("kind", BAD_FOLDERS)
def test_a_bad_image_folder_is_refused_at_the_door_naming_the_file(tmp_path, capsys, monkeypatch, kind):
    _bad_folder(tmp_path / "images", kind)
    line = refused(["download", "--data", "images", "--out", "summary.json"], tmp_path, capsys, monkeypatch)
    assert BAD_FOLDERS[kind] in line, line


# -- loading and splitting --------------------------------------------------------------------------
def test_a_split_is_stratified_seeded_and_its_hash_follows_the_contents(own, tmp_path):
    source = data_source("points", {"path": str(own["labelled"]), "label_column": "label"})
    first, again, other = load_source(source, 0), load_source(source, 0), load_source(source, 1)
    assert np.array_equal(first.X_test, again.X_test) and not np.array_equal(first.X_test, other.X_test)
    assert len(first.X_test) == 360 and np.bincount(first.y_test).min() >= 35  # a fifth of every class
    assert first.classes[0] == "digit 0" and content_hash(source) == content_hash(source)
    edited = tmp_path / "labelled.csv"
    edited.write_text(own["labelled"].read_text().replace("\n0.0,", "\n1.0,", 1))
    changed = data_source("points", {"path": str(edited), "label_column": "label"})
    assert content_hash(changed) != content_hash(source)
    copied = tmp_path / "copy" / "labelled.csv"
    copied.parent.mkdir()
    copied.write_bytes(own["labelled"].read_bytes())
    assert content_hash(data_source("points", {"path": str(copied), "label_column": "label"})) == content_hash(source)


def test_a_declared_test_table_is_the_test_split(own, tmp_path):
    test_table = tmp_path / "test.csv"
    test_table.write_text("".join(own["labelled"].read_text().splitlines(keepends=True)[:301]))
    source = data_source(
        "points", {"path": str(own["labelled"]), "label_column": "label", "test": {"path": str(test_table)}}
    )
    data = load_source(source)
    assert len(data.X_train) == 1797 and len(data.X_test) == 300


def test_unlabelled_data_needs_its_dimension_and_has_no_classes(own):
    with pytest.raises(InputError, match="has no labels: declare its n_components"):
        load_source(data_source("loose", {"path": str(own["unlabelled"])}))
    data = load_inputs("loose", source=data_source("loose", {"path": str(own["unlabelled"]), "n_components": 9}))
    assert data.y_train is None and data.n_classes is None and data.n_components == 9


# -- the commands ----------------------------------------------------------------------------------
def _run_json(argv, folder, capsys, monkeypatch) -> dict:
    monkeypatch.chdir(folder)
    assert launcher.run_command([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads([line for line in capsys.readouterr().out.splitlines() if line.startswith("{")][-1])


def test_an_unlabelled_table_runs_with_random_anchors_and_says_what_it_lacks(own, tmp_path, capsys, monkeypatch):
    data = ["--data", str(own["unlabelled"]), "--n-components", "9", "--dataset", "loose"]
    _run_json(["reference", *data, "--out", "ref.npz"], tmp_path, capsys, monkeypatch)
    settings = ["n_iter=5", "batch_size=300", "anchors_per_class=10", 'evaluation="authors"']
    command = ["run", "--method", "basis", *data, "--reference", "ref.npz", "--out", "run"]
    out = _run_json([*command, *(f"--set={setting}" for setting in settings)], tmp_path, capsys, monkeypatch)
    assert {"d_G", "d_perp", "alignment_error_median"} <= set(out) and not {"nmi", "acc", "accuracy"} & set(out)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["not_available"] == UNLABELLED_UNAVAILABLE
    assert np.load(tmp_path / "run" / "embedding.npz").files == ["test", "reference"]


def test_an_unlabelled_run_as_the_readme_writes_it_takes_basis_default_anchors(own, tmp_path, capsys, monkeypatch):
    """No ``anchors_per_class`` given (the README's command): BASiS's own default, 25 a
    component, drawn at random (it ended in a KeyError)."""
    data = ["--data", str(own["unlabelled"]), "--n-components", "2"]
    settings = ["n_iter=3", "batch_size=300"]
    out = _run_json(["run", "--method", "basis", *data, "--out", "o", *(f"--set={s}" for s in settings)],
                    tmp_path, capsys, monkeypatch)  # fmt: skip
    assert out["d_G"] >= 0
    params = torch.load(tmp_path / "o" / "model.pt", weights_only=True)["params"]
    assert params["anchors"] == "random" and params["n_anchors"] == 2 * 25


def test_tables_and_the_comparison_show_what_unlabelled_data_lacks_and_why():
    import pandas as pd

    rows = [
        {"dataset": "loose", "method": "basis", "seed": s, "d_G": 0.5 + s, "d_perp": 0.2, "d_perp_code": 0.1}
        for s in (0, 1)
    ]
    unavailable = not_available([("loose", {"not_available": UNLABELLED_UNAVAILABLE})] * 2)
    summary = summarize(pd.DataFrame(rows))
    table = table_markdown(summary, unavailable)
    na = NOT_AVAILABLE
    assert (
        f"| loose | basis | **1.000 ± 0.707** | **0.200 ± 0.000** | {na} | {na} | {na} |" in table
    )  # one method: best
    assert "n/a: not available: the data set has no labels (loose acc, loose accuracy" in table
    comparison = comparison_markdown(summary, unavailable)
    assert (
        "| loose | basis | nmi | — | n/a | — | no paper number; not available: the data set has no labels | n/a |"
        in comparison
    )
    assert "| loose | basis | d_G | — | n/a | — | no paper number; not available without labels" in comparison
    assert "| 1.000 ± 0.707 (d_G) |" in comparison  # the equation's d_G is there


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["run", "--method", "basis", "--set", "batch_size=2000"], "batch_size=2000 exceeds the number of training"),
        (["reference", "--set", "graph.n_neighbors=400"], "its test split holds 360 points, no more than graph.n_ne"),
        (["run", "--method", "specnet1", "--set", 'evaluation="authors"', "--set", "batch_size=256"],
         "the authors' evaluation draws 25 test anchors per class"),
    ],
)  # fmt: skip
def test_too_few_points_for_the_batch_or_the_graph_are_refused(own, tmp_path, capsys, monkeypatch, argv, words):
    command, *rest = argv
    data = ["--data", str(own["labelled"]), "--label-column", "label"]
    if "authors" in str(argv):
        data += ["--test-fraction", "0.1"]
    line = refused(
        [command, *rest, *data, "--out", "out.npz" if command == "reference" else "out"], tmp_path, capsys, monkeypatch
    )
    assert words in line, line


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["download", "--dataset", "mydata"], "--dataset 'mydata' is not in the catalog"),
        (
            ["download", "--label-column", "label", "--dataset", "digits"],
            "--label-column declares a data set of one's own",
        ),
        (["download", "--data", "{labelled}", "--label-column", "kind"], "has no label column 'kind'"),
        (["download", "--data", "{labelled}", "--dataset", "mnist"], "'mnist' is a data set of the catalog"),
        (["features", "--data", "{labelled}", "--label-column", "label", "--out", "f.npz"], "has no images"),
        (["download", "--data", "{unlabelled}"], "declare its n_components"),
    ],
)
def test_the_command_line_refuses_a_bad_data_set_in_one_line(own, tmp_path, capsys, monkeypatch, argv, words):
    argv = [a.replace("{labelled}", str(own["labelled"])).replace("{unlabelled}", str(own["unlabelled"])) for a in argv]
    assert words in refused(argv, tmp_path, capsys, monkeypatch)


def test_a_download_summarises_an_image_folder_with_its_hash(own, tmp_path, capsys, monkeypatch):
    summary = _run_json(
        ["download", "--data", str(own["images"]), "--image-size", "16", "16", "--out", "d.json"],
        tmp_path,
        capsys,
        monkeypatch,
    )
    assert summary["dataset"] == "images" and summary["shape"] == [1, 16, 16] and summary["n_classes"] == 3
    assert summary["n_train"] + summary["n_test"] == 120 and len(summary["content_hash"]) == 32
    written = json.loads((tmp_path / "d.json").read_text())
    assert written["kind"] == "images" and written["source"] == {
        "path": str(own["images"]),
        "test": {"fraction": 0.2},
        "image_size": [16, 16],
    }


def test_embed_takes_a_table_of_ones_own(own, tmp_path, capsys, monkeypatch):
    data = ["--data", str(own["labelled"]), "--label-column", "label"]
    _run_json(
        ["run", "--method", "specnet1", *data, "--set", "n_iter=3", "--out", "run"], tmp_path, capsys, monkeypatch
    )
    out = _run_json(["embed", "--model", "run/model.pt", *data, "--out", "e.npy"], tmp_path, capsys, monkeypatch)
    assert out["n"] == 1797 and np.load(tmp_path / "e.npy").shape == (1797, 10)
    line = refused(
        ["embed", "--model", "run/model.pt", "--data", str(own["images"]), "--out", "f.npy"],
        tmp_path,
        capsys,
        monkeypatch,
    )
    assert "is an image folder: embed its images with --siamese" in line


def _readme_section() -> str:
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    return text.split("## Your own data", 1)[1].split("\n## ", 1)[0]


def test_the_readmes_command_runs_as_written(tmp_path):
    """The README's `run --data` line, in a folder holding the table it names."""
    import shlex
    import subprocess
    import sys

    (line,) = [line for line in _readme_section().splitlines() if line.startswith(".venv/bin/python -m basis run")]
    (tmp_path / "data").mkdir()
    write_tables(tmp_path / "tables")
    (tmp_path / "tables" / "labelled.csv").rename(tmp_path / "data" / "my_table.csv")
    argv = shlex.split(line)
    assert argv[0] == ".venv/bin/python"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads((tmp_path / "results" / "mine" / "metrics.json").read_text())
    assert {"d_G", "d_perp", "nmi", "acc", "accuracy"} <= set(metrics) and "not_available" not in metrics


def test_a_study_takes_a_data_set_of_ones_own_by_its_download_summary(own, tmp_path, capsys, monkeypatch):
    labelled = ["--data", str(own["labelled"]), "--label-column", "label", "--dataset", "points"]
    _run_json(["download", *labelled, "--out", "points.json"], tmp_path, capsys, monkeypatch)
    unlabelled = ["--data", str(own["unlabelled"]), "--n-components", "5", "--dataset", "loose"]
    _run_json(["download", *unlabelled, "--out", "loose.json"], tmp_path, capsys, monkeypatch)
    settings = ["batch_sizes=[150,250]", "n_pairs=2", "n_held_out=20", "anchors_per_class=5"]
    study = ["study", "alignment_error", "--out", "ae/{dataset}", *(f"--set={s}" for s in settings)]
    out = _run_json([*study, "--datasets", "points", "--declaration", "points.json"], tmp_path, capsys, monkeypatch)
    assert out["datasets"]["points"]["m150/median_error"] > 0
    assert (tmp_path / "ae" / "points" / "metrics.json").exists()
    for argv, words in [
        ([*study, "--datasets", "points"], "'points' is not in the catalog; declare it with --declaration"),
        ([*study, "--datasets", "loose", "--declaration", "loose.json"], "loose has no labels"),
        (["study", "toy", "--out", "t/{dataset}", "--datasets", "points", "--declaration", "points.json"],
         "study 'toy' reads the catalog's data sets only"),
    ]:  # fmt: skip
        assert words in refused(argv, tmp_path, capsys, monkeypatch)


def test_a_split_in_place_gives_the_rows_a_copy_gives_moving_only_the_rows_that_trade_places(monkeypatch):
    from basis.data import own_sets

    monkeypatch.setattr(own_sets, "SWAP_BYTES", 7 * 3 * 4)  # many blocks of seven pairs
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 3)).astype(np.float32)
    held_out = own_sets.held_out_rows(500, 100, None, seed=1)
    out_front, in_tail = own_sets.trading_places(held_out)
    assert len(out_front) == len(in_tail) == np.count_nonzero(held_out[:400]) > 0
    order = np.arange(500)
    order[out_front], order[in_tail] = in_tail, out_front
    assert set(order[:400]) == set(np.flatnonzero(~held_out)) and set(order[400:]) == set(np.flatnonzero(held_out))
    expected = X[order].copy()
    read_only = X.copy()
    read_only.flags.writeable = False
    for given, in_place in ((X, True), (read_only, False)):
        X_train, X_test = own_sets._split_at(given, (out_front, in_tail), 400)
        assert np.array_equal(X_train, expected[:400]) and np.array_equal(X_test, expected[400:])
        assert np.shares_memory(X_train, given) == np.shares_memory(X_test, given) == in_place


def test_a_split_holds_out_each_class_share_and_keeps_a_training_point_of_each():
    from basis.data.own_sets import held_out_rows

    def split_rows(*args, **kwargs):
        held_out = held_out_rows(*args, **kwargs)
        return np.flatnonzero(~held_out), np.flatnonzero(held_out)

    y = np.repeat(np.arange(4), [50, 30, 18, 2])
    train, test = split_rows(100, 21, y, seed=3)
    assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(100))
    assert np.bincount(y[test], minlength=4).tolist() == [11, 6, 4, 0]  # 10.5, 6.3, 3.78, 0.42 by largest remainder
    assert not np.array_equal(test, split_rows(100, 21, y, seed=4)[1])
    train, test = split_rows(100, 90, y, seed=0)  # 90 %: the two-point class keeps one to train on
    assert np.bincount(y[train], minlength=4).min() >= 1

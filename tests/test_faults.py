"""Faults a user runs into: every bad input is named before compute, with exit status 2, no
traceback and nothing written (the workflow's faults are in test_workflow_e2e.py)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_GUARD_S

from basis.cli import main

ROOT = Path(__file__).resolve().parents[1]
RUN = ["run", "--method", "basis", "--dataset", "digits", "--device", "cpu", "--threads", "1"]


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    good = {
        "X_train": rng.normal(size=(300, 16)).astype(np.float32),
        "y_train": np.arange(300) % 10,
        "X_test": rng.normal(size=(100, 16)).astype(np.float32),
        "y_test": np.arange(100) % 10,
        "dataset": "digits",
        "data_seed": 0,
    }
    np.savez(tmp_path / "features.npz", **good)
    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "truncated.npz").write_bytes((tmp_path / "features.npz").read_bytes()[:500])
    np.save(tmp_path / "features.npy", good["X_train"])
    np.savez(tmp_path / "huge.npz", **{**good, "X_train": good["X_train"] * 1e30})
    np.savez(tmp_path / "reference.npz", settings="{}")
    (tmp_path / "a_file").write_text("results go in a folder")
    return tmp_path


CASES = [
    (["--set", "lr=abc"], "lr='abc' (str) is not valid: expected float"),
    (["--set", "graph.scale_neighbor=abc"], "graph.scale_neighbor='abc' (str) is not valid: expected int"),
    (["--set", "graph=5"], "graph=5 is not valid: expected a mapping of graph.* keys"),
    (["--set", "hidden=abc"], "hidden='abc' (str) is not valid: expected tuple[int, ...]"),
    (["--set", "n_iter=[1"], "--set n_iter='[1': the value is not valid YAML"),
    (["--set", "eval=null"], "eval=None is not valid: expected a mapping of eval.* keys"),
    (["--set", "n_iter=true"], "n_iter=True (bool) is not valid: expected int"),
    (["--features", "{d}/empty.npz"], "features file {d}/empty.npz is empty, truncated or not an .npz"),
    (["--features", "{d}/truncated.npz"], "features file {d}/truncated.npz is empty, truncated or not an .npz"),
    (["--features", "{d}/features.npy"], "features file {d}/features.npy is a single .npy array"),
    (["--features", "{d}/missing.npz"], "features file {d}/missing.npz does not exist"),
    (["--features", "{d}/huge.npz"], "X_train must be finite and at most 1e+15 in magnitude"),
    (["--features", "{d}/features.npz", "--dataset", "two_moons"], "holds 'digits' (data seed 0), not 'two_moons'"),
    (
        ["--features", "{d}/features.npz", "--data-seed", "1"],
        "holds 'digits' (data seed 0), not 'digits' (data seed 1)",
    ),
    (
        ["--features", "{d}/features.npz", "--reference", "{d}/reference.npz"],
        "reference {d}/reference.npz lacks ['embedding']",
    ),
    (["--out", "{d}/a_file"], "--out {d}/a_file is an existing file"),
    (["--device", "cuda"], "device 'cuda' was asked for, but torch sees 0 CUDA device(s)"),
    (["--set", "graph.scale=fixed"], "sigma must be a positive number when scale='fixed'"),
]


@pytest.mark.parametrize("extra, message", CASES, ids=[c[1][:40] for c in CASES])
def test_bad_run_input_is_named_before_compute_and_nothing_is_written(files, capsys, extra, message):
    extra = [item.format(d=files) for item in extra]
    out = files / "out"
    args = [*RUN, "--out", str(out), *extra]
    if "--out" in extra[:1]:
        args = [*RUN, *extra]
    if "--dataset" in extra:  # the later --dataset wins
        args = [a for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message.format(d=files) in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["features", "--dataset", "digits", "--out", "{d}/f.npz", "--set", "n_steps=-1"],
            "n_steps must be a positive",
        ),
        (["features", "--dataset", "digits", "--out", "{d}", "--set", "n_steps=5"], "is a folder"),
        (["study", "bunny", "--out", "{d}/s", "--set", "n_frames=many"], "n_frames='many' (str) is not valid"),
        (["study", "toy", "--out", "{d}/a_file", "--set", "n_iter=2"], "--out {d}/a_file is an existing file"),
        (["embed", "--model", "{d}/missing.pt", "--input", "{d}/features.npy", "--out", "{d}/y.npy"], "missing.pt"),
    ],
)
def test_bad_input_of_the_other_commands_is_named(files, capsys, args, message):
    assert main([item.format(d=files) for item in args]) == 2
    assert message.format(d=files) in capsys.readouterr().err
    assert not (files / "f.npz").exists() and not (files / "s").exists() and not (files / "y.npy").exists()


def test_the_exit_is_status_2_without_a_traceback():
    done = subprocess.run(
        [sys.executable, "-m", "basis", *RUN, "--set", "n_iter=true"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: n_iter=True") and "Traceback" not in done.stderr


def test_an_interrupted_write_leaves_the_old_file_whole(tmp_path):
    from basis.runtime.outputs import atomic_path

    target = tmp_path / "model.pt"
    target.write_bytes(b"the finished model")
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target) as partial:
            partial.write_bytes(b"half a mo")
            raise KeyboardInterrupt  # a kill in the middle of the write
    assert target.read_bytes() == b"the finished model"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]  # no partial file left behind


def test_a_corrupt_metrics_file_is_named_with_the_command_that_redoes_it(tmp_path):
    from basis.errors import InputError
    from basis.runtime.outputs import read_metrics

    path = tmp_path / "results/runs/digits/basis/seed0/metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"d_G": 0.1, "nmi"')
    with pytest.raises(InputError, match=r"metrics.json is missing or corrupt .* --forcerun .*seed0/metrics.json"):
        read_metrics(path)


@pytest.mark.parametrize(
    "values, words",
    [
        ({"d_perp": 0.2}, "lacks the measure 'd_G'"),
        ({"d_G": "garbage", "d_perp": 0.2}, "the measure 'd_G' holds 'garbage', not a number"),
        ({"d_G": True, "d_perp": 0.2}, "the measure 'd_G' holds True, not a number"),
        ({"d_G": float("nan"), "d_perp": 0.2}, "the measure 'd_G' holds nan, not a number"),
        ({"d_G": 0.1, "d_perp": 0.2, "d_G_code": [1]}, "the measure 'd_G_code' holds [1], not a number"),
    ],
)
def test_an_aggregate_refuses_a_seed_without_a_measure_or_with_one_that_is_not_a_number(tmp_path, values, words):
    from basis.errors import InputError
    from basis.runtime.outputs import read_metrics

    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(values))
    with pytest.raises(InputError, match=re.escape(words) + ".* --forcerun .*metrics.json"):
        read_metrics(path, required=("d_G", "d_perp"), numbers=("d_G_code",))


def test_a_measure_the_data_cannot_have_is_not_required_and_an_optional_one_may_be_absent(tmp_path):
    from basis.runtime.outputs import read_metrics

    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"d_G": 0.1, "not_available": {"nmi": "no labels"}}))
    assert read_metrics(path, required=("d_G", "nmi"), numbers=("d_G_code",))["d_G"] == 0.1


def test_two_tracked_runs_started_at_once_into_a_new_store_both_finish(tmp_path):
    """MLflow creates and migrates a new SQLite store on first use; two jobs doing it at
    once used to both fail (alembic: "table ... already exists"). They also create their
    parent run and their data set's record once between them."""
    from basis.tracking import client

    store = tmp_path / "store"
    jobs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "basis",
                "run",
                "--method",
                "basis",
                "--dataset",
                "two_moons",
                "--seed",
                str(seed),
                "--set",
                "n_iter=5",
                "--set",
                "eval.authors_probe_epochs=1",
                "--threads",
                "1",
                "--track",
                "exp",
                "--store",
                str(store),
                "--parent",
                "two_moons seeds",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for seed in (0, 1)
    ]
    for job in jobs:
        _, err = job.communicate(timeout=HANG_GUARD_S)
        assert job.returncode == 0, err[-2000:]
    mlflow_client = client(store)
    found = mlflow_client.search_runs([mlflow_client.get_experiment_by_name("exp").experiment_id])
    parents = [r for r in found if "basis.parent" in r.data.tags]
    runs = [r for r in found if "basis.parent" not in r.data.tags]
    assert len(parents) == 1 and {r.data.tags["mlflow.parentRunId"] for r in runs} == {parents[0].info.run_id}
    assert sorted(r.data.tags["seed"] for r in runs) == ["0", "1"]
    assert all(r.info.status == "FINISHED" and "superseded" not in r.data.tags for r in runs)
    assert all([i.dataset.name for i in r.inputs.dataset_inputs] == ["two_moons"] for r in runs)


# -- the input boundary: every loader against a family of malformed files ---------------
#: A BASiS that fits 60 points in a moment.
SMALL_BASIS = {
    "n_components": 2,
    "batch_size": 40,
    "n_iter": 2,
    "anchors": "random",
    "n_anchors": 10,
    "ransac_sample_size": 5,
    "graph": {"n_neighbors": 10},
}


def _unwritable(tmp_path):
    """A place where nothing can be created, for root too (permission bits do not stop
    root; sysfs refuses new entries to everyone)."""
    import os

    if os.geteuid() == 0:
        return Path("/sys/basis-cannot-write-here")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    return locked / "inside"


def _malformed(folder, kind, valid):
    """A file of one malformed ``kind`` in ``folder``, made from the ``valid`` file where
    the kind needs one (truncated)."""
    path = folder / f"{kind}.bin"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(valid.read_bytes()[: len(valid.read_bytes()) // 2])
    elif kind == "text":
        path.write_text("a,b,c\n1,2,3\n")
    elif kind == "wrong_rank":
        np.save(path.with_suffix(".npy"), np.zeros(16, dtype=np.float32))
        path = path.with_suffix(".npy")
    elif kind == "strings":
        np.save(path.with_suffix(".npy"), np.array([["a", "b"], ["c", "d"]]))
        path = path.with_suffix(".npy")
    elif kind == "npz_not_npy":
        np.savez(path.with_suffix(".npz"), X=np.zeros((3, 2)))
        path = path.with_suffix(".npz")
    elif kind == "npy_not_npz":
        np.save(path.with_suffix(".npy"), np.zeros((3, 2)))
        path = path.with_suffix(".npy")
    elif kind == "pickle":
        import pickle

        path.write_bytes(pickle.dumps({"state_dict": object()}))
    return path


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    """One valid input of each kind: points, a checkpoint, features, a Siamese network,
    a study folder, a store."""
    import torch

    from basis.estimators import make_estimator
    from basis.features import SiameseFeatures

    folder = tmp_path_factory.mktemp("valid")
    rng = np.random.default_rng(0)
    points = rng.normal(size=(60, 2)).astype(np.float32)
    np.save(folder / "points.npy", points)
    make_estimator("basis", **SMALL_BASIS).fit(points).save(folder / "model.pt")
    siamese = SiameseFeatures(4, n_steps=1, pairs_per_step=4, device="cpu").fit(
        rng.normal(size=(20, 1, 28, 28)).astype(np.float32), np.arange(20) % 2
    )
    siamese.save(folder / "siamese.pt")
    np.save(folder / "images.npy", rng.normal(size=(3, 1, 28, 28)).astype(np.float32))
    np.savez(
        folder / "features.npz",
        X_train=rng.normal(size=(300, 16)).astype(np.float32),
        y_train=np.arange(300) % 10,
        X_test=rng.normal(size=(100, 16)).astype(np.float32),
        y_test=np.arange(100) % 10,
        dataset="digits",
        data_seed=0,
    )
    study = folder / "study"
    study.mkdir()
    np.savez(study / "arrays.npz", X=np.zeros((3, 2)))
    (study / "metrics.json").write_text("{}")
    del torch
    return folder


MALFORMED = ("empty", "truncated", "text", "wrong_rank", "strings", "npz_not_npy", "npy_not_npz", "pickle")
# Each loader, the file it reads ("{bad}" is replaced by a malformed file), and the valid
# file a truncated one is cut from.
LOADERS = {
    "embed --input": (["embed", "--model", "{v}/model.pt", "--input", "{bad}", "--out", "{o}/y.npy"], "points.npy"),
    "embed --model": (["embed", "--model", "{bad}", "--input", "{v}/points.npy", "--out", "{o}/y.npy"], "model.pt"),
    "embed --siamese": (
        ["embed", "--model", "{v}/model.pt", "--siamese", "{bad}", "--input", "{v}/images.npy", "--out", "{o}/y.npy"],
        "siamese.pt",
    ),
    "run --features": ([*RUN, "--features", "{bad}", "--out", "{o}/run"], "features.npz"),
    "run --reference": (
        [*RUN, "--features", "{v}/features.npz", "--reference", "{bad}", "--out", "{o}/run"],
        "features.npz",
    ),
}


# (a .npy of points is what embed --input takes: not malformed there)
CASES_BY_LOADER = [
    (loader, kind)
    for loader in sorted(LOADERS)
    for kind in MALFORMED
    if (loader, kind) != ("embed --input", "npy_not_npz")
]


@pytest.mark.parametrize("loader, kind", CASES_BY_LOADER)
def test_every_loader_refuses_every_malformed_file_in_one_line(valid, tmp_path, capsys, monkeypatch, loader, kind):
    """Exit 2, one line on stderr that names the file, no traceback, nothing written (in
    the output folder or as a store in the current one)."""
    monkeypatch.chdir(tmp_path)
    args, source = LOADERS[loader]
    bad = _malformed(tmp_path, kind, valid / source)
    out = tmp_path / "out"
    out.mkdir()
    code = main([item.format(v=valid, bad=bad, o=out) for item in args])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(bad) in lines[0], err
    assert list(out.iterdir()) == [] and not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize("kind", ["empty", "truncated", "text", "npy_not_npz"])
def test_a_figure_refuses_a_malformed_study_folder(valid, tmp_path, capsys, kind):
    study = tmp_path / "study"
    study.mkdir()
    (study / "metrics.json").write_text("{}")
    _malformed(study, kind, valid / "study" / "arrays.npz").rename(study / "arrays.npz")
    code = main(["figure", "fig2_illustration", "--input", str(study), "--out", str(tmp_path / "fig.png")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "arrays.npz" in err, err
    assert not (tmp_path / "fig.png").exists()


@pytest.mark.parametrize("seed", ["-1", str(10**23), "4294967295"])
@pytest.mark.parametrize("command", [RUN, ["study", "illustration", "--out", "{o}/s"]])
def test_a_seed_out_of_range_is_refused_before_compute(tmp_path, capsys, command, seed):
    code = main([item.format(o=tmp_path) for item in command] + ["--seed", seed])
    assert code == 2 and f"--seed {int(seed)} is not a valid seed" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        [*RUN, "--set", "n_iter=2", "--out", "{u}"],
        ["study", "illustration", "--out", "{u}"],
        ["features", "--dataset", "digits", "--out", "{u}/f.npz"],
        ["embed", "--model", "{v}/model.pt", "--input", "{v}/points.npy", "--out", "{u}/y.npy"],
        ["figure", "fig2_illustration", "--input", "{v}/study", "--out", "{u}/fig.png"],
        [*RUN, "--set", "n_iter=2", "--track", "exp", "--store", "{u}"],
    ],
    ids=["run", "study", "features", "embed", "figure", "store"],
)
def test_an_output_that_cannot_be_written_is_refused_before_compute(valid, tmp_path, capsys, args):
    unwritable = _unwritable(tmp_path)
    code = main([item.format(u=unwritable, v=valid) for item in args])
    err = capsys.readouterr().err
    assert code == 2 and "cannot be written" in err and len(err.strip().splitlines()) == 1, err


def test_stores_that_cannot_be_used_are_named_as_such(files, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracked = [*RUN, "--set", "n_iter=2", "--track", "exp", "--store"]
    assert main([*tracked, str(files / "a_file")]) == 2
    assert "--store" in (err := capsys.readouterr().err) and "is a file" in err
    not_a_database = tmp_path / "store"
    not_a_database.mkdir()
    (not_a_database / "mlflow.db").write_text("these are notes, not a database\n" * 10)
    assert main([*tracked, str(not_a_database)]) == 2
    assert "is not an SQLite database" in capsys.readouterr().err
    assert (not_a_database / "mlflow.db").read_text().startswith("these are notes")  # left as it was
    # reading runs from a store that holds none names it, and makes no store anywhere
    monkeypatch.chdir(tmp_path)
    embed = ["embed", "--model", "runs:/0123/model", "--input", str(files / "features.npy"), "--out", "y.npy"]
    assert main([*embed, "--store", str(tmp_path / "empty")]) == 2
    assert "holds no mlflow.db" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "empty").exists()


def test_a_refused_tracked_job_opens_no_run_and_no_parent(files, tmp_path, capsys):
    store = tmp_path / "store"
    args = [*RUN, "--track", "exp", "--parent", "digits seeds", "--store", str(store), "--set", "batch_size=100000"]
    assert main(args) == 2
    assert "batch_size=100000 exceeds the number of training points" in capsys.readouterr().err
    assert not store.exists()  # not even an empty database


def test_checkpoints_that_hold_code_are_refused_without_running_it(tmp_path, capsys):
    import torch

    class Payload:
        def __reduce__(self):
            return (Path.touch, (tmp_path / "executed",))

    torch.save({"method": Payload()}, tmp_path / "evil.pt")
    np.save(tmp_path / "X.npy", np.zeros((3, 2), dtype=np.float32))
    code = main(["embed", "--model", str(tmp_path / "evil.pt"), "--input", str(tmp_path / "X.npy"), "--out", "y.npy"])
    assert code == 2 and "is not loaded" in capsys.readouterr().err
    assert not (tmp_path / "executed").exists()


def test_a_bug_shows_its_traceback_with_a_line_that_says_so(monkeypatch, capsys):
    import basis.cli

    def broken(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(basis.cli, "check_common", broken)
    assert main(["embed", "--model", "m.pt", "--input", "x.npy", "--out", "y.npy"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err and "is a bug in basis" in err.splitlines()[-1]


def test_the_readmes_embed_of_a_logged_model_works_as_written(tmp_path):
    """`python -m basis embed --model runs:/<run id>/<run name> --input X.npy --out Y.npy`, run
    where `make quick` leaves its store (results/mlflow), without MLFLOW_TRACKING_URI: it
    finds the run there, prints nothing on stderr, and makes no store in the folder."""
    from basis import tracking
    from basis.estimators import make_estimator

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2)).astype(np.float32)
    estimator = make_estimator("basis", **SMALL_BASIS)
    estimator.fit(X).save(tmp_path / "model.pt")
    with tracking.tracked_run("exp", "digits-basis-seed0", {}, store=tmp_path / "results/mlflow") as run:
        run.log_embedding_model(tmp_path / "model.pt", X[:5], description="raw points", name="digits-basis-seed0")
        run_id = run.run_id
    np.save(tmp_path / "X.npy", X)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    command = f"python -m basis embed --model runs:/{run_id}/digits-basis-seed0 --input X.npy --out Y.npy"
    done = subprocess.run(
        [sys.executable, *command.split()[1:]],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "Y.npy"), estimator.transform(X))
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def test_a_message_shows_numpy_scalars_as_their_values():
    """NumPy 2 writes np.int64(3) inside a list; a message names the classes as a user wrote them."""
    from basis.errors import InputError, TrainingDiverged

    labels = np.unique(np.array([3, 7]))
    assert str(InputError(f"classes {list(labels)} are not in 'coil20'")) == "classes [3, 7] are not in 'coil20'"
    assert str(TrainingDiverged(f"loss {np.float32(np.inf)} at step {np.int64(4)}")) == "loss inf at step 4"
    assert str(InputError(f"value {np.str_('a')!r}, {np.bool_(True)!r}")) == "value 'a', True"


def test_a_warning_is_one_line_without_the_source_line_beneath_it(tmp_path):
    """A disconnected graph's warning: one line naming the problem, not Python's file and
    line number with the source line echoed beneath it."""
    rng = np.random.default_rng(0)
    points = np.vstack([rng.normal(0, 1, (200, 3)), rng.normal(100, 1, (200, 3))])
    np.savetxt(tmp_path / "two.csv", points, delimiter=",", header="a,b,c", comments="")
    done = subprocess.run(
        [sys.executable, "-m", "basis", "reference", "--data", "two.csv", "--n-components", "3", "--out", "ref.npz"],
        cwd=tmp_path, capture_output=True, text=True, timeout=HANG_GUARD_S,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "warning: the graph has 2 connected components; its leading eigenvectors are indicator-like and the trivial"
        " vector is not unique. Increase n_neighbors or the kernel scale to connect it. (DisconnectedGraphWarning)"
    ], done.stderr

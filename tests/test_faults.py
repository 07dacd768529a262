"""Faults a user runs into: every bad input is named before compute, with exit status 2, no
traceback and nothing written (the workflow's faults are in test_workflow_e2e.py)."""

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
    from basis.outputs import atomic_path

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
    from basis.outputs import read_metrics

    path = tmp_path / "results/runs/digits/basis/seed0/metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"d_G": 0.1, "nmi"')
    with pytest.raises(InputError, match=r"metrics.json is missing or corrupt .* --forcerun .*seed0/metrics.json"):
        read_metrics(path)


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

"""Nothing lost when something fails: no output over an input, whatever its spelling; a
full disk or store ends in one line with nothing partial and no run left open; every
command that opens the store checks it; the benchmark tools report failure as failure;
config abuse ends in one line. (A failed rerun of the workflow keeping its earlier
results: test_workflow_e2e.py.)"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_GUARD_S, assert_refused, copy_workflow, run_snakemake

from basis.cli import main
from basis.runtime.jobs import JOB_COMMAND, age_restored_outputs, job_log, run_logged
from basis.tracking.store import read_local_store

ROOT = Path(__file__).resolve().parents[1]
PYTHON = [sys.executable, "-m", "basis"]


def basis(*args, cwd=None, env=None):
    """``python -m basis`` in a process of its own (its exit status and its stderr lines)."""
    done = subprocess.run(
        [*PYTHON, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=HANG_GUARD_S,
    )
    return done.returncode, [line for line in done.stderr.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A trained two-moons model (2-d input) and a points file for it."""
    folder = tmp_path_factory.mktemp("model")
    assert main(["run", "--method", "basis", "--dataset", "two_moons", "--set", "n_iter=3", "--out", str(folder)]) == 0
    np.save(folder / "points.npy", np.random.default_rng(0).normal(size=(200, 2)))
    return folder


# --- outputs over inputs ---------------------------------------------------------------


def _spell(path: Path, spelling: str, tmp_path: Path) -> str:
    """``path`` written another way: as given, relative with ./, absolute, through a
    symbolic link to its folder, or as a hard link to it."""
    if spelling == "same":
        return str(path)
    if spelling == "dotted":
        return os.path.join(path.parent, ".", path.name)
    if spelling == "absolute":
        return str(path.resolve())
    if spelling == "linked_folder":
        link = tmp_path / "linked"
        link.symlink_to(path.parent.resolve(), target_is_directory=True)
        return str(link / path.name)
    hard = path.with_name("hard" + path.suffix)
    os.link(path, hard)
    return str(hard)


SPELLINGS = ["same", "dotted", "absolute", "linked_folder", "hard_link"]


def _features(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    path = folder / "features.npz"
    arrays = {"X_train": rng.normal(size=(300, 16)), "y_train": np.arange(300) % 10}
    np.savez(path, **arrays, X_test=rng.normal(size=(100, 16)), y_test=np.arange(100) % 10, dataset="digits")
    return path


@pytest.mark.parametrize(
    "command, spelling",
    [
        (command, spelling)
        for command in ("embed", "reference", "run_folder", "tracking_flag", "features_in_images")
        for spelling in SPELLINGS
        if (command, spelling) not in [("run_folder", "hard_link"), ("features_in_images", "hard_link")]
    ],
)
def test_no_command_writes_an_output_over_one_of_its_inputs(model, tmp_path, capsys, command, spelling):
    if command == "embed":
        source = tmp_path / "X.npy"
        np.save(source, np.load(model / "points.npy"))
        out = _spell(source, spelling, tmp_path)
        args = ["embed", "--model", str(model / "model.pt"), "--input", str(source), "--out", out]
    elif command == "reference":
        source = _features(tmp_path)
        out = _spell(source, spelling, tmp_path)
        args = ["reference", "--dataset", "digits", "--features", str(source), "--out", out]
    elif command == "run_folder":  # a folder that holds the input
        (tmp_path / "runs" / "deep").mkdir(parents=True)
        source = _features(tmp_path / "runs" / "deep")
        out = str(Path(_spell(source, spelling, tmp_path)).parent.parent)
        args = ["run", "--method", "basis", "--dataset", "digits", "--features", str(source), "--out", out]
    elif command == "features_in_images":  # a file inside the image folder it reads
        from own_data import write_image_folder

        folder = write_image_folder(tmp_path / "images", per_class=10)
        source = next(folder.rglob("*.png"))
        out = str(Path(_spell(source, spelling, tmp_path)).with_name("feat.npz"))
        args = ["features", "--data", str(folder), "--image-size", "16", "16", "--out", out]
    else:  # tracking setup's flag over the store's database
        store = tmp_path / "store"
        assert main(["tracking", "setup", "--store", str(store), "--experiment", "x"]) == 0
        capsys.readouterr()
        source = store / "mlflow.db"
        out = _spell(source, spelling, tmp_path)
        args = ["tracking", "setup", "--store", str(store), "--experiment", "x", "--flag", out]
    before = source.read_bytes()
    files_before = sorted(p for p in tmp_path.rglob("*"))
    assert main([*args, "--device", "cpu"] if command != "tracking_flag" else args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and any(words in lines[0] for words in ("is the input", "holds the input", "lies inside")), (
        lines
    )
    assert source.read_bytes() == before
    assert sorted(p for p in tmp_path.rglob("*")) == files_before  # nothing written


# --- a full disk -------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB file system of its own (tmpfs; needs root, as CI and the cluster test have),
    and a function that fills it to the last byte."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a small tmpfs needs root")

    def fill():
        with open(mount / "filler", "wb", buffering=0) as handle:
            for chunk in (1 << 16, 1 << 10, 1):  # to the last byte
                try:
                    while True:
                        handle.write(b"\0" * chunk)
                except OSError:
                    pass

    yield mount, fill
    subprocess.run(["umount", "-l", str(mount)], check=False)


WRITERS = {
    "embed": ["embed", "--model", "{model}/model.pt", "--input", "{model}/points.npy", "--out", "{out}/e.npy"],
    "reference": ["reference", "--dataset", "two_moons", "--out", "{out}/reference.npz"],
    "features": ["features", "--dataset", "digits", "--set", "n_steps=2", "--out", "{out}/f.npz"],
    "study": ["study", "illustration", "--set", "n_per_cluster=80", "--out", "{out}/study"],
    "download": ["download", "--dataset", "digits", "--out", "{out}/digits.json"],
    "tracking_flag": ["tracking", "setup", "--store", "{store}", "--experiment", "x", "--flag", "{out}/flag.json"],
}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_a_full_disk_under_out_ends_in_one_line_with_nothing_partial(model, tmp_path, small_disk, command):
    mount, fill = small_disk
    fill()
    args = [a.format(model=model, out=mount, store=tmp_path / "store") for a in WRITERS[command]]
    status, lines = basis(*args, *(["--device", "cpu"] if command != "tracking_flag" else []), cwd=tmp_path)
    assert status == 2, lines
    assert lines[-1].startswith("error:") and "file system is full" in lines[-1], lines
    assert not any(line.startswith("Traceback") for line in lines), lines
    assert [p for p in mount.rglob("*") if p.is_file() and p.name != "filler"] == []  # nothing partial


def test_a_full_disk_under_a_tracked_runs_out_closes_its_run_as_failed(tmp_path, small_disk):
    mount, fill = small_disk
    fill()
    store = tmp_path / "store"
    status, lines = basis(
        "run", "--method", "basis", "--dataset", "two_moons", "--set", "n_iter=3", "--device", "cpu",
        "--out", mount / "run", "--track", "x", "--store", store,
    )  # fmt: skip
    assert status == 2
    assert lines[-1].startswith("error:") and "could not be written: its file system is full" in lines[-1], lines
    assert not any(line.startswith("Traceback") for line in lines)
    assert not list((mount / "run").glob("*"))  # nothing partial
    assert read_local_store(store, "SELECT group_concat(status) FROM runs") == "FAILED"


def test_a_full_store_ends_in_one_line_and_leaves_no_run_open(tmp_path, small_disk):
    mount, fill = small_disk
    store = mount / "store"
    assert main(["tracking", "setup", "--store", str(store), "--experiment", "x"]) == 0
    fill()
    status, lines = basis(
        "run", "--method", "basis", "--dataset", "two_moons", "--set", "n_iter=3", "--device", "cpu",
        "--out", tmp_path / "run", "--track", "x", "--store", store,
    )  # fmt: skip
    assert status == 2
    assert [line for line in lines if not line.startswith("step ")] == [
        f"error: the results or the MLflow store ({store}/mlflow.db) could not be written:"
        " the file system is full; free space and rerun"
    ], lines
    (mount / "filler").unlink()
    assert basis("tracking", "close-stale", "--store", store)[0] == 0
    assert not read_local_store(store, "SELECT COUNT(*) FROM runs WHERE status = 'RUNNING'")


# --- the store -----------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("action", ["close-stale", "url", "setup"])
@pytest.mark.parametrize(
    "uri, message",
    [
        ("bogus://x", "is not a tracking store URI"),
        ("http://127.0.0.1:{port}", "no tracking server answers there"),
        ("sqlite:///relative.db", "names a path relative to the current folder"),
    ],
)
def test_every_tracking_command_checks_the_store_the_same_way(tmp_path, action, uri, message):
    uri = uri.format(port=_closed_port())
    status, lines = basis("tracking", action, "--experiment", "x", cwd=tmp_path, env={"MLFLOW_TRACKING_URI": uri})
    assert status == 2 and len(lines) == 1 and message in lines[0], lines
    assert list(tmp_path.iterdir()) == []  # no store made in the current folder


def test_a_read_only_command_never_writes_into_a_store(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "mlflow.db").write_bytes(b"")
    status, lines = basis("tracking", "url", "--store", store)
    assert status == 2 and len(lines) == 1 and "holds no MLflow runs" in lines[0], lines
    assert (store / "mlflow.db").read_bytes() == b""
    assert sorted(p.name for p in store.iterdir()) == ["mlflow.db"]


@pytest.mark.parametrize("ui", ["not a url", "ftp://host", "http://", "http://host:port"])
def test_the_ui_address_is_checked(tmp_path, ui):
    store = tmp_path / "store"
    assert main(["tracking", "setup", "--store", str(store), "--experiment", "basis-runs"]) == 0
    status, lines = basis("tracking", "url", "--store", store, "--ui", ui)
    assert status == 2 and len(lines) == 1 and "--ui" in lines[0], lines


# --- other arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["download", "--dataset", "mnist", "--data-root", "/dev/null"], "--data-root /dev/null is not a folder"),
        (["embed", "--device", "tpu"], "device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'tpu'"),
        (["embed", "--input", "{d}/huge.npy"], "holds values beyond 1e+15 in magnitude"),
    ],
)
def test_bad_arguments_end_in_one_line(model, tmp_path, args, message):
    np.save(tmp_path / "huge.npy", np.full((10, 2), 1e300))
    if args[0] == "embed":
        defaults = {"--model": str(model / "model.pt"), "--input": str(model / "points.npy")}
        defaults["--out"] = str(tmp_path / "e.npy")
        given = dict(zip(args[1::2], args[2::2]))
        args = ["embed", *[item for key, value in {**defaults, **given}.items() for item in (key, value)]]
    status, lines = basis(*[a.format(d=tmp_path) for a in args])
    assert status == 2 and len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "e.npy").exists()


# --- workflow jobs -------------------------------------------------------------------------


def test_a_jobs_failure_is_one_line_on_the_console_and_in_its_log(tmp_path, capfd):
    from basis.errors import InputError

    log = tmp_path / "job.log"
    with pytest.raises(SystemExit) as stopped, job_log(log):
        print("working")
        raise InputError("results/x.json is missing or corrupt")
    assert stopped.value.code == 2
    err = [line for line in capfd.readouterr().err.splitlines() if not line.startswith(JOB_COMMAND)]  # what runs
    assert err == ["error: results/x.json is missing or corrupt"]
    assert log.read_text() == "working\nerror: results/x.json is missing or corrupt\n"
    with pytest.raises(SystemExit) as stopped, job_log(log):
        raise KeyError("seed")
    assert stopped.value.code == 1
    assert "a bug in basis" in capfd.readouterr().err and "Traceback" in log.read_text()


def test_a_commands_error_line_reaches_the_console(tmp_path, capfd):
    log = tmp_path / "job.log"
    command = [*PYTHON, "embed", "--model", "missing.pt", "--input", "missing.npy", "--out", str(tmp_path / "e.npy")]
    with pytest.raises(SystemExit) as stopped:
        run_logged(command, log, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert stopped.value.code == 2
    command, *err = capfd.readouterr().err.strip().splitlines()  # first what it runs, then the one error line
    assert command.startswith(f"{JOB_COMMAND.strip()} python -m basis embed --model missing.pt")
    assert len(err) == 1 and err[0].startswith("error: --input missing.npy does not exist") and str(log) in err[0]
    assert log.read_text().startswith("# python -m basis embed")


def test_restored_outputs_get_their_old_times_back_and_never_newer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    for path in (old, new):
        path.write_text("x")
    os.utime(old, ns=(0, 1_000_000_000))
    log = tmp_path / "job.log"
    with pytest.raises(SystemExit), job_log(log, [old]):
        raise RuntimeError("boom")
    os.utime(old, None)  # Snakemake's restore: a new copy
    notes = list((tmp_path / "results/logs/failed").glob("*.json"))
    assert len(notes) == 1
    # a note that would make a file newer is not followed
    notes[0].write_text(json.dumps({str(old): 1_000_000_000, str(new): new.stat().st_mtime_ns + 10**12}))
    newer = new.stat().st_mtime_ns
    assert age_restored_outputs() == ["old.csv"]
    assert old.stat().st_mtime_ns == 1_000_000_000 and new.stat().st_mtime_ns == newer
    assert not list((tmp_path / "results/logs/failed").glob("*.json"))


# --- config abuse ----------------------------------------------------------------------------


def test_a_yaml_alias_bomb_is_refused_in_one_line(tmp_path):
    folder = copy_workflow(tmp_path / "workflow")
    lines = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for name in "bcdefghi":
        previous = chr(ord(name) - 1)
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]")
    (folder / "bomb.yaml").write_text("\n".join([*lines, "datasets: *i"]) + "\n")
    done = run_snakemake(folder, "-n", "--configfile", "bomb.yaml")
    assert_refused(done, "bomb.yaml: its aliases (*name) expand to 9.26e+08 values")


# --- benchmark tools -------------------------------------------------------------------------


def test_the_paper_scale_script_fails_when_its_parts_fail(tmp_path):
    env = {**os.environ, "PARTS": "step", "DEVICE": "cpu", "OUT": str(tmp_path / "out"), "PYTHON": "false"}
    command = [sys.executable, "-m", "benchmarks", "device", "paper-scale"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout
    assert "part(s) FAILED: the figures above are not measurements" in done.stderr
    done = subprocess.run(command, cwd=ROOT, env={**env, "PARTS": " "}, capture_output=True, text=True)
    assert (
        done.returncode == 2 and done.stderr.strip() == "PARTS is empty: name at least one of step, table1, projection"
    )


def test_a_workflow_start_on_a_store_it_cannot_use_stops_in_one_line(tmp_path):
    """Every real execution closes stale runs first (tracking close-stale), which checks the
    store like every other command: no traceback, no job."""
    folder = copy_workflow(tmp_path / "workflow")
    env = {**os.environ, "PYTHONPATH": str(folder), "MLFLOW_TRACKING_URI": "bogus://x"}
    done = run_snakemake(folder, "results/data/digits.json", "--configfile", "tests/configs/tiny.yaml", env=env)
    assert_refused(done, "MLFLOW_TRACKING_URI bogus://x is not a tracking store URI")
    assert not (folder / "results").exists()

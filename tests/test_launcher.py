"""``python -m basis`` through a persistent worker (basis/launcher.py): the same outputs,
exit codes, signals and library code as a process of its own."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]
RUN = ["run", "--method", "basis", "--dataset", "two_moons", "--set", "n_iter=5", "--json"]


def _environment(tmp_path: Path, worker: bool = True, **extra: str) -> dict[str, str]:
    """A private folder of workers (TMPDIR, short: a socket's path is at most 107 bytes)
    per test, so that each test sees its own."""
    env = {**os.environ, "TMPDIR": str(_worker_root(tmp_path)), "PYTHONPATH": str(ROOT), "BASIS_WORKER_IDLE": "60"}
    return {**env, "BASIS_WORKER": "on" if worker else "off", **extra}


def _worker_root(tmp_path: Path) -> Path:
    link = tmp_path / "tmp"
    if not link.exists():
        link.symlink_to(tempfile.mkdtemp(prefix="bw"))
    return link.resolve()


def _basis(tmp_path: Path, *args: str, worker: bool = True, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "basis", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_environment(tmp_path, worker, **extra),
        timeout=HANG_GUARD_S,
    )


def _workers(tmp_path: Path) -> list[int]:
    """Process ids of the workers started for ``tmp_path``'s commands (from their logs); a
    worker that failed to start fails the test with its log."""
    pids = []
    for log in _worker_root(tmp_path).glob("basis-worker-*/*.log"):
        text = log.read_text()
        assert "Traceback" not in text, text
        pids += [int(line.split()[1]) for line in text.splitlines() if line.endswith("ready")]
    return pids


def _children(pid: int) -> list[int]:
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]


def _stop_workers(tmp_path: Path) -> None:
    for pid in _workers(tmp_path):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


@pytest.fixture
def workers(tmp_path):
    yield tmp_path
    _stop_workers(tmp_path)
    shutil.rmtree(_worker_root(tmp_path), ignore_errors=True)


def _comparable(result: dict) -> dict:
    return {k: v for k, v in result.items() if "seconds" not in k and k not in ("run_id", "out")}


def test_a_worker_gives_the_outputs_and_exit_codes_of_a_process_of_its_own(workers):
    tmp_path = workers
    by_worker = [_basis(tmp_path, *RUN, "--out", f"w{i}", "--track", "t", "--store", "store") for i in range(2)]
    alone = _basis(tmp_path, *RUN, "--out", "alone", "--track", "t", "--store", "store", worker=False)
    assert [done.returncode for done in (*by_worker, alone)] == [0, 0, 0], alone.stderr[-2000:]
    assert len(_workers(tmp_path)) == 1  # the second command was served by the first one's worker
    metrics = {name: (tmp_path / name / "metrics.json").read_bytes() for name in ("w0", "w1", "alone")}
    assert {k: _comparable(json.loads(v)) for k, v in metrics.items()} == {
        k: _comparable(json.loads(metrics["alone"])) for k in metrics
    }
    printed = [_comparable(json.loads(done.stdout)) for done in (*by_worker, alone)]
    assert printed[0] == printed[1] == printed[2]
    timings = [line for line in by_worker[1].stderr.splitlines() if line.startswith("# timings")]
    assert timings and json.loads(timings[0].removeprefix("# timings "))["startup"] > 0  # from the client's start
    for worker in (True, False):
        refused = _basis(tmp_path, "bench", "step", "--iterations", "3", worker=worker)
        assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
            "error: --iterations 3: needs more than the 10 warm-up steps"
        ]
        usage = _basis(tmp_path, "no-such-command", worker=worker)
        assert usage.returncode == 2 and "invalid choice" in usage.stderr


def test_a_worker_runs_the_library_as_its_folder_has_it_now(workers):
    tmp_path = workers
    library = tmp_path / "lib"
    shutil.copytree(ROOT / "basis", library / "basis", ignore=shutil.ignore_patterns("__pycache__"))
    before = _basis(tmp_path, "bench", "step", "--iterations", "3", PYTHONPATH=str(library))
    cli = library / "basis" / "cli.py"
    cli.write_text(cli.read_text().replace("needs more than the", "needs, since the edit, more than the"))
    after = _basis(tmp_path, "bench", "step", "--iterations", "3", PYTHONPATH=str(library))
    assert "needs more than the" in before.stderr and "since the edit" in after.stderr
    assert len(_workers(tmp_path)) == 1


def _running_command(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """A long command started through a worker, and the worker's process id once the
    command runs in its child."""
    client = subprocess.Popen(
        [sys.executable, "-m", "basis", "bench", "step", "--iterations", "100000", "--device", "cpu"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=_environment(tmp_path),
    )
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        workers = _workers(tmp_path)
        if workers and _children(workers[0]):
            return client, workers[0]
        assert client.poll() is None, client.stderr.read()
        time.sleep(0.1)
    raise AssertionError("the command never started")


def _wait_for_no_children(worker: int) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while _children(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _children(worker)


def test_a_signal_to_the_client_reaches_the_command_and_ends_the_client_the_same_way(workers):
    client, worker = _running_command(workers)
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=HANG_GUARD_S) == -signal.SIGTERM
    _wait_for_no_children(worker)


def test_a_client_killed_outright_takes_its_command_with_it(workers):
    client, worker = _running_command(workers)
    client.kill()
    client.wait(timeout=HANG_GUARD_S)
    _wait_for_no_children(worker)


@pytest.mark.parametrize(
    "extra, reason",
    [({"BASIS_WORKER": "off"}, "switched off"), ({"SLURM_JOB_ID": "7"}, "under SLURM")],
)
def test_where_a_worker_is_not_wanted_the_command_runs_in_its_own_process(workers, extra, reason):
    tmp_path = workers
    env = _environment(tmp_path, **extra)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import runpy, sys; sys.argv = ['basis', 'bench', 'step', '--iterations', '3'];"
            "runpy.run_module('basis', run_name='__main__')",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 2, reason
    assert not _workers(tmp_path), reason


def test_where_no_socket_can_be_bound_the_command_runs_in_its_own_process(workers):
    tmp_path = workers
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    done = _basis(tmp_path, "bench", "step", "--iterations", "3", TMPDIR=str(deep))
    assert done.returncode == 2 and done.stderr.startswith("error: --iterations 3")
    assert not list(deep.glob("basis-worker-*/*.log"))  # no worker was started


def test_a_command_that_leaves_a_thread_pool_idle_still_exits():
    """MLflow's artifact repositories keep a thread pool whose idle worker thread only the
    interpreter's thread-exit hooks stop: exit_now runs them, as the interpreter would."""
    code = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from basis.launcher import exit_now\n"
        "pool = ThreadPoolExecutor(1)  # held, as MLflow holds its repositories' pools\n"
        "pool.submit(print, 'done').result()\n"
        "exit_now(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=HANG_GUARD_S)
    assert done.returncode == 3 and done.stdout == "done\n"


def test_an_idle_worker_exits_and_removes_its_socket(workers):
    tmp_path = workers
    assert _basis(tmp_path, "bench", "step", "--iterations", "3", BASIS_WORKER_IDLE="1").returncode == 2
    (folder,) = _worker_root(tmp_path).glob("basis-worker-*")
    deadline = time.monotonic() + HANG_GUARD_S
    while any(folder.glob("*.sock")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(folder.glob("*.sock"))


@pytest.mark.parametrize("flag", ["-O", "-s", "-X importtime", "-W error"])
def test_an_interpreter_started_with_options_a_worker_lacks_runs_the_command_itself(flag):
    code = "from basis.launcher import wanted; print(wanted())"
    done = subprocess.run(
        [sys.executable, *flag.split(), "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "BASIS_WORKER": "on"},
        timeout=HANG_GUARD_S,
    )
    assert done.stdout.strip() == "False", done.stderr

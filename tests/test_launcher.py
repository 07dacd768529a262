"""How ``python -m basis`` runs, stops and ends (basis/cli/launcher.py): the same bytes however
a command is started, a SIGTERM that does not wait for a long computation, and an exit that
does not hang on idle thread pools."""

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]
ENV = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "PYTHONPATH": str(ROOT)}

# One small member of each command family that writes results; the run trains on what breaks
# determinism first: Siamese-like features, touching clusters whose embedding is nearly
# piecewise constant (ten near-zero eigenvalues), given as a features file.
COMMANDS = {
    "run": [
        "run",
        "--method",
        "basis",
        "--dataset",
        "digits",
        "--features",
        "{features}",
        "--set",
        "n_iter=20",
        "--out",
        "out",
    ],
    "features": ["features", "--dataset", "digits", "--out", "out/features.npz", "--set", "n_steps=5"],
    "reference": ["reference", "--dataset", "blobs", "--out", "out/reference.npz"],
    "study": ["study", "toy", "--set", "n_iter=5", "--out", "out"],
}

# An interpreter that already holds what a long-lived host would (a notebook, a Snakemake
# `run:` block, a job server that forks): the heavy libraries imported,
# torch's pool at another size, NumPy's and Python's global random state consumed.
PRELOADED_HOST = (
    "import random, sys, numpy, torch, sklearn.cluster, mlflow\n"
    "torch.set_num_threads(1); numpy.random.seed(123); numpy.random.rand(7); random.random(); torch.rand(3)\n"
    "from basis.cli.launcher import run_command\n"
    "sys.exit(run_command(sys.argv[1:]))\n"
)


def _digests(folder: Path) -> dict[str, str]:
    """Every file below ``folder`` by its bytes, but the per-job timing record."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "timings.json"
    }


def _start(how: str, arguments: list[str], cwd: Path, **extra) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "basis"] if how == "own process" else [sys.executable, "-c", PRELOADED_HOST]
    return subprocess.run(
        [*command, *arguments], capture_output=True, text=True, cwd=cwd, env=ENV, timeout=HANG_GUARD_S, **extra
    )


def _siamese_like_features(path: Path) -> Path:
    """A features file as `basis features` writes it for digits: 16-d touching clusters."""
    from basis.data.clusters import clustered_data

    X, y = clustered_data(1500, 16, 10, seed=3, spread=1.5)
    np.savez(path, X_train=X[:1200], y_train=y[:1200], X_test=X[1200:], y_test=y[1200:], dataset="digits", data_seed=0)
    return path


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_writes_the_same_bytes_however_it_is_started(tmp_path, name):
    """Asking for more threads than the job's cores is what made a pre-imported interpreter
    (one where torch's pool can grow past the cores) differ from a fresh one."""
    features = _siamese_like_features(tmp_path / "features.npz") if "{features}" in COMMANDS[name] else None
    arguments = [
        *(a.format(features=features) for a in COMMANDS[name]),
        "--threads",
        str(len(os.sched_getaffinity(0)) + 1),
    ]
    written = {}
    for how in ("own process", "preloaded host"):
        (tmp_path / how).mkdir()
        done = _start(how, arguments, tmp_path / how)
        assert done.returncode == 0, done.stderr[-2000:]
        written[how] = _digests(tmp_path / how / "out")
    assert written["own process"] and written["own process"] == written["preloaded host"]


def test_bench_reports_the_same_thread_pools_however_it_is_started(tmp_path):
    arguments = ["bench", "step", "--iterations", "12", "--json", "--device", "cpu", "--threads", "64"]
    pools = []
    for how in ("own process", "preloaded host"):
        done = _start(how, arguments, tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        pools.append(json.loads(done.stdout)["threads"])
        assert "capped at the" in done.stderr
    assert pools[0] == pools[1]
    assert pools[0]["torch"] == len(os.sched_getaffinity(0))


def test_threads_above_the_jobs_cores_are_capped_at_them(tmp_path):
    """A job given one core (Snakemake, SLURM or taskset set its affinity) runs one thread in
    every pool, whatever --threads asks for."""
    one_core = min(os.sched_getaffinity(0))
    done = _start(
        "own process",
        ["bench", "step", "--iterations", "12", "--json", "--device", "cpu", "--threads", "3"],
        tmp_path,
        preexec_fn=lambda: os.sched_setaffinity(0, {one_core}),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert set(json.loads(done.stdout)["threads"].values()) == {1}
    assert "note: --threads 3 capped at the 1 cores this job may use" in done.stderr.splitlines()


# A main thread inside one long C call (an eigh that takes seconds even on a fast machine);
# a partial output and a clean-up are registered as a tracked command's would be. A second
# thread says "computing" a second after the call began, so the signal cannot arrive before it.
LONG_CALL = """
import sys, threading, time, torch
from basis.errors import Terminated
from basis.runtime.outputs import atomic_path
from basis.runtime.stopping import on_stop, stop_on_sigterm
stop_on_sigterm()
torch.set_num_threads(1)
matrix = torch.randn(4000, 4000, dtype=torch.float64)
matrix = matrix + matrix.T
on_stop(lambda: print("closed the run", flush=True))
threading.Timer(1.0, lambda: print("computing", flush=True)).start()
try:
    with atomic_path(sys.argv[1]) as partial:
        partial.write_text("half")
        torch.linalg.eigh(matrix)
        print("the call returned", flush=True)
except Terminated:
    print("unwound after the call", flush=True)
"""


def test_sigterm_ends_a_command_inside_a_long_call_without_waiting_for_it(tmp_path):
    job = subprocess.Popen(
        [sys.executable, "-c", LONG_CALL, str(tmp_path / "out.npy")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert job.stdout.readline() == "computing\n"
        job.send_signal(signal.SIGTERM)
        stdout, stderr = job.communicate(timeout=HANG_GUARD_S)
    finally:
        job.kill()
    assert job.returncode == 143, stderr
    assert stdout == "closed the run\n"  # neither the call's end nor the unwinding after it
    assert "during a long computation" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # the partial output is gone


# A tracked run stopped by SIGTERM that gets a second one while it unwinds, as a timed-out
# SLURM job does (SLURM signals every process of the job and srun forwards the signal to its
# step again): the second arrives inside the run's clean-up, from its metrics' last flush.
TWO_SIGNALS = """
import os, signal, sys
from basis import tracking
from basis.errors import Terminated
from basis.runtime.stopping import stop_on_sigterm
from basis.tracking.runs import TrackedRun

stop_on_sigterm()
flush = TrackedRun.flush

def flush_beside_a_second_signal(self):
    os.kill(os.getpid(), signal.SIGTERM)
    flush(self)

TrackedRun.flush = flush_beside_a_second_signal
try:
    with tracking.tracked_run("exp", "job", {"rule": "features"}, store=sys.argv[1]):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10**9):
            pass
except Terminated:
    print("unwound", flush=True)
"""


def test_a_second_sigterm_during_the_unwinding_still_leaves_the_run_killed(tmp_path):
    from basis import tracking

    store = tmp_path / "mlflow"
    done = subprocess.run(
        [sys.executable, "-c", TWO_SIGNALS, str(store)], capture_output=True, text=True, env=ENV, timeout=HANG_GUARD_S
    )
    assert done.stdout == "unwound\n", done.stderr[-2000:]  # one exception, not a second from inside its clean-up
    client = tracking.client(store)
    [run] = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert run.info.status == "KILLED", done.stderr[-2000:]


# The main thread's unwinding has begun a clean-up that outlasts the watcher's grace: the
# watcher waits for it rather than running it a second time or ending the process halfway.
SLOW_CLEAN_UP = """
import os, signal, time
from basis.errors import Terminated
from basis.runtime.stopping import GRACE_S, on_stop, once, stop_on_sigterm

stop_on_sigterm()

def close():
    print("closing", flush=True)
    time.sleep(3 * GRACE_S)
    print("closed", flush=True)

close_once = once(close)
on_stop(close_once)
try:
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(10**9):
        pass
except Terminated:
    close_once()
    time.sleep(60)  # the watcher ends the process
"""

# A clean-up that never returns (a store that does not answer): the watcher ends the process.
HUNG_CLEAN_UP = """
import os, signal, time
from basis.errors import Terminated
from basis.runtime.stopping import on_stop, stop_on_sigterm

stop_on_sigterm()
on_stop(lambda: time.sleep(3600))
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(3600)
except Terminated:
    time.sleep(3600)  # the main thread stuck in a long call after the signal
"""


def test_the_watcher_waits_for_a_clean_up_under_way_and_runs_it_once():
    done = subprocess.run(
        [sys.executable, "-c", SLOW_CLEAN_UP], capture_output=True, text=True, env=ENV, timeout=HANG_GUARD_S
    )
    assert done.returncode == 143, done.stderr[-2000:]
    assert done.stdout == "closing\nclosed\n"


def test_a_clean_up_that_hangs_does_not_keep_a_stopped_process_alive():
    done = subprocess.run(
        [sys.executable, "-c", HUNG_CLEAN_UP], capture_output=True, text=True, env=ENV, timeout=HANG_GUARD_S
    )
    assert done.returncode == 143, done.stderr[-2000:]
    assert "the clean-up after the stop took over 3 s; ended without it" in done.stderr


def test_a_clean_up_is_forgotten_once_its_block_ends():
    from basis.runtime import stopping

    forget = stopping.on_stop(lambda: None)
    assert len(stopping._clean_ups) == 1
    forget()
    assert stopping._clean_ups == {}


def test_a_command_that_leaves_a_thread_pool_idle_still_exits():
    """MLflow's artifact repositories keep a thread pool whose idle worker thread only the
    interpreter's thread-exit hooks stop: exit_now runs them, as the interpreter would."""
    code = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from basis.cli.launcher import exit_now\n"
        "pool = ThreadPoolExecutor(1)  # held, as MLflow holds its repositories' pools\n"
        "pool.submit(print, 'done').result()\n"
        "exit_now(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=HANG_GUARD_S)
    assert done.returncode == 3 and done.stdout == "done\n"

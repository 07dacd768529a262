"""The cluster tests' daemons and the processes the tests start, ended on every way out.

A pytest plugin (tests/conftest.py loads it; test_interrupted.py loads it into a pytest of
its own with ``-p cluster.daemon_fixtures``):

- ``cluster``: a single-node SLURM cluster on localhost (slurm_cluster.sh), its environment;
- ``server``: an MLflow server on PostgreSQL, and a second one with basic-auth
  (tracking_server.sh), the first one's address;
- :func:`started`: a process a test starts, in a process group of its own, remembered so
  that the teardown ends its whole group (a workflow and the jobs it runs).

pytest tears its fixtures down on success, on failure and on Ctrl-C (a KeyboardInterrupt);
a time limit's SIGTERM would end it on the spot and leave every daemon running, so while
they run, SIGTERM is turned into the same interrupt. The teardown finds what it ends from what it
started (the groups it made, the scripts' pid files, SLURM's own job tracking), never by
looking through other processes.
"""

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
#: The groups of the processes the tests started, ended at the teardown.
_STARTED: list[subprocess.Popen] = []


def started(command: list[str], **popen) -> subprocess.Popen:
    """``subprocess.Popen(command, **popen)`` as the leader of a new process group, ended with
    its group by the teardown if it still runs then."""
    process = subprocess.Popen(command, start_new_session=True, **popen)
    _STARTED.append(process)
    return process


def end_started(grace_s: float = 10.0) -> None:
    """SIGTERM to the group of every process :func:`started` that still runs, SIGKILL to what is
    left of them after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for process in _STARTED:
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        for process in _STARTED:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    _STARTED.clear()


def _interrupt(signum: int, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the teardown short
    raise KeyboardInterrupt(f"stopped by signal {signum}")


@pytest.fixture(scope="session")
def sigterm_tears_down() -> Iterator[None]:
    """SIGTERM as a KeyboardInterrupt for as long as the daemons run (the fixtures that start
    them ask for it first, so it is torn down after them)."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        end_started()
        signal.signal(signal.SIGTERM, previous)


def _script(name: str, action: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(HERE / name), action], capture_output=True, text=True, timeout=timeout)


def _up(name: str) -> str:
    done = _script(name, "up")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return _script(name, "env").stdout


def _down(name: str) -> None:
    end_started()  # nothing the tests started may go on using the daemons meanwhile
    _script(name, "down", timeout=300)


@pytest.fixture(scope="session")
def cluster(sigterm_tears_down) -> Iterator[dict[str, str]]:
    """A single-node SLURM cluster on localhost, started once for the session and torn down
    after it, whatever happens: its environment (``SLURM_CONF``)."""
    if os.geteuid() != 0:
        pytest.fail("the cluster tests start SLURM's daemons and need root (make test-cluster as root)")
    try:
        yield {"SLURM_CONF": _up("slurm_cluster.sh").strip().split("=", 1)[1]}
    finally:
        _down("slurm_cluster.sh")


@pytest.fixture(scope="session")
def server(sigterm_tears_down) -> Iterator[str]:
    """An MLflow server on PostgreSQL (and one with basic-auth on the next port), started once
    for the session and torn down after it, whatever happens: its address."""
    if os.geteuid() != 0:
        pytest.fail("the tracking server tests start PostgreSQL as its own user and need root (make test-cluster)")
    try:
        addresses = dict(line.split("=", 1) for line in _up("tracking_server.sh").split())
        yield addresses["MLFLOW_TRACKING_URI"]
    finally:
        _down("tracking_server.sh")

"""`make test-cluster` stopped at any point leaves nothing running: a pytest of its own holds
the cluster and the tracking server (daemon_fixtures.py) in state folders of its own and is
stopped as a time limit or a user stops it; none of the daemons it started, no state folder
and no SLURM configuration is left, and a run after one killed outright (nothing can tear
down after SIGKILL) starts cleanly and leaves nothing either.

It starts its own daemons on the cluster suite's ports, so it runs before the suite's own
cluster and server are up (its module name sorts first; it refuses to run otherwise).
"""

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

pytestmark = pytest.mark.cluster
HERE = Path(__file__).resolve().parent
SLURM_CONF = Path("/etc/slurm/slurm.conf")

#: The held pytest's one test: both daemons up and a SLURM job running whose child left it
#: (reparented to init: a job's process that SLURM must still find), then a sign, then a wait.
HOLDING_TEST = """
import os, subprocess, time
from pathlib import Path

def test_holds_the_daemons(cluster, server):
    escaped = Path(os.environ["HELD_SIGN"]).with_name("escaped")
    script = f"(sleep 3600 & echo $! > {escaped}); sleep 3600"
    subprocess.run(["sbatch", "--wrap", script, "-o", "/dev/null"], env={**os.environ, **cluster}, check=True)
    while not escaped.exists() or not escaped.read_text().strip():
        time.sleep(0.5)
    Path(os.environ["HELD_SIGN"]).write_text(server)
    time.sleep(float(os.environ["HELD_FOR_S"]))
"""


def _held(folder: Path, held_for_s: float) -> subprocess.Popen:
    """A pytest with the cluster tests' fixtures and one test that holds their daemons for
    ``held_for_s``, its daemons' state in ``folder``."""
    (folder / "test_holding.py").write_text(HOLDING_TEST)
    (folder / "pytest.ini").write_text("[pytest]\n")
    for sign in ("sign", "escaped"):
        (folder / sign).unlink(missing_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(HERE.parent),
        "CLUSTER_STATE": str(folder / "cluster"),
        "TRACKING_STATE": str(folder / "tracking"),
        "HELD_SIGN": str(folder / "sign"),
        "HELD_FOR_S": str(held_for_s),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "cluster.daemon_fixtures", "-p", "no:cacheprovider"]
    with open(folder / "pytest.out", "a") as out:
        return subprocess.Popen(
            [*command, "-c", str(folder / "pytest.ini"), "--rootdir", str(folder), str(folder / "test_holding.py")],
            cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_ctrl_c_heard,
        )  # fmt: skip


def _ctrl_c_heard() -> None:
    """SIGINT as at a terminal: a suite started in the background of a script (CI's) inherits
    it ignored, and Python then never turns it into a KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _daemons_up(folder: Path, held: subprocess.Popen) -> list[int]:
    """Once the held pytest's test runs: the pids of the daemons it started (the scripts' pid
    files) and of its SLURM job's escaped process."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not (folder / "sign").exists():
        assert held.poll() is None, (folder / "pytest.out").read_text()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(1)
    pid_files = [*(folder / "cluster").glob("*.pid"), *(folder / "tracking").glob("*.pid")]
    pids = [int(path.read_text().split()[0]) for path in [*pid_files, folder / "tracking" / "pg" / "postmaster.pid"]]
    assert len(pids) >= 7, pid_files  # (munged,) MariaDB, slurmdbd, slurmctld, slurmd, PostgreSQL, two servers
    return [*pids, int((folder / "escaped").read_text())]


def _running(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    return alive


def _assert_nothing_left(folder: Path, pids: list[int]) -> None:
    deadline = time.monotonic() + 60  # a process being reaped
    while _running(pids) and time.monotonic() < deadline:
        time.sleep(1)
    assert _running(pids) == []
    assert not (folder / "cluster").exists() and not (folder / "tracking").exists()
    assert not SLURM_CONF.exists()


@pytest.fixture
def folder(sigterm_tears_down):
    """A folder PostgreSQL's own user can reach (pytest's are its owner's only); whatever a
    held pytest left in it goes down with it, this suite stopped by a time limit included."""
    if os.geteuid() != 0:
        pytest.fail("the cluster tests start SLURM's daemons and need root (make test-cluster as root)")
    if SLURM_CONF.exists():
        pytest.fail(f"{SLURM_CONF} exists: a cluster is up; this test runs before the suite's own")
    made = Path(tempfile.mkdtemp(prefix="basis-interrupted-"))
    made.chmod(0o755)
    yield made
    # what a failed check left running goes down before its state folder goes
    env = {**os.environ, "CLUSTER_STATE": str(made / "cluster"), "TRACKING_STATE": str(made / "tracking")}
    for script in ("slurm_cluster.sh", "tracking_server.sh"):
        subprocess.run(["bash", str(HERE / script), "down"], env=env, capture_output=True, timeout=300)
    shutil.rmtree(made, ignore_errors=True)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["time-limit", "ctrl-c"])
def test_a_run_stopped_by_a_signal_tears_everything_down_and_only_what_it_started(folder, stop):
    """... and a process that only looks like one of the cluster's (its environment says
    ``SLURM_CLUSTER_NAME=basis``) is left alone: the teardown does not read environments."""
    held = _held(folder, HANG_GUARD_S)
    lookalike = subprocess.Popen(["sleep", "3600"], env={**os.environ, "SLURM_CLUSTER_NAME": "basis"})
    try:
        pids = _daemons_up(folder, held)
        assert _running(pids) == pids
        held.send_signal(stop)
        assert held.wait(timeout=600) == pytest.ExitCode.INTERRUPTED, (folder / "pytest.out").read_text()[-3000:]
        _assert_nothing_left(folder, pids)
        assert lookalike.poll() is None
    finally:
        held.kill()
        lookalike.kill()


def test_a_run_after_one_killed_outright_starts_cleanly_and_leaves_nothing(folder):
    killed = _held(folder, HANG_GUARD_S)
    try:
        left = _daemons_up(folder, killed)
    finally:
        killed.kill()
    killed.wait()
    assert _running(left) == left  # what SIGKILL leaves behind
    again = _held(folder, 0)
    try:
        assert again.wait(timeout=HANG_GUARD_S) == 0, (folder / "pytest.out").read_text()[-3000:]
    finally:
        again.kill()
    _assert_nothing_left(folder, left)

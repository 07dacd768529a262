import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

#: The cluster tests' daemons (``cluster``, ``server``), ended on every way out.
pytest_plugins = ["cluster.daemon_fixtures"]

# Subprocesses get a hang guard, not a speed limit: speed is measured by the benchmarks,
# and a busy machine may take many times longer than an idle one.
HANG_GUARD_S = 3600

ROOT = Path(__file__).resolve().parents[1]

#: What a Snakemake test folder holds: the workflow, and the library it runs.
WORKFLOW_FILES = ("Snakefile", "workflow", "config", "profiles", "tests", "basis")


def copy_workflow(folder: Path, names: tuple[str, ...] = WORKFLOW_FILES) -> Path:
    """A copy of the checkout's ``names`` in ``folder`` (made if missing), without caches
    or Snakemake state, for a test to run Snakemake in."""
    folder.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns(".state", ".tracking", "__pycache__", ".snakemake")
    for name in names:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, folder / name, ignore=ignore)
        else:
            shutil.copy(source, folder / name)
    return folder


def snakemake_env(library: Path, **extra: str) -> dict[str, str]:
    """A Snakemake subprocess's environment: ``library`` (a test folder's own copy of the
    library, or the checkout) first on the import path, no tracking URI of the caller's
    (runs land in the folder's own store), and ``extra``."""
    path = os.pathsep.join(filter(None, [str(library), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, **extra, "PYTHONPATH": path}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def snakemake_command(*args: str, cores: int | None = 1) -> list[str]:
    """``python -m snakemake`` with this interpreter, on ``cores`` (None: set by ``args``,
    e.g. a profile)."""
    return [sys.executable, "-m", "snakemake", *(["--cores", str(cores)] if cores else []), *args]


def run_snakemake(
    folder: Path, *args: str, cores: int | None = 1, env: dict[str, str] | None = None, timeout: float = HANG_GUARD_S
) -> subprocess.CompletedProcess:
    """Snakemake in ``folder`` (by default with the folder's own copy of the library)."""
    return subprocess.run(
        snakemake_command(*args, cores=cores),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=folder,
        env=snakemake_env(folder) if env is None else env,
    )


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def refused(argv: list[str], folder: Path, capsys, monkeypatch) -> str:
    """Run ``python -m basis ARGV`` in ``folder`` (in this process) and assert the promise
    for bad input: exit status 2, one line on stderr, no traceback, nothing written
    (no output, partial, store or log); returns the line."""
    from basis.cli import launcher

    monkeypatch.chdir(folder)
    before = _tree(folder)
    code = launcher.run_command(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (argv, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), (argv, err)
    assert "Traceback" not in err
    assert _tree(folder) == before, (argv, _tree(folder) - before)
    return lines[0]


def assert_refused(done: subprocess.CompletedProcess, message: str) -> None:
    """A dry run refused its config or store as the README promises: exit status 2 and one
    line naming the problem (beside Snakemake's notice of the profile it reads)."""
    lines = [line for line in done.stderr.splitlines() if not line.startswith("Using workflow specific profile")]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and message in lines[0], done.stderr


def pytest_configure(config):
    """Under pytest-xdist (``make test``), each worker runs on its own share of the cores,
    and so do the jobs it starts: they size their thread pools by the cores they may run on
    (:func:`basis.runtime.threads.available_cores`), so N workers on C cores run C threads, not
    N x C that wait on each other."""
    import os

    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker is None or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    from basis.runtime.threads import limit_threads

    cores = sorted(os.sched_getaffinity(0))
    share = cores[int(worker.removeprefix("gw")) % count :: count] or cores
    os.sched_setaffinity(0, share)
    limit_threads(len(share))


#: The modules that take longest (a tiny workflow in the set-up of the first, full training
#: budgets in the second, many commands in the third), collected first so that under
#: pytest-xdist (``--dist loadfile --no-loadscope-reorder``, as ``make test`` runs it) they
#: start at once instead of ending the suite; the order of the tests within a module is kept.
LONG_MODULES = ("test_workflow_e2e.py", "test_methods_two_moons.py", "test_cli_workflow.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: position for position, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_MODULES)))  # stable: keeps each module's order


@pytest.fixture(autouse=True)
def _quiet_threads():
    torch.manual_seed(0)
    yield


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def random_connected_graph(rng, n=200, k=10):
    """Dense symmetric kNN-Gaussian adjacency of random points, connected by a ring."""
    from basis.graph import GraphConfig, dense_affinity

    X = torch.as_tensor(rng.normal(size=(n, 3)))
    W = dense_affinity(X, GraphConfig(n_neighbors=k, scale="global", scale_neighbor=k - 1))
    ring = torch.zeros_like(W)
    idx = torch.arange(n)
    ring[idx, (idx + 1) % n] = 0.01
    return W + ring + ring.T


#: Where the browser tests leave their screenshots (CI keeps them as the run's artifacts).
SCREENSHOTS = Path(os.environ.get("BASIS_TEST_ARTIFACTS", Path(__file__).resolve().parents[1] / "test-artifacts"))


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium that renders a page at a laptop's size: ``browser(url, name)``
    returns the page's DOM once its JavaScript has run, and keeps a screenshot
    ``<name>.png`` in :data:`SCREENSHOTS` (``name`` may hold a folder)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs it (apt-get install chromium chromium-driver)")
        pytest.skip("chromium not installed (apt-get install chromium chromium-driver)")
    # charts draw only in the visible part of the window; virtual time lets the page settle
    common = [found, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=60000"]
    common.append("--window-size=1400,1100")

    def render(url: str, name: str) -> str:
        shot = SCREENSHOTS / f"{name}.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        shot.unlink(missing_ok=True)
        subprocess.run([*common, f"--screenshot={shot}", url], capture_output=True, timeout=HANG_GUARD_S)
        assert shot.exists() and shot.stat().st_size > 10_000, name
        done = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=HANG_GUARD_S)
        return done.stdout

    return render

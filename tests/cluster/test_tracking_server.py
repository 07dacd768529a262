"""Tracking as a cluster runs it: `mlflow server` on PostgreSQL with proxied artifacts
(`tracking_server.sh`), against the default SQLite store: the same runs, locally and through
`profiles/slurm`; concurrent jobs; the server and the database restarted mid-run.

Marked ``cluster``: `make test-cluster` runs it (as root; `.ci/run` does), `make test` does
not. The tests run in order; the server and the cluster are torn down at the end, whatever
happens.
"""

import functools
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from cluster.daemon_fixtures import started
from conftest import HANG_GUARD_S, copy_workflow, snakemake_env
from stores import differences, snapshot
from test_slurm_cluster import FAST_STATUS, NO_GPUS

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("tracking_server.sh")
TINY = "tests/configs/tiny.yaml"
#: Two of Table 1's runs and what they need: the features, the reference, the data summary.
TARGETS = ["results/runs/digits/basis/seed0/metrics.json", "results/runs/digits/specnet1/seed0/metrics.json"]
RERUN = TARGETS[0]


def _script(*action: str) -> str:
    done = subprocess.run(["bash", str(SCRIPT), *action], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def _addresses() -> dict[str, str]:
    """The servers' addresses and the basic-auth admin's password file (the script's `env`)."""
    return dict(line.split("=", 1) for line in _script("env").split())


def _env(folder: Path, uri: str | None = None, **extra: str) -> dict[str, str]:
    env = snakemake_env(folder, **extra)
    if uri:
        env["MLFLOW_TRACKING_URI"] = uri
    return env


def _start_snakemake(
    folder: Path, env: dict[str, str], *args: str, profile: bool = False, targets: list[str] = TARGETS
) -> subprocess.Popen:
    """Snakemake on ``targets`` in ``folder``, its output in ``folder``/snakemake.out (a file:
    a pipe nobody reads while the job runs in the background would fill and stall it)."""
    where = ["--profile", "profiles/slurm", *NO_GPUS, *FAST_STATUS] if profile else ["--cores", "2"]
    # targets first: --configfile and --forcerun take every value after them
    command = [sys.executable, "-m", "snakemake", *targets, *where, *args, "--configfile", "config.yaml"]
    with open(folder / "snakemake.out", "w") as out:
        return started(command, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)


def _finish(folder: Path, job: subprocess.Popen) -> None:
    try:
        job.wait(timeout=HANG_GUARD_S)
    finally:
        job.kill()
    assert job.returncode == 0, (folder / "snakemake.out").read_text()[-4000:]


def _snakemake(folder: Path, env: dict[str, str], *args: str, **options) -> None:
    _finish(folder, _start_snakemake(folder, env, *args, **options))


def _workflow(folder: Path, prefix: str) -> Path:
    """A copy of the checkout whose config is the tiny one logging to experiments ``prefix-*``."""
    copy_workflow(folder)
    config = yaml.safe_load((folder / TINY).read_text())
    config["tracking"]["experiment_prefix"] = prefix
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return folder


def _client(uri_or_folder: str | Path):
    from mlflow.tracking import MlflowClient

    if isinstance(uri_or_folder, Path):
        return MlflowClient(f"sqlite:///{uri_or_folder / 'results/mlflow/mlflow.db'}")
    return MlflowClient(uri_or_folder)


def _stages(found: dict, prefix: str) -> dict:
    """A snapshot keyed by stage (the experiment's name without its prefix)."""
    return {name.removeprefix(f"{prefix}-"): value for name, value in found.items()}


@pytest.fixture(scope="module")
def workflows(server, cluster, tmp_path_factory):
    """The same targets run three ways, each job rerun once (a superseded run): into SQLite
    locally, into the server locally, into the server through SLURM."""
    base = tmp_path_factory.mktemp("tracking")
    ways = {
        "sqlite": (_workflow(base / "sqlite", "tiny"), None, False),
        "server": (_workflow(base / "server", "tiny"), server, False),
        "slurm": (_workflow(base / "slurm", "tinyslurm"), server, True),
    }
    # the SLURM way in the background: most of its time is the plugin's waits between checks
    slurm_folder, _, _ = ways["slurm"]
    slurm_env = _env(slurm_folder, server, **cluster)
    slurm = _start_snakemake(slurm_folder, slurm_env, profile=True)
    try:
        for folder, uri, _ in (ways["sqlite"], ways["server"]):
            _snakemake(folder, _env(folder, uri))
            _snakemake(folder, _env(folder, uri), "--forcerun", RERUN)
    finally:
        _finish(slurm_folder, slurm)
    _snakemake(slurm_folder, slurm_env, "--forcerun", RERUN, profile=True)
    return ways


def _pgrep(option: str, pid: int) -> list[int]:
    """The processes of a group (``-g``) or the children of a process (``-P``) the harness
    started; pgrep reads their status, not their environment."""
    found = subprocess.run(["pgrep", option, str(pid)], capture_output=True, text=True).stdout
    return [int(found_pid) for found_pid in found.split()]


def _command_lines_holding(pids: list[int], secrets: list[str]) -> list[str]:
    """The command lines of ``pids`` that hold one of ``secrets``, each shown as <secret>
    (a failing test must not print it either)."""
    lines = []
    for pid in pids:
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # ended meanwhile
            continue
        if any(secret in line for secret in secrets):
            lines.append(functools.reduce(lambda text, secret: text.replace(secret, "<secret>"), secrets, line))
    return lines


def test_no_process_the_harness_started_holds_a_password_on_its_command_line(server):
    """Every user of the machine reads every process's arguments (`ps`): the servers' and the
    database's processes, as the harness starts them, carry neither the database's password
    nor the basic-auth admin's."""
    state = Path(_addresses()["AUTH_ADMIN_PASSWORD_FILE"]).parent
    secrets = [(state / name).read_text().strip() for name in ("db_password", "admin_password")]
    postmaster = int((state / "pg" / "postmaster.pid").read_text().split()[0])
    servers = [pid for name in ("server", "auth") for pid in _pgrep("-g", int((state / f"{name}.pid").read_text()))]
    database = [postmaster, *_pgrep("-P", postmaster)]
    assert len(servers) >= 4 and len(database) >= 3  # each server with its workers, PostgreSQL's backends
    assert _command_lines_holding(servers + database, secrets) == []


def test_the_server_and_its_database_listen_on_loopback_only(server):
    listening = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout
    for port in (15000, 15432):
        local = [line.split()[3] for line in listening.splitlines()]
        addresses = {address.rsplit(":", 1)[0] for address in local if address.endswith(f":{port}")}
        assert addresses == {"127.0.0.1"}, (port, addresses)


def test_the_server_holds_the_same_runs_as_sqlite_locally_and_through_slurm(server, workflows):
    sqlite = _stages(snapshot(_client(workflows["sqlite"][0]), "tiny"), "tiny")
    assert set(sqlite) >= {"features", "references", "runs"}
    runs = sqlite["runs"]["runs"]
    assert [r["tags"].get("superseded") for r in runs["digits-basis-seed0"]] == ["true", None]
    assert sqlite["runs"]["models"]["digits-basis-seed0"]["signature"]
    for way, prefix in (("server", "tiny"), ("slurm", "tinyslurm")):
        found = _stages(snapshot(_client(server), prefix), prefix)
        assert differences(sqlite, found) == [], way
    # the artifacts went through the server: the client has no path to them
    run = _client(server).search_runs([_client(server).get_experiment_by_name("tiny-runs").experiment_id])[0]
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")


def test_embed_and_the_ui_address_work_against_the_server(server, workflows, tmp_path):
    import numpy as np

    folder = workflows["server"][0]
    mlflow_client = _client(server)
    experiment = mlflow_client.get_experiment_by_name("tiny-runs")
    (run,) = mlflow_client.search_runs(
        [experiment.experiment_id], "tags.method = 'basis' and tags.superseded IS NULL", max_results=10
    )
    env = _env(folder, server)
    out = tmp_path / "embedded.npy"
    features = np.load(folder / "results/features/digits.npz")
    np.save(tmp_path / "points.npy", features["X_test"][:50])
    command = [sys.executable, "-m", "basis", "embed", "--model", f"runs:/{run.info.run_id}/{run.info.run_name}"]
    done = subprocess.run(
        [*command, "--input", str(tmp_path / "points.npy"), "--out", str(out)],
        cwd=folder, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    from basis.estimators import SpectralEstimator

    checkpoint = SpectralEstimator.load(folder / "results/runs/digits/basis/seed0/model.pt")
    np.testing.assert_allclose(np.load(out), checkpoint.transform(np.load(tmp_path / "points.npy")), atol=1e-5)
    url = subprocess.run(
        [sys.executable, "-m", "basis", "tracking", "url", "--experiment", "tiny-runs", "--ui", server],
        cwd=folder, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert url.returncode == 0 and url.stdout.startswith(f"{server}/#/experiments/{experiment.experiment_id}/runs")


def test_32_concurrent_jobs_lose_and_double_nothing_on_the_server_and_in_sqlite(server, tmp_path):
    from benchmarks.jobs import concurrent_jobs

    for uri in (server, None):
        env = {"MLFLOW_TRACKING_URI": uri} if uri else {}
        previous = os.environ.pop("MLFLOW_TRACKING_URI", None)
        os.environ.update(env)
        try:
            # forked from one process that has imported MLflow: 32 processes at once, without
            # the 32 interpreters' start-up (a minute of the 2-core box's CPU per store)
            figures = concurrent_jobs(32, 60, tmp_path / "store", tmp_path / "artifacts", preloaded=True)
        finally:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
            if previous:
                os.environ["MLFLOW_TRACKING_URI"] = previous
        assert figures["errors"] == [] and figures["problems"] == [], figures


#: A call to the server that fails is given up after one retry (MLflow's default: 7, minutes).
QUICK_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}


#: A training job's batch: 1,000 steps in about 10 s here, long enough to outlive a fault.
FAULT_BATCH = 128


def _training_job(
    folder: Path, uri: str, name: str, n_iter: int, experiment: str = "faults", **extra: str
) -> subprocess.Popen:
    """`python -m basis run` on two moons, tracked on the server, one loss point a step."""
    command = [sys.executable, "-m", "basis", "run", "--method", "basis", "--dataset", "two_moons"]
    return started(
        [*command, "--set", f"n_iter={n_iter}", "--set", f"batch_size={FAULT_BATCH}", "--out", str(folder / name),
         "--track", experiment, "--tag", f"job={name}"],
        cwd=folder, env=_env(ROOT, uri, **extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _running_run(uri: str, name: str, job: subprocess.Popen, experiment: str = "faults"):
    mlflow_client = _client(uri)
    for _ in range(HANG_GUARD_S):
        assert job.poll() is None, job.stderr.read()[-3000:]
        found = mlflow_client.get_experiment_by_name(experiment)
        found = found and mlflow_client.search_runs([found.experiment_id], f"tags.job = '{name}'")
        if found and mlflow_client.get_metric_history(found[0].info.run_id, "train/loss"):
            return found[0]
        time.sleep(0.5)
    pytest.fail("the training job never logged a step")


def test_a_run_completes_with_every_point_across_a_server_and_a_database_restart(server, tmp_path):
    """One job through both: the server stopped for 5 s and started, then PostgreSQL restarted."""
    job = _training_job(tmp_path, server, "restarts", n_iter=3000)
    try:
        run = _running_run(server, "restarts", job)
        for action in ("stop-server", "start-server", "restart-db"):
            _script(action)
            time.sleep(5)
        assert job.poll() is None, "the job ended before the faults were over: give it more steps"
        _, stderr = job.communicate(timeout=HANG_GUARD_S)
    finally:
        job.kill()
    assert job.returncode == 0, stderr[-3000:]
    mlflow_client = _client(server)
    finished = mlflow_client.get_run(run.info.run_id)
    assert finished.info.status == "FINISHED"
    steps = sorted(m.step for m in mlflow_client.get_metric_history(run.info.run_id, "train/loss"))
    assert steps == list(range(3000))
    assert {a.path for a in mlflow_client.list_artifacts(run.info.run_id)} >= {"metrics.json", "embedding.npz"}


def test_a_job_stopped_from_outside_closes_its_run_on_the_server_as_killed(server, tmp_path):
    job = _training_job(tmp_path, server, "killed", n_iter=100_000)
    try:
        run = _running_run(server, "killed", job)
        job.send_signal(signal.SIGTERM)
        job.communicate(timeout=HANG_GUARD_S)
    finally:
        job.kill()
    assert job.returncode != 0
    assert _client(server).get_run(run.info.run_id).info.status == "KILLED"
    assert not (tmp_path / "killed" / "metrics.json").exists()
    print(json.dumps({"killed": run.info.run_id}))


def _one_warning(stderr: str, uri: str) -> str:
    """The one line of a job's log that speaks of its server (beside its usual lines)."""
    lines = [line for line in stderr.splitlines() if uri.removeprefix("http://") in line or "Traceback" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: results written"), stderr[-3000:]
    assert "python -m basis tracking replay" in lines[0]
    return lines[0]


def _replay(folder: Path, uri: str) -> subprocess.CompletedProcess:
    """The README's replay, as written, in ``folder`` (which holds results/ and, linked, the
    checkout's .venv)."""
    (line,) = [line for line in (ROOT / "README.md").read_text().splitlines() if "basis tracking replay" in line]
    if not (folder / ".venv").exists():
        (folder / ".venv").symlink_to(ROOT / ".venv")
    return subprocess.run(["bash", "-c", line], cwd=folder, env=_env(ROOT, uri), capture_output=True, text=True)


def _as_steady(found: dict) -> dict:
    """A run's snapshot without what a store cannot have of a job that ran through an outage:
    the job's tag and its output folder (the host's sampled metrics, which MLflow's monitor
    stops logging with the server, the snapshot leaves out for every run)."""
    for run in found["runs"].values():
        for record in run:
            record["tags"].pop("job")
            record["params"] = {k: v for k, v in record["params"].items() if k != "out"}
    return found


def test_a_job_outliving_an_outage_writes_its_results_and_its_replay_logs_the_run_as_if_uninterrupted(server, tmp_path):
    job = _training_job(tmp_path, server, "outage", n_iter=1000, experiment="faults-outage", **QUICK_RETRIES)
    try:
        run = _running_run(server, "outage", job, experiment="faults-outage")
        _script("stop-server")
        _, stderr = job.communicate(timeout=HANG_GUARD_S)
    finally:
        job.kill()
        _script("start-server")
    assert job.returncode == 0, stderr[-3000:]
    assert run.info.run_id in _one_warning(stderr, server)
    assert json.loads((tmp_path / "outage" / "metrics.json").read_text())["d_G"] >= 0
    refused = _replay(tmp_path, "http://127.0.0.1:1")  # no server there: nothing sent, one line
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    done = _replay(tmp_path, server)
    assert done.returncode == 0, done.stderr[-3000:]
    assert run.info.run_id in done.stdout
    assert not (tmp_path / "results/mlflow/pending" / run.info.run_id).exists()
    steady = _training_job(tmp_path, server, "steady", n_iter=1000, experiment="faults-steady")
    _, stderr = steady.communicate(timeout=HANG_GUARD_S)
    assert steady.returncode == 0, stderr[-3000:]
    found = snapshot(_client(server), "faults")
    assert differences(_as_steady(found["faults-outage"]), _as_steady(found["faults-steady"])) == []
    (outage,) = found["faults-outage"]["runs"].values()
    assert outage[0]["status"] == "FINISHED" and len(outage[0]["metrics"]["train/loss"]) == 1000


class _Proxy(http.server.ThreadingHTTPServer):
    """A proxy in front of the tracking server that answers 500 to everything while ``failing``."""

    failing = False

    def __init__(self, target: str):
        self.target = target.removeprefix("http://")
        super().__init__(("127.0.0.1", 0), _Forward)


class _Forward(http.server.BaseHTTPRequestHandler):
    def _forward(self) -> None:
        import http.client

        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.server.failing:
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        connection = http.client.HTTPConnection(self.server.target, timeout=60)
        skip = {"host", "content-length", "connection", "transfer-encoding"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        connection.request(self.command, self.path, body=body, headers=headers)
        answer = connection.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in skip:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    def log_message(self, *args) -> None:  # the test's output is the assertions'
        pass


def test_a_server_answering_500s_is_outlived_like_an_outage(server, tmp_path):
    proxy = _Proxy(server)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{proxy.server_address[1]}"
    try:
        job = _training_job(tmp_path, uri, "errors", n_iter=1000, **QUICK_RETRIES)
        try:
            run = _running_run(uri, "errors", job)
            proxy.failing = True
            _, stderr = job.communicate(timeout=HANG_GUARD_S)
        finally:
            job.kill()
        assert job.returncode == 0, stderr[-3000:]
        assert "500" in _one_warning(stderr, uri)
        proxy.failing = False
        done = _replay(tmp_path, uri)
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        proxy.shutdown()
    mlflow_client = _client(server)
    assert mlflow_client.get_run(run.info.run_id).info.status == "FINISHED"
    assert len(mlflow_client.get_metric_history(run.info.run_id, "train/loss")) == 1000


def _files_holding(folder: Path, secret: str) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_basic_auth_refuses_at_the_door_and_no_file_written_holds_the_password(server, tmp_path):
    lines = _addresses()
    uri, password = lines["AUTH_TRACKING_URI"], Path(lines["AUTH_ADMIN_PASSWORD_FILE"]).read_text().strip()
    command = [sys.executable, "-m", "basis", "run", "--method", "basis", "--dataset", "two_moons"]
    command += ["--set", "n_iter=20", "--track", "auth"]
    for name, extra, said in (
        ("anonymous", {}, "asks for a user and password"),
        ("wrong", {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": "not-the-password"}, "refused"),
    ):
        done = subprocess.run(
            [*command, "--out", str(tmp_path / name)], cwd=tmp_path, env=_env(ROOT, uri, **extra),
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr[-2000:]
        assert said in done.stderr and not (tmp_path / name).exists()
    in_address = uri.replace("http://", f"http://admin:{password}@")
    variables = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": password}
    done = subprocess.run(
        [*command, "--out", str(tmp_path / "variables")], cwd=tmp_path, env=_env(ROOT, uri, **variables),
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert password not in done.stdout + done.stderr
    # the workflow (one run: every request to the basic-auth app costs it 0.2 s here) with the
    # password in its address and a token beside it (the address's user and password win, as
    # in MLflow's client): no file it writes, job logs included, holds either
    token = f"token-{os.urandom(8).hex()}"
    folder = _workflow(tmp_path / "workflow", "authed")
    _snakemake(folder, _env(folder, in_address, MLFLOW_TRACKING_TOKEN=token), targets=TARGETS[:1])
    for secret in (password, token):
        assert _files_holding(folder, secret) == [], secret
    mlflow_client = _client(in_address)
    experiment = mlflow_client.get_experiment_by_name("authed-runs")
    for run in mlflow_client.search_runs([experiment.experiment_id]):
        assert password not in json.dumps([run.data.params, run.data.tags])
        assert token not in json.dumps([run.data.params, run.data.tags])


def test_the_readmes_server_command_serves_the_runs_as_written(server, tmp_path):
    """The README's `mlflow server` command, as written but for its port, database address and
    artifact folder: a tracked job's run, metrics and artifacts go through it."""
    readme = (ROOT / "README.md").read_text()
    (block,) = [b.split("```", 1)[0] for b in readme.split("```bash\n")[1:] if "mlflow server" in b.split("```", 1)[0]]
    port = 15002
    command = (
        block.replace("--port 5000", f"--port {port}")
        .replace("db-host:5432", "127.0.0.1:15432")
        .replace("/shared/mlflow-artifacts", str(tmp_path / "artifacts"))
    )
    password = (Path(_addresses()["AUTH_ADMIN_PASSWORD_FILE"]).parent / "db_password").read_text().strip()
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:15432:mlflow:mlflow:{password}\n")
    pgpass.chmod(0o600)
    readme_server = started(
        ["bash", "-c", command], cwd=ROOT, env={**os.environ, "PGPASSFILE": str(pgpass)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    try:
        import requests

        for _ in range(240):
            try:
                if requests.get(f"{uri}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                time.sleep(0.5)
        job = _training_job(tmp_path, uri, "readme", n_iter=20, experiment="readme-server")
        _, stderr = job.communicate(timeout=HANG_GUARD_S)
        assert job.returncode == 0, stderr[-3000:]
        mlflow_client = _client(uri)
        (run,) = mlflow_client.search_runs([mlflow_client.get_experiment_by_name("readme-server").experiment_id])
        assert run.info.status == "FINISHED" and run.info.artifact_uri.startswith("mlflow-artifacts:")
        assert {p.name for p in (tmp_path / "artifacts").rglob("*") if p.is_file()} >= {"metrics.json", "model.pt"}
        assert _command_lines_holding(_pgrep("-g", readme_server.pid), [password]) == []
    finally:
        os.killpg(readme_server.pid, signal.SIGTERM)
        readme_server.wait(timeout=60)


def test_a_full_artifact_destination_is_outlived_like_an_outage(server, tmp_path):
    """The server's artifact folder for one experiment on a file system that is full (a tmpfs
    filled up): the job's artifacts cannot be stored, the job writes its results and says so,
    and the replay stores them once there is room."""
    mlflow_client = _client(server)
    experiment_id = mlflow_client.create_experiment("faults-full")
    state = Path(_addresses()["AUTH_ADMIN_PASSWORD_FILE"]).parent
    full = state / "server-artifacts" / experiment_id
    full.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={full / 'filler'}", "bs=4k"], capture_output=True)
        job = _training_job(tmp_path, server, "full", n_iter=50, experiment="faults-full", **QUICK_RETRIES)
        _, stderr = job.communicate(timeout=HANG_GUARD_S)
        assert job.returncode == 0, stderr[-3000:]
        _one_warning(stderr, server)
        assert (tmp_path / "full" / "metrics.json").is_file()
    finally:
        subprocess.run(["umount", str(full)], check=True)
    done = _replay(tmp_path, server)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = mlflow_client.search_runs([experiment_id])
    assert run.info.status == "FINISHED"
    assert {a.path for a in mlflow_client.list_artifacts(run.info.run_id)} >= {"metrics.json", "embedding.npz"}

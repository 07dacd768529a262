"""A run whose tracking server goes away mid-job (:mod:`basis.tracking.pending`): its writes
kept in order, the job's one line, the replay that leaves the store as an uninterrupted run
would; credentials at the door and out of every message. No server: a SQLite store behind a
client that answers as an unreachable server does."""

import http.server
import threading

import numpy as np
import pytest
from cluster.stores import differences, snapshot
from test_faults import SMALL_BASIS

#: The client calls that write to the store.
WRITE_CALLS = {"log_batch", "set_tag", "log_inputs", "log_artifact", "set_terminated"}
SECRET = "s3cret-pass"
UNREACHABLE = (
    f"API request to http://admin:{SECRET}@tracking.example:5000/api/2.0/mlflow/runs/log-batch failed with"
    " exception HTTPConnectionPool(host='tracking.example', port=5000): Max retries exceeded"
)


class _GoesAway:
    """A store's client that takes ``writes`` writes, then fails as a server that is gone
    (and has a server's address from its first failure on; before, the store's, which the
    model is logged to through MLflow's own API)."""

    def __init__(self, real, writes: int) -> None:
        self.real, self.left, self.failed = real, writes, False

    @property
    def tracking_uri(self) -> str:
        return "http://tracking.example:5000" if self.failed else self.real.tracking_uri

    def __getattr__(self, name):
        from mlflow.exceptions import MlflowException

        attribute = getattr(self.real, name)
        if name not in WRITE_CALLS:
            return attribute

        def write(*args, **kwargs):
            if self.left <= 0:
                self.failed = True
                raise MlflowException(UNREACHABLE)
            self.left -= 1
            return attribute(*args, **kwargs)

        return write


def _job(run, checkpoint, X) -> None:
    """What a training job logs: params, step metrics over several flushes, final metrics
    tied to its model, a data set, an artifact, the model."""
    run.log_params({"n_iter": 300, "graph": {"n_neighbors": 10}})
    run.log_dataset("points", "abc123", "points.npy", X, None)
    for step in range(300):
        run.log_step(step, {"loss": 1.0 / (step + 1), "alignment_error": step * 1e-3})
    model = run.log_embedding_model(checkpoint, X[:5], "an embedding of 60 points", name="points-basis")
    run.log_metrics({"d_G": 0.25}, step=300, model_id=model)
    run.log_artifact(checkpoint)
    run.set_description("a job of the test")


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A SQLite store, a fitted model to log, no system metrics (their thread would ask the
    unreachable address), and the two jobs: one uninterrupted, one whose server goes away
    after ``writes`` writes (returned by ``run_job(experiment, writes)``)."""
    from basis import tracking
    from basis.estimators import make_estimator
    from basis.tracking import runs

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(runs._SystemMonitor, "start", lambda self, mlflow_client, run_id: None)
    X = np.random.default_rng(0).normal(size=(60, 2)).astype(np.float32)
    checkpoint = tmp_path / "model.pt"
    make_estimator("basis", **SMALL_BASIS).fit(X).save(checkpoint)
    folder = tmp_path / "results/mlflow"
    real_client = runs.client

    def run_job(experiment: str, writes: int | None = None) -> str:
        if writes is not None:
            monkeypatch.setattr(runs, "client", lambda store: _GoesAway(real_client(store), writes))
        with tracking.tracked_run(experiment, "points-basis-seed0", {"rule": "test"}, store=folder) as run:
            _job(run, checkpoint, X)
        monkeypatch.setattr(runs, "client", real_client)
        return run.run_id

    return folder, run_job


def test_a_job_whose_server_goes_away_keeps_its_writes_and_says_so_in_one_line(store, capsys):
    from basis.tracking.pending import pending_runs

    folder, run_job = store
    run_id = run_job("unit-outage", writes=3)
    err = [line for line in capsys.readouterr().err.splitlines() if " INFO mlflow." not in line]  # a new store's
    assert len(err) == 1 and err[0].startswith(f"warning: results written, but run {run_id}"), err
    assert "Max retries exceeded" in err[0] and SECRET not in err[0] and "tracking replay" in err[0]
    assert pending_runs(folder) == [run_id]
    journal = (folder / "pending" / run_id / "journal.jsonl").read_text().splitlines()
    assert len(journal) > 5  # every write from the fourth on, in order, the status last
    assert '"set_terminated"' in journal[-2] and '"supersede"' in journal[-1]


@pytest.mark.parametrize("writes", [0, 3, 4])  # 4: the model logged before the server goes
def test_the_replay_leaves_the_store_as_an_uninterrupted_job_would(store, writes, capsys):
    from basis.tracking import client
    from basis.tracking.pending import pending_runs, replay
    from basis.tracking.runs import WRITES

    folder, run_job = store
    run_job("unit-steady")
    run_id = run_job("unit-outage", writes=writes)
    assert client(folder).get_run(run_id).info.status == "RUNNING"
    assert set(replay(WRITES, folder)) == {run_id}
    assert pending_runs(folder) == []
    found = snapshot(client(folder), "unit")
    assert differences(found["unit-steady"], found["unit-outage"]) == []
    assert found["unit-outage"]["runs"]["points-basis-seed0"][0]["status"] == "FINISHED"
    assert len(found["unit-outage"]["runs"]["points-basis-seed0"][0]["metrics"]["train/loss"]) == 300


def test_a_replay_the_server_stops_resumes_where_it_stopped(store, monkeypatch):
    from basis.tracking import client, pending
    from basis.tracking.pending import pending_runs, replay
    from basis.tracking.runs import WRITES

    folder, run_job = store
    run_job("unit-steady")
    run_id = run_job("unit-outage", writes=2)
    real_client = pending.client
    monkeypatch.setattr(pending, "client", lambda store: _GoesAway(real_client(store), 4))
    with pytest.raises(Exception, match="Max retries exceeded"):
        replay(WRITES, folder)
    assert pending_runs(folder) == [run_id]
    monkeypatch.setattr(pending, "client", real_client)
    replay(WRITES, folder)
    found = snapshot(client(folder), "unit")
    assert differences(found["unit-steady"], found["unit-outage"]) == []  # the model once, each point once


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda lines: lines[:-1] + [lines[-1][: len(lines[-1]) // 2]], "is not a write this project kept"),
        (lambda lines: lines + ["[1, 2]"], "is not a write this project kept"),
        (lambda lines: lines + ['{"write": "rm_rf", "arguments": [], "files": []}'], "is not a write this project"),
        (lambda lines: lines + ['{"write": "log_artifact", "arguments": ["a"], "files": [5]}'], "is not a write"),
    ],
    ids=["cut-short", "not-an-object", "unknown-write", "file-out-of-range"],
)
def test_a_malformed_journal_is_refused_in_one_line_before_anything_is_sent(store, capsys, damage, words):
    """It ended in a traceback, or sent the writes before the bad line and then stopped."""
    from basis.cli import launcher
    from basis.tracking import client

    folder, run_job = store
    run_id = run_job("unit-outage", writes=3)
    journal = folder / "pending" / run_id / "journal.jsonl"
    journal.write_text("\n".join(damage(journal.read_text().splitlines())) + "\n")
    before = client(folder).get_run(run_id).data
    capsys.readouterr()
    assert launcher.run_command(["tracking", "replay", "--store", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "journal.jsonl: line" in err[0], err
    assert client(folder).get_run(run_id).data.metrics == before.metrics and journal.exists()
    (journal.parent / "progress.json").write_text("{not json")
    journal.write_text("")
    assert launcher.run_command(["tracking", "replay", "--store", str(folder)]) == 2
    assert "progress.json is corrupt" in capsys.readouterr().err


def test_a_write_the_server_refuses_is_raised_not_kept(store, monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

    from basis.tracking import runs

    folder, _ = store

    class Refuses(_GoesAway):
        tracking_uri = "http://tracking.example:5000"

        def __getattr__(self, name):
            if name == "log_batch":

                def refuse(*args, **kwargs):
                    raise MlflowException("a bad metric", error_code=INVALID_PARAMETER_VALUE)  # HTTP 400

                return refuse
            return getattr(self.real, name)

    real_client = runs.client
    monkeypatch.setattr(runs, "client", lambda store: Refuses(real_client(store), 0))
    with pytest.raises(MlflowException, match="a bad metric"):
        with runs.tracked_run("unit-refused", "job", {}, store=folder) as run:
            run.log_params({"a": 1})
    assert not (folder / "pending").exists()


class _Refusing(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        accepted = ("Basic YWRtaW46cmlnaHQ=", "Bearer token-right")  # admin:right, or its token
        self.send_response(200 if self.headers.get("Authorization") in accepted else 401)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    "credentials, said",
    [({}, "asks for a user and password"), ({"MLFLOW_TRACKING_PASSWORD": "wrong"}, "refused the user and password")],
)
def test_a_server_that_refuses_the_credentials_is_refused_at_the_door(monkeypatch, credentials, said):
    from basis.errors import InputError
    from basis.runtime.stores import check_tracking_uri

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        if credentials:
            monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        for key, value in credentials.items():
            monkeypatch.setenv(key, value)
        with pytest.raises(InputError, match=said):
            check_tracking_uri(uri)
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "right")
        check_tracking_uri(uri)  # the right ones pass
        monkeypatch.delenv("MLFLOW_TRACKING_USERNAME")
        monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD")
        check_tracking_uri(uri.replace("http://", "http://admin:right@"))  # in the address too
    finally:
        server.shutdown()


def test_a_token_is_sent_as_mlflow_sends_it_and_never_shown(monkeypatch):
    """MLflow sends the user and password when both are set, else the token: the door's
    check sends what the runs will send, and its refusal does not show the token."""
    from basis.errors import InputError
    from basis.runtime.stores import check_tracking_uri

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "token-right")
        check_tracking_uri(uri)
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "token-stale-and-secret")
        with pytest.raises(InputError, match="refused the user and password given") as refused:
            check_tracking_uri(uri)
        assert "token-stale-and-secret" not in str(refused.value) and len(str(refused.value).splitlines()) == 1
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "right")
        check_tracking_uri(uri)  # MLflow sends these, not the stale token
    finally:
        server.shutdown()


def test_a_bugs_traceback_shows_no_password(tmp_path, monkeypatch, capsys):
    from basis import tracking
    from basis.cli import launcher

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "another-secret")

    def broken(store):
        raise RuntimeError(f"{UNREACHABLE} (password another-secret)")

    monkeypatch.setattr(tracking, "close_stale_runs", broken)
    assert launcher.run_command(["tracking", "close-stale"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "Max retries exceeded" in err
    assert SECRET not in err and "another-secret" not in err

"""Experiment tracking with MLflow: one run per training or evaluation job.

By default runs go to an embedded SQLite store, ``results/mlflow/mlflow.db``, with
artifacts under ``results/mlflow/artifacts``. No server is needed. Setting
``MLFLOW_TRACKING_URI`` sends them to a server instead, which is what a cluster
should do. The client API is used throughout (not the fluent one), so nothing depends
on a process-global active run.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from basis.errors import Terminated
from basis.stopping import on_stop
from basis.timing import timed, timed_calls

log = logging.getLogger(__name__)

DEFAULT_STORE = Path("results/mlflow")
#: Tags that identify "the same job"; a newer finished run supersedes older ones with equal values.
KEY_TAGS = ("rule", "dataset", "method", "seed", "variant", "config_name")
#: Per-step metric points buffered before one batched write.
FLUSH_EVERY_POINTS = 500


def tracking_uri(store: str | Path = DEFAULT_STORE) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else the SQLite file under ``store``."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    store = Path(store).resolve()
    store.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{store / 'mlflow.db'}"


def client(store: str | Path = DEFAULT_STORE):
    """An MLflow client of the store. A local SQLite store is opened under a file lock:
    MLflow creates and migrates the database on first use, and two jobs doing that at once
    into a new store both fail (alembic: "table ... already exists")."""
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(store)
    if not uri.startswith("sqlite:"):
        return MlflowClient(tracking_uri=uri)
    with _store_lock(store):
        return MlflowClient(tracking_uri=uri)  # creates or migrates the database


#: The description of each of the workflow's experiments (``<prefix>-<stage>``), which the
#: MLflow UI shows above the experiment's runs.
STAGE_DESCRIPTIONS = {
    "features": "Siamese feature networks, one run per image set: the 16-d features Table 1's methods embed.",
    "references": "Analytic reference embeddings (eigenvectors of the test split's graph) that d_G scores against.",
    "runs": "Table 1: each method on each data set, one run per seed, with its loss curve, scores and logged model.",
    "studies": "The paper's figures' experiments (toy sets, bunny, consistency, feature change, variants).",
    "sensitivity": "Fig. 5: each method's d_G against the graph's k, one run per k and seed.",
    "ablation": "The alignment ablation: RANSAC, least squares and no alignment, with and without wrong anchors.",
    "paper": "The assembled tables and figures, side by side with the paper's published numbers.",
}


#: The runs experiment's shared view (MLflow's ``viewStateShareKey``): Table 1's current runs
#: grouped by data set and method (seeds averaged, each group unfolds into its seeds), with
#: Table 1's scores as columns.
TABLE1_VIEW = "table1"
TABLE1_METRICS = ("d_G", "d_perp", "nmi", "acc", "accuracy")


def table1_view() -> str:
    """The JSON of :data:`TABLE1_VIEW`, in the view-state format of MLflow 3.17's UI."""
    return json.dumps(
        {
            "searchFilter": "tags.rule = 'train_and_evaluate' and tags.superseded IS NULL",
            "orderByKey": "attributes.start_time",
            "orderByAsc": False,
            "startTime": "ALL",
            "lifecycleFilter": "Active",
            "modelVersionFilter": "All Runs",
            "datasetsFilter": [],
            "selectedColumns": [f"metrics.`{name}`" for name in TABLE1_METRICS],
            "groupBy": {
                "aggregateFunction": "average",
                "groupByKeys": [{"mode": "param", "groupByData": key} for key in ("dataset", "method")],
            },
            "useGroupedValuesInCharts": True,
        }
    )


def table1_url(ui: str, experiment_id: str) -> str:
    """The MLflow UI's address of experiment ``experiment_id``'s Table 1 view, in its
    model-training mode (MLflow 3.17 opens on its GenAI mode otherwise)."""
    query = f"viewStateShareKey={TABLE1_VIEW}&workflowType=machine_learning"
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def ensure_experiments(names: list[str], store: str | Path = DEFAULT_STORE) -> dict[str, str]:
    """Create the experiments that do not exist yet; returns name -> id. A workflow stage's
    experiment (``<prefix>-<stage>``) gets its description (:data:`STAGE_DESCRIPTIONS`), and
    the runs stage's the Table 1 view (:func:`table1_view`), also where it exists already.

    Meant to run once, before the jobs that log to them. A concurrent creator
    (RESOURCE_ALREADY_EXISTS) is tolerated."""
    from mlflow.exceptions import MlflowException

    mlflow_client = client(store)
    artifacts = None if os.environ.get("MLFLOW_TRACKING_URI") else (Path(store).resolve() / "artifacts").as_uri()
    ids = {}
    for name in names:
        experiment = mlflow_client.get_experiment_by_name(name)
        if experiment is None:
            try:
                location = f"{artifacts}/{name}" if artifacts else None
                ids[name] = mlflow_client.create_experiment(name, artifact_location=location)
            except MlflowException:
                experiment = mlflow_client.get_experiment_by_name(name)
                if experiment is None:
                    raise
        if experiment is not None:
            ids[name] = experiment.experiment_id
        for key, value in _stage_tags(name).items():
            if experiment is None or experiment.tags.get(key) != value:
                mlflow_client.set_experiment_tag(ids[name], key, value)
    return ids


def _stage_tags(experiment: str) -> dict[str, str]:
    """The tags of a workflow stage's experiment: its description and, for the runs, the Table 1 view."""
    stage = experiment.rsplit("-", 1)[-1]
    if stage not in STAGE_DESCRIPTIONS:
        return {}
    tags = {"mlflow.note.content": STAGE_DESCRIPTIONS[stage]}
    if stage == "runs":
        tags[f"mlflow.sharedViewState.{TABLE1_VIEW}"] = table1_view()
    return tags


def store_identity(store: str | Path = DEFAULT_STORE) -> str | None:
    """Which local store this is (the creation time of its first experiment), read with
    sqlite3 in read-only mode, without MLflow; None when there is no local store (or runs
    go to a server, whose identity is its URI)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    created = _read_local_store(store, "SELECT MIN(creation_time) FROM experiments")
    return None if created is None else str(created)


def _read_local_store(store: str | Path, query: str) -> Any:
    """The first column of ``query``'s first row in the local SQLite store, read with sqlite3
    in read-only mode (no MLflow import); None when there is no store or it cannot be read."""
    import sqlite3

    database = Path(store) / "mlflow.db"
    if not database.is_file():
        return None
    try:
        with sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True) as connection:
            return connection.execute(query).fetchone()[0]
    except sqlite3.Error:
        return None


def config_hash(section: Any) -> str:
    """Short stable hash of a JSON-serialisable config section."""
    return hashlib.sha256(json.dumps(section, sort_keys=True, default=str).encode()).hexdigest()[:12]


def git_commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return done.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out[prefix] = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)


class TrackedRun:
    """One MLflow run: params, per-step metrics (buffered), final metrics, artifacts."""

    def __init__(self, mlflow_client, run_id: str, store: str | Path = DEFAULT_STORE):
        self.client = mlflow_client
        self.run_id = run_id
        self.store = store
        self._pending: list = []

    @timed_calls("tracking")
    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        flat: dict[str, str] = {}
        _flatten("", params, flat)
        items = [Param(k, v[:6000]) for k, v in sorted(flat.items())]
        for start in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[start : start + 100])

    def log_step(self, step: int, values: dict[str, float]) -> None:
        """Buffer one step's metrics; written in batches to keep the store fast."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        self._pending += [Metric(k, float(v), stamp, step) for k, v in values.items() if v == v]
        if len(self._pending) >= FLUSH_EVERY_POINTS:
            self.flush()

    @timed_calls("tracking")
    def flush(self) -> None:
        for start in range(0, len(self._pending), 1000):
            self.client.log_batch(self.run_id, metrics=self._pending[start : start + 1000])
        self._pending = []

    @timed_calls("tracking")
    def log_metrics(self, values: dict[str, float], step: int = 0) -> None:
        """Final metrics, in one batch, at ``step`` (a training run's last step, so that they
        sit beside the final loss on the model's page)."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), stamp, step) for k, v in values.items()])

    @timed_calls("tracking")
    def set_description(self, text: str) -> None:
        """The run's description in the MLflow UI (its note)."""
        self.client.set_tag(self.run_id, "mlflow.note.content", text)

    @timed_calls("tracking")
    def log_dataset(self, name: str, digest: str, source: str, context: str = "training") -> None:
        """The data set a run used, as an MLflow input (the UI's Datasets column)."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(name=name, digest=digest, source_type="local", source=source)
        # The first run to log a data set creates its record: concurrent jobs take turns.
        with _store_lock(self.store):
            self.client.log_inputs(
                self.run_id, datasets=[DatasetInput(dataset, [InputTag("mlflow.data.context", context)])]
            )

    @timed_calls("tracking")
    def log_artifact(self, path: str | Path, folder: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), folder)

    @timed_calls("tracking")
    def log_embedding_model(
        self, checkpoint: str | Path, input_example, description: str, *, name: str = "model", step: int = 0
    ) -> None:
        """The fitted estimator saved at ``checkpoint`` as this run's MLflow model ``name``:
        its prediction is the estimator's ``transform`` (see :mod:`basis.serving`); it takes
        the run's metrics of ``step``, so the buffered steps are written first."""
        import mlflow

        from basis.serving import log_embedding_model

        self.flush()
        with scoped_tracking_uri(self.client.tracking_uri), mlflow.start_run(run_id=self.run_id):
            log_embedding_model(checkpoint, input_example, description, name=name, step=step)


@contextmanager
def scoped_tracking_uri(uri: str) -> Iterator[None]:
    """MLflow's fluent API (model logging needs it) pointed at ``uri`` for a block only:
    ``mlflow.set_tracking_uri`` also sets MLFLOW_TRACKING_URI, which would send every later
    run of this process to the same store."""
    # MLflow's own scoped setter (pinned version) restores its global; the variable is
    # restored here, since MLflow unsets it when its global was unset.
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    previous_env = os.environ.get("MLFLOW_TRACKING_URI")
    try:
        with _use_tracking_uri(uri):
            yield
    finally:
        if previous_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = previous_env


def process_tags() -> dict[str, str]:
    """Tags that identify the process logging a run, so that a later invocation can
    prove the process gone before it closes the run (see :func:`close_stale_runs`)."""
    import socket

    import psutil

    return {
        "basis.host": socket.gethostname(),
        "basis.pid": str(os.getpid()),
        "basis.process_started": f"{psutil.Process().create_time():.3f}",
    }


def process_is_gone(tags: dict[str, str]) -> bool:
    """True only when the run's process provably no longer exists: it ran on this host,
    and its PID is free or now belongs to a process started at another time. A run from
    another host, or without these tags, is never taken for dead."""
    import socket

    import psutil

    if tags.get("basis.host") != socket.gethostname() or "basis.pid" not in tags:
        return False
    try:
        started = psutil.Process(int(tags["basis.pid"])).create_time()
    except psutil.NoSuchProcess:
        return True
    return f"{started:.3f}" != tags.get("basis.process_started")


def _search_all(mlflow_client, experiment_ids: list[str], filter_string: str = "") -> Iterator:
    """Every run that matches, page by page (search_runs returns at most one page)."""
    token = None
    while True:
        page = mlflow_client.search_runs(
            experiment_ids, filter_string=filter_string, max_results=1000, page_token=token
        )
        yield from page
        token = page.token
        if not token:
            return


@contextmanager
def _store_lock(store: str | Path) -> Iterator[None]:
    """Serialise find-or-create steps of concurrent jobs on a local store (a server does
    its own locking; there the lock file is only this host's)."""
    import fcntl

    Path(store).mkdir(parents=True, exist_ok=True)
    with open(Path(store) / ".store.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def parent_run(mlflow_client, experiment_id: str, name: str, store: str | Path = DEFAULT_STORE) -> str:
    """The id of the run named ``name`` that groups runs of one sweep or one data set's
    seeds in the UI (created by the first of them; concurrent jobs create it once)."""
    with _store_lock(store):
        for run in _search_all(mlflow_client, [experiment_id], "attributes.status = 'FINISHED'"):
            if run.data.tags.get("basis.parent") == name:
                return run.info.run_id
        run = mlflow_client.create_run(experiment_id, run_name=name, tags={"basis.parent": name})
        mlflow_client.set_terminated(run.info.run_id, "FINISHED")
        return run.info.run_id


@contextmanager
def tracked_run(
    experiment: str,
    run_name: str,
    tags: dict[str, str],
    store: str | Path = DEFAULT_STORE,
    parent: str | None = None,
) -> Iterator[TrackedRun]:
    """Start a run; it ends FINISHED, or FAILED if the body raises, and a finished run
    marks older finished runs with the same key tags as ``superseded``. A run of the same
    job left RUNNING by a process that is gone (a killed job) is closed first. ``parent``
    names the run it is grouped under (:func:`parent_run`). The host's CPU, memory and GPU
    use are logged as system metrics while the run lasts."""
    with timed("tracking"):
        mlflow_client, run, all_tags, monitor = _open_run(experiment, run_name, tags, store, parent)
    tracked = TrackedRun(mlflow_client, run.info.run_id, store)
    # A stop that cannot wait for the main thread (see basis.launcher) closes the run too.
    forget = on_stop(lambda: mlflow_client.set_terminated(run.info.run_id, "KILLED"))
    try:
        yield tracked
        with timed("tracking"):
            tracked.flush()
    except BaseException as err:
        tracked.flush()
        monitor.finish()
        # A job stopped from outside (a scheduler's cancel or time limit, Ctrl-C) closes
        # its own run as KILLED, on whatever node it runs; any other error as FAILED.
        killed = isinstance(err, (KeyboardInterrupt, Terminated))
        mlflow_client.set_terminated(run.info.run_id, "KILLED" if killed else "FAILED")
        raise
    finally:
        forget()
    with timed("tracking"):
        monitor.finish()
        mlflow_client.set_terminated(run.info.run_id, "FINISHED")
        supersede_older(mlflow_client, run.info.experiment_id, all_tags, run.info.run_id)


def _open_run(experiment: str, run_name: str, tags: dict[str, str], store: str | Path, parent: str | None):
    """:func:`tracked_run`'s start: the client, the run with its tags, its system monitor."""
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    mlflow_client = client(store)
    experiment_id = ensure_experiments([experiment], store)[experiment]
    commit = git_commit()
    all_tags = {
        "git_commit": commit,
        # MLflow's standard source tags, which its UI shows
        "mlflow.source.git.commit": commit,
        "mlflow.source.type": "LOCAL",
        "mlflow.source.name": "python -m basis",
        "mlflow.user": getpass.getuser(),
        **process_tags(),
        **{k: str(v) for k, v in tags.items()},
    }
    if parent:
        all_tags["mlflow.parentRunId"] = parent_run(mlflow_client, experiment_id, parent, store)
    close_stale_runs(store, key=_key(all_tags), experiment_ids=[experiment_id])
    run = mlflow_client.create_run(experiment_id, run_name=run_name, tags=all_tags)
    monitor = SystemMetricsMonitor(run.info.run_id, sampling_interval=1, tracking_uri=mlflow_client.tracking_uri)
    monitor.start()
    return mlflow_client, run, all_tags, monitor


def _key(tags: dict[str, str]) -> dict[str, str]:
    return {k: tags[k] for k in KEY_TAGS if k in tags}


def _matches(run, key: dict[str, str]) -> bool:
    # Tag values are compared here rather than in a filter string, so that any value
    # (quotes included) is safe.
    return all(run.data.tags.get(k) == v for k, v in key.items())


def supersede_older(mlflow_client, experiment_id: str, tags: dict[str, str], newest_run_id: str) -> list[str]:
    """Tag every other finished or killed run of the same job key as superseded by the
    newest (a rerun after a cancelled or timed-out job replaces its run too)."""
    key = _key(tags)
    if not key:
        return []
    finished = [
        run
        for status in ("FINISHED", "KILLED")
        for run in _search_all(mlflow_client, [experiment_id], f"attributes.status = '{status}'")
    ]
    older = [r for r in finished if r.info.run_id != newest_run_id and _matches(r, key)]
    for run in older:
        mlflow_client.set_tag(run.info.run_id, "superseded", "true")
        mlflow_client.set_tag(run.info.run_id, "superseded_by", newest_run_id)
    return [r.info.run_id for r in older]


def close_stale_runs(
    store: str | Path = DEFAULT_STORE, key: dict[str, str] | None = None, experiment_ids: list[str] | None = None
) -> int:
    """Mark runs left RUNNING by a process that is provably gone (a killed job) as
    KILLED; returns how many. Live runs, and runs whose process cannot be checked (another
    host, no process tags), are left alone, so this is safe beside a running workflow.
    ``key`` restricts it to the runs of one job."""
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        if not (Path(store) / "mlflow.db").exists():
            return 0
        # Every workflow invocation starts here: a store with no RUNNING run at all (the
        # usual case) is told by one read-only query, without MLflow's 2 s import.
        if _read_local_store(store, "SELECT COUNT(*) FROM runs WHERE status = 'RUNNING'") == 0:
            return 0
    mlflow_client = client(store)
    experiment_ids = experiment_ids or [e.experiment_id for e in mlflow_client.search_experiments()]
    if not experiment_ids:
        return 0
    running = _search_all(mlflow_client, experiment_ids, "attributes.status = 'RUNNING'")
    stale = [r for r in running if _matches(r, key or {}) and process_is_gone(r.data.tags)]
    for run in stale:
        mlflow_client.set_terminated(run.info.run_id, "KILLED")
        mlflow_client.set_tag(run.info.run_id, "closed_by", "close_stale_runs")
    return len(stale)

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
import math
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
#: Significant digits of a metric in MLflow (the UI prints every digit; a run's exact scores
#: are in its metrics.json).
SHOWN_DIGITS = 4

#: MLflow's names of a run's final scores, where the short name of metrics.json would be
#: ambiguous. The part before the first "/" is the section the MLflow UI groups a run's
#: charts by: ``eval`` (the paper's equations), ``authors`` (the same measures as the
#: authors' code computes them), ``alignment`` (BASiS's batch alignment) and ``time``;
#: per-step curves are ``train/...``, and MLflow's own ``system/...``.
METRIC_NAMES = {
    "acc": "eval/cluster_acc",  # K-means on the embedding, best label matching (0-1)
    "accuracy": "eval/probe_accuracy_pct",  # a linear probe trained to convergence (%)
    "accuracy_authors": "authors/probe_accuracy_pct",  # the authors' probe, as their code trains it (%)
    "d_G_code": "authors/d_G",
    "d_G_code_skew": "authors/d_G_skew",
    "d_G_code_inliers": "authors/d_G_inliers",
    "d_perp_code": "authors/d_perp",
    "nmi_code": "authors/nmi",
    "alignment_error_median": "alignment/error_median",
    "alignment_error_max": "alignment/error_max",
    "ransac_fallbacks": "alignment/ransac_fallbacks",
    "ransac_unsure_batches": "alignment/ransac_unsure_batches",
}


def metric_name(key: str, *, per_step: bool = False) -> str:
    """The MLflow name of metric ``key``: :data:`METRIC_NAMES`, else ``time/`` for timings,
    ``train/`` for other per-step values and ``eval/`` for other final ones; a name that
    has a section already is kept."""
    if "/" in key:
        return key
    if key in METRIC_NAMES:
        return METRIC_NAMES[key]
    if key.startswith("ms_") or key.endswith("_seconds"):
        return f"time/{key}"
    return f"train/{key}" if per_step else f"eval/{key}"


def shown_value(value: float) -> float:
    """``value`` as MLflow shows it: rounded to :data:`SHOWN_DIGITS` significant digits."""
    value = float(value)
    return float(f"{value:.{SHOWN_DIGITS}g}") if math.isfinite(value) else value


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
#: with its scores as columns. Once Table 1 is assembled, each row is a method on a data set
#: (its parent run, :func:`summarise_seeds`: the seeds' mean), unfolding into its seeds.
TABLE1_VIEW = "table1"
TABLE1_METRICS = ("d_G", "d_perp", "nmi", "acc", "accuracy")


def table1_view() -> str:
    """The JSON of :data:`TABLE1_VIEW`, in the view-state format of MLflow 3.17's UI. The
    parents do not match its filter: MLflow shows a matching run under its parent when the
    runs are sorted by start time."""
    return json.dumps(
        {
            "searchFilter": "tags.rule = 'train_and_evaluate' and tags.superseded IS NULL",
            "orderByKey": "attributes.start_time",
            "orderByAsc": False,
            "startTime": "ALL",
            "lifecycleFilter": "Active",
            "modelVersionFilter": "All Runs",
            "datasetsFilter": [],
            "selectedColumns": [f"metrics.`{metric_name(name)}`" for name in TABLE1_METRICS],
            "chartsSearchFilter": "eval/",  # the chart view opens on the scores, one bar per run
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
        self._pending += [
            Metric(metric_name(k, per_step=True), shown_value(v), stamp, step) for k, v in values.items() if v == v
        ]
        if len(self._pending) >= FLUSH_EVERY_POINTS:
            self.flush()

    @timed_calls("tracking")
    def flush(self) -> None:
        for start in range(0, len(self._pending), 1000):
            self.client.log_batch(self.run_id, metrics=self._pending[start : start + 1000])
        self._pending = []

    @timed_calls("tracking")
    def log_metrics(
        self,
        values: dict[str, float],
        step: int = 0,
        *,
        model_id: str | None = None,
        dataset: tuple[str, str] | None = None,
    ) -> None:
        """Final metrics, in one batch, at ``step``, under their MLflow names
        (:func:`metric_name`) and as MLflow shows them (:func:`shown_value`). At step 0
        MLflow's charts show them as bars, one per run; a later step makes them lines. With
        ``model_id`` they are the logged model's metrics too, measured on ``dataset`` (name,
        digest), which the model's page links."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        name, digest = dataset or (None, None)
        metrics = [
            Metric(metric_name(k), shown_value(v), stamp, step, model_id, name, digest) for k, v in values.items()
        ]
        self.client.log_batch(self.run_id, metrics=metrics)

    @timed_calls("tracking")
    def set_description(self, text: str) -> None:
        """The run's description in the MLflow UI (its note)."""
        self.client.set_tag(self.run_id, "mlflow.note.content", text)

    @timed_calls("tracking")
    def log_dataset(self, name: str, digest: str, source: str, features, targets, context: str = "training") -> None:
        """The data set a run used, as an MLflow input (the UI's Datasets column and drawer):
        where it comes from, and the dtype and shape of its ``features`` and ``targets``."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        def tensor(array) -> str:
            spec = {"dtype": str(array.dtype), "shape": [-1, *array.shape[1:]]}
            return json.dumps([{"type": "tensor", "tensor-spec": spec}])

        dataset = Dataset(
            name=name,
            digest=digest,
            source_type="local",
            source=json.dumps({"uri": source}),
            schema=json.dumps({"mlflow_tensorspec": {"features": tensor(features), "targets": tensor(targets)}}),
            profile=json.dumps({"features_shape": list(features.shape), "targets_shape": list(targets.shape)}),
        )
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
    ) -> str:
        """The fitted estimator saved at ``checkpoint`` as this run's MLflow model ``name``:
        its prediction is the estimator's ``transform`` (see :mod:`basis.serving`); it takes
        the run's metrics of ``step``, so the buffered steps are written first. Returns the
        model's id."""
        import mlflow

        from basis.serving import log_embedding_model

        self.flush()
        with scoped_tracking_uri(self.client.tracking_uri), mlflow.start_run(run_id=self.run_id):
            return log_embedding_model(checkpoint, input_example, description, name=name, step=step)


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


def finish_parents(experiment: str, names: list[str], store: str | Path = DEFAULT_STORE) -> list[str]:
    """Mark the parent runs ``names`` of a sweep in ``experiment`` (:func:`parent_run`, each
    made by its first run) finished now, once their runs are done, so that each spans its
    runs; returns their ids."""
    mlflow_client = client(store)
    experiment_id = ensure_experiments([experiment], store)[experiment]
    ids = [parent_run(mlflow_client, experiment_id, name, store) for name in names]
    for run_id in ids:
        mlflow_client.set_terminated(run_id, "FINISHED")
    return ids


#: The tag of a run that summarises one data set's seeds of one method (``<dataset>/<method>``).
SUMMARY_TAG = "basis.summary"


def summarise_seeds(
    mlflow_client,
    experiment_id: str,
    dataset: str,
    method: str,
    seeds: list[int],
    scores: dict[str, tuple[float, float]],
    store: str | Path = DEFAULT_STORE,
) -> tuple[str, list]:
    """The parent run of ``method``'s current runs of ``seeds`` on ``dataset``; returns its id
    and those runs. It spans
    them (started with the first, finished after the last), holds the parameters and data
    set they share, and ``scores`` (measure -> mean, std over seeds) under the seeds' own
    metric names (the std as ``std/<name>``), so that a chart of a score compares methods.
    A summary made before (an older set of seeds) is deleted; its seeds stay superseded."""
    from mlflow.entities import DatasetInput

    wanted = {str(seed) for seed in seeds}
    key = f"{dataset}/{method}"
    every = list(_search_all(mlflow_client, [experiment_id]))
    seeds = [
        run
        for run in every
        if run.info.status == "FINISHED"
        and run.data.tags.get("dataset") == dataset
        and run.data.tags.get("method") == method
        and run.data.tags.get("seed") in wanted
        and "superseded" not in run.data.tags
    ]
    if len(seeds) != len(wanted):
        raise ValueError(f"{len(seeds)} current runs of {method} on {dataset} for the seeds {sorted(wanted)}")
    older = [run for run in every if run.data.tags.get(SUMMARY_TAG) == key]
    shared = {k: v for k, v in seeds[0].data.params.items() if k != "seed"}
    shared = {k: v for k, v in shared.items() if all(run.data.params.get(k) == v for run in seeds)}
    description = f"{method} on {dataset}: the mean of its {len(seeds)} seeds (std/...: their spread); unfold for each."
    summary = mlflow_client.create_run(
        experiment_id,
        run_name=f"{dataset}: {method}",
        start_time=min(run.info.start_time for run in seeds),
        tags={SUMMARY_TAG: key, "dataset": dataset, "method": method, "mlflow.note.content": description},
    )
    run_id = summary.info.run_id
    tracked = TrackedRun(mlflow_client, run_id, store)
    tracked.log_params({**shared, "n_seeds": len(seeds)})
    inputs = {(i.dataset.name, i.dataset.digest): i for run in seeds for i in run.inputs.dataset_inputs}
    if inputs:
        with _store_lock(store):
            mlflow_client.log_inputs(run_id, datasets=[DatasetInput(i.dataset, i.tags) for i in inputs.values()])
    values = {}
    for measure, (mean, std) in scores.items():
        values |= {measure: mean, f"std/{metric_name(measure)}": std}
    tracked.log_metrics({k: v for k, v in values.items() if v == v})  # NaN: a measure some seeds lack
    for run in seeds:
        mlflow_client.set_tag(run.info.run_id, "mlflow.parentRunId", run_id)
    mlflow_client.set_terminated(run_id, "FINISHED")
    for run in older:
        mlflow_client.delete_run(run.info.run_id)
    return run_id, seeds


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

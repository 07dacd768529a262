"""One MLflow run per job: its parameters, per-step and final metrics under the UI's
section names, data set, artifacts and model; runs of killed jobs closed, reruns
superseding older runs, and the parents that group seeds and sweeps.

The client API is used throughout (not the fluent one), so nothing depends on a
process-global active run.
"""

from __future__ import annotations

import getpass
import json
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from basis.errors import Terminated
from basis.runtime.stopping import on_stop, once
from basis.runtime.timing import timed, timed_calls
from basis.tracking.pending import PLACEHOLDER, STORE_WRITES, Journal, pending_runs, reason, server_unreachable
from basis.tracking.store import (
    DEFAULT_STORE,
    client,
    git_commit,
    read_local_store,
    search_all,
    store_lock,
)
from basis.tracking.views import LOG_SCALED, ensure_experiments, metric_name, shown_value

log = logging.getLogger(__name__)
#: Tags that identify "the same job"; a newer finished run supersedes older ones with equal values.
KEY_TAGS = ("rule", "dataset", "method", "seed", "variant", "config_name")
#: Per-step metric points buffered before one batched write.
FLUSH_EVERY_POINTS = 500


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out[prefix] = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)


class TrackedRun:
    """One MLflow run: params, per-step metrics (buffered), final metrics, artifacts. On a
    server that cannot be reached, the writes are kept for later (:mod:`basis.tracking.pending`)."""

    def __init__(self, mlflow_client, run_id: str, store: str | Path = DEFAULT_STORE):
        self.client = mlflow_client
        self.run_id = run_id
        self.store = store
        self._pending: list = []
        self.journal: Journal | None = None  #: set once a write could not reach the server
        self.unreachable: BaseException | None = None
        self.on_unreachable = lambda: None

    def _write(self, write: str, *arguments: Any, files: tuple[int, ...] = ()) -> Any:
        """One write to the store, or kept for later once the server could not take one."""
        # A second try on a new connection where the first one dropped (a server closes idle
        # connections, and MLflow's retries resend no POST that was cut off); not for a model,
        # which a repeated call would log twice.
        tries = 1 if write == "log_model" else 2
        while self.journal is None and tries:
            tries -= 1
            try:
                return WRITES[write](self.client, self.run_id, {}, *arguments)
            except Exception as err:
                if self.client.tracking_uri.startswith("sqlite:") or not server_unreachable(err):
                    raise
                if not tries:
                    self.journal, self.unreachable = Journal(self.store, self.run_id), err
                    self.on_unreachable()
        self.journal.keep(write, *arguments, files=files)
        return PLACEHOLDER + arguments[3] if write == "log_model" else None

    @timed_calls("tracking")
    def log_params(self, params: dict[str, Any]) -> None:
        flat: dict[str, str] = {}
        _flatten("", params, flat)
        items = [(k, v[:6000]) for k, v in sorted(flat.items())]
        for start in range(0, len(items), 100):
            self._write("log_batch", [], items[start : start + 100])

    def log_step(self, step: int, values: dict[str, float]) -> None:
        """Buffer one step's metrics; written in batches to keep the store fast."""
        stamp = int(time.time() * 1000)
        self._pending += [
            (metric_name(k, per_step=True), shown_value(v), stamp, step, None, None, None)
            for k, v in values.items()
            if v == v
        ]
        if len(self._pending) >= FLUSH_EVERY_POINTS:
            self.flush()

    @timed_calls("tracking")
    def flush(self) -> None:
        for start in range(0, len(self._pending), 1000):
            self._write("log_batch", self._pending[start : start + 1000], [])
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
        stamp = int(time.time() * 1000)
        name, digest = dataset or (None, None)
        metrics = [(metric_name(k), shown_value(v), stamp, step, model_id, name, digest) for k, v in values.items()]
        self._write("log_batch", metrics, [])

    @timed_calls("tracking")
    def set_tags(self, tags: dict[str, str]) -> None:
        """Tags beside the workflow's (e.g. why a measure is not available)."""
        for key, value in tags.items():
            self._write("set_tag", key, value)

    @timed_calls("tracking")
    def set_description(self, text: str) -> None:
        """The run's description in the MLflow UI (its note)."""
        self._write("set_tag", "mlflow.note.content", text)

    @timed_calls("tracking")
    def log_dataset(self, name: str, digest: str, source: str, features, targets, context: str = "training") -> None:
        """The data set a run used, as an MLflow input (the UI's Datasets column and drawer):
        where it comes from, and the dtype and shape of its ``features`` and ``targets`` (None:
        unlabelled)."""

        def tensor(array) -> str:
            spec = {"dtype": str(array.dtype), "shape": [-1, *array.shape[1:]]}
            return json.dumps([{"type": "tensor", "tensor-spec": spec}])

        dataset = {
            "name": name,
            "digest": digest,
            "source_type": "local",
            "source": json.dumps({"uri": source}),
            "schema": json.dumps(
                {
                    "mlflow_tensorspec": {
                        "features": tensor(features),
                        **({} if targets is None else {"targets": tensor(targets)}),
                    }
                }
            ),
            "profile": json.dumps(
                {
                    "features_shape": list(features.shape),
                    "targets_shape": None if targets is None else list(targets.shape),
                }
            ),
        }
        # The first run to log a data set creates its record: concurrent jobs take turns.
        with store_lock(self.store):
            self._write("log_inputs", dataset, context)

    @timed_calls("tracking")
    def log_artifact(self, path: str | Path, folder: str | None = None) -> None:
        self._write("log_artifact", str(path), folder, files=(0,))

    @timed_calls("tracking")
    def log_embedding_model(
        self, checkpoint: str | Path, input_example, description: str, *, name: str = "model", step: int = 0
    ) -> str:
        """The fitted estimator saved at ``checkpoint`` as this run's MLflow model ``name``:
        its prediction is the estimator's ``transform`` (see :mod:`basis.tracking.serving`); it takes
        the run's metrics of ``step``, so the buffered steps are written first. Returns the
        model's id (a placeholder while the server cannot be reached)."""
        import numpy as np

        self.flush()
        with tempfile.TemporaryDirectory() as folder:
            example = Path(folder) / "input_example.npy"
            np.save(example, np.asarray(input_example))
            return self._write("log_model", str(checkpoint), str(example), description, name, step, files=(0, 1))

    def set_terminated(self, status: str) -> None:
        self._write("set_terminated", status)

    def supersede_older(self, experiment_id: str, tags: dict[str, str]) -> None:
        self._write("supersede", experiment_id, tags)


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


def parent_run(mlflow_client, experiment_id: str, name: str, store: str | Path = DEFAULT_STORE) -> str:
    """The id of the run named ``name`` that groups runs of one sweep or one data set's
    seeds in the UI (created by the first of them; concurrent jobs create it once)."""
    with store_lock(store):
        for run in search_all(mlflow_client, [experiment_id], "attributes.status = 'FINISHED'"):
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
    start_time: int | None = None,
) -> tuple[str, list]:
    """The parent run of ``method``'s current runs of ``seeds`` on ``dataset``; returns its id
    and those runs. It spans
    them (started with the first, finished after the last), holds the parameters and data
    set they share, and ``scores`` (measure -> mean, std over seeds) under the seeds' own
    metric names (the std as ``<name>_std``, listed beside the mean), so that a chart of a score compares methods,
    and each distance's log10 as ``<name>_log10`` (a baseline's d_perp of 1e6 beside BASiS's
    0.2 flattens a linear chart). ``start_time`` (ms) orders the summaries in a view sorted by
    start time (Table 1 gives its rows falling times in its order: by data set, then method).
    A summary made before (an older set of seeds) is deleted; its seeds stay superseded."""
    from mlflow.entities import DatasetInput

    wanted = {str(seed) for seed in seeds}
    key = f"{dataset}/{method}"
    every = list(search_all(mlflow_client, [experiment_id]))
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
    description = f"{method} on {dataset}: the mean of its {len(seeds)} seeds (..._std: their spread); unfold for each."
    summary = mlflow_client.create_run(
        experiment_id,
        run_name=f"{dataset}: {method}",
        start_time=min(run.info.start_time for run in seeds) if start_time is None else start_time,
        # the seeds' rule too: the Table 1 view's filter then lists the summaries themselves, in
        # Table 1's order (start_time), each unfolding into its seeds
        tags={SUMMARY_TAG: key, "dataset": dataset, "method": method, "mlflow.note.content": description}
        | {"rule": seeds[0].data.tags["rule"]},
    )
    run_id = summary.info.run_id
    tracked = TrackedRun(mlflow_client, run_id, store)
    tracked.log_params({**shared, "n_seeds": len(seeds)})
    inputs = {(i.dataset.name, i.dataset.digest): i for run in seeds for i in run.inputs.dataset_inputs}
    if inputs:
        with store_lock(store):
            mlflow_client.log_inputs(run_id, datasets=[DatasetInput(i.dataset, i.tags) for i in inputs.values()])
    values = {}
    for measure, (mean, std) in scores.items():
        values |= {measure: mean, f"{metric_name(measure)}_std": std}
        if measure in LOG_SCALED and mean > 0:
            values[f"{metric_name(measure)}_log10"] = math.log10(mean)
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
        mlflow_client, run, all_tags = _open_run(experiment, run_name, tags, store, parent)
    tracked = TrackedRun(mlflow_client, run.info.run_id, store)
    # Closed as KILLED once, by the main thread's unwinding or by the stop's watcher when the
    # main thread is stuck in a long call (basis.runtime.stopping), whichever comes first.
    close_killed = once(lambda: tracked.set_terminated("KILLED"))
    forget = on_stop(close_killed)
    monitor = _SystemMonitor()
    tracked.on_unreachable = monitor.abandon
    try:
        with timed("tracking"):
            monitor.start(mlflow_client, run.info.run_id)
        yield tracked
        with timed("tracking"):
            tracked.flush()
    except (KeyboardInterrupt, Terminated):
        # A job stopped from outside (a scheduler's cancel or time limit, Ctrl-C) closes its
        # own run as KILLED, on whatever node it runs: the status first, the metrics after.
        close_killed()
        tracked.flush()
        monitor.finish()
        raise
    except BaseException:
        # Each step on its own: where the store itself cannot be written (a full disk), the
        # run stays RUNNING and the next invocation's close-stale closes it, and the error
        # the user sees is the one that ended the job.
        for step in (tracked.flush, monitor.finish, lambda: tracked.set_terminated("FAILED")):
            with suppress(Exception):
                step()
        raise
    finally:
        forget()
    with timed("tracking"):
        monitor.finish()
        tracked.set_terminated("FINISHED")
        tracked.supersede_older(run.info.experiment_id, all_tags)
    if tracked.journal is not None:
        from basis.runtime.stores import redacted_uri

        print(
            f"warning: results written, but run {run.info.run_id} ({run_name}) is not fully logged: the tracking"
            f" server {redacted_uri(mlflow_client.tracking_uri)} could not be reached ({reason(tracked.unreachable)});"
            f" its writes are kept in {tracked.journal.folder}:"
            " once the server is back, python -m basis tracking replay",
            file=sys.stderr,
        )


class _SystemMonitor:
    """MLflow's monitor of the host's CPU, memory and GPU use, logging to one run every
    second; finishing one that has not started does nothing."""

    def __init__(self) -> None:
        self._monitor = None

    def start(self, mlflow_client, run_id: str) -> None:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        # Its lines are not the job's: it starts, it stops, and it warns when the server is gone
        # (which the job says itself, once).
        logging.getLogger("mlflow.system_metrics").setLevel(logging.ERROR)
        self._monitor = SystemMetricsMonitor(run_id, sampling_interval=1, tracking_uri=mlflow_client.tracking_uri)
        self._monitor.start()

    def finish(self) -> None:
        if self._monitor is not None:
            self._monitor.finish()

    def abandon(self) -> None:
        """Stop without a last write (the server cannot be reached): its thread ends at its
        next look at the run."""
        if self._monitor is not None:
            self._monitor._shutdown_event.set()
            self._monitor = None


def _open_run(experiment: str, run_name: str, tags: dict[str, str], store: str | Path, parent: str | None):
    """:func:`tracked_run`'s start: the client, the run, its tags."""
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
    return mlflow_client, run, all_tags


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
        for run in search_all(mlflow_client, [experiment_id], f"attributes.status = '{status}'")
    ]
    older = [r for r in finished if r.info.run_id != newest_run_id and _matches(r, key)]
    for run in older:
        mlflow_client.set_tag(run.info.run_id, "superseded", "true")
        mlflow_client.set_tag(run.info.run_id, "superseded_by", newest_run_id)
    return [r.info.run_id for r in older]


#: A run's writes (:mod:`basis.tracking.pending`): the store's own, and marking older runs superseded.
WRITES = {
    **STORE_WRITES,
    "supersede": lambda store, run_id, models, experiment_id, tags: supersede_older(store, experiment_id, tags, run_id),
}


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
        if read_local_store(store, "SELECT COUNT(*) FROM runs WHERE status = 'RUNNING'") == 0:
            return 0
    mlflow_client = client(store)
    experiment_ids = experiment_ids or [e.experiment_id for e in mlflow_client.search_experiments()]
    if not experiment_ids:
        return 0
    running = search_all(mlflow_client, experiment_ids, "attributes.status = 'RUNNING'")
    kept = set(pending_runs(store))  # their writes wait for a replay (basis.tracking.pending)
    stale = [
        r for r in running if _matches(r, key or {}) and process_is_gone(r.data.tags) and r.info.run_id not in kept
    ]
    for run in stale:
        mlflow_client.set_terminated(run.info.run_id, "KILLED")
        mlflow_client.set_tag(run.info.run_id, "closed_by", "close_stale_runs")
    return len(stale)

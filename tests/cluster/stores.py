"""What a tracking store holds of a workflow's runs, in a form two stores can be compared by:
every field a user sees, with what differs by nature between two invocations (run ids,
times, process ids, the folder the workflow ran in, durations) left out or named instead."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import yaml

#: Tags that name the process, the host or the folder of one invocation.
PROCESS_TAGS = {"basis.pid", "basis.process_started", "basis.host", "mlflow.source.name", "mlflow.user"}
#: Metrics measured, not computed: their keys and steps are compared, not their values.
MEASURED = ("time/", "eval/seconds")
#: The host's use, sampled every second while a run lasts: left out, since whether a run of
#: under a second got a sample depends on the host's load, not on the store.
SAMPLED = "system/"
#: Tags whose values are run ids: compared as the names of the runs they point to.
RUN_ID_TAGS = {"mlflow.parentRunId", "superseded_by"}


def _artifacts(mlflow_client, run_id: str, folder: str = "") -> dict[str, str]:
    """Every artifact's path and the MD5 of its bytes (downloaded through the store's client)."""
    found = {}
    for item in mlflow_client.list_artifacts(run_id, folder or None):
        if item.is_dir:
            found |= _artifacts(mlflow_client, run_id, item.path)
            continue
        with tempfile.TemporaryDirectory() as where:
            local = mlflow_client.download_artifacts(run_id, item.path, where)
            found[item.path] = hashlib.md5(Path(local).read_bytes()).hexdigest()
    return found


def _metrics(mlflow_client, run) -> dict[str, list]:
    histories = {}
    for key in sorted(run.data.metrics):
        if key.startswith(SAMPLED):
            continue
        history = sorted((m.step, m.value) for m in mlflow_client.get_metric_history(run.info.run_id, key))
        histories[key] = [step for step, _ in history] if key.startswith(MEASURED) else history
    return histories


def _models(mlflow_client, experiment_id: str, names: dict[str, str]) -> dict[str, Any]:
    """Each logged model by name: its run's name, params, tags, description and signature."""
    import mlflow.artifacts

    models = {}
    for model in mlflow_client.search_logged_models([experiment_id]):
        with tempfile.TemporaryDirectory() as where:
            spec = mlflow.artifacts.download_artifacts(
                f"{model.artifact_location}/MLmodel", dst_path=where, tracking_uri=mlflow_client.tracking_uri
            )
            signature = yaml.safe_load(Path(spec).read_text()).get("signature")
        tags = {k: v for k, v in model.tags.items() if k not in PROCESS_TAGS}
        models[model.name] = {
            "run": names.get(model.source_run_id),
            "params": dict(model.params),
            "tags": tags,
            "status": str(model.status),
            "signature": signature,
        }
    return models


def snapshot(mlflow_client, prefix: str) -> dict[str, Any]:
    """The store's experiments named ``prefix-*``, each with its tags, its runs (by name and,
    for a superseded run, its place among its job's runs) and its logged models."""
    found = {}
    for experiment in mlflow_client.search_experiments(filter_string=f"name LIKE '{prefix}-%'"):
        runs = mlflow_client.search_runs([experiment.experiment_id], max_results=1000, order_by=["start_time ASC"])
        names = {run.info.run_id: run.info.run_name for run in runs}
        by_name: dict[str, list] = {}
        for run in runs:
            tags = {k: v for k, v in run.data.tags.items() if k not in PROCESS_TAGS}
            tags |= {k: names.get(tags[k], "another experiment's run") for k in RUN_ID_TAGS & set(tags)}
            dataset_inputs = sorted(
                (i.dataset.name, i.dataset.digest, i.dataset.source, i.dataset.profile, i.dataset.schema)
                for i in run.inputs.dataset_inputs
            )
            by_name.setdefault(run.info.run_name, []).append(
                {
                    "status": run.info.status,
                    "params": dict(run.data.params),
                    "tags": tags,
                    "metrics": _metrics(mlflow_client, run),
                    "datasets": dataset_inputs,
                    "artifacts": _artifacts(mlflow_client, run.info.run_id),
                }
            )
        found[experiment.name] = {
            "tags": dict(experiment.tags),
            "runs": by_name,
            "models": _models(mlflow_client, experiment.experiment_id, names),
        }
    return found


def differences(first: Any, second: Any, where: str = "") -> list[str]:
    """Every path at which two snapshots differ, with both values (short)."""
    if isinstance(first, dict) and isinstance(second, dict):
        out = []
        for key in sorted(set(first) | set(second), key=str):
            if key not in first or key not in second:
                out.append(f"{where}/{key}: only in the {'second' if key not in first else 'first'}")
            else:
                out += differences(first[key], second[key], f"{where}/{key}")
        return out
    if isinstance(first, list) and isinstance(second, list) and len(first) == len(second):
        return [d for i, (a, b) in enumerate(zip(first, second)) for d in differences(a, b, f"{where}[{i}]")]
    return [] if first == second else [f"{where}: {str(first)[:200]} != {str(second)[:200]}"]

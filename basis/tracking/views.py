"""What the MLflow UI shows: metric names grouped in sections and rounded values, each
workflow stage's experiment with its description, and the runs experiment's Table 1 view.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from basis.tracking.store import DEFAULT_STORE, client

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
#: The distances a parent run also logs as log10 (``<name>_log10``), on which the methods
#: can be told apart in a chart: a baseline's d_perp can be a million times BASiS's.
LOG_SCALED = ("d_G", "d_perp")


def table1_columns() -> list[str]:
    """The view's columns: each score (the paper's equation), its seeds' spread beside it
    (``..._std``), and for a distance its log10; the UI lists a section's columns
    alphabetically, so each mean is followed by its log10 and its spread."""
    columns = []
    for name in TABLE1_METRICS:
        columns += [f"metrics.`{metric_name(name)}`"]
        columns += [f"metrics.`{metric_name(name)}_log10`"] if name in LOG_SCALED else []
        columns += [f"metrics.`{metric_name(name)}_std`"]
    return columns


def table1_view() -> str:
    """The JSON of :data:`TABLE1_VIEW`, in the view-state format of MLflow 3.17's UI. The
    parents match its filter too (they carry their seeds' rule): MLflow shows a matching run
    under its parent when the runs are sorted by start time, and Table 1 starts its parents
    after their seeds, in its own order (:func:`~basis.tracking.runs.summarise_seeds`), so
    that they are listed by data set, then method."""
    return json.dumps(
        {
            "searchFilter": "tags.rule = 'train_and_evaluate' and tags.superseded IS NULL",
            "orderByKey": "attributes.start_time",
            "orderByAsc": False,
            "startTime": "ALL",
            "lifecycleFilter": "Active",
            "modelVersionFilter": "All Runs",
            "datasetsFilter": [],
            "selectedColumns": table1_columns(),
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


def report_path(config_name: str) -> str:
    """Where a config's report lands (:mod:`basis.report`): what a finished workflow hands the reader."""
    return f"results/{config_name}/report.html"


def ui_address() -> str | None:
    """The MLflow UI's address where it is known: the tracking server's (it serves the UI),
    without its credentials; None for a local store, whose UI the reader starts on a port of
    their choosing."""
    from basis.runtime.stores import redacted_uri

    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    return redacted_uri(uri) if uri.startswith(("http://", "https://")) else None


def where_to_look(runs_experiment: str, config_name: str, store: str | Path = DEFAULT_STORE) -> str:
    """The lines a finished workflow ends with: where the report is, and the two commands that
    open Table 1's view in the MLflow UI (a local store's UI, or the tracking server's)."""
    ui = ui_address()
    if ui is not None:
        serve = f"the tracking server serves the UI at {ui}"
    else:
        ui = "http://127.0.0.1:5000"
        database = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(store) / 'mlflow.db'}"
        serve = f".venv/bin/mlflow ui --backend-store-uri {database} --host 127.0.0.1 --port 5000 --workers 1"
    return "\n".join(
        [
            f"The report: {report_path(config_name)} (open it in a browser; its text: results/paper/comparison.md).",
            "Table 1 in the MLflow UI:",
            f"  {serve}",
            f"  .venv/bin/python -m basis tracking url --experiment {runs_experiment} --ui {ui}",
        ]
    )

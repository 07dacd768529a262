"""Experiment tracking with MLflow: one run per training or evaluation job.

- :mod:`~basis.tracking.store`: where runs are kept (a local SQLite store by default,
  ``MLFLOW_TRACKING_URI`` for a server);
- :mod:`~basis.tracking.runs`: a job's run (:func:`tracked_run`) and the parents that group
  seeds and sweeps;
- :mod:`~basis.tracking.views`: each stage's experiment and the UI's Table 1 view;
- :mod:`~basis.tracking.serving`: a fitted estimator as an MLflow model;
- :mod:`~basis.tracking.pending`: a run's writes kept while its server cannot be reached,
  and their replay.

Importing this package imports neither MLflow nor torch: the workflow reads it at parse time.
"""

from basis.tracking.runs import (
    KEY_TAGS,
    SUMMARY_TAG,
    TrackedRun,
    close_stale_runs,
    finish_parents,
    parent_run,
    process_is_gone,
    process_tags,
    summarise_seeds,
    supersede_older,
    tracked_run,
)
from basis.tracking.store import (
    DEFAULT_STORE,
    TRACKING_FLAG,
    check_results_store,
    client,
    config_hash,
    git_commit,
    scoped_tracking_uri,
    store_identity,
    tracking_uri,
)
from basis.tracking.views import (
    METRIC_NAMES,
    STAGE_DESCRIPTIONS,
    TABLE1_VIEW,
    ensure_experiments,
    metric_name,
    shown_value,
    table1_url,
    table1_view,
)

__all__ = [
    "DEFAULT_STORE",
    "KEY_TAGS",
    "METRIC_NAMES",
    "STAGE_DESCRIPTIONS",
    "SUMMARY_TAG",
    "TABLE1_VIEW",
    "TrackedRun",
    "client",
    "close_stale_runs",
    "config_hash",
    "ensure_experiments",
    "finish_parents",
    "git_commit",
    "metric_name",
    "parent_run",
    "process_is_gone",
    "process_tags",
    "scoped_tracking_uri",
    "shown_value",
    "store_identity",
    "TRACKING_FLAG",
    "check_results_store",
    "summarise_seeds",
    "supersede_older",
    "table1_url",
    "table1_view",
    "tracked_run",
    "tracking_uri",
]

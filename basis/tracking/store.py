"""Where runs are kept: the MLflow store's address, a client for it, and what can be read
from a local store without MLflow.

By default runs go to an embedded SQLite store, ``results/mlflow/mlflow.db``, with
artifacts under ``results/mlflow/artifacts``. No server is needed. Setting
``MLFLOW_TRACKING_URI`` sends them to a server instead, which is what a cluster
should do.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from basis.errors import InputError

DEFAULT_STORE = Path("results/mlflow")


def tracking_uri(store: str | Path = DEFAULT_STORE) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else the SQLite file under ``store``."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    store = Path(store).resolve()
    store.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{store / 'mlflow.db'}"


#: Seconds one HTTP call to a tracking server may take.
HTTP_TIMEOUT_S = 30


def client(store: str | Path = DEFAULT_STORE):
    """An MLflow client of the store. A local SQLite store is opened under a file lock:
    MLflow creates and migrates the database on first use, and two jobs doing that at once
    into a new store both fail (alembic: "table ... already exists")."""
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(store)
    if not uri.startswith("sqlite:"):
        # A server that accepts the connection but never answers ends a call after this
        # long (MLflow's default waits 120 s per try, over 7 tries); its retries stay.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(HTTP_TIMEOUT_S))
        # Each retry's warning would be a line in the job's log; a call that fails in the end says why.
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        if "@" in urlsplit(uri).netloc:  # MLflow prints each run's address, user and password included
            os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
        return MlflowClient(tracking_uri=uri)
    with store_lock(store):
        return MlflowClient(tracking_uri=uri)  # creates or migrates the database


def store_identity(store: str | Path = DEFAULT_STORE) -> str | None:
    """Which local store this is (the creation time of its first experiment), read with
    sqlite3 in read-only mode, without MLflow; None when there is no local store (or runs
    go to a server, whose identity is its URI without credentials: it is written to a file)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        from basis.runtime.stores import redacted_uri

        return redacted_uri(os.environ["MLFLOW_TRACKING_URI"])
    created = read_local_store(store, "SELECT MIN(creation_time) FROM experiments")
    return None if created is None else str(created)


#: Where the workflow records which store its results were logged to (its tracking_setup rule).
TRACKING_FLAG = Path("results/mlflow/experiments.json")


def check_results_store(flag: str | Path = TRACKING_FLAG, store: str | Path = DEFAULT_STORE) -> None:
    """Refuse a store the runs cannot go to (an ``MLFLOW_TRACKING_URI`` that is no store's
    address: whether its server answers is asked when jobs start), and refuse to take
    finished results for complete when the MLflow store behind them was deleted or replaced
    (its runs are gone): an InputError saying what to do. Only reads ``flag`` and the store."""
    from basis.runtime.stores import check_tracking_uri

    if os.environ.get("MLFLOW_TRACKING_URI"):
        check_tracking_uri(os.environ["MLFLOW_TRACKING_URI"], reach=False)
    flag = Path(flag)
    if not flag.exists():
        return
    recorded = json.loads(flag.read_text()).get("store")
    found = store_identity(store)
    if found == recorded:
        return
    database = Path(store) / "mlflow.db"
    if found is not None:
        state = "is not the one the results were logged to"
    elif database.is_file():
        state = "is not a readable MLflow database (corrupt, or another kind of file)"
    else:
        state = "is missing"
    raise InputError(
        f"the MLflow store {database} {state}, so the runs behind results/ are not in it."
        f" Restore it, or delete {flag} to log every tracked job again into a new store (all of them rerun)."
    )


def read_local_store(store: str | Path, query: str) -> Any:
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


def search_all(mlflow_client, experiment_ids: list[str], filter_string: str = "") -> Iterator:
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
def store_lock(store: str | Path) -> Iterator[None]:
    """Serialise find-or-create steps of concurrent jobs on a local store (a server does
    its own locking; there the lock file is only this host's)."""
    import fcntl

    Path(store).mkdir(parents=True, exist_ok=True)
    with open(Path(store) / ".store.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield

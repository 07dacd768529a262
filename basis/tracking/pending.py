"""A run's writes kept on disk while its tracking server cannot be reached, and logged later.

When a write to a server fails after MLflow's own retries (the server or its database gone,
a 5xx answer, its artifact store full), the job does not fail: that write and every later
one of its run go, in order, to ``<store>/pending/<run id>/`` (a JSON line per write; the
artifacts and the model's checkpoint copied beside it), the job writes its results, and it
ends with one line saying so. ``python -m basis tracking replay`` sends the kept writes once
the server is back, resuming where an earlier replay stopped, so that the store ends as after
an uninterrupted run: the same run, its points with their own steps and timestamps, its
artifacts, its model, its status.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from basis.errors import InputError
from basis.tracking.store import DEFAULT_STORE, client, scoped_tracking_uri

#: The folder under a store that holds the runs not yet fully logged.
PENDING = "pending"
#: A model id that stands for a model not yet logged (the replay puts the real one in).
PLACEHOLDER = "pending-model:"


def _log_batch(mlflow_client, run_id: str, models: dict, metrics: list, params: list) -> None:
    """Metric points as (key, value, timestamp, step, model id, data set name, digest) and
    (key, value) params, in one call; a placeholder model id becomes the logged model's."""
    from mlflow.entities import Metric, Param

    points = [Metric(k, v, t, s, models.get(m, m), n, d) for k, v, t, s, m, n, d in metrics]
    mlflow_client.log_batch(run_id, metrics=points, params=[Param(k, v) for k, v in params])


def _log_inputs(mlflow_client, run_id: str, models: dict, dataset: dict, context: str) -> None:
    from mlflow.entities import Dataset, DatasetInput, InputTag

    tag = InputTag("mlflow.data.context", context)
    mlflow_client.log_inputs(run_id, datasets=[DatasetInput(Dataset(**dataset), [tag])])


def _log_model(mlflow_client, run_id: str, models: dict, checkpoint: str, example: str, description: str, name: str,
               step: int) -> str:  # fmt: skip
    import numpy as np

    from basis.tracking.serving import log_embedding_model

    with scoped_tracking_uri(mlflow_client.tracking_uri):
        return log_embedding_model(run_id, checkpoint, np.load(example), description, name=name, step=step)


#: A run's writes to the store by name: function(client, run id, model ids by placeholder,
#: *arguments); :data:`basis.tracking.runs.WRITES` adds the ones made of several calls.
STORE_WRITES: dict[str, Callable] = {
    "log_batch": _log_batch,
    "set_tag": lambda store, run_id, models, key, value: store.set_tag(run_id, key, value),
    "log_inputs": _log_inputs,
    "log_artifact": lambda store, run_id, models, path, folder: store.log_artifact(run_id, path, folder),
    "log_model": _log_model,
    "set_terminated": lambda store, run_id, models, status: store.set_terminated(run_id, status),
}


def server_unreachable(error: BaseException) -> bool:
    """Whether a failed write means the server cannot take writes now (worth keeping them for
    later) rather than a write it refuses (a bug, or bad credentials: raised as they are)."""
    from mlflow.exceptions import MlflowException
    from requests.exceptions import ConnectionError as Unconnected
    from requests.exceptions import Timeout

    if isinstance(error, (Unconnected, Timeout, ConnectionError, TimeoutError)):
        return True
    if isinstance(error, MlflowException):
        status = error.get_http_status_code()
        text = str(error)
        return status >= 500 or "Max retries exceeded" in text or "Connection" in text or "status code 5" in text
    return False


def reason(error: BaseException) -> str:
    """Why a write failed, short and without credentials: the cause MLflow's message ends with
    (``... (Caused by ...)``) where it has one, else its first line."""
    from basis.runtime.stores import redacted_text

    text = (str(error).splitlines() or [type(error).__name__])[0]
    if "Caused by " in text:
        text = text.rsplit("Caused by ", 1)[1].rstrip(")")
    return redacted_text(text)[:200]


def pending_runs(store: str | Path = DEFAULT_STORE) -> list[str]:
    """The ids of the runs with writes kept for later."""
    folder = Path(store) / PENDING
    return sorted(p.name for p in folder.iterdir() if (p / "journal.jsonl").is_file()) if folder.is_dir() else []


class Journal:
    """The writes of run ``run_id`` kept under ``store``, in the order they were made."""

    def __init__(self, store: str | Path, run_id: str) -> None:
        self.folder = Path(store) / PENDING / run_id
        self._files = 0

    def keep(self, write: str, *arguments: Any, files: tuple[int, ...] = ()) -> None:
        """Keep one write; ``files`` are the positions of the arguments that are files,
        copied now (the job may overwrite them before the replay)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        arguments = list(arguments)
        for position in files:
            self._files += 1
            source = Path(arguments[position])
            kept = self.folder / f"{self._files:04d}" / source.name
            kept.parent.mkdir()
            shutil.copy2(source, kept)
            arguments[position] = str(kept.relative_to(self.folder))
        with open(self.folder / "journal.jsonl", "a") as journal:
            journal.write(json.dumps({"write": write, "arguments": arguments, "files": list(files)}) + "\n")

    def entries(self, known: Collection[str]) -> list[dict]:
        """The kept writes in order, each one of ``known``; a line that is not one (a journal
        cut short or edited) is refused in one line, before anything is sent."""
        path = self.folder / "journal.jsonl"
        entries = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                entry = None
            if not _kept_write(entry, known):
                raise InputError(
                    f"{path}: line {number} is not a write this project kept; its run cannot be replayed"
                    f" (remove {self.folder} to drop its pending writes)"
                )
            for position in entry["files"]:
                entry["arguments"][position] = str(self.folder / entry["arguments"][position])
            entries.append(entry)
        return entries


def _progress(path: Path) -> dict:
    """How far an interrupted replay got (``done`` writes, the models it logged)."""
    try:
        progress = json.loads(path.read_text())
    except ValueError:
        progress = None
    if not (
        isinstance(progress, dict)
        and isinstance(progress.get("done"), int)
        and isinstance(progress.get("models"), dict)
    ):
        raise InputError(
            f"{path} is corrupt: how far the replay got is lost (remove {path.parent} to drop the run's writes)"
        )
    return progress


def _kept_write(entry: Any, known: Collection[str]) -> bool:
    """Whether ``entry`` is a write as :meth:`Journal.keep` writes it, of a ``known`` kind."""
    if not isinstance(entry, dict) or entry.get("write") not in known:
        return False
    arguments, files = entry.get("arguments"), entry.get("files")
    return (
        isinstance(arguments, list)
        and isinstance(files, list)
        and all(isinstance(p, int) and 0 <= p < len(arguments) and isinstance(arguments[p], str) for p in files)
    )


def replay(
    writes: dict[str, Callable], store: str | Path = DEFAULT_STORE, runs: list[str] | None = None
) -> dict[str, int]:
    """Send the kept writes of every pending run (or of ``runs``) through ``writes`` (name ->
    function, :data:`basis.tracking.runs.WRITES`), as the job would have; a run's folder goes
    once all its writes are in. Stops at the first write the server does not take (raising
    it), remembering how far each run got. Returns the writes sent per run."""
    mlflow_client = client(store)
    sent = {}
    for run_id in runs or pending_runs(store):
        journal = Journal(store, run_id)
        progress_file = journal.folder / "progress.json"
        entries = journal.entries(writes)
        progress = _progress(progress_file) if progress_file.exists() else {"done": 0, "models": {}}
        for index in range(progress["done"], len(entries)):
            entry = entries[index]
            model = writes[entry["write"]](mlflow_client, run_id, progress["models"], *entry["arguments"])
            if entry["write"] == "log_model":
                progress["models"][PLACEHOLDER + entry["arguments"][3]] = model
            progress["done"] = index + 1
            progress_file.write_text(json.dumps(progress))
        sent[run_id] = len(entries)
        shutil.rmtree(journal.folder)
    return sent

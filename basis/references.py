"""The ground truth of Table 1: the analytic embedding of a data set's test split,
computed once, stored with what it was computed from, and checked when it is reused."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from basis.data import Dataset, load_npz
from basis.errors import InputError
from basis.graph import sparse_affinity
from basis.outputs import atomic_path
from basis.settings import GraphConfig, reference_settings
from basis.spectral import sparse_spectral_embedding


def analytic_embedding(
    X: np.ndarray, settings: dict[str, Any], n_components: int, device: str = "cpu", report: dict | None = None
) -> np.ndarray:
    """The ground truth: eigenvectors of the whole set's graph (sparse Lanczos).
    ``report``, when given, receives the neighbour search's figures (see
    :func:`~basis.graph.sparse_affinity`) and ``graph_seconds`` and ``eigen_seconds``."""
    report = {} if report is None else report
    start = time.perf_counter()
    W = sparse_affinity(X, GraphConfig.from_dict(settings["graph"]), device=device, report=report)
    report["graph_seconds"] = time.perf_counter() - start
    start = time.perf_counter()
    U, _ = sparse_spectral_embedding(
        W,
        n_components,
        operator=settings["operator"],
        drop_trivial=settings["drop_trivial"],
        diffusion_time=settings.get("diffusion_time", 1.0),
    )
    report["eigen_seconds"] = time.perf_counter() - start
    return U


def fingerprint(X: np.ndarray) -> str:
    """Hash of an input matrix, so a stored reference is only used for the same points."""
    return hashlib.sha256(np.ascontiguousarray(X, dtype=np.float32).tobytes()).hexdigest()[:16]


def save_reference(path: str | Path, data: Dataset, settings: dict[str, Any], device: str = "cpu") -> dict[str, Any]:
    """Compute the test split's analytic embedding once and store it with its settings
    and a fingerprint of the test inputs."""
    n_components = settings["n_components"] or data.n_classes
    start, report = time.perf_counter(), {}
    U = analytic_embedding(data.X_test, settings, n_components, device=device, report=report)
    meta = {**reference_settings(settings, n_components), "test_inputs": fingerprint(data.X_test)}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as partial:
        # `report` (timings, the neighbour search and its recall) rides along, unchecked on reuse.
        np.savez(partial, embedding=U, settings=json.dumps(meta, sort_keys=True), report=json.dumps(report))
    return {"seconds": time.perf_counter() - start, "n_test": len(U), **report, **meta}


def load_reference(path: str | Path, settings: dict[str, Any], n_components: int, X_test: np.ndarray) -> np.ndarray:
    """A stored reference, refused when it was computed with other settings or on other points."""
    stored = load_npz(path, ("embedding", "settings"), "reference")
    try:
        U, meta = stored["embedding"], json.loads(str(stored["settings"]))
    except json.JSONDecodeError as err:
        raise InputError(
            f"reference {path}: its settings are not JSON ({err}); recompute it with basis reference"
        ) from None
    if U.ndim != 2 or len(U) != len(X_test) or U.shape[1] != n_components:
        raise InputError(
            f"reference {path} holds an embedding of shape {U.shape}; this run needs ({len(X_test)}, {n_components})"
        )
    expected = {
        **json.loads(json.dumps(reference_settings(settings, n_components))),
        "test_inputs": fingerprint(X_test),
    }
    if meta != expected:
        raise InputError(f"reference {path} was computed with {meta}, this run needs {expected}")
    return U

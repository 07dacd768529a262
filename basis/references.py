"""The ground truth of Table 1: the analytic embedding of a data set's test split,
computed once, stored with what it was computed from, and checked when it is reused."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from basis.catalog import SPARSE_SOLVERS
from basis.catalog.settings import reference_settings
from basis.data import Dataset, load_npz
from basis.errors import InputError
from basis.graph import GraphConfig, device_affinity, sparse_affinity
from basis.runtime import device as devices
from basis.runtime.outputs import atomic_path
from basis.spectral import sparse_spectral_embedding
from basis.spectral.certificate import Certificate, UncertifiedEigenvectors


def analytic_embedding(
    X: np.ndarray,
    settings: dict[str, Any],
    n_components: int,
    device: str = "cpu",
    report: dict | None = None,
    eigensolver: str = "auto",
    topk_block: int | None = None,
) -> np.ndarray:
    """The ground truth: eigenvectors of the whole set's sparse graph.

    ``eigensolver`` ``arpack`` assembles the graph on the host and runs Lanczos there;
    ``chebyshev`` keeps the graph on ``device`` (:func:`~basis.graph.device_affinity`) and
    solves it there (:func:`~basis.spectral.chebyshev_eigensolve`); ``auto``, the default,
    is ``chebyshev`` on a GPU and ``arpack`` on the CPU. ``report``, when given, receives
    the neighbour search's figures (see :func:`~basis.graph.sparse_affinity`), the solver,
    ``graph_seconds`` and ``eigen_seconds``."""
    if eigensolver not in ("auto", *SPARSE_SOLVERS):
        raise InputError(f"eigensolver must be one of {['auto', *SPARSE_SOLVERS]}, got {eigensolver!r}")
    if eigensolver == "auto":
        eigensolver = devices.sparse_solver_by_default(device)
    report = {} if report is None else report
    report["eigensolver"] = eigensolver
    graph = GraphConfig.from_dict(settings["graph"])
    assemble = device_affinity if eigensolver == "chebyshev" else sparse_affinity
    start = time.perf_counter()
    W = assemble(X, graph, device=device, report=report, topk_block=topk_block)
    devices.synchronize(device)
    report["graph_seconds"] = time.perf_counter() - start
    start = time.perf_counter()
    U, _ = sparse_spectral_embedding(
        W,
        n_components,
        operator=settings["operator"],
        drop_trivial=settings["drop_trivial"],
        diffusion_time=settings.get("diffusion_time", 1.0),
        solver=eigensolver,
        report=report,
    )
    report["eigen_seconds"] = time.perf_counter() - start
    return U


def fingerprint(X: np.ndarray) -> str:
    """Hash of an input matrix, so a stored reference is only used for the same points."""
    return hashlib.sha256(np.ascontiguousarray(X, dtype=np.float32).tobytes()).hexdigest()[:16]


def check_graph_size(data: Dataset, settings: dict[str, Any]) -> None:
    """The test split's graph needs more points than neighbours and than components."""
    n_test, k = len(data.X_test), settings["graph"].get("n_neighbors")
    if k is not None and n_test <= k:
        raise InputError(
            f"data set {data.name}: its test split holds {n_test} points, no more than graph.n_neighbors={k};"
            " give it more points or fewer neighbours"
        )
    n_components = settings["n_components"] or data.n_components
    if n_components is not None and n_test <= n_components + 1:
        raise InputError(f"data set {data.name}: its test split holds {n_test} points for {n_components} components")


def save_reference(
    path: str | Path, data: Dataset, settings: dict[str, Any], device: str = "cpu", eigensolver: str = "auto"
) -> dict[str, Any]:
    """Compute the test split's analytic embedding once (see :func:`analytic_embedding`)
    and store it with its settings and a fingerprint of the test inputs."""
    n_components = settings["n_components"] or data.n_components
    start, report = time.perf_counter(), {}
    try:
        U = analytic_embedding(
            data.X_test, settings, n_components, device=device, report=report, eigensolver=eigensolver
        )
    except UncertifiedEigenvectors as err:  # nothing is written
        raise UncertifiedEigenvectors(f"data set {data.name}: {err}") from None
    certificate = report.pop("certificate")
    meta = {**reference_settings(settings, n_components), "test_inputs": fingerprint(data.X_test)}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as partial:
        # How it was computed (the neighbour search, its recall) rides along, unchecked on reuse;
        # its timings do not, so that the same settings write the same bytes.
        how = {k: v for k, v in report.items() if not k.endswith("_seconds")}
        np.savez(
            partial,
            embedding=U,
            settings=json.dumps(meta, sort_keys=True),
            report=json.dumps(how),
            certificate=json.dumps(certificate, sort_keys=True),
        )
    figures = {f"certificate_{key}": value for key, value in certificate.items()}
    return {"seconds": time.perf_counter() - start, "n_test": len(U), **report, **meta, **figures}


def stored_certificate(path: str | Path) -> Certificate | None:
    """The certificate stored with a reference (None for a file written before references
    carried one)."""
    stored = load_npz(path, (), "reference", optional=("certificate",))
    if "certificate" not in stored:
        return None
    try:
        return Certificate.from_dict(json.loads(str(stored["certificate"])))
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise InputError(f"reference {path}: its certificate is not readable ({err}); recompute it") from None


def load_reference(path: str | Path, settings: dict[str, Any], n_components: int, X_test: np.ndarray) -> np.ndarray:
    """A stored reference, refused when it was computed with other settings or on other points."""
    stored = load_npz(path, ("embedding", "settings"), "reference")
    try:
        U, meta = stored["embedding"], json.loads(str(stored["settings"]))
    except json.JSONDecodeError as err:
        raise InputError(
            f"reference {path}: its settings are not JSON ({err}); recompute it with basis reference"
        ) from None
    if U.dtype.kind != "f" or not np.isfinite(U).all():
        raise InputError(
            f"reference {path} holds NaN, infinite or non-numeric values; recompute it with basis reference"
        )
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

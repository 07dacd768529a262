"""One method on one data set: the evaluation protocol of Table 1.

Train on the training split, embed the test split, and compare with the analytic
embedding of the test split's own graph (same graph settings): d_G, d_perp, NMI and
ACC of K-means on the output, each also as the authors' code computed it, and two linear
probes trained on the training split's output (a converged one, and the authors').
SpecNet2's post-processing runs on the whole test set, as in the paper, and SpecNet2 is
scored in its own basis as well.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from basis import metrics
from basis.data import Dataset, load_dataset
from basis.estimators import METHODS, SpecNet2, SpectralEstimator, make_estimator
from basis.graph import GraphConfig, sparse_affinity
from basis.spectral import sparse_spectral_embedding
from basis.toy import TOY_SETS

#: Table 1's protocol (paper Sec. 5.2 and the authors' code); every key can be overridden.
PROTOCOL: dict[str, Any] = {
    "n_components": None,  # None: the number of classes
    "operator": "normalized",
    "drop_trivial": False,
    "batch_size": 512,
    "n_iter": 1000,
    "lr": 1e-4,
    "graph": {
        "n_neighbors": 50,
        "scale": "local",
        "scale_neighbor": 7,
        "sigma": None,
        "kernel": "paper",
        "symmetrize": "mean",
        "self_loops": True,
    },
    "eval": {
        "kmeans_n_init": 10,
        "probe_C": 1.0,
        "probe_max_iter": 1000,
        "authors_probe_epochs": 100,
        "authors_probe_lr": 1e-4,
        "authors_probe_batch_size": 262,
    },
}


#: Toy sets (2-D, a few thousand points) get a graph of their own: with k = 50 and a local
#: scale, neighbouring moons share edges inside a batch. lr 1e-3 as in config/quick.yaml.
TOY_OVERRIDES: dict[str, Any] = {"graph": {"n_neighbors": 15, "scale": "global"}, "lr": 1e-3}


@dataclass
class RunResult:
    metrics: dict[str, float]
    estimator: SpectralEstimator
    train_embedding: np.ndarray
    test_embedding: np.ndarray
    reference_embedding: np.ndarray
    params: dict[str, Any] = field(default_factory=dict)


def parse_assignment(text: str) -> tuple[list[str], Any]:
    """``"graph.n_neighbors=20"`` -> (["graph", "n_neighbors"], 20); values are YAML."""
    import yaml

    if "=" not in text:
        raise ValueError(f"--set expects key=value, got {text!r}")
    key, raw = text.split("=", 1)
    value = yaml.safe_load(raw)
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            value = float(value)
        except ValueError:
            pass
    return key.strip().split("."), value


def resolve_settings(
    method: str, overrides: dict[str, Any] | None = None, assignments: list[str] = (), dataset: str | None = None
) -> dict[str, Any]:
    """The protocol (with the toy-set defaults for a toy ``dataset``), then overrides;
    unknown keys are named with the valid ones."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; valid: {sorted(METHODS)}")
    settings = copy.deepcopy(PROTOCOL)
    if dataset in TOY_SETS:
        settings["graph"].update(TOY_OVERRIDES["graph"])
        settings.update({k: v for k, v in TOY_OVERRIDES.items() if k != "graph"})
    method_keys = set(METHODS[method].parameter_names()) - {"callback", "seed", "device"}
    items = list((overrides or {}).items()) + [
        (".".join(path), value) for path, value in (parse_assignment(a) for a in assignments)
    ]
    for dotted, value in items:
        path = dotted.split(".")
        if path[0] in ("graph", "eval") and len(path) == 2:
            if path[1] not in settings[path[0]]:
                raise ValueError(f"unknown key {dotted!r}; valid {path[0]} keys: {sorted(settings[path[0]])}")
            settings[path[0]][path[1]] = value
        elif len(path) == 1 and (path[0] in settings or path[0] in method_keys):
            settings[path[0]] = value
        else:
            valid = (
                sorted((set(settings) | method_keys) - {"graph", "eval"})
                + [f"graph.{k}" for k in PROTOCOL["graph"]]
                + [f"eval.{k}" for k in PROTOCOL["eval"]]
            )
            raise ValueError(f"unknown key {dotted!r} for method {method!r}; valid: {valid}")
    GraphConfig.from_dict(settings["graph"])  # fail early on bad graph values
    return settings


def load_inputs(
    dataset: str, features: str | Path | None = None, seed: int = 0, root: str | Path = "resources/data"
) -> Dataset:
    """A data set's flat features: a features ``.npz`` (from ``basis features``) or the raw set."""
    if features is not None:
        with np.load(Path(features)) as data:
            missing = {"X_train", "y_train", "X_test", "y_test"} - set(data.files)
            if missing:
                raise ValueError(f"features file {features} lacks {sorted(missing)}")
            return Dataset(dataset, data["X_train"], data["y_train"], data["X_test"], data["y_test"])
    data = load_dataset(dataset, seed=seed, root=root)
    X_train, X_test = data.flat()
    return Dataset(dataset, X_train, data.y_train, X_test, data.y_test)


def analytic_embedding(X: np.ndarray, settings: dict[str, Any], n_components: int, device: str = "cpu") -> np.ndarray:
    """The ground truth: eigenvectors of the whole set's graph (sparse Lanczos)."""
    W = sparse_affinity(X, GraphConfig.from_dict(settings["graph"]), device=device)
    U, _ = sparse_spectral_embedding(
        W,
        n_components,
        operator=settings["operator"],
        drop_trivial=settings["drop_trivial"],
        diffusion_time=settings.get("diffusion_time", 1.0),
    )
    return U


#: Settings that define the analytic reference embedding.
REFERENCE_KEYS = ("graph", "operator", "drop_trivial", "diffusion_time")


def reference_settings(settings: dict[str, Any], n_components: int) -> dict[str, Any]:
    return {"n_components": n_components, **{k: settings.get(k, PROTOCOL.get(k, 1.0)) for k in REFERENCE_KEYS}}


def fingerprint(X: np.ndarray) -> str:
    """Hash of an input matrix, so a stored reference is only used for the same points."""
    return hashlib.sha256(np.ascontiguousarray(X, dtype=np.float32).tobytes()).hexdigest()[:16]


def save_reference(path: str | Path, data: Dataset, settings: dict[str, Any], device: str = "cpu") -> dict[str, Any]:
    """Compute the test split's analytic embedding once and store it with its settings
    and a fingerprint of the test inputs."""
    n_components = settings["n_components"] or data.n_classes
    start = time.perf_counter()
    U = analytic_embedding(data.X_test, settings, n_components, device=device)
    meta = {**reference_settings(settings, n_components), "test_inputs": fingerprint(data.X_test)}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, embedding=U, settings=json.dumps(meta, sort_keys=True))
    return {"seconds": time.perf_counter() - start, "n_test": len(U), **meta}


def load_reference(path: str | Path, settings: dict[str, Any], n_components: int, X_test: np.ndarray) -> np.ndarray:
    """A stored reference, refused when it was computed with other settings or on other points."""
    with np.load(Path(path)) as stored:
        U, meta = stored["embedding"], json.loads(str(stored["settings"]))
    expected = {
        **json.loads(json.dumps(reference_settings(settings, n_components))),
        "test_inputs": fingerprint(X_test),
    }
    if meta != expected:
        raise ValueError(f"reference {path} was computed with {meta}, this run needs {expected}")
    return U


def run_method(
    method: str,
    data: Dataset,
    *,
    seed: int = 0,
    device: str = "auto",
    settings: dict[str, Any] | None = None,
    callback=None,
    reference: str | Path | None = None,
) -> RunResult:
    """Fit ``method`` on ``data``'s training split and evaluate on its test split,
    against a stored ``reference`` (from :func:`save_reference`) or one computed here."""
    settings = settings or resolve_settings(method)
    n_components = settings["n_components"] or data.n_classes
    # A stored reference is checked before training, not after.
    stored = None if reference is None else load_reference(reference, settings, n_components, data.X_test)
    params = {k: v for k, v in settings.items() if k not in ("eval", "n_components")}
    estimator = make_estimator(method, n_components=n_components, seed=seed, device=device, callback=callback, **params)
    start = time.perf_counter()
    estimator.fit(data.X_train, data.y_train)
    if isinstance(estimator, SpecNet2):
        estimator.postprocess(data.X_test)  # on the whole test set, as in the paper
    train_seconds = time.perf_counter() - start
    test_embedding = estimator.transform(data.X_test)
    train_embedding = estimator.transform(data.X_train)
    reference_embedding = (
        stored
        if stored is not None
        else analytic_embedding(data.X_test, settings, n_components, device=str(estimator.device_))
    )
    ev = settings["eval"]
    result = metrics.evaluate_embedding(
        test_embedding,
        data.y_test,
        reference_embedding,
        n_clusters=data.n_classes,
        seed=seed,
        n_init=ev["kmeans_n_init"],
    )
    if isinstance(estimator, SpecNet2):  # scored in its own basis as well (see metrics.own_basis_grassmann_distance)
        degrees = np.asarray(
            sparse_affinity(data.X_test, estimator.graph_, device=str(estimator.device_)).sum(axis=1)
        ).ravel()
        result["d_G_own_basis"] = metrics.own_basis_grassmann_distance(test_embedding, reference_embedding, degrees)
    result["accuracy"] = metrics.linear_probe_accuracy(
        train_embedding,
        data.y_train,
        test_embedding,
        data.y_test,
        C=ev["probe_C"],
        max_iter=ev["probe_max_iter"],
    )
    result["accuracy_authors"] = metrics.authors_linear_probe_accuracy(
        train_embedding,
        data.y_train,
        test_embedding,
        data.y_test,
        epochs=ev["authors_probe_epochs"],
        lr=ev["authors_probe_lr"],
        batch_size=ev["authors_probe_batch_size"],
        seed=seed,
    )
    result["train_seconds"] = train_seconds
    return RunResult(
        result, estimator, train_embedding, test_embedding, reference_embedding, params | {"n_components": n_components}
    )


def anchor_spread(
    X: np.ndarray,
    anchors: np.ndarray,
    *,
    n_batches: int = 20,
    batch_size: int = 256,
    n_components: int = 2,
    graph: dict | GraphConfig | None = None,
    operator: str = "unnormalized",
    drop_trivial: bool = True,
    ransac: dict | None = None,
    n_held_out: int = 9,
    seed: int = 0,
) -> dict[str, Any]:
    """The anchors' embedding over independent batches, before and after alignment (Fig. 3).

    Each batch is the anchors, ``n_held_out`` fixed other nodes, and ``batch_size`` random
    other nodes. After alignment every batch is mapped onto the first one through the
    anchors (RANSAC). The spread is the standard deviation across batches, averaged over
    nodes and coordinates. The anchors' spread after alignment is small partly because the
    map is fitted on them; the held-out nodes, in every batch but not in the fit, show
    whether the aligned eigenvectors agree beyond the anchors.
    """
    import torch

    from basis.alignment import apply_affine, ransac_affine
    from basis.graph import dense_affinity
    from basis.spectral import spectral_embedding

    config = GraphConfig.from_dict(graph)
    rng = np.random.default_rng(seed)
    held_out = rng.choice(np.setdiff1d(np.arange(len(X)), anchors), n_held_out, replace=False)
    fixed = np.concatenate([anchors, held_out])
    others = np.setdiff1d(np.arange(len(X)), fixed)
    ransac = {"sample_size": 5, "tolerance": 0.01, "tolerance_mode": "absolute", **(ransac or {})}
    raw, aligned = [], []
    for _ in range(n_batches):
        batch = np.concatenate([fixed, rng.choice(others, batch_size, replace=False)])
        W = dense_affinity(torch.as_tensor(X[batch], dtype=torch.float64), config)
        phi, _ = spectral_embedding(
            W, n_components, operator=operator, drop_trivial=drop_trivial, on_disconnected="ignore"
        )
        raw.append(phi[: len(fixed)])
        if not aligned:
            aligned.append(phi[: len(fixed)])
            continue
        fit = ransac_affine(
            phi[: len(anchors)], aligned[0][: len(anchors)], generator=torch.Generator().manual_seed(seed), **ransac
        )
        aligned.append(apply_affine(fit.transform, phi[: len(fixed)]))
    raw_np, aligned_np = np.stack([r.numpy() for r in raw]), np.stack([a.numpy() for a in aligned])
    result: dict[str, Any] = {"before": raw_np[:, : len(anchors)], "after": aligned_np[:, : len(anchors)]}
    for name, rows in (("", slice(0, len(anchors))), ("held_out_", slice(len(anchors), None))):
        before, after = float(raw_np[:, rows].std(axis=0).mean()), float(aligned_np[:, rows].std(axis=0).mean())
        result.update(
            {
                f"{name}spread_before": before,
                f"{name}spread_after": after,
                f"{name}reduction": before / max(after, 1e-300),
            }
        )
    return result

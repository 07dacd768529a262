"""The protocols the studies beyond the paper train BASiS under: the toy study's (Fig. 1)
and Table 1's on a feature set. Each returns the data, the BASiS options and the graph
settings the test split's analytic embedding (the ground truth of d_G) is computed with;
:func:`study_protocol` picks the one a data set follows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from basis.catalog import FEATURE_SETS, TOY_BATCH_SIZE, TOY_SETS
from basis.catalog.data_sources import DataSource, through_siamese_features
from basis.catalog.settings import EVALUATION_KEYS, resolve_settings
from basis.data import Dataset, load_dataset, load_inputs
from basis.data.toy_sets import TOY_GRAPH, three_moons_anchors
from basis.errors import InputError


def toy_protocol(
    dataset: str,
    n_samples: int,
    data_seed: int,
    *,
    batch_size: int = TOY_BATCH_SIZE,
    lr: float = 1e-4,
    n_neighbors: int = TOY_GRAPH["n_neighbors"],
) -> tuple[Dataset, dict[str, Any], dict[str, Any]]:
    """The toy study's protocol (Fig. 1): L = D - W without the trivial vector; three
    hand-placed anchors per class added to every batch of ``batch_size`` nodes; RANSAC
    with 5 anchors and absolute tolerance 0.01, as in the authors' moons code."""
    data = load_dataset(dataset, seed=data_seed, n_samples=n_samples)
    anchors = three_moons_anchors(data.X_train, data.y_train)
    graph = {**TOY_GRAPH, "n_neighbors": n_neighbors}
    graph_settings = {"graph": graph, "operator": "unnormalized", "drop_trivial": True}
    options = {
        **graph_settings,
        "batch_size": batch_size + len(anchors),
        "lr": lr,
        "anchor_indices": anchors.tolist(),
        "ransac_sample_size": 5,
        "ransac_tolerance": 0.01,
        "ransac_tolerance_mode": "absolute",
    }
    return data, options, graph_settings


def feature_protocol(
    dataset: str,
    features_dir: str | None,
    protocol: dict | None,
    data_seed: int,
    data_root: str,
    data_source: DataSource | None = None,
) -> tuple[Dataset, dict[str, Any], dict[str, Any]]:
    """Table 1's protocol on a feature set's Siamese features (raw inputs without
    ``features_dir``, or a table of one's own: ``data_source``); its labels are needed."""
    siamese = through_siamese_features(dataset, data_source)
    features = None if features_dir is None or not siamese else Path(features_dir) / f"{dataset}.npz"
    data = load_inputs(dataset, features, seed=data_seed, root=data_root, source=data_source)
    if not data.labelled:
        raise InputError(f"data set {dataset} has no labels; this study draws its anchors and scores per class")
    settings = resolve_settings("basis", overrides=protocol or {}, dataset=dataset)
    options = {k: v for k, v in settings.items() if k not in EVALUATION_KEYS}
    return data, options, settings


def study_protocol(
    dataset: str,
    *,
    n_samples: int,
    features_dir: str | None,
    protocol: dict | None,
    data_seed: int,
    data_root: str,
    data_source: DataSource | None = None,
) -> tuple[Dataset, dict[str, Any], dict[str, Any], int]:
    """The protocol ``dataset`` follows (toy sets: :func:`toy_protocol` with ``n_samples``
    nodes; feature sets and data sets of one's own, ``data_source``: :func:`feature_protocol`)
    and its number of eigenvectors K (classes - 1 without the trivial vector, classes with it)."""
    if dataset in TOY_SETS:
        data, options, graph_settings = toy_protocol(dataset, n_samples, data_seed)
        return data, options, graph_settings, max(1, data.n_classes - 1)
    if dataset in FEATURE_SETS or data_source is not None:
        data, options, graph_settings = feature_protocol(
            dataset, features_dir, protocol, data_seed, data_root, data_source
        )
        return data, options, graph_settings, data.n_components
    raise InputError(f"data set {dataset!r} has no BASiS protocol here; valid: {[*TOY_SETS, *FEATURE_SETS]}")


def pooled_features(
    dataset: str, *, features_dir: str | None, data_seed: int, data_root: str, data_source: DataSource | None = None
) -> tuple[Any, Any, int]:
    """Every point of a feature set (its Siamese features in ``features_dir``, or a data set
    of one's own) with its training and test splits pooled in an order seeded by
    ``data_seed``, their labels, and its number of eigenvectors K."""
    import numpy as np

    data, _, _ = feature_protocol(dataset, features_dir, None, data_seed, data_root, data_source)
    X, y = np.concatenate([data.X_train, data.X_test]), np.concatenate([data.y_train, data.y_test])
    order = np.random.default_rng(data_seed).permutation(len(X))
    return X[order], y[order], data.n_components

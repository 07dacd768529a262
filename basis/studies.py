"""The paper's experiments beyond Table 1, one function each (Figs. 1-4 and 6-8).

Each study takes its settings as keyword arguments (the paper's values are the
defaults) and returns ``(metrics, arrays)``: scalar results for the comparison and
MLflow, and the arrays its figure is drawn from. ``python -m basis study NAME``
runs one and writes ``metrics.json`` and ``arrays.npz``. Table 1, the kNN sweep
(Fig. 5) and the alignment ablation are ``python -m basis run`` jobs instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from basis import metrics
from basis.alignment import align_affine, apply_affine, ransac_affine
from basis.bunny import circular_correlation
from basis.data import load_bunny, load_dataset
from basis.errors import InputError
from basis.estimators import BASiS
from basis.feature_change import FeatureChangeTrainer, snapshot_arrays, summarize
from basis.graph import GraphConfig, dense_affinity
from basis.outputs import atomic_path, write_json
from basis.references import analytic_embedding
from basis.spectral import spectral_embedding
from basis.toy import TOY_SETS, three_moons, three_moons_anchors

Study = tuple[dict[str, float], dict[str, np.ndarray]]
#: The authors' toy graph: k = 15 with one global scale; L = D - W, trivial vector dropped.
TOY_GRAPH = {"n_neighbors": 15, "scale": "global", "scale_neighbor": 7}


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


def toy_example(
    dataset: str = "three_moons",
    *,
    n_samples: int = 9000,
    batch_size: int = 256,
    n_iter: int = 1000,
    lr: float = 1e-4,
    n_neighbors: int = 15,
    grid_size: int = 200,
    grid_margin: float = 0.5,
    seed: int = 0,
    data_seed: int = 0,
    device: str = "auto",
    callback: Callable | None = None,
) -> Study:
    """Fig. 1: BASiS on a toy set [9,000 nodes, batches of 256, 1,000 iterations, the
    first non-trivial eigenvectors], scored on the test points, and the network's
    output over a grid that extends ``grid_margin`` of the data's range beyond it.

    K = classes - 1 non-trivial eigenvectors of L = D - W; three anchors per class
    (both ends and the middle along x, like the authors' hand-placed moons anchors),
    added to every batch of ``batch_size`` nodes; RANSAC with 5 anchors and
    absolute tolerance 0.01 as in the authors' moons code.
    """
    if dataset not in TOY_SETS:
        raise InputError(f"unknown toy set {dataset!r}; valid: {sorted(TOY_SETS)}")
    data = load_dataset(dataset, seed=data_seed, n_samples=n_samples)
    n_classes = data.n_classes
    anchors = three_moons_anchors(data.X_train, data.y_train)
    graph = {**TOY_GRAPH, "n_neighbors": n_neighbors}
    model = BASiS(
        max(1, n_classes - 1),
        graph=graph,
        operator="unnormalized",
        drop_trivial=True,
        batch_size=batch_size + len(anchors),
        n_iter=n_iter,
        lr=lr,
        anchor_indices=anchors.tolist(),
        ransac_sample_size=5,
        ransac_tolerance=0.01,
        ransac_tolerance_mode="absolute",
        seed=seed,
        device=device,
        callback=callback,
    ).fit(data.X_train, data.y_train)
    test = model.transform(data.X_test)
    reference = analytic_embedding(
        data.X_test, {"graph": graph, "operator": "unnormalized", "drop_trivial": True}, model.n_components
    )
    predicted = metrics.kmeans_labels(test, n_classes, seed=seed)
    result = metrics.evaluate_embedding(test, data.y_test, reference, n_clusters=n_classes, seed=seed)
    X_all = np.concatenate([data.X_train, data.X_test])
    low, high = X_all.min(axis=0), X_all.max(axis=0)
    pad = grid_margin * (high - low)
    gx, gy = np.meshgrid(*(np.linspace(lo, hi, grid_size) for lo, hi in zip(low - pad, high + pad)))
    grid = model.transform(np.stack([gx.ravel(), gy.ravel()], axis=1)).reshape(grid_size, grid_size, -1)
    result.update(
        n_fallbacks=model.n_fallbacks_,
        final_loss=float(np.mean(model.loss_curve_[-20:])),
        batch_analytic_nmi=batch_embedding_nmi(
            data.X_train, data.y_train, graph, model.batch_size, model.n_components, seed=seed
        ),
    )
    arrays = {
        "X_test": data.X_test,
        "y_test": data.y_test,
        "predicted": predicted,
        "grid_x": gx,
        "grid_y": gy,
        "grid_embedding": grid,
        "anchors": data.X_train[anchors],
    }
    return result, arrays


def batch_embedding_nmi(
    X: np.ndarray, y: np.ndarray, graph: dict, batch_size: int, n_components: int, *, n_batches: int = 10, seed: int = 0
) -> float:
    """Mean NMI of K-means on the analytic embedding (L = D - W, trivial vector dropped)
    of random batches: what a batch can express at all, whatever the network learns."""
    rng = np.random.default_rng(seed)
    config, scores = GraphConfig.from_dict(graph), []
    for _ in range(n_batches):
        batch = rng.choice(len(X), batch_size, replace=False)
        W = dense_affinity(torch.as_tensor(X[batch], dtype=torch.float64), config)
        phi, _ = spectral_embedding(
            W, n_components, operator="unnormalized", drop_trivial=True, on_disconnected="ignore"
        )
        labels = metrics.kmeans_labels(phi.numpy(), len(np.unique(y)), seed=seed)
        scores.append(metrics.nmi(y[batch], labels))
    return float(np.mean(scores))


def illustration(
    *, n_per_cluster: int = 150, n_neighbors: int = 10, shared_per_cluster: int = 5, seed: int = 0
) -> Study:
    """Fig. 2: three separated clusters sampled twice, unevenly, with one shared anchor
    per cluster. Each subset's embedding (first two non-trivial eigenvectors of
    L = D - W) puts every cluster on one point, but at different places in the two
    subsets; the affine map fitted on the three anchors aligns subset 1 to subset 2.

    Three anchors fix an affine map in K = 2 exactly, so their error after alignment is
    zero by construction. The claim is checked on ``shared_per_cluster`` further points
    per cluster that both subsets contain but the fit does not see (held-out error)."""
    shares = ((0.6, 0.3, 0.15), (0.15, 0.35, 0.6))  # uneven sampling of the clusters
    smallest = int(min(min(s) for s in shares) * n_per_cluster) + 1 + shared_per_cluster
    if smallest <= n_neighbors:
        raise InputError(
            f"n_per_cluster={n_per_cluster} leaves {smallest} points of a cluster in a subset, not more"
            f" than n_neighbors={n_neighbors}: the clusters would be joined; raise n_per_cluster"
        )
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [4.0, 0.0], [2.0, 3.5]])
    X = np.concatenate([c + 0.5 * rng.standard_normal((n_per_cluster, 2)) for c in centres])
    y = np.repeat(np.arange(3), n_per_cluster)
    anchors = np.array([rng.choice(np.flatnonzero(y == c)) for c in range(3)])
    shared = np.concatenate(
        [rng.choice(np.setdiff1d(np.flatnonzero(y == c), anchors), shared_per_cluster, replace=False) for c in range(3)]
    )
    subsets = []
    for subset_shares in shares:
        chosen = [
            rng.choice(
                np.setdiff1d(np.flatnonzero(y == c), np.concatenate([anchors, shared])),
                int(share * n_per_cluster),
                replace=False,
            )
            for c, share in enumerate(subset_shares)
        ]
        subsets.append(np.concatenate([anchors, shared, *chosen]))
    config = GraphConfig(n_neighbors=n_neighbors, scale="global")
    embeddings = []
    for subset in subsets:
        W = dense_affinity(torch.as_tensor(X[subset], dtype=torch.float64), config)
        phi, _ = spectral_embedding(W, 2, operator="unnormalized", drop_trivial=True, on_disconnected="ignore")
        embeddings.append(phi)
    fit = align_affine(embeddings[0][:3], embeddings[1][:3])
    aligned = apply_affine(fit.transform, embeddings[0])
    held_out = slice(3, 3 + len(shared))

    def error(first: torch.Tensor, rows: slice) -> float:
        return float(torch.linalg.norm(first[rows] - embeddings[1][rows], dim=1).max())

    result = {
        "anchor_error_before": error(embeddings[0], slice(0, 3)),
        "anchor_error_after": error(aligned, slice(0, 3)),
        "held_out_error_before": error(embeddings[0], held_out),
        "held_out_error_after": error(aligned, held_out),
    }
    arrays = {
        "X": X,
        "y": y,
        "anchors": anchors,
        "shared": shared,
        "subset1": subsets[0],
        "subset2": subsets[1],
        "embedding1": embeddings[0].numpy(),
        "embedding2": embeddings[1].numpy(),
        "aligned1": aligned.numpy(),
    }
    return result, arrays


def anchor_consistency(
    *,
    n_samples: int = 9000,
    n_batches: int = 20,
    batch_size: int = 256,
    n_neighbors: int = 15,
    seed: int = 0,
    data_seed: int = 0,
) -> Study:
    """Fig. 3: the two leading non-trivial eigenvectors at the nine three-moons anchors
    over ``n_batches`` batches of ``batch_size`` nodes [20 of 256 out of 9,000], before
    and after alignment to the first batch (RANSAC, 5 anchors, absolute tolerance 0.01)."""
    X, y = three_moons(n_per_moon=n_samples // 3, seed=data_seed)
    anchors = three_moons_anchors(X, y)
    spread = anchor_spread(
        X,
        anchors,
        n_batches=n_batches,
        batch_size=batch_size,
        graph={**TOY_GRAPH, "n_neighbors": n_neighbors},
        seed=seed,
    )
    result = {k: v for k, v in spread.items() if k not in ("before", "after")}
    arrays = {"X": X, "y": y, "anchors": anchors, "before": spread["before"], "after": spread["after"]}
    return result, arrays


def bunny_diffusion_maps(
    *,
    n_frames: int = 2000,
    n_test: int = 500,
    resolution: int = 64,
    frames_dir: str | None = None,
    n_neighbors: int = 20,
    batch_size: int = 512,
    n_anchors: int = 100,
    n_iter: int = 1000,
    lr: float = 1e-4,
    seed: int = 0,
    data_seed: int = 0,
    device: str = "auto",
    callback: Callable | None = None,
) -> Study:
    """Fig. 4: Diffusion Maps to R^2 of turntable frames [2,000 snapshots, 20 nearest
    neighbours, random-walk matrix P, train on 1,500, test on 500, raw pixels].

    Analytic DM of all frames and of the test frames, and BASiS trained on the
    training frames (``n_anchors`` random anchors: the frames have no classes) to
    output the DM coordinates. d_G compares the network with the test frames' own
    DM; the circular correlation compares each embedding's angle with the true
    rotation (rendered frames only; NaN for real ones, whose angles are unknown).
    """
    data = load_bunny(n_frames=n_frames, n_test=n_test, resolution=resolution, frames_dir=frames_dir, seed=data_seed)
    X_train, X_test = data.flat()
    settings = {
        "graph": {"n_neighbors": n_neighbors, "scale": "local", "scale_neighbor": 7},
        "operator": "diffusion",
        "drop_trivial": True,
    }
    all_frames = analytic_embedding(np.concatenate([X_train, X_test]), settings, 2)
    test_reference = analytic_embedding(X_test, settings, 2)
    model = BASiS(
        2,
        graph=settings["graph"],
        operator="diffusion",
        drop_trivial=True,
        batch_size=min(batch_size, len(X_train)),
        n_iter=n_iter,
        lr=lr,
        anchors="random",
        n_anchors=n_anchors,
        seed=seed,
        device=device,
        callback=callback,
    ).fit(X_train)
    network = model.transform(X_test)
    angles = np.concatenate([data.y_train, data.y_test])

    def correlation(embedding: np.ndarray, true: np.ndarray) -> float:
        if np.isnan(true).any():
            return float("nan")
        return circular_correlation(np.arctan2(embedding[:, 1], embedding[:, 0]), true)

    result = {
        "d_G": metrics.grassmann_distance(network, test_reference),
        "circular_correlation_network": correlation(network, data.y_test),
        "circular_correlation_analytic_test": correlation(test_reference, data.y_test),
        "circular_correlation_analytic_all": correlation(all_frames, angles),
        "n_fallbacks": model.n_fallbacks_,
    }
    examples = data.X_test[np.argsort(data.y_test)[:: max(1, len(data.y_test) // 6)][:6], 0]
    arrays = {
        "all_frames": all_frames,
        "angles_all": angles,
        "test_reference": test_reference,
        "network": network,
        "angles_test": data.y_test,
        "examples": examples,
    }
    return result, arrays


def feature_change(
    dataset: str = "mnist",
    *,
    classes: list[int] | None = None,
    n_components: int | None = None,
    data_root: str = "resources/data",
    data_seed: int = 0,
    seed: int = 0,
    device: str = "auto",
    callback: Callable | None = None,
    **settings: Any,
) -> Study:
    """Figs. 6-8: Algorithm 2 on an image set's raw images, optionally restricted to
    ``classes`` (the paper's 2-D run: digits 4, 7 and 9). ``n_components`` defaults to
    classes - 1 (paper: 9 for MNIST, 2 for 4/7/9); ``settings`` go to
    :class:`~basis.feature_change.FeatureChangeTrainer`."""
    data = load_dataset(dataset, seed=data_seed, root=data_root)
    if not data.is_image:
        raise InputError(f"data set {dataset!r} has no images; feature change needs an image set or digits")
    X_train, y_train, X_test, y_test = data.X_train, data.y_train, data.X_test, data.y_test
    if classes:
        missing = sorted(set(classes) - set(np.unique(y_train).tolist()))
        if missing:
            raise InputError(f"classes {missing} are not in {dataset!r}")
        keep_train, keep_test = np.isin(y_train, classes), np.isin(y_test, classes)
        X_train, y_train, X_test, y_test = (
            X_train[keep_train],
            y_train[keep_train],
            X_test[keep_test],
            y_test[keep_test],
        )
    n_components = n_components or len(np.unique(y_train)) - 1
    trainer = FeatureChangeTrainer(n_components, seed=seed, device=device, callback=callback, **settings)
    outcome = trainer.fit(X_train, y_train, X_test, y_test)
    return summarize(outcome), snapshot_arrays(outcome)


STUDIES: dict[str, Callable[..., Study]] = {
    "toy": toy_example,
    "illustration": illustration,
    "consistency": anchor_consistency,
    "bunny": bunny_diffusion_maps,
    "feature_change": feature_change,
}


def save_study(folder: str | Path, result: dict[str, float], arrays: dict[str, np.ndarray]) -> None:

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / "arrays.npz") as partial:
        np.savez_compressed(partial, **{k: np.asarray(v) for k, v in arrays.items() if v is not None})
    write_json(folder / "metrics.json", {k: float(v) for k, v in result.items()})

"""BASiS under iterative feature change (Algorithm 2, paper Sec. 4.3 and Figs. 6-8).

A Siamese feature network and a BASiS spectral network train together. The feature
network takes a contrastive step every iteration; every ``spectral_every``-th
iteration the spectral network takes one BASiS step on the current features, after
the base (reference) embedding has been recomputed on those features and aligned to
its previous self with the global transformation T_G (``global_transformation_algo``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from basis.errors import InputError

if TYPE_CHECKING:
    import torch


@dataclass
class FeatureChangeResult:
    """Curves and snapshots of one joint training run.

    ``history`` maps a measure to ``(iterations, values)``: ``contrastive_loss`` every
    iteration, ``spectral_mse`` and ``tg_inlier_fraction`` every spectral step, and at
    each evaluation ``nmi_analytic``/``acc_analytic`` (the analytic embedding of the
    current validation features), ``nmi_train``/``acc_train`` and ``nmi_val``/``acc_val``
    (the spectral network's output), and ``d_G_val`` (network vs analytic, validation).
    ``snapshots`` maps an iteration to the base embedding before and after T_G and the
    network's validation embedding; ``start`` and ``end`` hold the validation embedding
    and labels at the first and the last evaluation (for the t-SNE figure).
    """

    history: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    snapshots: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    start: np.ndarray | None = None
    end: np.ndarray | None = None
    base_labels: np.ndarray | None = None
    val_labels: np.ndarray | None = None
    seconds: float = 0.0

    def record(self, name: str, iteration: int, value: float) -> None:
        steps, values = self.history.setdefault(name, ([], []))
        steps.append(iteration)
        values.append(float(value))


class FeatureChangeTrainer:
    """Algorithm 2: joint training of the feature and the spectral networks.

    Parameters
    ----------
    n_components : int
        K, eigenvectors learnt (paper: 9 for MNIST, 2 for the digits 4/7/9 run).
    out_dim : int
        Feature dimension of the Siamese network (paper: 16).
    n_iter : int
        Iterations of the feature network (paper: 1,500).
    spectral_every : int
        A spectral step every this many iterations (paper: 10).
    batch_size, anchors_per_class, graph, operator, drop_trivial, spectral_lr :
        The BASiS side (authors: batch 512 with 25 anchors per class, k = 50 with the
        local scale of the 7th neighbour, L_N without the trivial vector, lr 1e-4).
    feature_lr, pairs_per_step, margin :
        The Siamese side (contrastive loss, Adam).
    ransac_iter, ransac_max_iter, ransac_confidence, ransac_sample_size, ransac_tolerance, ransac_tolerance_mode :
        RANSAC of both the batch alignment and T_G (as in :class:`~basis.estimators.BASiS`).
    use_global_transform : bool
        False replaces the base embedding without T_G (an ablation).
    eval_every, eval_size :
        How often, and on how many training and validation points, the clustering
        curves are measured.
    snapshot_at : tuple of int
        Iterations whose base embedding (before and after T_G) is kept.
    """

    def __init__(
        self,
        n_components: int = 9,
        *,
        out_dim: int = 16,
        n_iter: int = 1500,
        spectral_every: int = 10,
        batch_size: int = 512,
        anchors_per_class: int = 25,
        graph: dict | None = None,
        operator: str = "normalized",
        drop_trivial: bool = True,
        spectral_lr: float = 1e-4,
        feature_lr: float = 1e-3,
        pairs_per_step: int = 256,
        margin: float = 1.0,
        ransac_iter: int = 100,
        ransac_max_iter: int = 5000,
        ransac_confidence: float = 0.99,
        ransac_sample_size: int | None = None,
        ransac_tolerance: float = 0.25,
        ransac_tolerance_mode: str = "relative",
        use_global_transform: bool = True,
        eval_every: int = 50,
        eval_size: int = 2000,
        snapshot_at: tuple[int, ...] = (10, 100, 500, 1500),
        seed: int = 0,
        device: str = "auto",
        callback: Callable[[int, dict[str, float]], None] | None = None,
    ):
        if spectral_every < 1 or n_iter < spectral_every:
            raise InputError(
                f"need 1 <= spectral_every <= n_iter, got spectral_every={spectral_every}, n_iter={n_iter}"
            )
        if eval_every < 1 or eval_size < 2:
            raise InputError(f"eval_every must be >= 1 and eval_size >= 2, got {eval_every} and {eval_size}")
        # imported here: the feature-change study's settings (these parameters) are read at a dry run's parse
        from basis.estimators import BASiS
        from basis.features import SiameseFeatures

        self.features = SiameseFeatures(
            out_dim,
            margin=margin,
            n_steps=n_iter,
            pairs_per_step=pairs_per_step,
            lr=feature_lr,
            device=device,
            seed=seed,
            progress=False,
        )
        self.spectral = BASiS(
            n_components,
            graph=graph,
            operator=operator,
            drop_trivial=drop_trivial,
            batch_size=batch_size,
            n_iter=n_iter // spectral_every,
            lr=spectral_lr,
            anchors="stratified",
            anchors_per_class=anchors_per_class,
            ransac_iter=ransac_iter,
            ransac_max_iter=ransac_max_iter,
            ransac_confidence=ransac_confidence,
            ransac_sample_size=ransac_sample_size,
            ransac_tolerance=ransac_tolerance,
            ransac_tolerance_mode=ransac_tolerance_mode,
            device=device,
            seed=seed,
        )
        self.n_iter, self.spectral_every = n_iter, spectral_every
        self.use_global_transform = use_global_transform
        self.eval_every, self.eval_size = eval_every, eval_size
        self.snapshot_at = tuple(sorted({int(i) for i in snapshot_at if 0 < int(i) <= n_iter}))
        self.seed, self.callback = seed, callback

    def fit(
        self, images_train: np.ndarray, y_train: np.ndarray, images_val: np.ndarray, y_val: np.ndarray
    ) -> FeatureChangeResult:
        import torch

        started = time.perf_counter()
        result = FeatureChangeResult()
        features, spectral = self.features.start(images_train, y_train), self.spectral
        images = features.images_
        rng = np.random.default_rng(self.seed)
        train_eval = rng.choice(len(images_train), min(self.eval_size, len(images_train)), replace=False)
        val_eval = rng.choice(len(images_val), min(self.eval_size, len(images_val)), replace=False)
        images_val_t = torch.as_tensor(images_val[val_eval], dtype=torch.float32)
        result.val_labels = np.asarray(y_val)[val_eval]
        # The base set V^ref and its embedding on the initial features.
        spectral.start(features.embed(images).cpu().numpy(), np.asarray(y_train))
        base, n_anchors = spectral.reference_indices_, len(spectral.anchor_indices_)
        result.base_labels = np.asarray(y_train)[base.cpu().numpy()]
        base_embedding = spectral.reference_embedding_
        images_train_eval, y_train_eval = images[train_eval], np.asarray(y_train)[train_eval]
        self._evaluate(0, result, images_train_eval, y_train_eval, images_val_t)
        for iteration in range(1, self.n_iter + 1):
            info = {"contrastive_loss": features.step()}
            result.record("contrastive_loss", iteration, info["contrastive_loss"])
            if iteration % self.spectral_every == 0:
                base_embedding, step_info = self._spectral_step(iteration, base, n_anchors, base_embedding, result)
                info.update(step_info)
            if iteration % self.eval_every == 0 or iteration in self.snapshot_at or iteration == self.n_iter:
                info.update(self._evaluate(iteration, result, images_train_eval, y_train_eval, images_val_t))
            if self.callback is not None:
                self.callback(iteration, info)
        result.seconds = time.perf_counter() - started
        return result

    def _spectral_step(
        self, iteration: int, base: torch.Tensor, n_anchors: int, previous: torch.Tensor, result: FeatureChangeResult
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Algorithm 2 (base re-embedding and T_G), then one BASiS step (Algorithm 1)."""
        import torch

        from basis.alignment import apply_affine, global_transform

        spectral = self.spectral
        updated = spectral.embed_batch(self._features_of(base))
        info: dict[str, float] = {}
        if updated is None:  # the base graph fell apart under the new features: keep the previous base
            current = previous
        elif self.use_global_transform:
            fit = global_transform(
                previous[:n_anchors],
                updated[:n_anchors],
                spectral.ransac_settings(),
                generator=spectral.ransac_generator_,
            )
            current = apply_affine(fit.transform, updated)
            # How far T_G is from the identity [I, 0]: zero when the features did not move,
            # so that a control run with frozen features shows what the chain of T_G adds.
            identity = torch.eye(*fit.transform.shape, dtype=fit.transform.dtype, device=fit.transform.device)
            deviation = torch.linalg.norm(fit.transform - identity)
            # One host read per spectral step for both (float32 values are exact in float64).
            readings = torch.stack([fit.inliers.float().mean().to(deviation.dtype), deviation]).tolist()
            info["tg_inlier_fraction"], info["tg_deviation"] = readings
            for name in ("tg_inlier_fraction", "tg_deviation"):
                result.record(name, iteration, info[name])
        else:
            current = updated
        spectral.set_reference(current[:n_anchors])
        if iteration in self.snapshot_at:
            result.snapshots[iteration] = {
                "base_before": (previous if updated is None else updated).cpu().numpy(),
                "base_after": current.cpu().numpy(),
            }
        step = spectral.step(spectral.prepare_batch(self._features_of))
        result.record("spectral_mse", iteration, step["loss"])
        return current, {**info, "spectral_mse": step["loss"], "inlier_fraction": step["inlier_fraction"]}

    def _features_of(self, indices: torch.Tensor) -> torch.Tensor:
        """Current features of the training images at ``indices``."""
        images = self.features.images_
        return self.features.embed(images[indices.to(images.device)])

    def _evaluate(
        self,
        iteration: int,
        result: FeatureChangeResult,
        images_train: torch.Tensor,
        y_train: np.ndarray,
        images_val: torch.Tensor,
    ) -> dict[str, float]:
        """Clustering of the analytic embedding of the current validation features and
        of the network's output on training and validation points."""
        from basis import metrics
        from basis.references import analytic_embedding

        features, spectral = self.features, self.spectral
        n_clusters = len(np.unique(result.val_labels))
        val_features = features.embed(images_val).cpu().numpy()
        settings = {
            "graph": spectral.graph_.to_dict(),
            "operator": spectral.operator,
            "drop_trivial": spectral.drop_trivial,
        }
        reference = analytic_embedding(val_features, settings, spectral.n_components)
        outputs = {
            "analytic": (reference, result.val_labels),
            "train": (spectral.transform(features.embed(images_train).cpu().numpy()), y_train),
            "val": (spectral.transform(val_features), result.val_labels),
        }
        info = {}
        for name, (embedding, labels) in outputs.items():
            scores = metrics.evaluate_embedding(embedding, labels, n_clusters=n_clusters, seed=self.seed)
            info[f"nmi_{name}"], info[f"acc_{name}"] = scores["nmi"], scores["acc"]
        info["d_G_val"] = metrics.grassmann_distance(outputs["val"][0], reference)
        for name, value in info.items():
            result.record(name, iteration, value)
        if result.start is None:
            result.start = outputs["val"][0]
        result.end = outputs["val"][0]
        if iteration in result.snapshots:
            result.snapshots[iteration]["val_embedding"] = outputs["val"][0]
        return info


def summarize(result: FeatureChangeResult, last_fraction: float = 0.25) -> dict[str, float]:
    """Final values, and how far the network's validation clustering stays from the
    analytic one over the last ``last_fraction`` of the evaluations."""
    history = result.history
    summary = {f"final_{name}": values[-1] for name, (_, values) in history.items()}
    for measure in ("nmi", "acc"):
        analytic, network = np.asarray(history[f"{measure}_analytic"][1]), np.asarray(history[f"{measure}_val"][1])
        tail = max(1, int(round(len(analytic) * last_fraction)))
        summary[f"{measure}_gap_last"] = float(np.mean(np.abs(analytic[-tail:] - network[-tail:])))
    return summary


def centre_aspect(embedding: np.ndarray, labels: np.ndarray) -> float:
    """How far the class centres of an embedding are from spanning its space evenly: the
    ratio of the largest to the smallest singular value of the centred class centres (1
    for a regular simplex; large when the classes are squeezed towards a lower-dimensional
    set). T_G maps each new base embedding onto the previous one, so the shape the first
    T_G gives (onto the embedding of the untrained features) is kept by every later base."""
    centres = np.array([embedding[labels == c].mean(axis=0) for c in np.unique(labels)])
    values = np.linalg.svd(centres - centres.mean(axis=0), compute_uv=False)
    return float(values[0] / values[-1])


def snapshot_arrays(result: FeatureChangeResult) -> dict[str, Any]:
    """Flat arrays for an ``.npz``: the curves, the snapshots and the t-SNE inputs."""
    arrays: dict[str, Any] = {
        "val_labels": result.val_labels,
        "base_labels": result.base_labels,
        "start": result.start,
        "end": result.end,
    }
    for name, (steps, values) in result.history.items():
        arrays[f"history/{name}/steps"] = np.asarray(steps)
        arrays[f"history/{name}/values"] = np.asarray(values)
    for iteration, snapshot in result.snapshots.items():
        for key, value in snapshot.items():
            arrays[f"snapshot/{iteration}/{key}"] = value
    return arrays

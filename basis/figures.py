"""The paper's figures, drawn from the studies' ``arrays.npz`` and the runs' summaries.

Every figure is written as PNG and as PDF (same name, other suffix). Functions take a
study folder (``metrics.json`` + ``arrays.npz``) or a summary table and the PNG path.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from basis.paper import METHOD_LABELS  # noqa: E402

CLUSTER_COLOURS = plt.get_cmap("tab10")


def _save(fig, out: str | Path) -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=130)
    fig.savefig(out.with_suffix(".pdf"))
    plt.close(fig)


def _load(folder: str | Path) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    folder = Path(folder)
    with np.load(folder / "arrays.npz", allow_pickle=False) as stored:
        arrays = {k: stored[k] for k in stored.files}
    return json.loads((folder / "metrics.json").read_text()), arrays


def toy_examples(folders: list[str | Path], out: str | Path) -> None:
    """Fig. 1: the network's first output over a grid beyond the data, and the
    K-means clusters of the test points on top (one panel per toy set)."""
    fig, axes = plt.subplots(1, len(folders), figsize=(3.6 * len(folders), 3.4), squeeze=False)
    for ax, folder in zip(axes[0], folders):
        result, a = _load(folder)
        values = a["grid_embedding"][..., 0]
        mesh = ax.pcolormesh(a["grid_x"], a["grid_y"], values, cmap="coolwarm", shading="auto")
        ax.contour(a["grid_x"], a["grid_y"], values, levels=12, colors="k", linewidths=0.3, alpha=0.5)
        shown = np.random.default_rng(0).permutation(len(a["X_test"]))[:1500]
        ax.scatter(*a["X_test"][shown].T, c=CLUSTER_COLOURS(a["predicted"][shown] % 10), s=3, linewidths=0)
        ax.scatter(*a["anchors"].T, marker="*", c="gold", edgecolors="k", s=70, linewidths=0.5)
        ax.set_title(f"{Path(folder).name}: NMI {result['nmi']:.3f}, ACC {result['acc']:.3f}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(mesh, ax=ax, shrink=0.8)
    _save(fig, out)


def illustration(folder: str | Path, out: str | Path) -> None:
    """Fig. 2: the data and two subsets, each subset's embedding, and the union after
    aligning subset 1 to subset 2 through the three anchors."""
    result, a = _load(folder)
    X, y, anchors = a["X"], a["y"], a["anchors"]
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.3))
    axes[0].scatter(*X[a["subset1"]].T, s=8, marker="o", facecolors="none", edgecolors="tab:blue", label="subset 1")
    axes[0].scatter(*X[a["subset2"]].T, s=8, marker="x", c="tab:green", label="subset 2")
    axes[0].scatter(*X[anchors].T, s=60, c="red", label="anchors")
    axes[0].legend(fontsize=7)
    axes[0].set_title("data, subsets and anchors", fontsize=9)
    panels = (
        (axes[1], a["embedding1"], a["subset1"], "subset 1 embedding"),
        (axes[2], a["embedding2"], a["subset2"], "subset 2 embedding"),
    )
    for ax, embedding, subset, title in panels:
        ax.scatter(*embedding.T, c=CLUSTER_COLOURS(y[subset]), s=20)
        ax.scatter(*embedding[:3].T, c="red", s=60, marker="x")
        ax.set_title(title, fontsize=9)
    axes[3].scatter(
        *a["embedding2"].T, c=CLUSTER_COLOURS(y[a["subset2"]]), s=40, marker="o", alpha=0.4, label="subset 2"
    )
    axes[3].scatter(*a["aligned1"].T, c=CLUSTER_COLOURS(y[a["subset1"]]), s=15, marker="x", label="subset 1, aligned")
    axes[3].legend(fontsize=7)
    axes[3].set_title(f"union after alignment (anchor error {result['anchor_error_after']:.1e})", fontsize=9)
    for ax in axes[1:]:
        ax.set_xlabel(r"$\varphi_1$")
        ax.set_ylabel(r"$\varphi_2$")
    _save(fig, out)


def anchor_consistency(folder: str | Path, out: str | Path) -> None:
    """Fig. 3: three moons and its nine anchors; the two leading eigenvectors at the
    anchors over the batches, before and after alignment."""
    result, a = _load(folder)
    fig, axes = plt.subplots(2, 3, figsize=(11, 6))
    axes[0, 0].scatter(*a["X"].T, c=CLUSTER_COLOURS(a["y"]), s=1)
    axes[0, 0].set_title("three moons", fontsize=9)
    axes[1, 0].scatter(*a["X"].T, c="lightgrey", s=1)
    axes[1, 0].scatter(*a["X"][a["anchors"]].T, c="red", s=40)
    for i, (x, y) in enumerate(a["X"][a["anchors"]]):
        axes[1, 0].annotate(str(i + 1), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    axes[1, 0].set_title("anchors", fontsize=9)
    anchor_ids = np.arange(1, a["before"].shape[1] + 1)
    for row, (key, label) in enumerate((("before", "before alignment"), ("after", "after alignment"))):
        for column in range(2):
            ax = axes[row, column + 1]
            ax.plot(anchor_ids, a[key][:, :, column].T, marker="o", markersize=3, linewidth=0.6, alpha=0.7)
            ax.set_title(f"eigenvector {column + 1}, {label}", fontsize=9)
            ax.set_xlabel("anchor")
    fig.suptitle(f"{a['before'].shape[0]} batches; spread reduced {result['reduction']:.0f}x by alignment", fontsize=10)
    _save(fig, out)


def bunny(folder: str | Path, out: str | Path) -> None:
    """Fig. 4: example frames, the analytic DM of all frames and of the test frames,
    and the network's output on the test frames (colour: true rotation angle)."""
    result, a = _load(folder)
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.3))
    strip = np.concatenate(list(a["examples"]), axis=1)
    axes[0].imshow(strip, cmap="gray")
    axes[0].set_title("example frames", fontsize=9)
    axes[0].axis("off")
    colour_all = a["angles_all"] if np.isfinite(a["angles_all"]).all() else None
    colour_test = a["angles_test"] if np.isfinite(a["angles_test"]).all() else None
    panels = (
        (axes[1], a["all_frames"], colour_all, "analytic DM, all frames"),
        (axes[2], a["test_reference"], colour_test, "analytic DM, test frames"),
        (axes[3], a["network"], colour_test, f"network, test frames (d_G {result['d_G']:.3f})"),
    )
    for ax, embedding, colour, title in panels:
        ax.scatter(*embedding.T, c=colour, cmap="hsv", s=4)
        ax.set_title(title, fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
    _save(fig, out)


def knn_sensitivity(summary: pd.DataFrame, out: str | Path) -> None:
    """Fig. 5: NMI, ACC, d_G and d_perp (mean and std over seeds) against k."""
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.3))
    for ax, measure in zip(axes, ("nmi", "acc", "d_G", "d_perp")):
        for method, block in summary.groupby("method"):
            block = block.sort_values("n_neighbors")
            ax.errorbar(
                block["n_neighbors"],
                block[f"{measure}_mean"],
                yerr=block[f"{measure}_std"].fillna(0),
                marker="o",
                capsize=3,
                label=METHOD_LABELS.get(method, method),
            )
        ax.set_xlabel("neighbours k")
        ax.set_title(measure, fontsize=9)
    axes[0].legend(fontsize=7)
    _save(fig, out)


def _history(a: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    return a[f"history/{name}/steps"], a[f"history/{name}/values"]


def feature_change_training(folder: str | Path, out: str | Path) -> None:
    """Fig. 6: contrastive loss, spectral MSE, and NMI and ACC of the analytic
    embedding of the current features (blue) and of the network on training
    (orange) and validation (green) points."""
    _, a = _load(folder)
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.3))
    for ax, name in zip(axes[:2], ("contrastive_loss", "spectral_mse")):
        ax.plot(*_history(a, name), linewidth=0.8)
        ax.set_yscale("log")
        ax.set_title(name.replace("_", " "), fontsize=9)
    for ax, measure in zip(axes[2:], ("nmi", "acc")):
        for part, colour in (("analytic", "tab:blue"), ("train", "tab:orange"), ("val", "tab:green")):
            ax.plot(*_history(a, f"{measure}_{part}"), color=colour, marker=".", label=part)
        ax.set_title(measure.upper(), fontsize=9)
        ax.legend(fontsize=7)
    for ax in axes:
        ax.set_xlabel("iteration")
    _save(fig, out)


def feature_change_tsne(folder: str | Path, out: str | Path, seed: int = 0) -> None:
    """Fig. 7: t-SNE of the network's validation embedding at the start and the end."""
    from sklearn.manifold import TSNE

    _, a = _load(folder)
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    for ax, key, title in ((axes[0], "start", "start of training"), (axes[1], "end", "end of training")):
        embedding = a[key]
        perplexity = min(30.0, (len(embedding) - 1) / 3)
        points = TSNE(2, perplexity=perplexity, random_state=seed, init="pca").fit_transform(embedding)
        ax.scatter(*points.T, c=CLUSTER_COLOURS(a["val_labels"] % 10), s=3)
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    _save(fig, out)


def feature_change_snapshots(folder: str | Path, out: str | Path) -> None:
    """Fig. 8: per snapshot iteration, the base embedding before and after T_G and the
    network's validation embedding (2-D run)."""
    _, a = _load(folder)
    iterations = sorted({int(k.split("/")[1]) for k in a if k.startswith("snapshot/")})
    fig, axes = plt.subplots(len(iterations), 3, figsize=(9, 2.8 * len(iterations)), squeeze=False)
    for row, iteration in enumerate(iterations):
        prefix = f"snapshot/{iteration}/"
        panels = (
            ("base_before", a["base_labels"], "base, before T_G"),
            ("base_after", a["base_labels"], "base, after T_G"),
            ("val_embedding", a["val_labels"], "network, validation"),
        )
        for column, (key, labels, title) in enumerate(panels):
            ax = axes[row, column]
            if prefix + key in a:
                ax.scatter(*a[prefix + key][:, :2].T, c=CLUSTER_COLOURS(labels % 10), s=3)
            ax.set_title(f"iteration {iteration}: {title}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    _save(fig, out)


#: Figures drawn from study folders, by the name ``python -m basis figure`` takes.
FIGURES = {
    "toy_examples": toy_examples,
    "illustration": illustration,
    "anchor_consistency": anchor_consistency,
    "bunny": bunny,
    "feature_change_training": feature_change_training,
    "feature_change_tsne": feature_change_tsne,
    "feature_change_snapshots": feature_change_snapshots,
}

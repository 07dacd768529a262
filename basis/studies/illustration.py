"""Fig. 2: two uneven samples of three clusters, aligned through one anchor per cluster."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from basis.errors import InputError
from basis.studies import ClaimRow, Figure, Study, StudyResult, figures
from basis.studies.figures import load_study, save_figure

# What the study computes with is imported where it computes: drawing its figures (a
# workflow job of its own) imports numpy and matplotlib only.


def illustration(
    *,
    n_per_cluster: int = 150,
    n_neighbors: int = 10,
    shared_per_cluster: int = 5,
    cluster_std: float = 0.9,
    seed: int = 0,
) -> StudyResult:
    """Fig. 2: three clusters sampled twice, unevenly, with one shared anchor per cluster.
    Each subset's embedding (first two non-trivial eigenvectors of L = D - W) places the
    clusters differently in the two subsets; the affine map fitted on the three anchors
    aligns subset 1 to subset 2.

    Three anchors fix an affine map in K = 2 exactly, so their error after alignment is
    zero by construction. The claim is checked on ``shared_per_cluster`` further points
    per cluster that both subsets contain but the fit does not see (held-out error). The
    clusters touch (``cluster_std`` 0.9 at centres 4 apart), so that each subset's graph
    is connected (``n_components`` counts its components): on separated clusters every
    point of a cluster sits on its anchor's value, and any map that is right at the
    anchors looks right everywhere."""
    import torch

    from basis.alignment import align_affine, apply_affine
    from basis.graph import GraphConfig, dense_affinity
    from basis.spectral import connected_components, spectral_embedding

    shares = ((0.6, 0.3, 0.15), (0.15, 0.35, 0.6))  # uneven sampling of the clusters
    smallest = int(min(min(s) for s in shares) * n_per_cluster) + 1 + shared_per_cluster
    if smallest <= n_neighbors:
        raise InputError(
            f"n_per_cluster={n_per_cluster} leaves {smallest} points of a cluster in a subset, not more"
            f" than n_neighbors={n_neighbors}: the clusters would be joined; raise n_per_cluster"
        )
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [4.0, 0.0], [2.0, 3.5]])
    X = np.concatenate([c + cluster_std * rng.standard_normal((n_per_cluster, 2)) for c in centres])
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
    embeddings, n_components = [], 0
    for subset in subsets:
        W = dense_affinity(torch.as_tensor(X[subset], dtype=torch.float64), config)
        n_components = max(n_components, connected_components(W)[0])
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
        "n_components": n_components,
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


def draw_illustration(folders: list[str | Path], out: str | Path) -> None:
    """Fig. 2: the data and two subsets, each subset's embedding, and the union after
    aligning subset 1 to subset 2 through the three anchors."""
    result, a = load_study(folders[0])
    X, y, anchors = a["X"], a["y"], a["anchors"]
    fig, axes = figures.plt.subplots(1, 4, figsize=(13, 3.3))
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
        ax.scatter(*embedding.T, c=figures.CLUSTER_COLOURS(y[subset]), s=20)
        ax.scatter(*embedding[:3].T, c="red", s=60, marker="x")
        ax.set_title(title, fontsize=9)
    axes[3].scatter(
        *a["embedding2"].T, c=figures.CLUSTER_COLOURS(y[a["subset2"]]), s=40, marker="o", alpha=0.4, label="subset 2"
    )
    axes[3].scatter(
        *a["aligned1"].T, c=figures.CLUSTER_COLOURS(y[a["subset1"]]), s=15, marker="x", label="subset 1, aligned"
    )
    axes[3].legend(fontsize=7)
    axes[3].set_title(f"union after alignment (anchor error {result['anchor_error_after']:.1e})", fontsize=9)
    for ax in axes[1:]:
        ax.set_xlabel(r"$\varphi_1$")
        ax.set_ylabel(r"$\varphi_2$")
    save_figure(fig, out)


def illustration_claims(results: dict[str, dict[str, float]]) -> list[ClaimRow]:
    """Fig. 2: the alignment makes the subsets agree beyond the anchors it is fitted on."""
    result = results[""]
    return [
        {
            "claim": "Fig. 2: aligning through the anchors makes the two subset embeddings agree",
            "criterion": "on connected subset graphs, error at shared points outside the fit (held out) cut ≥ 10x"
            " by the alignment (the 3 anchors fit an affine map in K = 2 exactly, so their own error is 0 by"
            " construction)",
            "measured": f"held out {result['held_out_error_before']:.3g} before,"
            f" {result['held_out_error_after']:.2g} after;"
            f" anchors {result['anchor_error_after']:.2g} after; {result['n_components']:.0f} graph component(s)",
            "reproduced": result["n_components"] == 1
            and result["held_out_error_after"] <= 0.1 * result["held_out_error_before"],
        }
    ]


STUDY = Study(
    function="illustration",
    figures=(
        Figure(
            name="fig2_illustration",
            draw="draw_illustration",
            caption="Fig. 2, illustration: three touching clusters sampled twice, unevenly, with one shared"
            " anchor per cluster (red). Each subset's embedding puts the clusters at different places; after the"
            " affine map fitted on the anchors aligns subset 1 to subset 2, the union is consistent.",
        ),
    ),
    claims="illustration_claims",
)

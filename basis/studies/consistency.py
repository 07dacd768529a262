"""Fig. 3: the anchors' eigenvector values over independent batches, before and after alignment."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from basis.studies import ClaimRow, Figure, Study, StudyResult, figures
from basis.studies.figures import load_study, save_figure

if TYPE_CHECKING:
    from basis.graph import GraphConfig

# What the study computes with is imported where it computes: drawing its figures (a
# workflow job of its own) imports numpy and matplotlib only.


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
    from basis.graph import GraphConfig, dense_affinity
    from basis.spectral import connected_components, spectral_embedding

    config = GraphConfig.from_dict(graph)
    rng = np.random.default_rng(seed)
    held_out = rng.choice(np.setdiff1d(np.arange(len(X)), anchors), n_held_out, replace=False)
    fixed = np.concatenate([anchors, held_out])
    others = np.setdiff1d(np.arange(len(X)), fixed)
    ransac = {"sample_size": 5, "tolerance": 0.01, "tolerance_mode": "absolute", **(ransac or {})}
    raw, aligned, disconnected = [], [], 0
    for _ in range(n_batches):
        batch = np.concatenate([fixed, rng.choice(others, batch_size, replace=False)])
        W = dense_affinity(torch.as_tensor(X[batch], dtype=torch.float64), config)
        disconnected += int(connected_components(W)[0] > 1)
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
    result: dict[str, Any] = {
        "before": raw_np[:, : len(anchors)],
        "after": aligned_np[:, : len(anchors)],
        "n_disconnected_batches": disconnected,
    }
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


def anchor_consistency(
    *,
    n_samples: int = 9000,
    n_batches: int = 20,
    batch_size: int = 256,
    n_neighbors: int = 25,
    seed: int = 0,
    data_seed: int = 0,
) -> StudyResult:
    """Fig. 3: the two leading non-trivial eigenvectors at the nine three-moons anchors
    over ``n_batches`` batches of ``batch_size`` nodes [20 of 256 out of 9,000], before
    and after alignment to the first batch (RANSAC, 5 anchors, absolute tolerance 0.01).
    ``n_neighbors`` 25 keeps every batch graph connected (at the toy sets' 15, some batches
    split into the three moons, whose eigenvectors are then constant on each moon, and a
    wrong map would look right beyond the anchors); ``n_disconnected_batches`` counts
    those that are not."""
    from basis.data.toy_sets import TOY_GRAPH, three_moons, three_moons_anchors

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


def draw_anchor_consistency(folders: list[str | Path], out: str | Path) -> None:
    """Fig. 3: three moons and its nine anchors; the two leading eigenvectors at the
    anchors over the batches, before and after alignment."""
    result, a = load_study(folders[0])
    fig, axes = figures.plt.subplots(2, 3, figsize=(11, 6))
    axes[0, 0].scatter(*a["X"].T, c=figures.CLUSTER_COLOURS(a["y"]), s=1)
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
    save_figure(fig, out)


def consistency_claims(results: dict[str, dict[str, float]]) -> list[ClaimRow]:
    """Fig. 3: after alignment the eigenvectors agree across batches, beyond the anchors."""
    result = results[""]
    return [
        {
            "claim": "Fig. 3: after alignment the anchors' eigenvector values are consistent across batches",
            "criterion": "on connected batch graphs, spread across batches of nodes in every batch but outside"
            " the fit (held out) reduced ≥ 10x",
            "measured": f"held out {result['held_out_reduction']:.0f}x"
            f" ({result['held_out_spread_before']:.3g}"
            f" → {result['held_out_spread_after']:.3g}); anchors {result['reduction']:.0f}x;"
            f" {result['n_disconnected_batches']:.0f} disconnected batch(es)",
            "reproduced": result["n_disconnected_batches"] == 0 and result["held_out_reduction"] >= 10,
        }
    ]


STUDY = Study(
    function="anchor_consistency",
    figures=(
        Figure(
            name="fig3_three_moons_consistency",
            draw="draw_anchor_consistency",
            caption="Fig. 3, three moons: the data and its nine anchors, then the two leading non-trivial"
            " eigenvectors at the anchors over independent batches, before alignment (top) and after alignment"
            " to the first batch (bottom). The title gives the spread-reduction factor.",
        ),
    ),
    claims="consistency_claims",
)

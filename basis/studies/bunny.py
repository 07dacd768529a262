"""Fig. 4: Diffusion Maps of turntable frames, analytic and learned by BASiS."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from basis.studies import ClaimRow, Figure, Study, StudyResult, figures
from basis.studies.figures import load_study, save_figure

# What the study computes with is imported where it computes: drawing its figures (a
# workflow job of its own) imports numpy and matplotlib only.


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
) -> StudyResult:
    """Fig. 4: Diffusion Maps to R^2 of turntable frames [2,000 snapshots, 20 nearest
    neighbours, random-walk matrix P, train on 1,500, test on 500, raw pixels].

    Analytic DM of all frames and of the test frames, and BASiS trained on the
    training frames (``n_anchors`` random anchors: the frames have no classes) to
    output the DM coordinates. d_G compares the network with the test frames' own
    DM; the circular correlation compares each embedding's angle with the true
    rotation (rendered frames only; NaN for real ones, whose angles are unknown).
    """
    from basis import metrics
    from basis.data import load_bunny
    from basis.data.rendered_bunny import circular_correlation
    from basis.estimators import BASiS
    from basis.references import analytic_embedding

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
        "alignment_error_max": max(model.alignment_errors_, default=0.0),
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


def draw_bunny(folders: list[str | Path], out: str | Path) -> None:
    """Fig. 4: example frames, the analytic DM of all frames and of the test frames,
    and the network's output on the test frames (colour: true rotation angle)."""
    result, a = load_study(folders[0])
    fig, axes = figures.plt.subplots(1, 4, figsize=(13, 3.3))
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
    save_figure(fig, out)


def bunny_claims(results: dict[str, dict[str, float]]) -> list[ClaimRow]:
    """Fig. 4: the network's embedding is the Diffusion-Maps circle (rendered frames only:
    real snapshots have no known angle)."""
    result = results[""]
    if not np.isfinite(result["circular_correlation_network"]):
        return []
    return [
        {
            "claim": "Fig. 4: the network approximates the bunny's Diffusion-Maps circle",
            "criterion": "circular correlation of the network's angle with the rotation ≥ 0.95",
            "measured": f"{result['circular_correlation_network']:.3f} (analytic DM of the test frames"
            f" {result['circular_correlation_analytic_test']:.3f}); d_G {result['d_G']:.3f}",
            "reproduced": result["circular_correlation_network"] >= 0.95,
        }
    ]


STUDY = Study(
    function="bunny_diffusion_maps",
    figures=(
        Figure(
            name="fig4_bunny_diffusion_maps",
            draw="draw_bunny",
            caption="Fig. 4, Diffusion Maps of a rotating object: example frames, the analytic DM of all frames,"
            " the analytic DM of the test frames and BASiS's output on the test frames, coloured by the true"
            " rotation angle (rendered frames; real snapshots when experiments.bunny.settings.frames_dir is set).",
        ),
    ),
    claims="bunny_claims",
    gpu=True,
)

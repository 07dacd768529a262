"""Figs. 6-8: Algorithm 2, BASiS trained while the features it embeds are trained too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from basis.catalog.data_sources import DataSource
from basis.errors import InputError
from basis.studies import ClaimRow, Figure, Study, StudyResult, figures
from basis.studies.figures import load_study, save_figure

# What the study computes with is imported where it computes: drawing its figures (a
# workflow job of its own) imports numpy and matplotlib only.


def feature_change(
    dataset: str = "mnist",
    *,
    classes: list[int] | None = None,
    n_components: int | None = None,
    data_root: str = "resources/data",
    data_source: DataSource | None = None,
    data_seed: int = 0,
    seed: int = 0,
    device: str = "auto",
    callback: Callable | None = None,
    **settings: Any,
) -> StudyResult:
    """Figs. 6-8: Algorithm 2 on an image set's raw images, optionally restricted to
    ``classes`` (the paper's 2-D run: digits 4, 7 and 9). ``n_components`` defaults to
    classes - 1 (paper: 9 for MNIST, 2 for 4/7/9); ``settings`` go to
    :class:`~basis.changing_features.FeatureChangeTrainer`."""
    from basis.changing_features import FeatureChangeTrainer, centre_aspect, snapshot_arrays, summarize
    from basis.data import load_dataset

    data = load_dataset(dataset, seed=data_seed, root=data_root, source=data_source)
    if not data.is_image:
        raise InputError(
            f"data set {dataset!r} has no images; feature change needs an image set, digits or an image folder"
        )
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
    worst_alignment = max(trainer.spectral.alignment_errors_, default=0.0)
    last = outcome.snapshots[max(outcome.snapshots)] if outcome.snapshots else None
    shape = {}
    if last is not None:  # the base embedding's shape, fresh and as the chain of T_G keeps it
        shape = {
            "base_centre_aspect_fresh": centre_aspect(last["base_before"], outcome.base_labels),
            "base_centre_aspect": centre_aspect(last["base_after"], outcome.base_labels),
        }
    return {**summarize(outcome), "alignment_error_max": worst_alignment, **shape}, snapshot_arrays(outcome)


def history(a: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, np.ndarray]:
    return a[f"history/{name}/steps"], a[f"history/{name}/values"]


def draw_training(folders: list[str | Path], out: str | Path) -> None:
    """Fig. 6: contrastive loss, spectral MSE, and NMI and ACC of the analytic
    embedding of the current features (blue) and of the network on training
    (orange) and validation (green) points."""
    _, a = load_study(folders[0])
    fig, axes = figures.plt.subplots(1, 4, figsize=(14, 3.3))
    for ax, name in zip(axes[:2], ("contrastive_loss", "spectral_mse")):
        ax.plot(*history(a, name), linewidth=0.8)
        ax.set_yscale("log")
        ax.set_title(name.replace("_", " "), fontsize=9)
    for ax, measure in zip(axes[2:], ("nmi", "acc")):
        for part, colour in (("analytic", "tab:blue"), ("train", "tab:orange"), ("val", "tab:green")):
            ax.plot(*history(a, f"{measure}_{part}"), color=colour, marker=".", label=part)
        ax.set_title(measure.upper(), fontsize=9)
        ax.legend(fontsize=7)
    for ax in axes:
        ax.set_xlabel("iteration")
    save_figure(fig, out)


def draw_tsne(folders: list[str | Path], out: str | Path, seed: int = 0) -> None:
    """Fig. 7: t-SNE of the network's validation embedding at the start and the end."""
    from sklearn.manifold import TSNE

    _, a = load_study(folders[0])
    fig, axes = figures.plt.subplots(1, 2, figsize=(8, 4))
    for ax, key, title in ((axes[0], "start", "start of training"), (axes[1], "end", "end of training")):
        embedding = a[key]
        perplexity = min(30.0, (len(embedding) - 1) / 3)
        points = TSNE(2, perplexity=perplexity, random_state=seed, init="pca").fit_transform(embedding)
        ax.scatter(*points.T, c=figures.CLUSTER_COLOURS(a["val_labels"] % 10), s=3)
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    save_figure(fig, out)


def draw_snapshots(folders: list[str | Path], out: str | Path) -> None:
    """Fig. 8: per snapshot iteration, the base embedding before and after T_G and the
    network's validation embedding (2-D run)."""
    _, a = load_study(folders[0])
    iterations = sorted({int(k.split("/")[1]) for k in a if k.startswith("snapshot/")})
    fig, axes = figures.plt.subplots(len(iterations), 3, figsize=(9, 2.8 * len(iterations)), squeeze=False)
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
                ax.scatter(*a[prefix + key][:, :2].T, c=figures.CLUSTER_COLOURS(labels % 10), s=3)
            ax.set_title(f"iteration {iteration}: {title}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    save_figure(fig, out)


def feature_change_claims(results: dict[str, dict[str, float]]) -> list[ClaimRow]:
    """Fig. 6: the network's clustering follows the analytic one as the features change."""
    return [
        {
            "claim": f"Fig. 6 ({name}): under feature change the network's clustering follows the analytic one",
            "criterion": "mean |NMI| and |ACC| gap (validation) over the last quarter ≤ 0.05",
            "measured": f"NMI gap {result['nmi_gap_last']:.3f}, ACC gap {result['acc_gap_last']:.3f};"
            f" final NMI {result['final_nmi_val']:.3f} vs analytic {result['final_nmi_analytic']:.3f}"
            + (
                f"; base class-centre aspect {result['base_centre_aspect']:.1f} after T_G"
                f" ({result['base_centre_aspect_fresh']:.1f} fresh)"
                if "base_centre_aspect" in result
                else ""
            ),
            "reproduced": max(result["nmi_gap_last"], result["acc_gap_last"]) <= 0.05,
        }
        for name, result in results.items()
    ]


STUDY = Study(
    function="feature_change",
    settings_to="basis.changing_features:FeatureChangeTrainer",
    runs=("main", "subset"),
    figures=(
        Figure(
            name="fig6_feature_change_training",
            draw="draw_training",
            caption="Fig. 6, training under feature change (Algorithm 2): contrastive loss of the feature"
            " network, MSE of the spectral network, and NMI and ACC of the analytic embedding of the current"
            " features (blue) and of the network's output on training (orange) and validation (green) points.",
            runs=("main",),
        ),
        Figure(
            name="fig7_feature_change_tsne",
            draw="draw_tsne",
            caption="Fig. 7, test-set embedding under feature change: t-SNE of the spectral network's validation"
            " embedding at the start and at the end of joint training, coloured by class.",
            runs=("main",),
        ),
        Figure(
            name="fig8_feature_change_subset",
            draw="draw_snapshots",
            caption="Fig. 8, the role of T_G (2-D run on three classes): per snapshot iteration, the base"
            " embedding computed on the current features before T_G, after T_G, and the network's validation"
            " embedding.",
            runs=("subset",),
        ),
    ),
    claims="feature_change_claims",
    gpu=True,
)

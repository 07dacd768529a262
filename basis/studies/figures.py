"""What the paper's figures share: drawing setup, colours, saving, reading study folders.

Each study's figures are drawn by functions of its module in ``basis/studies/``; Fig. 5,
drawn from the kNN sweep's summary, is here. Every figure is written as PNG and as PDF.
"""

from __future__ import annotations

import zipfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from basis.catalog import METHOD_LABELS
from basis.errors import InputError
from basis.runtime.outputs import read_metrics

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["knn_sensitivity", "load_study", "save_figure"]  # and plt, CLUSTER_COLOURS (loaded on first use)


@cache
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


def __getattr__(name: str) -> Any:
    """``plt`` (pyplot) and ``CLUSTER_COLOURS`` load matplotlib on first use, when a figure
    is drawn: the workflow imports the study modules at parse to read their declarations."""
    if name == "plt":
        return _pyplot()
    if name == "CLUSTER_COLOURS":
        return _pyplot().get_cmap("tab10")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def save_figure(fig, out: str | Path) -> None:
    """Write ``fig`` as PNG and as PDF (same name, other suffix) and close it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=130)
    fig.savefig(out.with_suffix(".pdf"), metadata={"CreationDate": None})  # the same bytes from every run
    _pyplot().close(fig)


def load_study(folder: str | Path) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The ``metrics.json`` and ``arrays.npz`` of one study run, or an InputError that
    names the one that is missing or corrupt and how to redo it."""
    folder = Path(folder)
    try:
        stored = np.load(folder / "arrays.npz", allow_pickle=False)
        if not isinstance(stored, np.lib.npyio.NpzFile):
            raise ValueError("a single .npy array")
        with stored:
            arrays = {k: stored[k] for k in stored.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise InputError(
            f"study folder {folder}: arrays.npz is missing, truncated or not an .npz ({err});"
            " rerun the study that writes it"
        ) from None
    return read_metrics(folder / "metrics.json"), arrays


def check_study(folder: str | Path) -> None:
    """A study folder a figure can be drawn from (read whole once, before drawing)."""
    load_study(folder)


def knn_sensitivity(summary: pd.DataFrame, out: str | Path) -> None:
    """Fig. 5: NMI, ACC, d_G and d_perp (mean and std over seeds) against k."""
    fig, axes = _pyplot().subplots(1, 4, figsize=(14, 3.3))
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
    save_figure(fig, out)


def principal_plane(embedding: np.ndarray) -> np.ndarray:
    """The embedding's points on its two principal axes (a zero second axis for a 1-d one)."""
    centred = embedding - embedding.mean(axis=0)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)
    plane = centred @ axes[:2].T
    return plane if plane.shape[1] == 2 else np.column_stack([plane[:, 0], np.zeros(len(plane))])


def embedding_picture(
    embedding: np.ndarray,
    labels: np.ndarray | None,
    title: str,
    out: str | Path,
    scores: dict[str, float] | None = None,
) -> None:
    """A PNG of a run's test embedding as an MLflow run of Table 1 carries it beside its scores:
    the embedding's two principal axes (the directions of its largest spread, so that classes
    that its first two coordinates stack in one corner lie apart), one colour per class with a
    legend, and the run's scores in the title; one colour without labels."""
    plane = principal_plane(embedding)
    fig, ax = _pyplot().subplots(figsize=(6.4, 5.2))
    classes = [None] if labels is None else list(np.unique(labels))
    for index, label in enumerate(classes):
        chosen = slice(None) if label is None else np.asarray(labels) == label
        colours = _pyplot().get_cmap("tab10")
        colour = colours(index % colours.N)
        ax.scatter(*plane[chosen].T, color=colour, s=6, linewidths=0, label=None if label is None else str(label))
    if labels is not None:
        ax.legend(
            title="class", fontsize=7, title_fontsize=8, markerscale=2, loc="center left", bbox_to_anchor=(1, 0.5)
        )
    ax.set_xlabel("principal axis 1 of the test embedding")
    ax.set_ylabel("principal axis 2")
    shown = ", ".join(f"{name} {value:.3f}" for name, value in (scores or {}).items() if np.isfinite(value))
    ax.set_title(f"{title}\n{shown}" if shown else title, fontsize=9)
    ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    _pyplot().close(fig)

"""Data sets of one's own, written by the tests: scikit-learn's digits as an image folder
(PNG files of odd sizes, one sub-folder per class) and as feature tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from sklearn.datasets import load_digits


def write_image_folder(root: Path, classes: tuple[int, ...] = (0, 1, 2), per_class: int | None = None) -> Path:
    """Digits of ``classes`` as grey PNGs, each resized to a size of its own (8 to 19 pixels)."""
    digits = load_digits()
    rng = np.random.default_rng(0)
    for digit in classes:
        folder = root / f"digit_{digit}"
        folder.mkdir(parents=True, exist_ok=True)
        for index in np.flatnonzero(digits.target == digit)[:per_class]:
            side = int(rng.integers(8, 20))
            pixels = (digits.images[index] * 16).clip(0, 255).astype(np.uint8)
            Image.fromarray(pixels).resize((side, side)).save(folder / f"{index}.png")
    return root


def digits_frame(labels: bool = True, rows: int | None = None) -> pd.DataFrame:
    """Digits' 64 pixels as columns f0..f63, and their classes as strings in ``label``."""
    digits = load_digits()
    frame = pd.DataFrame(digits.data[:rows], columns=[f"f{j}" for j in range(64)])
    if labels:
        frame["label"] = [f"digit {t}" for t in digits.target[:rows]]
    return frame


def write_tables(folder: Path) -> dict[str, Path]:
    """A labelled CSV, an unlabelled CSV and a labelled .npz of the digits."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"labelled": folder / "labelled.csv", "unlabelled": folder / "unlabelled.csv", "npz": folder / "points.npz"}
    digits_frame().to_csv(paths["labelled"], index=False)
    digits_frame(labels=False).to_csv(paths["unlabelled"], index=False)
    digits = load_digits()
    np.savez(paths["npz"], X=digits.data, y=digits.target)
    return paths

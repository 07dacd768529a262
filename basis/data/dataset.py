"""The split data set every loader returns (:class:`Dataset`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Dataset:
    """Train/test split of one data set.

    ``X_*`` are float32 arrays: images (n, c, h, w) for image sets, points (n, d)
    otherwise. ``y_*`` are class labels, or rotation angles for ``bunny``; None for a
    data set of one's own without labels. ``standin``: synthetic images in the set's
    shapes (:mod:`basis.data.standins`), not the set. A data set of one's own also has
    its class names (``classes``, when its labels were strings or folders) and the
    dimension it declares (``declared_components``).
    """

    name: str
    X_train: np.ndarray
    y_train: np.ndarray | None
    X_test: np.ndarray
    y_test: np.ndarray | None
    standin: bool = False
    classes: tuple[str, ...] | None = None
    declared_components: int | None = None

    @property
    def labelled(self) -> bool:
        return self.y_train is not None

    @property
    def n_classes(self) -> int | None:
        """The number of classes; None without labels."""
        return int(len(np.unique(self.y_train))) if self.labelled else None

    @property
    def n_components(self) -> int | None:
        """The embedding's dimension unless a setting gives one: the declared one (a data
        set of one's own), else one per class."""
        return self.declared_components or self.n_classes

    @property
    def is_image(self) -> bool:
        return self.X_train.ndim == 4

    def flat(self) -> tuple[np.ndarray, np.ndarray]:
        """Train and test inputs as (n, d) feature matrices."""
        return self.X_train.reshape(len(self.X_train), -1), self.X_test.reshape(len(self.X_test), -1)

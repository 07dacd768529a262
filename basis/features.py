"""Siamese feature network trained with the contrastive loss (``contrastive_loss``).

The spectral methods embed 16-dimensional features learnt by a small CNN from class
labels, as in the paper (Sec. 5.2). Pairs are balanced: half share a class, half do not.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.neighbors import KNeighborsClassifier

from basis.errors import InputError
from basis.estimators.training import TrainingLoop
from basis.models import SiameseCNN
from basis.runtime.determinism import fixed_order_convolutions
from basis.runtime.device import resolve_device
from basis.runtime.inputs import load_checkpoint
from basis.runtime.optim import adam_for
from basis.runtime.outputs import atomic_path
from basis.runtime.timing import Progress


def contrastive_loss(z1: torch.Tensor, z2: torch.Tensor, same: torch.Tensor, margin: float = 1.0) -> torch.Tensor:
    """Mean of 1{y_i = y_j} d^2 + 1{y_i != y_j} max(0, eps - d)^2 over pairs (``contrastive_loss``)."""
    d = torch.linalg.norm(z1 - z2, dim=1)
    return torch.where(same, d**2, torch.clamp(margin - d, min=0.0) ** 2).mean()


def balanced_pairs(
    labels: np.ndarray, n_pairs: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index pairs, the first half same-class, the second half different-class."""
    by_class = {c: np.flatnonzero(labels == c) for c in np.unique(labels)}
    first = rng.integers(0, len(labels), n_pairs)
    second = np.empty(n_pairs, dtype=np.int64)
    same = np.arange(n_pairs) < n_pairs // 2
    for i in range(n_pairs):
        own = labels[first[i]]
        if same[i]:
            second[i] = rng.choice(by_class[own])
        else:
            other = rng.choice([c for c in by_class if c != own])
            second[i] = rng.choice(by_class[other])
    return first, second, same


class SiameseFeatures:
    """Train a :class:`~basis.models.SiameseCNN` on labelled images and embed images.

    Parameters
    ----------
    out_dim : int
        Feature dimension (paper: 16).
    margin : float
        epsilon of the contrastive loss.
    n_steps, pairs_per_step, lr : training budget (Adam).
    device : ``"auto"``, ``"cpu"`` or ``"cuda[:N]"``.
    seed : seeds initialisation and pair sampling.
    progress : print progress lines to stderr (:class:`~basis.runtime.timing.Progress`).
    """

    def __init__(
        self,
        out_dim: int = 16,
        *,
        margin: float = 1.0,
        n_steps: int = 2000,
        pairs_per_step: int = 256,
        lr: float = 1e-3,
        device: str = "auto",
        seed: int = 0,
        progress: bool = True,
    ):
        self.out_dim, self.margin, self.n_steps, self.pairs_per_step = out_dim, margin, n_steps, pairs_per_step
        self.lr, self.device, self.seed, self.progress = lr, device, seed, progress

    def check_params(self) -> "SiameseFeatures":
        """An InputError for a parameter out of its range (before any data is read)."""
        for name in ("out_dim", "n_steps", "pairs_per_step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        if not self.lr > 0 or not self.margin > 0:
            raise InputError(f"lr and margin must be positive, got {self.lr!r} and {self.margin!r}")
        return self

    def start(self, images: np.ndarray, labels: np.ndarray) -> "SiameseFeatures":
        """Build the network and optimiser without training; :meth:`step` then trains
        one step at a time (Algorithm 2 interleaves these steps with spectral ones)."""
        self.check_params()
        images = np.asarray(images, dtype=np.float32)
        if images.ndim != 4 or not np.isfinite(images).all():
            raise InputError(f"images must be a finite (n, c, h, w) array, got shape {images.shape}")
        if len(np.unique(labels)) < 2:
            raise InputError("contrastive training needs at least two classes")
        self.device_ = resolve_device(self.device)
        self.rng_ = np.random.default_rng(self.seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.model_ = SiameseCNN(images.shape[1:], self.out_dim).to(self.device_)
        self.in_shape_ = tuple(images.shape[1:])
        self.optimizer_ = adam_for(self.model_.parameters(), self.lr, self.device_)
        self.images_ = torch.from_numpy(images).to(self.device_)
        self.labels_ = np.asarray(labels)
        self.loss_curve_: list[float] = []
        return self

    def step(self) -> float:
        """One Adam step on a fresh set of balanced pairs; returns the contrastive loss (a
        read from the device: a loop of one's own, as Algorithm 2's, reads each step's)."""
        self.loss_curve_.append(float(self._train_step()))
        return self.loss_curve_[-1]

    def _train_step(self) -> torch.Tensor:
        """:meth:`step`, its loss left on the device."""
        self.model_.train()
        first, second, same = balanced_pairs(self.labels_, self.pairs_per_step, self.rng_)
        with fixed_order_convolutions():
            z1, z2 = self.model_(self.images_[first]), self.model_(self.images_[second])
            loss = contrastive_loss(z1, z2, torch.from_numpy(same).to(self.device_), self.margin)
            self.optimizer_.zero_grad(set_to_none=True)
            loss.backward()
        self.optimizer_.step()
        return loss.detach()

    def fit(self, images: np.ndarray, labels: np.ndarray) -> "SiameseFeatures":
        self.start(images, labels)
        progress = Progress(self.n_steps, "siamese step") if self.progress else None
        unread: list[torch.Tensor] = []
        for done in range(1, self.n_steps + 1):
            unread.append(self._train_step())
            # The losses stay on the device and are read once per block of steps (a read
            # makes a CUDA host wait for the step it reads).
            if len(unread) == TrainingLoop.LOSS_BLOCK or done == self.n_steps:
                self.loss_curve_ += torch.stack(unread).tolist()
                unread = []
                if progress:
                    progress.update(done, f"loss {self.loss_curve_[-1]:.4g}")
        self.model_.eval()
        del self.images_, self.optimizer_  # free the training copy
        return self

    def transform(self, images: np.ndarray | torch.Tensor, chunk_size: int = 4096) -> np.ndarray:
        return self.embed(images, chunk_size).cpu().numpy()

    def embed(self, images: np.ndarray | torch.Tensor, chunk_size: int = 4096) -> torch.Tensor:
        """Features of ``images`` as a tensor on the network's device, without gradient."""
        images = torch.as_tensor(images, dtype=torch.float32).to(self.device_)
        was_training = self.model_.training
        self.model_.eval()
        with torch.no_grad(), fixed_order_convolutions():
            features = torch.cat([self.model_(images[i : i + chunk_size]) for i in range(0, len(images), chunk_size)])
        self.model_.train(was_training)
        return features

    def save(self, path: str | Path) -> None:
        state = {
            "in_shape": list(self.in_shape_),
            "out_dim": self.out_dim,
            "state_dict": {k: v.cpu() for k, v in self.model_.state_dict().items()},
        }
        with atomic_path(path) as partial:
            torch.save(state, partial)

    @classmethod
    def load(cls, path: str | Path, device: str = "auto") -> "SiameseFeatures":
        state = load_checkpoint(path, "Siamese network")
        try:
            features = cls(out_dim=int(state["out_dim"]), device=device)
            features.in_shape_ = tuple(int(size) for size in state["in_shape"])
            features.model_ = SiameseCNN(features.in_shape_, features.out_dim)
            features.model_.load_state_dict(state["state_dict"])
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            raise InputError(f"Siamese network {path} is not a checkpoint of basis features ({err!r})") from None
        features.device_ = resolve_device(device)
        features.model_.to(features.device_).eval()
        return features

    def check_images(self, images: np.ndarray, name: str = "images") -> None:
        """Refuse images of another shape than the network was trained on."""
        shape = tuple(images.shape[1:])
        if shape != self.in_shape_:
            raise InputError(f"{name} holds images of shape {shape}; this Siamese network takes {self.in_shape_}")


def knn_accuracy(
    train_features: np.ndarray, train_labels: np.ndarray, test_features: np.ndarray, test_labels: np.ndarray
) -> float:
    """1-nearest-neighbour test accuracy of a feature space."""
    classifier = KNeighborsClassifier(n_neighbors=1).fit(train_features, train_labels)
    return float((classifier.predict(test_features) == np.asarray(test_labels)).mean())


def train_features(images_train, labels_train, images_test, labels_test, **options: Any) -> dict[str, Any]:
    """Train, embed both splits, and measure; returns arrays and figures for the CLI."""
    start = time.perf_counter()
    model = SiameseFeatures(**options).fit(images_train, labels_train)
    seconds = time.perf_counter() - start
    train, test = model.transform(images_train), model.transform(images_test)
    return {
        "model": model,
        "train": train,
        "test": test,
        "train_seconds": seconds,
        "knn_accuracy": knn_accuracy(train, labels_train, test, labels_test),
    }

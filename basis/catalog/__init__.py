"""What the package offers, by name, without importing torch: data sets and methods.

The workflow checks a config against these at parse time, and a dry run must not pay
for torch. The data sets' names are stated here and read by the modules that load them;
the methods are read from their declarations (:mod:`basis.estimators.parameters`, each
method's parameters class: names, types, defaults, ranges and its label). The studies,
which declare themselves in their modules, are read by :mod:`basis.plan.registry`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from basis.errors import InputError
from basis.estimators.parameters import DECLARED, SpectralParameters, annotation_text

PACKAGE = Path(__file__).resolve().parent.parent

#: How a whole set's sparse graph is solved: Lanczos on the host, or a Chebyshev-filtered
#: block iteration on the graph's device (:func:`basis.spectral.sparse_spectral_embedding`).
SPARSE_SOLVERS = ("arpack", "chebyshev")
#: What ``bench step`` trains on: the stand-in (clusters that are the graph's connected
#: components), Siamese-like features (clusters that touch: one component, ten small
#: eigenvalues, as trained features give) and raw scikit-learn digits (64-d pixels).
STEP_DATA = ("clusters", "touching", "digits")

#: The toy sets and their number of classes.
TOY_CLASSES = {"three_moons": 3, "two_moons": 2, "circles": 2, "blobs": 4, "spirals": 2}
TOY_SETS = tuple(TOY_CLASSES)
IMAGE_SETS = ("mnist", "fashion_mnist", "svhn", "cifar10")
#: Each image set's official splits, (training images, test images, (channels, height, width)).
IMAGE_SHAPES = {
    "mnist": (60_000, 10_000, (1, 28, 28)),
    "fashion_mnist": (60_000, 10_000, (1, 28, 28)),
    "svhn": (73_257, 26_032, (3, 32, 32)),
    "cifar10": (50_000, 10_000, (3, 32, 32)),
}
#: Image sets whose runs embed Siamese features rather than raw pixels.
FEATURE_SETS = (*IMAGE_SETS, "digits")
DATASETS = (*TOY_SETS, "digits", "bunny", *IMAGE_SETS)
#: How tables and figures name each method (declared with it), in Table 1's order, and each image set.
METHOD_LABELS = {name: declared.label for name, declared in DECLARED.items()}
DATASET_LABELS = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST", "svhn": "SVHN", "cifar10": "CIFAR-10"}
#: The share of a generated set (toy sets, digits) held out as its test split.
TEST_FRACTION = 0.2
#: Nodes per batch of the toy protocol (Fig. 1), before its anchors are added.
TOY_BATCH_SIZE = 256

#: Parameters every method takes that the run command sets itself, not a config.
RUN_PARAMETERS = ("callback", "device", "seed")


def method_names() -> list[str]:
    """Every declared method (:mod:`basis.estimators.parameters`)."""
    return sorted(DECLARED)


def _method(method: str) -> type[SpectralParameters]:
    if method not in DECLARED:
        raise InputError(f"unknown method {method!r}; valid: {method_names()}")
    return DECLARED[method]


def method_parameters(method: str) -> tuple[str, ...]:
    """Constructor parameters of a method, those it passes on to the base class included."""
    return tuple(_method(method).parameter_names())


def method_annotations(method: str) -> dict[str, str]:
    """Each constructor parameter's type annotation, as text with its choices spelt out."""
    declared = _method(method)
    return {name: annotation_text(declared, name) for name in declared.parameter_names()}


def method_defaults(method: str) -> dict[str, Any]:
    """Each constructor parameter's default."""
    return _method(method).defaults()


def seeds_apart_when(method: str) -> dict[str, tuple[Any, str]]:
    """The settings with which ``method`` cannot train its seeds together: parameter -> (value, why)."""
    return dict(_method(method).SEEDS_APART_WHEN)


def seeds_never_together(method: str) -> str | None:
    """Why ``method``'s seeds never train together whatever its settings, or None."""
    return _method(method).SEEDS_NEVER_TOGETHER

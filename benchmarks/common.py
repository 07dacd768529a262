"""What the benchmark areas share: the command line of an area and its parts, timing on
a device, and the clustered batches the alignment benchmarks embed."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

#: The areas, in the order ``python -m benchmarks`` lists them.
AREAS = ("alignment", "training", "reference", "jobs", "studies", "peers", "device")
ROOT = Path(__file__).resolve().parents[1]


def area_parser(area: str, module: ModuleType) -> argparse.ArgumentParser:
    """``python -m benchmarks AREA``'s parser: one sub-command per entry of the module's
    ``PARTS`` (name -> (add its arguments, run it)), each described by its runner's docstring."""
    from basis.cli.parser import OneLineParser

    parser = OneLineParser(prog=f"python -m benchmarks {area}", description=module.__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="part", required=True)
    for name, (add_arguments, run) in module.PARTS.items():
        doc = run.__doc__ or ""
        part = sub.add_parser(
            name,
            help=doc.split("\n\n")[0].replace("\n", " "),
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_arguments(part)
        part.set_defaults(run=run)
    return parser


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """A part whose settings are environment variables (the device calls)."""


def timed(work: Callable[[], Any], device: str) -> tuple[float, Any]:
    """Seconds ``work()`` takes on ``device`` (its queue drained before and after), and its result."""
    from basis.runtime import device as devices

    devices.synchronize(device)
    start = time.perf_counter()
    result = work()
    devices.synchronize(device)
    return time.perf_counter() - start, result


def per_call_ms(function: Callable, *args: Any, device: str, repeat: int = 50, **kwargs: Any) -> float:
    """Mean milliseconds of one ``function(*args, **kwargs)`` on ``device`` after one warm-up call."""
    function(*args, **kwargs)
    seconds, _ = timed(lambda: [function(*args, **kwargs) for _ in range(repeat)], device)
    return round(1e3 * seconds / repeat, 3)


#: The quick config's graph, which the alignment benchmarks embed their batches on.
QUICK_GRAPH = {"n_neighbors": 15, "scale": "global", "scale_neighbor": 7, "kernel": "paper"}


def embed_rows(X: np.ndarray, rows: np.ndarray, n_components: int):
    """The batch ``X[rows]``'s embedding on the quick config's graph, the trivial vector kept."""
    import torch

    from basis.graph import GraphConfig, dense_affinity
    from basis.spectral import spectral_embedding

    W = dense_affinity(torch.as_tensor(X[rows], dtype=torch.float64), GraphConfig(**QUICK_GRAPH))
    return spectral_embedding(W, n_components, operator="normalized", drop_trivial=False, on_disconnected="ignore")[0]


def corrupted_batches(
    X: np.ndarray, y: np.ndarray, level: float, n_batches: int, rng: np.random.Generator, new_points: int = 262
) -> Iterator[tuple[Any, Any, np.ndarray, np.ndarray]]:
    """Batches of 250 anchors (25 per class) and ``new_points`` others, embedded: the
    reference batch's anchors first, then per batch its anchors' embedding when ``level``
    of the anchor slots hold a node of another class, the clean slots and the anchors'
    classes, as ``(reference, phi, clean, classes)``."""
    n_components = len(np.unique(y))
    anchors = np.concatenate([rng.choice(np.flatnonzero(y == c), 25, replace=False) for c in np.unique(y)])
    others = np.setdiff1d(np.arange(len(X)), anchors)
    rows = np.concatenate([anchors, rng.choice(others, new_points, replace=False)])
    reference = embed_rows(X, rows, n_components)[: len(anchors)]
    for _ in range(n_batches):
        slots = anchors.copy()
        corrupted = rng.choice(len(anchors), round(level * len(anchors)), replace=False)
        for slot in corrupted:
            slots[slot] = rng.choice(np.flatnonzero(y != y[anchors[slot]]))
        clean = np.ones(len(anchors), dtype=bool)
        clean[corrupted] = False
        rows = np.concatenate([slots, rng.choice(others, new_points, replace=False)])
        yield reference, embed_rows(X, rows, n_components)[: len(anchors)], clean, y[anchors]


def clean_error(transform, phi, target, clean: np.ndarray) -> float:
    """RMS error of the clean anchors' map over the targets' RMS row norm."""
    from basis.alignment import apply_affine, rms_row_norm

    return float(rms_row_norm((apply_affine(transform, phi) - target)[clean]) / rms_row_norm(target))

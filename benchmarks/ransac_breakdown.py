"""RANSAC's breakdown on clustered anchors: at each share of wrong anchors, how far the map
it returns is from the best one could do, how many hypotheses it drew, and whether it says
when it is unsure. Uniform samples (the authors' draw) against stratified ones (every
sample holds every class).

For each data set (``clusters``: tight synthetic clusters in 16-d, 10 classes;
``digits``: scikit-learn's raw digits, or a features ``.npz`` given with ``--features``)
batches of m = 512 nodes (250 anchors, 25 per class, and 262 others; a kNN graph of 15
neighbours and a global scale) are embedded (K = 10, the trivial vector kept); in every batch
after the reference one, ``level`` of the anchor slots hold a node of another class. Per
batch: the clean error (RMS error of the clean anchors over the targets' RMS row norm)
of RANSAC's map and of the oracle (least squares on the clean anchors only), the hypotheses
drawn, and the flags (``unsure``: ended short of its confidence; ``fallback``). A map is
*bad* when its clean error exceeds twice the oracle's; the goal is no bad map unflagged.

    python benchmarks/ransac_breakdown.py --batches 6
"""

from __future__ import annotations

import numpy as np
import torch

from basis.alignment import align_affine, apply_affine, ransac_affine, rms_row_norm
from basis.cli.parser import OneLineParser
from basis.data import load_inputs
from basis.graph import GraphConfig, dense_affinity
from basis.spectral import spectral_embedding

GRAPH = GraphConfig(n_neighbors=15, scale="global", scale_neighbor=7, kernel="paper")
LEVELS = (0.0, 0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45)


def embed(X: np.ndarray, rows: np.ndarray) -> torch.Tensor:
    W = dense_affinity(torch.as_tensor(X[rows], dtype=torch.float64), GRAPH)
    return spectral_embedding(W, 10, operator="normalized", drop_trivial=False, on_disconnected="ignore")[0]


def clean_error(transform: torch.Tensor, phi: torch.Tensor, target: torch.Tensor, clean: np.ndarray) -> float:
    return float(rms_row_norm((apply_affine(transform, phi) - target)[clean]) / rms_row_norm(target))


def data_sets(features: str | None, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(10, 16))
    y = np.repeat(np.arange(10), 300)
    clusters = centres[y] + 0.3 * rng.normal(size=(len(y), 16))
    if features:
        digits = np.load(features)
        return {"clusters": (clusters, y), "digits features": (digits["X_train"], digits["y_train"])}
    raw = load_inputs("digits")
    return {"clusters": (clusters, y), "digits (raw)": (raw.X_train, raw.y_train)}


def batches(X: np.ndarray, y: np.ndarray, level: float, n_batches: int, seed: int):
    """The reference anchors' embedding, then per batch its anchors' embedding, the clean
    slots and the anchors' classes."""
    rng = np.random.default_rng(seed)
    anchors = np.concatenate([rng.choice(np.flatnonzero(y == c), 25, replace=False) for c in np.unique(y)])
    others = np.setdiff1d(np.arange(len(X)), anchors)
    reference = embed(X, np.concatenate([anchors, rng.choice(others, 262, replace=False)]))[: len(anchors)]
    for _ in range(n_batches):
        slots = anchors.copy()
        corrupted = rng.choice(len(anchors), round(level * len(anchors)), replace=False)
        for slot in corrupted:
            slots[slot] = rng.choice(np.flatnonzero(y != y[anchors[slot]]))
        clean = np.ones(len(anchors), dtype=bool)
        clean[corrupted] = False
        phi = embed(X, np.concatenate([slots, rng.choice(others, 262, replace=False)]))[: len(anchors)]
        yield reference, phi, clean, y[anchors]


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", help="a digits features .npz (python -m basis features) instead of raw digits")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        "| data | wrong anchors | sampling | hypotheses, median (max) | clean error, median (max)"
        " | oracle, median | bad maps | flagged | bad and unflagged |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (X, y) in data_sets(args.features, args.seed).items():
        for level in LEVELS:
            rows = {"uniform": [], "stratified": []}
            for reference, phi, clean, classes in batches(X, y, level, args.batches, args.seed):
                oracle = clean_error(align_affine(phi[clean], reference[clean]).transform, phi, reference, clean)
                for sampling, strata in (("uniform", None), ("stratified", torch.as_tensor(classes))):
                    generator = torch.Generator().manual_seed(args.seed)
                    fit = ransac_affine(phi, reference, generator=generator, strata=strata)
                    error = clean_error(fit.transform, phi, reference, clean)
                    flagged = fit.unsure or fit.fallback
                    rows[sampling].append((fit.n_hypotheses, error, oracle, error > 2 * oracle, flagged))
            for sampling, found in rows.items():
                drawn, errors, oracles, bad, flagged = (np.array(column) for column in zip(*found))
                print(
                    f"| {name} | {level:.0%} | {sampling} | {np.median(drawn):.0f} ({drawn.max()})"
                    f" | {np.median(errors):.3f} ({errors.max():.3f}) | {np.median(oracles):.3f}"
                    f" | {bad.sum()} of {len(bad)} | {flagged.sum()} | {(bad & ~flagged).sum()} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()

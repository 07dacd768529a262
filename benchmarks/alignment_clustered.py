"""The anchor alignment on clustered (Siamese) embeddings: how often a RANSAC sample can
fix the map at all, and what plain least squares and RANSAC make of the same batches.

Embeds batches of Siamese digits features (m = 512: 250 anchors, 25 per class, and 262 new
points, or ``--new-points``; the quick config's graph), puts ``--outliers`` of the anchor slots of every batch
but the reference onto a node of another class, and prints, for the 20-anchor RANSAC
samples and for each batch:

- the share of 20-anchor samples whose design fixes the map as well as all anchors do
  (on a clustered embedding a sample must hold every class), and their conditioning;
- each batch's alignment error (RMS error of the clean anchors over their RMS row norm)
  by plain least squares and by RANSAC, with RANSAC's hypotheses drawn and rejected.

    python -m basis features --dataset digits --out results/features/digits.npz
    python benchmarks/alignment_clustered.py --features results/features/digits.npz
"""

from __future__ import annotations

import json

import numpy as np
import torch

from basis.alignment import NOISE_RCOND, align_affine, apply_affine, ransac_affine, rms_row_norm
from basis.cli.parser import OneLineParser
from basis.graph import GraphConfig, dense_affinity
from basis.spectral import spectral_embedding

QUICK_GRAPH = {"n_neighbors": 15, "scale": "global", "scale_neighbor": 7, "kernel": "paper"}


def embed(X: np.ndarray, rows: np.ndarray, K: int) -> torch.Tensor:
    W = dense_affinity(torch.as_tensor(X[rows], dtype=torch.float64), GraphConfig(**QUICK_GRAPH))
    return spectral_embedding(W, K, operator="normalized", drop_trivial=False, on_disconnected="ignore")[0]


def sample_ranks(phi: torch.Tensor, n_samples: int, generator: torch.Generator) -> dict[str, float]:
    """The share of 20-anchor samples whose design fixes the map as well as all anchors do
    (rank of the centred design, columns in the anchor set's scale, rcond 1e-3), and the
    median condition number of those that do."""
    samples = torch.rand(n_samples, len(phi), generator=generator).argsort(dim=1)[:, :20]
    centred = phi - phi.mean(dim=0)
    scale = torch.linalg.norm(centred, dim=0) / np.sqrt(len(phi)) * np.sqrt(20)
    design = (phi[samples] - phi[samples].mean(dim=1, keepdim=True)) / scale
    S = torch.linalg.svdvals(design)
    anchor_rank = int(
        (torch.linalg.svdvals(centred / scale) > NOISE_RCOND * torch.linalg.svdvals(centred / scale)[0]).sum()
    )
    ranks = (S > NOISE_RCOND * S[:, :1]).sum(dim=1)
    usable = ranks >= anchor_rank
    condition = S[usable, 0] / S[usable, anchor_rank - 1]
    return {
        "anchor_rank": anchor_rank,
        "usable_samples": float(usable.double().mean()),
        "usable_condition_median": float(condition.median()) if len(condition) else float("nan"),
    }


def alignment_error(transform: torch.Tensor, phi: torch.Tensor, reference: torch.Tensor, clean: np.ndarray) -> float:
    """RMS error of the clean anchors over the reference anchors' RMS row norm."""
    return float(rms_row_norm((apply_affine(transform, phi) - reference)[clean]) / rms_row_norm(reference))


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", required=True, help="a features .npz of digits (python -m basis features)")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--outliers", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--new-points", type=int, default=262, help="new points per batch beside the 250 anchors")
    args = parser.parse_args()
    data = np.load(args.features)
    X, y = data["X_train"], data["y_train"]
    rng = np.random.default_rng(args.seed)
    K = len(np.unique(y))
    anchors = np.concatenate([rng.choice(np.flatnonzero(y == c), 25, replace=False) for c in np.unique(y)])
    others = np.setdiff1d(np.arange(len(X)), anchors)
    reference = embed(X, np.concatenate([anchors, rng.choice(others, args.new_points, replace=False)]), K)[
        : len(anchors)
    ]
    generator = torch.Generator().manual_seed(args.seed)
    rows = []
    for batch in range(args.batches):
        slots = anchors.copy()
        corrupted = rng.choice(len(anchors), round(args.outliers * len(anchors)), replace=False)
        for slot in corrupted:
            slots[slot] = rng.choice(np.flatnonzero(y != y[anchors[slot]]))
        phi = embed(X, np.concatenate([slots, rng.choice(others, args.new_points, replace=False)]), K)[: len(anchors)]
        clean = np.ones(len(anchors), dtype=bool)
        clean[corrupted] = False
        robust = ransac_affine(phi, reference, generator=generator)
        row = {
            "batch": batch,
            "error_lstsq": alignment_error(align_affine(phi, reference).transform, phi, reference, clean),
            "error_ransac": alignment_error(robust.transform, phi, reference, clean),
            "ransac_hypotheses": robust.n_hypotheses,
            "ransac_rejected": robust.n_rejected,
            "ransac_fallback": robust.fallback,
            **sample_ranks(phi, 500, generator),
        }
        rows.append(row)
        print(json.dumps(row))
    summary = {
        key: float(np.median([row[key] for row in rows])) for key in rows[0] if key not in ("batch", "ransac_fallback")
    }
    summary["worst_error_ransac"] = max(row["error_ransac"] for row in rows)
    summary["worst_error_lstsq"] = max(row["error_lstsq"] for row in rows)
    summary["fallbacks"] = sum(row["ransac_fallback"] for row in rows)
    print(json.dumps({"median_over_batches": summary}))


if __name__ == "__main__":
    main()

"""The anchor alignment on clustered (Siamese) embeddings: why per-sample column scaling
broke RANSAC, and what the fixed solver does on the same batches.

Embeds batches of Siamese digits features (m = 512: 250 anchors, 25 per class, and 262 new
points; the quick config's graph), puts ``--outliers`` of the anchor slots of every batch
but the reference onto a node of another class, and prints, for the 20-anchor RANSAC
samples and for each batch:

- how often a sample's design is truncated, and its condition number, when every column
  is scaled by its norm over the sample itself (the solver before the fix) and over all
  anchors (the fix);
- the largest map coefficient of the sample fits in each case;
- each batch's alignment error (RMS error of the clean anchors over their RMS row norm)
  by plain least squares and by RANSAC, with RANSAC's hypotheses drawn and rejected.

    python -m basis features --dataset digits --out results/features/digits.npz
    python benchmarks/alignment_clustered.py --features results/features/digits.npz
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from basis.alignment import (
    NOISE_RCOND,
    align_affine,
    apply_affine,
    least_squares,
    ransac_affine,
)
from basis.graph import GraphConfig, dense_affinity
from basis.spectral import spectral_embedding

QUICK_GRAPH = {"n_neighbors": 15, "scale": "global", "scale_neighbor": 7, "kernel": "paper"}


def embed(X: np.ndarray, rows: np.ndarray, K: int) -> torch.Tensor:
    W = dense_affinity(torch.as_tensor(X[rows], dtype=torch.float64), GraphConfig(**QUICK_GRAPH))
    return spectral_embedding(W, K, operator="normalized", drop_trivial=False, on_disconnected="ignore")[0]


def sample_designs(phi: torch.Tensor, n_samples: int, generator: torch.Generator) -> dict[str, float]:
    """Truncation, conditioning and coefficient size of 20-anchor fits, scaled per sample
    (before) and by the anchor set (after)."""
    samples = torch.rand(n_samples, len(phi), generator=generator).argsort(dim=1)[:, :20]
    before = torch.cat([phi, torch.ones(len(phi), 1, dtype=phi.dtype)], dim=1)[samples]
    own = before / torch.linalg.norm(before, dim=1, keepdim=True)
    centred = phi - phi.mean(dim=0)
    scale = torch.linalg.norm(centred, dim=0) / np.sqrt(len(phi)) * np.sqrt(20)
    after = (phi[samples] - phi[samples].mean(dim=1, keepdim=True)) / scale
    target = torch.randn(n_samples, 20, phi.shape[1], generator=generator, dtype=phi.dtype) * phi.abs().mean()
    result = {}
    for name, design in (("per_sample", own), ("anchor_set", after)):
        S = torch.linalg.svdvals(design)
        ratio = S[:, -1] / S[:, 0]
        result[f"{name}_truncated"] = float((ratio <= NOISE_RCOND).double().mean())
        result[f"{name}_condition_median"] = float((1 / ratio).median())
    old_fit = least_squares(before, target, rcond=NOISE_RCOND)
    result["per_sample_max_coefficient"] = float(old_fit.abs().max())
    new_fit = least_squares(after, target - target.mean(dim=1, keepdim=True), rcond=NOISE_RCOND)
    result["anchor_set_max_coefficient"] = float((new_fit / scale.unsqueeze(-1)).abs().max())
    return result


def alignment_error(transform: torch.Tensor, phi: torch.Tensor, reference: torch.Tensor, clean: np.ndarray) -> float:
    """RMS error of the clean anchors over the reference anchors' RMS row norm."""
    residual = (apply_affine(transform, phi) - reference)[clean]
    return float(residual.pow(2).sum(dim=1).mean().sqrt() / reference.pow(2).sum(dim=1).mean().sqrt())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", required=True, help="a features .npz of digits (python -m basis features)")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--outliers", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    data = np.load(args.features)
    X, y = data["X_train"], data["y_train"]
    rng = np.random.default_rng(args.seed)
    K = len(np.unique(y))
    anchors = np.concatenate([rng.choice(np.flatnonzero(y == c), 25, replace=False) for c in np.unique(y)])
    others = np.setdiff1d(np.arange(len(X)), anchors)
    reference = embed(X, np.concatenate([anchors, rng.choice(others, 262, replace=False)]), K)[: len(anchors)]
    generator = torch.Generator().manual_seed(args.seed)
    rows = []
    for batch in range(args.batches):
        slots = anchors.copy()
        corrupted = rng.choice(len(anchors), round(args.outliers * len(anchors)), replace=False)
        for slot in corrupted:
            slots[slot] = rng.choice(np.flatnonzero(y != y[anchors[slot]]))
        phi = embed(X, np.concatenate([slots, rng.choice(others, 262, replace=False)]), K)[: len(anchors)]
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
            **sample_designs(phi, 500, generator),
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

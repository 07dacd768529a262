"""The anchor alignment on clustered embeddings: what a RANSAC sample can fix, RANSAC's
breakdown against the share of wrong anchors, the floor of d_G on exact targets, and the
per-call cost of RANSAC's SVD shapes.

    python -m basis features --dataset digits --out results/features/digits.npz
    python -m benchmarks alignment clustered --features results/features/digits.npz
    python -m benchmarks alignment breakdown --batches 6
    python -m benchmarks alignment exact-floor --features results/features/digits.npz --n-iter 300 1000
    python -m benchmarks alignment svd-shapes [--device cuda]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from benchmarks.common import clean_error, corrupted_batches, per_call_ms


def add_clustered_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--features", required=True, help="a features .npz of digits (python -m basis features)")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--outliers", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--new-points", type=int, default=262, help="new points per batch beside the 250 anchors")


def sample_ranks(phi: torch.Tensor, n_samples: int, generator: torch.Generator) -> dict[str, float]:
    """The share of 20-anchor samples whose design fixes the map as well as all anchors do
    (rank of the centred design, columns in the anchor set's scale, rcond 1e-3), and the
    median condition number of those that do."""
    from basis.alignment import NOISE_RCOND

    samples = torch.rand(n_samples, len(phi), generator=generator).argsort(dim=1)[:, :20]
    centred = phi - phi.mean(dim=0)
    scale = torch.linalg.norm(centred, dim=0) / np.sqrt(len(phi)) * np.sqrt(20)
    design = (phi[samples] - phi[samples].mean(dim=1, keepdim=True)) / scale
    S = torch.linalg.svdvals(design)
    whole = torch.linalg.svdvals(centred / scale)
    anchor_rank = int((whole > NOISE_RCOND * whole[0]).sum())
    ranks = (S > NOISE_RCOND * S[:, :1]).sum(dim=1)
    usable = ranks >= anchor_rank
    condition = S[usable, 0] / S[usable, anchor_rank - 1]
    return {
        "anchor_rank": anchor_rank,
        "usable_samples": float(usable.double().mean()),
        "usable_condition_median": float(condition.median()) if len(condition) else float("nan"),
    }


def clustered(args: argparse.Namespace) -> int:
    """How often a RANSAC sample can fix the map on Siamese embeddings, and what least squares and RANSAC make of them.

    Embeds batches of Siamese digits features (m = 512: 250 anchors, 25 per class, and 262
    new points, or ``--new-points``; the quick config's graph), puts ``--outliers`` of the
    anchor slots of every batch but the reference onto a node of another class, and prints
    one JSON line per batch: the share of 20-anchor samples whose design fixes the map as
    well as all anchors do (on a clustered embedding a sample must hold every class) and
    their conditioning; the alignment error (RMS error of the clean anchors over their RMS
    row norm) by least squares and by RANSAC, with RANSAC's hypotheses drawn and rejected.
    """
    from basis.alignment import align_affine, ransac_affine

    data = np.load(args.features)
    X, y = data["X_train"], data["y_train"]
    rng = np.random.default_rng(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    rows = []
    found = corrupted_batches(X, y, args.outliers, args.batches, rng, args.new_points)
    for batch, (reference, phi, clean, _) in enumerate(found):
        robust = ransac_affine(phi, reference, generator=generator)
        row = {
            "batch": batch,
            "error_lstsq": clean_error(align_affine(phi, reference).transform, phi, reference, clean),
            "error_ransac": clean_error(robust.transform, phi, reference, clean),
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
    return 0


#: The shares of wrong anchors the breakdown is measured at.
LEVELS = (0.0, 0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45)


def add_breakdown_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--features", help="a digits features .npz (python -m basis features) instead of raw digits")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)


def _breakdown_sets(features: str | None, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Tight synthetic clusters in 16-d (10 classes), and raw digits or the features given."""
    from basis.data import load_inputs

    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(10, 16))
    y = np.repeat(np.arange(10), 300)
    clusters = centres[y] + 0.3 * rng.normal(size=(len(y), 16))
    if features:
        digits = np.load(features)
        return {"clusters": (clusters, y), "digits features": (digits["X_train"], digits["y_train"])}
    raw = load_inputs("digits")
    return {"clusters": (clusters, y), "digits (raw)": (raw.X_train, raw.y_train)}


def breakdown(args: argparse.Namespace) -> int:
    """RANSAC's breakdown on clustered anchors, uniform samples against stratified ones.

    At each share of wrong anchors: how far the map RANSAC returns is from the best one
    could do, how many hypotheses it drew, and whether it says when it is unsure. Uniform
    samples are the authors' draw; stratified ones hold every class. Batches of m = 512
    (250 anchors, 25 per class, and 262 others; 15 neighbours, a global scale), K = 10 with
    the trivial vector kept; in every batch after the reference one, ``level`` of the anchor
    slots hold a node of another class. Per batch: the clean error of RANSAC's map and of
    the oracle (least squares on the clean anchors only), the hypotheses drawn, and the
    flags (unsure: ended short of its confidence; fallback). A map is bad when its clean
    error exceeds twice the oracle's; the goal is no bad map unflagged.
    """
    from basis.alignment import align_affine, ransac_affine

    print(
        "| data | wrong anchors | sampling | hypotheses, median (max) | clean error, median (max)"
        " | oracle, median | bad maps | flagged | bad and unflagged |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (X, y) in _breakdown_sets(args.features, args.seed).items():
        for level in LEVELS:
            rows = {"uniform": [], "stratified": []}
            found = corrupted_batches(X, y, level, args.batches, np.random.default_rng(args.seed))
            for reference, phi, clean, classes in found:
                oracle = clean_error(align_affine(phi[clean], reference[clean]).transform, phi, reference, clean)
                for sampling, strata in (("uniform", None), ("stratified", torch.as_tensor(classes))):
                    generator = torch.Generator().manual_seed(args.seed)
                    fit = ransac_affine(phi, reference, generator=generator, strata=strata)
                    error = clean_error(fit.transform, phi, reference, clean)
                    flagged = fit.unsure or fit.fallback
                    rows[sampling].append((fit.n_hypotheses, error, oracle, error > 2 * oracle, flagged))
            for sampling, found_rows in rows.items():
                drawn, errors, oracles, bad, flagged = (np.array(column) for column in zip(*found_rows))
                print(
                    f"| {name} | {level:.0%} | {sampling} | {np.median(drawn):.0f} ({drawn.max()})"
                    f" | {np.median(errors):.3f} ({errors.max():.3f}) | {np.median(oracles):.3f}"
                    f" | {bad.sum()} of {len(bad)} | {flagged.sum()} | {(bad & ~flagged).sum()} |",
                    flush=True,
                )
    return 0


def add_exact_floor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--features", required=True, help="a features .npz from `python -m basis features`")
    parser.add_argument("--n-iter", type=int, nargs="+", default=[300, 1000])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a BASiS setting")


def _exact_targets_estimator():
    """The shared training loop on random batches whose targets are the rows of the whole
    training graph's analytic embedding, scaled like a batch embedding (unit-norm columns
    over batch_size nodes)."""
    from basis.estimators import SpectralEstimator
    from basis.references import analytic_embedding

    class ExactTargets(SpectralEstimator):
        def _prepare(self, X: torch.Tensor, y: np.ndarray | None) -> None:
            settings = {"graph": self.graph, "operator": self.operator, "drop_trivial": self.drop_trivial}
            exact = analytic_embedding(X.cpu().numpy(), settings, self.n_components)
            self.targets_ = torch.as_tensor(exact * np.sqrt(len(exact) / self.batch_size), dtype=torch.float32)

        def _next_batch(self, features_of, n_train, timer):
            batch = self._sample(n_train, self.batch_size)
            return features_of(batch), self.targets_[batch].to(self.device_)

        def _batch_loss(self, batch, timer):
            X_batch, target = batch
            return ((self.model_(X_batch) - target) ** 2).sum(dim=1).mean(), {}

    return ExactTargets


def exact_floor(args: argparse.Namespace) -> int:
    """The d_G a network reaches when trained on exact targets: a floor for every BASiS variant.

    BASiS regresses its network on aligned batch embeddings, which carry sampling and
    alignment noise. Training the same network with the same loop, budget and batch size on
    the exact eigenvectors of the whole training graph removes that noise; what d_G remains
    on the test split is what the function class, the budget and the difference between the
    training graph and the test graph leave, which no alignment variant can remove. Prints
    one JSON line per budget: the exact-target network's test d_G and the paper's BASiS's.
    """
    from basis import metrics
    from basis.catalog.settings import resolve_settings
    from basis.data import load_npz
    from basis.estimators import BASiS
    from basis.references import analytic_embedding

    ExactTargets = _exact_targets_estimator()
    data = load_npz(args.features, ("X_train", "y_train", "X_test", "y_test", "dataset"), "features file")
    settings = resolve_settings("basis", assignments=args.set, dataset=str(data["dataset"]))
    n_components = len(np.unique(data["y_train"]))
    reference = analytic_embedding(data["X_test"], settings, n_components)
    options = {k: v for k, v in settings.items() if k not in ("eval", "n_components")}
    shared = {k: options[k] for k in ("graph", "operator", "drop_trivial", "batch_size", "lr")}
    for n_iter in args.n_iter:
        scores = {"exact_targets": [], "basis": []}
        for seed in range(args.seeds):
            models = {
                "exact_targets": ExactTargets(n_components, **{**shared, "n_iter": n_iter}, seed=seed, device="cpu"),
                "basis": BASiS(n_components, **{**options, "n_iter": n_iter}, seed=seed, device="cpu"),
            }
            for name, model in models.items():
                embedding = model.fit(data["X_train"], data["y_train"]).transform(data["X_test"])
                scores[name].append(metrics.grassmann_distance(embedding, reference))
        means = {f"{k}_d_G_mean": float(np.mean(v)) for k, v in scores.items()}
        print(json.dumps({"n_iter": n_iter, **means, "seeds": args.seeds}))
    return 0


def add_svd_shapes_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cuda")


def _qr_then_svd(A: torch.Tensor):
    return torch.linalg.svd(torch.linalg.qr(A)[1], full_matrices=False)


def svd_shapes(args: argparse.Namespace) -> int:
    """Per-call cost of ``torch.linalg.svd`` (with its host check) on RANSAC's shapes, and of
    the QR-then-SVD route for tall designs: one JSON object, milliseconds per shape and driver."""
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    report = {}
    for shape in [(1, 250, 10), (250, 10), (100, 20, 10), (1, 10, 10), (101, 10, 10), (2, 250, 10)]:
        A = torch.randn(shape, generator=g, dtype=torch.float64).to(device)
        row = {"svd": per_call_ms(torch.linalg.svd, A, full_matrices=False, device=device)}
        for driver in ("gesvd", "gesvdj", "gesvda"):
            try:
                row[driver] = per_call_ms(torch.linalg.svd, A, full_matrices=False, driver=driver, device=device)
            except RuntimeError as err:
                row[driver] = str(err).splitlines()[0][:60]
        if shape[-2] > shape[-1]:
            row["qr"] = per_call_ms(torch.linalg.qr, A, device=device)
            row["qr_then_svd"] = per_call_ms(_qr_then_svd, A, device=device)
        report[str(shape)] = row
    print(json.dumps(report))
    return 0


PARTS = {
    "clustered": (add_clustered_arguments, clustered),
    "breakdown": (add_breakdown_arguments, breakdown),
    "exact-floor": (add_exact_floor_arguments, exact_floor),
    "svd-shapes": (add_svd_shapes_arguments, svd_shapes),
}

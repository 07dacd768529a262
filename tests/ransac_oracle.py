"""Test oracle: :func:`basis.alignment.ransac_affine` as it was before the search moved onto
the device (commit 09065fe), a host loop over Python numbers. The device-native search must
give the same estimate on the same samples (issue #20)."""

import math

import torch

from basis.alignment import (
    MAX_GAIN,
    MAX_REFITS,
    NOISE_RCOND,
    AlignmentResult,
    align_affine,
    alignment_gain,
    anchors_needed,
    hypotheses_needed,
    inlier_threshold,
    rms_row_norm,
)
from basis.alignment.affine import _affine_solve, _check_anchors, _row_errors
from basis.errors import InputError


def ransac_affine_09065fe(
    source: torch.Tensor,
    target: torch.Tensor,
    *,
    n_iter: int = 100,
    max_iter: int = 5000,
    confidence: float = 0.99,
    sample_size: int = 20,
    tolerance: float = 0.25,
    tolerance_mode: str = "relative",
    rcond: float = NOISE_RCOND,
    max_gain: float = MAX_GAIN,
    generator: torch.Generator | None = None,
    linear: bool = False,
) -> AlignmentResult:
    """The RANSAC of commit 09065fe, kept verbatim as the oracle of the device-native search."""
    _check_anchors(source, target, linear)
    n_anchors, dim = source.shape
    minimal, _ = anchors_needed(dim, linear=linear)
    if not minimal <= sample_size <= n_anchors:
        raise InputError(
            f"sample_size must be between {minimal} (fixes the map in K={dim}) and the number of anchors"
            f" {n_anchors}, got {sample_size}"
        )
    if not 1 <= n_iter <= max_iter or not tolerance > 0 or not 0 < confidence < 1:
        raise InputError(
            "RANSAC needs 1 <= n_iter <= max_iter, tolerance > 0 and 0 < confidence < 1, got"
            f" n_iter={n_iter}, max_iter={max_iter}, tolerance={tolerance}, confidence={confidence}"
        )
    threshold = inlier_threshold(target, tolerance, tolerance_mode)
    generator = generator or torch.Generator().manual_seed(0)
    dtype = source.dtype
    source, target = source.double(), target.double()
    # Every fit measures a column by its scale over all anchors, shrunk to the fit's size.
    centred = source if linear else source - source.mean(dim=0)
    anchor_scale = torch.linalg.norm(centred, dim=0, keepdim=True) / math.sqrt(n_anchors)

    def fit(rows: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        scale = anchor_scale * math.sqrt(size)
        return _affine_solve(source[rows], target[rows], linear, rcond, scale)

    def refine(inliers: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Refit on the inliers until the inlier set stops changing (local optimisation)."""
        transform, refits = fit(inliers, int(inliers.sum()))[0], 1
        while refits < MAX_REFITS:
            refined = _row_errors(transform, source, target) < threshold
            if torch.equal(refined, inliers) or int(refined.sum()) < consensus:
                break
            inliers, transform, refits = refined, fit(refined, int(refined.sum()))[0], refits + 1
        return transform, inliers, refits

    # A map is supported only by more anchors than fix it, and at least by its own sample:
    # K+1 inliers of an exact fit through K+1 anchors are no evidence at all.
    consensus = min(n_anchors, max(sample_size, minimal + 1))
    # A sample is usable when it fixes as much of the map as all anchors do.
    anchor_rank = int(fit(torch.arange(n_anchors, device=source.device), n_anchors)[1])
    best_score, best = (-1, 0.0), None  # (inlier count, -summed inlier error), refine()'s result
    drawn = rejected = full_rank = 0
    needed = float(n_iter)
    while drawn < needed:
        block = min(n_iter, max_iter - drawn)
        # One random permutation per hypothesis; its first sample_size anchors are the sample.
        samples = torch.rand(block, n_anchors, generator=generator).argsort(dim=1)[:, :sample_size]
        hypotheses, ranks = fit(samples.to(source.device), sample_size)
        errors = _row_errors(hypotheses, source.unsqueeze(0), target.unsqueeze(0))
        blown_up = alignment_gain(hypotheses, source.unsqueeze(0), target.unsqueeze(0)) > max_gain
        is_inlier = (errors < threshold) & ~blown_up.unsqueeze(1)
        counts = is_inlier.sum(dim=1)
        inlier_error = torch.where(is_inlier, errors, torch.zeros_like(errors)).sum(dim=1)
        # Most inliers first, then smallest summed inlier error.
        top = int(torch.argmax(counts * (1.0 + inlier_error.max()) - inlier_error))
        score = (int(counts[top]), -float(inlier_error[top]))
        drawn, rejected = drawn + block, rejected + int(blown_up.sum())
        full_rank += int((ranks >= anchor_rank).sum())
        if score > best_score:
            best_score = score
            if score[0] >= consensus:
                best = refine(is_inlier[top])
        # The inlier ratio after local optimisation is the best estimate of the clean share.
        ratio = (int(best[1].sum()) if best else best_score[0]) / n_anchors
        usable = max(full_rank, 1) / drawn
        needed = min(max_iter, max(n_iter, hypotheses_needed(ratio, sample_size, confidence, usable)))
    if best is not None and float(alignment_gain(best[0], source, target)) <= max_gain:
        transform, _, refits = best
        residuals = _row_errors(transform, source, target)
        # A map that misses the anchors by more, in RMS, than the zero map would is no
        # alignment, whatever its consensus (least squares on all anchors never is one).
        if float(residuals.pow(2).mean().sqrt()) <= float(rms_row_norm(target)):
            return AlignmentResult(
                transform.to(dtype), residuals < threshold, residuals, False, drawn, rejected, refits
            )
    result = align_affine(source, target, linear=linear)
    result.transform, result.fallback = result.transform.to(dtype), True
    result.n_hypotheses, result.n_rejected = drawn, rejected
    return result

"""Affine alignment of one embedding to another through shared anchor nodes.

Implements the least-squares map of ``eq:stepAffie_transformation_least_squares2``,
its robust RANSAC estimate, the batch alignment ``eq:stepAlignment`` and
Algorithm 2's global transform T_G.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from basis.errors import InputError

log = logging.getLogger(__name__)


@dataclass
class AlignmentResult:
    """A fitted affine map and how it was found.

    ``transform`` is T in R^{K x (K+1)}; ``inliers`` a boolean mask over the anchors;
    ``residuals`` the row-wise L2 error of every anchor under T; ``fallback`` is True
    when no RANSAC hypothesis had enough inliers and T was fitted on all anchors.
    """

    transform: torch.Tensor
    inliers: torch.Tensor
    residuals: torch.Tensor
    fallback: bool = False


def _homogeneous(phi: torch.Tensor) -> torch.Tensor:
    """[phi, 1]: append a column of ones."""
    return torch.cat([phi, torch.ones_like(phi[..., :1])], dim=-1)


#: The maps a batch can be aligned by: ``affine`` (the paper's, T in R^{K x (K+1)}) or
#: ``linear`` (no translation, T in R^{K x K}; beyond the paper).
MAPS = ("affine", "linear")


def _design(phi: torch.Tensor, linear: bool) -> torch.Tensor:
    """The rows a map multiplies: [phi, 1] for an affine map, phi for a linear one."""
    return phi if linear else _homogeneous(phi)


def anchors_needed(dim: int, *, linear: bool = False) -> tuple[int, str]:
    """How many anchors fix a map in dimension ``dim``, and that count in words: K for a
    linear map, K+1 for an affine one."""
    return (dim, "K") if linear else (dim + 1, "K+1")


def _check_anchors(source: torch.Tensor, target: torch.Tensor, linear: bool = False) -> None:
    if source.ndim != 2 or source.shape != target.shape:
        raise InputError(
            f"source and target anchors must be 2-D arrays of equal shape, got {tuple(source.shape)}"
            f" and {tuple(target.shape)}"
        )
    n_anchors, dim = source.shape
    needed, count = anchors_needed(dim, linear=linear)
    if n_anchors < needed:
        kind = "a linear" if linear else "an affine"
        raise InputError(f"{kind} map in dimension K={dim} needs at least {count}={needed} anchors, got {n_anchors}")


#: Singular values of a design below this fraction of its largest are treated as zero.
#: Eigenvector entries carry sampling noise of about 1e-2 of their scale, so a direction
#: weaker than 1e-3 of the strongest amplifies that noise more than a thousandfold; the
#: anchor designs of Table 1 (condition number 25-340) are never truncated.
RCOND = 1e-3


def least_squares(design: torch.Tensor, target: torch.Tensor, *, rcond: float = RCOND) -> torch.Tensor:
    """Least-squares solution X of ``design @ X ~ target`` by truncated SVD.

    Well defined for rank-deficient and ill-conditioned designs, and the same algorithm
    on every device: ``torch.linalg.lstsq`` is rank-revealing on the CPU (gelsy) but not on
    CUDA (gels only), where a nearly singular design raises or returns huge coefficients.
    The design's columns are scaled to unit norm first, so that the cutoff does not depend
    on the units of a column (an embedding's entries against the affine map's column of
    ones); singular values below ``rcond`` times the largest are then dropped, which gives
    the minimum-norm solution in the scaled coefficients. Batched over leading
    dimensions; computed in float64.
    """
    design, target = design.double(), target.double()
    norms = torch.linalg.norm(design, dim=-2, keepdim=True)
    norms = torch.where(norms > 0, norms, torch.ones_like(norms))
    U, S, Vh = torch.linalg.svd(design / norms, full_matrices=False)
    keep = S > rcond * S[..., :1]
    inverse = torch.where(keep, 1.0 / torch.where(keep, S, torch.ones_like(S)), torch.zeros_like(S))
    scaled = Vh.transpose(-1, -2) @ (inverse.unsqueeze(-1) * (U.transpose(-1, -2) @ target))
    return scaled / norms.transpose(-1, -2)


def affine_least_squares(source: torch.Tensor, target: torch.Tensor, *, linear: bool = False) -> torch.Tensor:
    """T = argmin_T sum_i ||target_i - T [source_i, 1]||^2 (``eq:stepAffie_transformation_least_squares2``).

    Solved by :func:`least_squares` (minimum norm where the anchors do not fix T). Works on
    a batch of problems too (leading dimensions are broadcast). Returns T of shape (..., K, K+1);
    with ``linear``, the map without translation, T = argmin sum_i ||target_i - T source_i||^2,
    of shape (..., K, K).
    """
    return least_squares(_design(source, linear), target).transpose(-1, -2).to(source.dtype)


def apply_affine(transform: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """phi <- T [phi, 1] for every row (``eq:stepAlignment``); a square T (a linear map)
    is applied as phi <- T phi."""
    return _design(phi, transform.shape[-1] == phi.shape[-1]) @ transform.T


def _row_errors(transform: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    design = _design(source, transform.shape[-1] == source.shape[-1])
    return torch.linalg.norm(design @ transform.transpose(-1, -2) - target, dim=-1)


def align_affine(source: torch.Tensor, target: torch.Tensor, *, linear: bool = False) -> AlignmentResult:
    """Plain least squares on all anchors, as an :class:`AlignmentResult` (a linear map
    with ``linear``)."""
    _check_anchors(source, target, linear)
    transform = affine_least_squares(source, target, linear=linear)
    residuals = _row_errors(transform, source, target)
    return AlignmentResult(transform, torch.ones_like(residuals, dtype=torch.bool), residuals)


TOLERANCE_MODES = ("relative", "absolute")


def inlier_threshold(target: torch.Tensor, tolerance: float, mode: str = "relative") -> float:
    """The row-wise error below which an anchor is an inlier.

    ``relative`` (default): ``tolerance`` times the RMS row norm of the target anchors, so
    the rule means the same at any K, batch size and embedding scale (unit-norm
    eigenvectors of a batch of m nodes have rows of norm about sqrt(K/m)). ``absolute``:
    ``tolerance`` itself, as in the authors' code (0.1 for MNIST, where every anchor passes
    since rows have norm about 0.14; 0.01 for the moons).
    """
    if mode not in TOLERANCE_MODES:
        raise InputError(f"tolerance_mode must be one of {list(TOLERANCE_MODES)}, got {mode!r}")
    if mode == "absolute":
        return tolerance
    return tolerance * float(torch.linalg.norm(target.double(), dim=1).pow(2).mean().sqrt())


def ransac_affine(
    source: torch.Tensor,
    target: torch.Tensor,
    *,
    n_iter: int = 100,
    sample_size: int = 20,
    tolerance: float = 0.25,
    tolerance_mode: str = "relative",
    generator: torch.Generator | None = None,
    linear: bool = False,
) -> AlignmentResult:
    """Robust affine map from ``source`` anchors to ``target`` anchors by RANSAC (a linear
    map with ``linear``: then K anchors fix one instead of K+1).

    Each of ``n_iter`` hypotheses is a least-squares fit to ``sample_size`` random
    anchors; an anchor is an inlier when its row-wise L2 error is below the threshold of
    :func:`inlier_threshold` (by default 0.25 of the target's RMS row norm: on Siamese
    digits features, 99 % of clean anchors lie within 0.15 of it, and an anchor from the
    wrong class misses by about its whole norm). The hypothesis with most inliers (ties:
    smallest inlier error) is refitted on its inliers. When no hypothesis has K+1 inliers,
    T is fitted on all anchors and the fallback is logged and flagged.

    A hypothesis is clean with probability (1 - outlier fraction)^sample_size: the
    authors' 20 anchors per sample and 100 iterations tolerate a few percent of
    outliers; with many, use minimal samples (K+1) or more iterations.
    """
    _check_anchors(source, target, linear)
    n_anchors, dim = source.shape
    minimal, _ = anchors_needed(dim, linear=linear)
    if not minimal <= sample_size <= n_anchors:
        raise InputError(
            f"sample_size must be between {minimal} (fixes the map in K={dim}) and the number of anchors"
            f" {n_anchors}, got {sample_size}"
        )
    if n_iter < 1 or not tolerance > 0:
        raise InputError(f"n_iter must be >= 1 and tolerance > 0, got {n_iter} and {tolerance}")
    threshold = inlier_threshold(target, tolerance, tolerance_mode)
    generator = generator or torch.Generator().manual_seed(0)
    dtype = source.dtype
    source, target = source.double(), target.double()
    # One random permutation per hypothesis; its first sample_size anchors are the sample.
    samples = torch.rand(n_iter, n_anchors, generator=generator).argsort(dim=1)[:, :sample_size]
    samples = samples.to(source.device)
    hypotheses = affine_least_squares(source[samples], target[samples], linear=linear)
    errors = _row_errors(hypotheses, source.unsqueeze(0), target.unsqueeze(0))
    is_inlier = errors < threshold
    counts = is_inlier.sum(dim=1)
    inlier_error = torch.where(is_inlier, errors, torch.zeros_like(errors)).sum(dim=1)
    # Most inliers first, then smallest summed inlier error.
    best = int(torch.argmax(counts * (1.0 + inlier_error.max()) - inlier_error))
    if int(counts[best]) < minimal:
        log.warning(
            "RANSAC: no hypothesis had %d inliers (best %d of %d at tolerance %g);"
            " falling back to least squares on all anchors",
            minimal,
            int(counts[best]),
            n_anchors,
            threshold,
        )
        result = align_affine(source, target, linear=linear)
        result.transform, result.fallback = result.transform.to(dtype), True
        return result
    transform = affine_least_squares(source[is_inlier[best]], target[is_inlier[best]], linear=linear)
    residuals = _row_errors(transform, source, target)
    return AlignmentResult(transform.to(dtype), residuals < threshold, residuals)


def global_transform(
    previous_anchors: torch.Tensor, updated_anchors: torch.Tensor, **ransac_options
) -> AlignmentResult:
    """T_G of Algorithm 2: maps the anchors' embedding under updated features onto
    their embedding under the previous features (RANSAC, same options as
    :func:`ransac_affine`). Apply it to the whole updated embedding with
    :func:`apply_affine`."""
    return ransac_affine(updated_anchors, previous_anchors, **ransac_options)

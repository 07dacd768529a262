"""Affine alignment of one embedding to another through shared anchor nodes, by least
squares: the map of ``eq:stepAffie_transformation_least_squares2`` (:func:`affine_least_squares`)
and its use on a batch (:func:`align_affine`, :func:`apply_affine`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from basis.errors import InputError
from basis.runtime import device as devices
from basis.runtime.capture import checked


@dataclass
class AlignmentResult:
    """A fitted affine map and how it was found.

    ``transform`` is T in R^{K x (K+1)}; ``inliers`` a boolean mask over the anchors;
    ``residuals`` the row-wise L2 error of every anchor under T; ``fallback`` is True
    when no RANSAC hypothesis had enough inliers and T was fitted on all anchors;
    ``n_hypotheses`` the RANSAC hypotheses drawn, ``n_rejected`` those rejected because
    their map blew the anchors up (see :data:`MAX_GAIN`), ``n_refits`` the refits on the
    inliers until the inlier set stopped changing; ``unsure`` is True when the search
    ended short of its confidence (it drew ``max_iter`` hypotheses, fewer than its best
    inlier ratio says that confidence needs). From :class:`RansacSearch` the flags and the
    counts are 0-dim tensors on the device; :meth:`on_host` reads them.
    """

    transform: torch.Tensor
    inliers: torch.Tensor
    residuals: torch.Tensor
    fallback: bool | torch.Tensor = False
    n_hypotheses: int = 0
    n_rejected: int | torch.Tensor = 0
    n_refits: int | torch.Tensor = 0
    unsure: bool | torch.Tensor = False

    def on_host(self) -> AlignmentResult:
        """The same result with its flags and counts as Python numbers (one read)."""
        fallback, rejected, refits, unsure = torch.stack(
            [
                torch.as_tensor(v, device=self.transform.device).long()
                for v in (self.fallback, self.n_rejected, self.n_refits, self.unsure)
            ]
        ).tolist()
        return AlignmentResult(
            self.transform,
            self.inliers,
            self.residuals,
            bool(fallback),
            int(self.n_hypotheses),
            rejected,
            refits,
            bool(unsure),
        )


def _homogeneous(phi: torch.Tensor) -> torch.Tensor:
    """[phi, 1]: append a column of ones."""
    return torch.cat([phi, torch.ones_like(phi[..., :1])], dim=-1)


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


#: The rank tolerance of a RANSAC hypothesis, relative to its strongest direction, with
#: every column measured in the scale it has over *all* anchors (see
#: :func:`ransac_affine`). Tied to the data's noise: a batch's eigenvector entries carry
#: sampling noise of about 1e-2 of their scale, so a direction that a sample holds at less
#: than 1e-3 of its share of the anchor set (e.g. a class indicator on a sample that
#: misses the class, 1e-9) amplifies that noise more than a thousandfold. Table 1's anchor
#: designs (condition number 25-340 once centred and scaled) are never truncated.
NOISE_RCOND = 1e-3

#: A map whose predictions on the anchors have an RMS row norm above this many times the
#: target anchors' is not an alignment but a blow-up: such a RANSAC hypothesis is rejected
#: (and counted), and such a final map is replaced by the fallback. A map between two
#: batch embeddings of one graph has a gain near 1.
MAX_GAIN = 10.0


#: A design taller than :data:`BATCHED_SVD_ROWS` (and than it is wide) is reduced to its
#: triangular factor before its SVD on CUDA (:func:`basis.runtime.device.is_cuda`). There,
#: cuSOLVER's batched Jacobi SVD, one cheap call for a whole batch, takes matrices of at
#: most 32 rows; a taller one goes to a general driver (all 250 anchors of a digits batch,
#: K = 10, on an H200: 0.70 ms a call against 0.21 ms for their 10 x 10 factor,
#: ``python -m benchmarks alignment svd-shapes``). LAPACK reduces a tall matrix itself, so the CPU keeps the
#: plain SVD and its bytes.
BATCHED_SVD_ROWS = 32


def machine_rcond(design: torch.Tensor) -> float:
    """The rank tolerance of an exact solve: machine epsilon times the larger dimension
    of the design, as LAPACK's and ``numpy.linalg.lstsq``'s default ``rcond``."""
    return torch.finfo(torch.float64).eps * max(design.shape[-2:])


def _solve(
    design: torch.Tensor, target: torch.Tensor, rcond: float | None, column_scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`least_squares`, and the rank it kept."""
    return _solves(design, target, [rcond], column_scale)[0]


def _solves(
    design: torch.Tensor, target: torch.Tensor, rconds: list[float | None], column_scale: torch.Tensor | None
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`least_squares` at each rank tolerance of ``rconds``, from one SVD."""
    design, target = design.double(), target.double()
    if column_scale is None:
        column_scale = torch.linalg.norm(design, dim=-2, keepdim=True)
    column_scale = column_scale.double()
    column_scale = torch.where(column_scale > 0, column_scale, torch.ones_like(column_scale))
    scaled_design = design / column_scale
    rows, columns = scaled_design.shape[-2:]
    # checked: where a recorded chain of CUDA graphs splits (basis.runtime.capture)
    if devices.is_cuda(design) and rows > BATCHED_SVD_ROWS and rows > columns:
        # The triangular factor of [design, target] holds R and Q^T target: the SVD of R
        # gives the singular values and, through U_R^T Q^T target, the projection, with
        # no Q formed.
        reduced = torch.linalg.qr(torch.cat([scaled_design, target], dim=-1), mode="r").R
        U, S, Vh = checked(torch.linalg.svd, reduced[..., :columns, :columns], full_matrices=False)
        projected = U.transpose(-1, -2) @ reduced[..., :columns, columns:]
    else:
        U, S, Vh = checked(torch.linalg.svd, scaled_design, full_matrices=False)
        projected = U.transpose(-1, -2) @ target
    solutions = []
    for rcond in rconds:
        cutoff = max(machine_rcond(design), rcond or 0.0)
        keep = S > cutoff * S[..., :1]
        inverse = torch.where(keep, 1.0 / torch.where(keep, S, torch.ones_like(S)), torch.zeros_like(S))
        scaled = Vh.transpose(-1, -2) @ (inverse.unsqueeze(-1) * projected)
        solutions.append((scaled / column_scale.transpose(-1, -2), keep.sum(dim=-1)))
    return solutions


def least_squares(
    design: torch.Tensor,
    target: torch.Tensor,
    *,
    rcond: float | None = None,
    column_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Least-squares solution X of ``design @ X ~ target`` by truncated SVD.

    The same algorithm on every device: ``torch.linalg.lstsq`` is rank-revealing on the
    CPU (gelsy) but not on CUDA (gels only), where a nearly singular design raises or
    returns huge coefficients. Each column of the design is divided by its
    ``column_scale`` (default: its own norm, so that the rank does not depend on a
    column's units), singular values at or below ``rcond`` times the largest are dropped
    (never less than :func:`machine_rcond`, the default: exact wherever the design has
    full rank, as ``numpy.linalg.lstsq``), and the result is the minimum-norm solution in
    the scaled coefficients. Batched over leading dimensions; computed in float64.
    """
    return _solve(design, target, rcond, column_scale)[0]


def _affine_solve(
    source: torch.Tensor,
    target: torch.Tensor,
    linear: bool,
    rcond: float | None,
    column_scale: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`affine_least_squares`, and the rank of its (centred) design."""
    return _affine_solves(source, target, linear, [rcond], column_scale)[0]


def _affine_solves(
    source: torch.Tensor,
    target: torch.Tensor,
    linear: bool,
    rconds: list[float | None],
    column_scale: torch.Tensor | None,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`_affine_solve` at each rank tolerance of ``rconds``, from one SVD."""
    dtype, source, target = source.dtype, source.double(), target.double()
    if linear:
        return [(X.transpose(-1, -2).to(dtype), rank) for X, rank in _solves(source, target, rconds, column_scale)]
    source_mean, target_mean = source.mean(dim=-2, keepdim=True), target.mean(dim=-2, keepdim=True)
    solutions = _solves(source - source_mean, target - target_mean, rconds, column_scale)
    return [
        (torch.cat([A, target_mean - source_mean @ A], dim=-2).transpose(-1, -2).to(dtype), rank)
        for A, rank in solutions
    ]


def affine_least_squares(
    source: torch.Tensor,
    target: torch.Tensor,
    *,
    linear: bool = False,
    rcond: float | None = None,
    column_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """T = argmin_T sum_i ||target_i - T [source_i, 1]||^2 (``eq:stepAffie_transformation_least_squares2``).

    The affine fit is solved on centred anchors (T = [A, b] with A from the centred
    problem and b = mean(target) - A mean(source)), which is the same least-squares
    problem but does not depend on where the origin is: a column 1 + 1e-3 v is as well
    determined as v. A is found by :func:`least_squares` with ``rcond`` and
    ``column_scale`` (the scale of each centred source column; default its own norm), so
    with the defaults T equals ``numpy.linalg.lstsq`` on [source, 1] wherever that design
    has full rank, and is the minimum-norm map where the anchors do not fix it. Works on a
    batch of problems (leading dimensions are broadcast). Returns T of shape (..., K, K+1);
    with ``linear``, the map without translation, T = argmin sum_i ||target_i - T source_i||^2,
    of shape (..., K, K).
    """
    return _affine_solve(source, target, linear, rcond, column_scale)[0]


def apply_affine(transform: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """phi <- T [phi, 1] for every row (``eq:stepAlignment``); a square T (a linear map)
    is applied as phi <- T phi."""
    return _design(phi, transform.shape[-1] == phi.shape[-1]) @ transform.transpose(-1, -2)


def _row_errors(transform: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.linalg.norm(apply_affine(transform, source) - target, dim=-1)


def rms_row_norm(rows: torch.Tensor) -> torch.Tensor:
    """sqrt(mean_i ||row_i||^2), in float64: the scale an embedding's anchors have."""
    return rows.double().pow(2).sum(dim=-1).mean(dim=-1).sqrt()


def alignment_gain(transform: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """RMS row norm of the mapped ``source`` over that of ``target``: about 1 for a map
    between two embeddings of one graph, orders of magnitude more for a blown-up fit."""
    return rms_row_norm(apply_affine(transform, source)) / rms_row_norm(target)


def align_affine(source: torch.Tensor, target: torch.Tensor, *, linear: bool = False) -> AlignmentResult:
    """Plain least squares on all anchors, as an :class:`AlignmentResult` (a linear map
    with ``linear``)."""
    _check_anchors(source, target, linear)
    transform = affine_least_squares(source, target, linear=linear)
    residuals = _row_errors(transform, source, target)
    return AlignmentResult(transform, torch.ones_like(residuals, dtype=torch.bool), residuals)

"""Affine alignment of one embedding to another through shared anchor nodes.

Implements the least-squares map of ``eq:stepAffie_transformation_least_squares2``,
its robust RANSAC estimate, the batch alignment ``eq:stepAlignment`` and
Algorithm 2's global transform T_G.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
from dataclasses import dataclass

import torch

from basis.capture import checked
from basis.errors import InputError

log = logging.getLogger(__name__)


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


#: Devices where a design taller than :data:`BATCHED_SVD_ROWS` (and than it is wide) is
#: reduced to its triangular factor before its SVD. On CUDA, cuSOLVER's batched Jacobi
#: SVD, one cheap call for a whole batch, takes matrices of at most 32 rows; a taller one
#: goes to a general driver (all 250 anchors of a digits batch, K = 10, on an H200: 0.70 ms
#: a call against 0.21 ms for their 10 x 10 factor, ``benchmarks/svd_shapes.py``). LAPACK
#: reduces a tall matrix itself, so the CPU keeps the plain SVD and its bytes.
REDUCE_TALL_DESIGNS_ON = ("cuda",)
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
    # checked: where a recorded chain of CUDA graphs splits (basis.capture)
    if design.device.type in REDUCE_TALL_DESIGNS_ON and rows > BATCHED_SVD_ROWS and rows > columns:
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
    return tolerance * float(rms_row_norm(target))


def hypotheses_needed(
    inlier_ratio: float, sample_size: int, confidence: float, full_rank_fraction: float = 1.0
) -> float:
    """How many random samples make at least one usable sample likely with probability
    ``confidence``: log(1 - confidence) / log(1 - q w^s) for inlier ratio w and sample size
    s (Fischler and Bolles), where q, the fraction of samples whose design fixes the map,
    counts the degenerate samples out (a clustered embedding's sample must hold every
    cluster); infinite when no sample can be usable."""
    clean = full_rank_fraction * inlier_ratio**sample_size
    if clean >= 1.0:
        return 1.0
    if clean <= 0.0:
        return math.inf
    return math.log(1.0 - confidence) / math.log1p(-clean)


#: :meth:`RansacSearch.settle` on a GPU draws this many times the hypotheses still needed
#: at once, with the mapped anchors of all of them in at most ROUND_BATCH_BYTES.
ROUND_MARGIN = 1.25
ROUND_BATCH_BYTES = 2**28

#: Refits on the inliers (local optimisation) stop after this many even if the inlier set
#: still changes; in practice it settles after one or two.
MAX_REFITS = 20


def ransac_affine(
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
    strata: torch.Tensor | None = None,
) -> AlignmentResult:
    """Robust affine map from ``source`` anchors to ``target`` anchors by RANSAC (a linear
    map with ``linear``: then K anchors fix one instead of K+1).

    Hypotheses are least-squares fits (:func:`affine_least_squares`) to ``sample_size``
    random anchors, drawn in rounds of ``n_iter``. After each round the number of
    hypotheses needed for ``confidence`` is computed from the best inlier ratio seen so
    far and the fraction of samples whose design had full rank (:func:`hypotheses_needed`),
    and rounds are drawn until that many have been drawn or ``max_iter`` (the cap: 5,000
    hypotheses find a clean, full-rank 20-anchor sample at 99 % confidence when 70 % of
    the anchors are clean, a minimal K+1 = 11-anchor one down to 50 %, in general
    position). On a clustered embedding a sample fixes the map only if it holds every
    cluster: 20 anchors of 10 classes do about one time in five, K+1 = 11 anchors about
    one in 500, so there minimal samples are the worse choice. Where the anchors' classes
    are known (``strata``, one code per anchor), every sample holds one anchor of each
    class and the rest drawn freely (stratified), so that every sample spans every cluster.
    A search that ends at ``max_iter`` short of its confidence says so (``unsure``, and a
    warning here).

    Each hypothesis measures its columns in the scale they have over *all* anchors, not
    over its own sample, and drops directions weaker than ``rcond`` of that
    (:data:`NOISE_RCOND`): a sample that misses a cluster of a clustered embedding holds
    that cluster's eigenvector at ~1e-9 of its scale, and scaled by the sample alone it
    would be fitted with coefficients ~1e8. A hypothesis whose map still blows the
    anchors up (:func:`alignment_gain` above ``max_gain``) is rejected and counted.

    An anchor is an inlier when its row-wise L2 error is below the threshold of
    :func:`inlier_threshold` (by default 0.25 of the target's RMS row norm: on Siamese
    digits features, 99 % of clean anchors lie within 0.15 of it, and an anchor from the
    wrong class misses by about its whole norm). The hypothesis with most inliers (ties:
    smallest inlier error) is refitted on its inliers, and the refit repeated on the new
    inlier set until it stops changing (local optimisation, at most :data:`MAX_REFITS`).
    A hypothesis counts only with a consensus of at least its own sample and more anchors
    than fix the map (K+2 for an affine map): an exact fit through K+1 anchors is
    supported by them whatever the data. When no hypothesis has that consensus, T is
    fitted on all anchors (whose least-squares error never exceeds the targets' RMS row
    norm), and the fallback is logged and flagged; so is a best map whose RMS error over
    all anchors exceeds the targets' RMS row norm (it explains the anchors worse than
    mapping them all to zero: e.g. on spirals, whose batch embeddings disagree beyond any
    affine map, the best consensus of 5 of 6 anchors misses the sixth by several times
    the norm).

    The search runs on the anchors' device as a :class:`RansacSearch`, whose decisions
    stay tensors; this function reads its outcome once at the end (see
    :meth:`RansacSearch.settle` for when it reads more).
    """
    search = RansacSearch(
        source,
        target,
        n_iter=n_iter,
        max_iter=max_iter,
        confidence=confidence,
        sample_size=sample_size,
        tolerance=tolerance,
        tolerance_mode=tolerance_mode,
        rcond=rcond,
        max_gain=max_gain,
        generator=generator,
        linear=linear,
        strata=strata,
    )
    search.settle()
    result = search.result().on_host()
    if result.fallback:
        log.warning(search.describe_fallback())
    if result.unsure:
        log.warning(search.describe_shortfall())
    return result


def _hypotheses_needed(ratio: torch.Tensor, sample_size: int, confidence: float, usable: torch.Tensor) -> torch.Tensor:
    """:func:`hypotheses_needed` on tensors (no host read)."""
    clean = usable * ratio**sample_size
    needed = math.log(1.0 - confidence) / torch.log1p(-clean)
    needed = torch.where(clean <= 0.0, torch.full_like(needed, math.inf), needed)
    return torch.where(clean >= 1.0, torch.ones_like(needed), needed)


class RansacSearch:
    """:func:`ransac_affine`'s search with every decision kept on the anchors' device.

    The first round of ``n_iter`` hypotheses, the choice of the best one, its refits on
    its inliers (0/1 row weights, a fixed shape) and the final choice between the best
    map and the least-squares fallback are tensor operations: nothing is read back to the
    host. :attr:`pending` says, as a 0-dim bool tensor, whether the search is unfinished:
    more rounds are needed for ``confidence``, or a refit on the first fit's inliers is due
    (none is computed speculatively: on the clustered embeddings Table 1 aligns the first
    fit's inlier set is already stable, and each refit costs an SVD, a host wait on CUDA).
    A caller reads it together with whatever else it
    reads (BASiS reads it with the step's diagnostics, in one transfer) and calls
    :meth:`settle` only when it is true; :meth:`settle` finishes the search on the host, one
    read per refit or round. Hypotheses are drawn from ``generator`` on the anchors'
    device, in the same order as :func:`ransac_affine` always drew them; the first round's
    uniform noise can be drawn beforehand (:meth:`first_noise`) and passed as
    ``first_draw``, so that the first round is a pure function of its tensors (which a
    CUDA graph can record), and a first round computed that way resumes from its
    :meth:`state` (``state``). With
    ``batch_rounds`` (the default on CUDA), :meth:`settle` draws the rounds still needed
    all at once, with the same inliers, counts and later draws (the maps equal to rounding:
    the adopted ones are fitted as one batch) and a few reads in all.
    """

    def __init__(
        self,
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
        batch_rounds: bool | None = None,
        first_draw: torch.Tensor | None = None,
        state: tuple[torch.Tensor, ...] | None = None,
        strata: torch.Tensor | None = None,
        n_strata: int | None = None,
    ):
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
        if tolerance_mode not in TOLERANCE_MODES:
            raise InputError(f"tolerance_mode must be one of {list(TOLERANCE_MODES)}, got {tolerance_mode!r}")
        self.dtype, device = source.dtype, source.device
        self.source, self.target = source.double(), target.double()
        self.linear, self.rcond, self.max_gain = linear, rcond, max_gain
        self.n_iter, self.max_iter, self.confidence, self.sample_size = n_iter, max_iter, confidence, sample_size
        self.generator = generator or torch.Generator(device=device).manual_seed(0)
        self.n_anchors = n_anchors
        self.strata, self.n_strata = self._strata(strata, n_strata, n_anchors, sample_size, device)
        # Rounds at once where a read is a wait for the device; one at a time on the host,
        # where it costs nothing and a round's tensors stay in cache (the outcome is the same).
        self.batch_rounds = device.type == "cuda" if batch_rounds is None else batch_rounds
        if first_draw is not None and first_draw.shape != (n_iter, n_anchors):
            raise InputError(f"first_draw must have shape {(n_iter, n_anchors)}, got {tuple(first_draw.shape)}")
        # A map is supported only by more anchors than fix it, and at least by its own sample:
        # K+1 inliers of an exact fit through K+1 anchors are no evidence at all.
        self.consensus = min(n_anchors, max(sample_size, minimal + 1))
        if state is not None:  # a first round computed elsewhere (e.g. replayed from a CUDA graph)
            if len(state) != len(self.STATE):
                raise InputError(f"a RANSAC state has {len(self.STATE)} tensors, got {len(state)}")
            self.__dict__.update(zip(self.STATE, state))
            self.drawn = n_iter
            return
        target_rms = rms_row_norm(self.target)
        self.threshold = (  # a fill, not a host-to-device copy, which a CUDA graph cannot hold
            torch.full((), tolerance, dtype=torch.float64, device=device)
            if tolerance_mode == "absolute"
            else tolerance * target_rms
        )
        self.target_rms = target_rms
        # Every fit measures a column by its scale over all anchors, shrunk to the fit's size.
        centred = self.source if linear else self.source - self.source.mean(dim=0)
        self.anchor_scale = torch.linalg.norm(centred, dim=0, keepdim=True) / math.sqrt(n_anchors)
        # One SVD of all anchors gives their rank at the noise tolerance (a sample is usable
        # when it fixes as much of the map as all anchors do) and the fallback: the exact
        # least-squares map on all anchors (affine_least_squares's defaults).
        (_, self.anchor_rank), (self.fallback_transform, _) = _affine_solves(
            self.source, self.target, linear, [rcond, None], None
        )
        # State, all tensors but the count of hypotheses drawn (known on the host).
        self.drawn = 0
        long = {"dtype": torch.int64, "device": device}
        self.rejected, self.full_rank = torch.zeros((), **long), torch.zeros((), **long)
        self.best_count = torch.full((), -1, **long)  # the best score: (inlier count, -summed inlier error)
        self.best_error = torch.zeros((), dtype=torch.float64, device=device)
        self.found = torch.zeros((), dtype=torch.bool, device=device)  # a best map has consensus
        width = dim if linear else dim + 1
        self.transform = torch.zeros((dim, width), dtype=torch.float64, device=device)
        self.inliers = torch.zeros(n_anchors, dtype=torch.bool, device=device)
        self.refits = torch.zeros((), **long)
        self.candidate = self.inliers  # the anchors within the threshold under the best map
        self.refining = torch.zeros((), dtype=torch.bool, device=device)  # a refit on them is due
        self.needed = torch.zeros((), dtype=torch.float64, device=device)
        self._rounds(first_draw=first_draw)

    #: The tensors the search's state consists of after its first round (:meth:`state`).
    STATE = (
        "threshold",
        "target_rms",
        "anchor_scale",
        "anchor_rank",
        "fallback_transform",
        "rejected",
        "full_rank",
        "best_count",
        "best_error",
        "found",
        "transform",
        "inliers",
        "refits",
        "candidate",
        "refining",
        "needed",
    )

    def state(self) -> tuple[torch.Tensor, ...]:
        """The search's tensors, in the order of :attr:`STATE`: what ``state`` resumes from."""
        return tuple(getattr(self, name) for name in self.STATE)

    @staticmethod
    def first_noise(n_iter: int, n_anchors: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        """The first round's uniform noise, drawn from ``generator`` as the search itself would
        draw it (pass it as ``first_draw``)."""
        return torch.rand(n_iter, n_anchors, generator=generator, device=device)

    # -- fits -------------------------------------------------------------------------
    def _fit(self, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The least-squares map on the anchors of 0/1 ``weights`` (a fixed shape: the others
        enter as zero rows, which leave the fit unchanged), and the rank it kept."""
        w = weights.to(torch.float64).unsqueeze(-1)
        # An empty set (a speculative fit no one will use) gets a zero map, not NaNs.
        size = w.sum(dim=-2, keepdim=True).clamp(min=1.0)
        scale = self.anchor_scale * size.sqrt()
        if self.linear:
            X, rank = _solve(self.source * w, self.target * w, self.rcond, scale)
            return X.transpose(-1, -2), rank
        source_mean = (self.source * w).sum(dim=-2, keepdim=True) / size
        target_mean = (self.target * w).sum(dim=-2, keepdim=True) / size
        A, rank = _solve((self.source - source_mean) * w, (self.target - target_mean) * w, self.rcond, scale)
        b = target_mean - source_mean @ A
        return torch.cat([A, b], dim=-2).transpose(-1, -2), rank

    def _fit_samples(self, samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The least-squares maps on the anchors of each row of ``samples`` (indices)."""
        scale = self.anchor_scale * math.sqrt(samples.shape[-1])
        X, rank = _affine_solve(self.source[samples], self.target[samples], self.linear, self.rcond, scale)
        return X.double(), rank

    def _errors(self, transform: torch.Tensor) -> torch.Tensor:
        return _row_errors(transform, self.source, self.target)

    def _check(self, transform, inliers, refits) -> tuple[torch.Tensor, torch.Tensor]:
        """The anchors within the threshold under ``transform``, and whether a refit on them
        is due: they differ from ``inliers``, keep a consensus, and refits are left. Batched
        over leading dimensions (one map per round, in :meth:`_rounds`)."""
        candidate = self._errors(transform) < self.threshold
        due = (candidate != inliers).any(dim=-1) & (candidate.sum(dim=-1) >= self.consensus) & (refits < MAX_REFITS)
        return candidate, due

    def _refit(self, transform, inliers, refits, candidate, refining):
        """One refit on the ``candidate`` inliers where ``refining`` says it is due (local
        optimisation), and the check of its result."""
        transform = torch.where(refining[..., None, None], self._fit(candidate)[0], transform)
        inliers = torch.where(refining[..., None], candidate, inliers)
        refits = refits + refining.long()
        candidate, due = self._check(transform, inliers, refits)
        return transform, inliers, refits, candidate, refining & due

    # -- the search -------------------------------------------------------------------
    @staticmethod
    def _strata(strata, n_strata: int | None, n_anchors: int, sample_size: int, device) -> tuple:
        """The anchors' class codes as a device tensor of 0..C-1 and C, or (None, 0) where
        a sample cannot hold every class (more classes than ``sample_size``) or there is one
        class. Codes given with their count ``n_strata`` are taken as they are (no read)."""
        if strata is None:
            return None, 0
        strata = torch.as_tensor(strata).to(device=device, dtype=torch.int64)
        if strata.shape != (n_anchors,):
            raise InputError(f"strata must hold one class code per anchor ({n_anchors}), got {tuple(strata.shape)}")
        if n_strata is None:  # codes of any values: renumbered on the host
            codes = torch.unique(strata.cpu())
            strata, n_strata = torch.searchsorted(codes.to(device), strata), len(codes)
        return (strata, n_strata) if 1 < n_strata <= sample_size else (None, 0)

    def _draw(self, block: int, noise: torch.Tensor | None = None) -> torch.Tensor:
        """One round's samples: a random permutation per hypothesis (the argsort of its
        uniform ``noise``, drawn here unless given), its first ``sample_size`` anchors; with
        ``strata``, each class's anchor of least noise comes first (noise is below 1), so
        that every sample holds every class."""
        if noise is None:
            noise = self.first_noise(block, self.n_anchors, self.generator, self.source.device)
        if self.strata is not None:
            codes = self.strata.expand(len(noise), -1)
            least = noise.new_full((len(noise), self.n_strata), 2.0)
            least = least.scatter_reduce(1, codes, noise, "amin")
            noise = noise - (noise == least.gather(1, codes)).to(noise.dtype)
        return noise.argsort(dim=1)[:, : self.sample_size]

    def _rounds(self, count: int = 1, first_draw: torch.Tensor | None = None) -> None:
        """Draw and score ``count`` rounds of ``n_iter`` hypotheses and keep the best so far.

        One round reads nothing: its best map is fitted whether or not it is adopted, and
        its refits, where due, are left to :meth:`settle`. Several rounds are drawn at once
        (one batched fit of every sample) and advance the search as one round at a time
        would, its maps to rounding: each round's best hypothesis against the best so far,
        the adopted ones refitted until their inliers settle, and the hypotheses needed
        updated after each round; the search stops at the first round after which no more
        were needed, and the generator is rewound to just after it, so that later draws are
        those of the round-by-round search. The rounds are scored as one tensor whatever their number,
        and the adopted maps fitted and refitted as one batch. That reads which rounds
        adopted a new best (once), their refit checks (once per refit, for all of them) and
        where to stop (once). ``first_draw``, the first round's noise drawn beforehand, goes
        with one round only: the generator has not drawn it here, so no rewind may redraw it."""
        blocks, drawn = [], self.drawn
        while len(blocks) < count and drawn < self.max_iter:
            blocks.append(min(self.n_iter, self.max_iter - drawn))
            drawn += blocks[-1]
        ends = list(itertools.accumulate(blocks))
        batched = len(blocks) > 1
        generator_state = self.generator.get_state() if batched else None
        if first_draw is not None and len(blocks) != 1:
            raise ValueError("first_draw is the noise of one round, the search's first")
        samples = torch.cat([self._draw(block, first_draw) for block in blocks])
        hypotheses, ranks = self._fit_samples(samples)
        errors = _row_errors(hypotheses, self.source.unsqueeze(0), self.target.unsqueeze(0))
        blown_up = alignment_gain(hypotheses, self.source.unsqueeze(0), self.target.unsqueeze(0)) > self.max_gain
        is_inlier = (errors < self.threshold) & ~blown_up.unsqueeze(1)
        counts = is_inlier.sum(dim=1)
        inlier_error = torch.where(is_inlier, errors, torch.zeros_like(errors)).sum(dim=1)
        rejected = self.rejected + self._by_round(blown_up.long(), 0).sum(dim=1).cumsum(0)
        full_ranks = self.full_rank + self._by_round((ranks >= self.anchor_rank).long(), 0).sum(dim=1).cumsum(0)
        # Each round's best (most inliers, then smallest summed inlier error); a padded
        # slot of a short last round scores below any hypothesis.
        round_counts, round_errors = self._by_round(counts, -1), self._by_round(inlier_error, 0.0)
        scores = round_counts * (1.0 + round_errors.max(dim=1, keepdim=True).values) - round_errors
        tops = scores.argmax(dim=1) + torch.arange(len(blocks), device=counts.device) * self.n_iter
        best_count, best_error, adopt = self._running_best(
            counts.index_select(0, tops), inlier_error.index_select(0, tops)
        )
        top_inliers = is_inlier.index_select(0, tops)
        found = self.found | (adopt.cumsum(0) > 0)
        current = (self.transform, self.inliers, self.refits, self.candidate, self.refining)
        if batched:
            # The adopted rounds' best maps, fitted as one batch and refitted until their
            # inliers settle (one read for all of them per refit).
            adopted = [r for r, flag in enumerate(adopt.tolist()) if flag]
            chain = self._first_fits(torch.stack([top_inliers[r] for r in adopted])) if adopted else None
            while chain is not None and any(chain[4].tolist()):
                chain = self._refit(*chain)
            # The search's state after each round: the latest adopted chain, if any.
            latest = [bisect.bisect_right(adopted, r) - 1 for r in range(len(blocks))]  # -1: none yet
            inlier_counts = chain[1].sum(dim=1).unbind() if chain is not None else ()
            before = self.inliers.sum()
            # self.drawn + ends, made on the device (a list copied from the host would wait)
            drawn_after = self.drawn + torch.arange(1, len(blocks) + 1, device=counts.device).mul(self.n_iter).clamp(
                max=self.max_iter - self.drawn
            )
            needed = self._needed(
                found,
                torch.stack([before if i < 0 else inlier_counts[i] for i in latest]),
                best_count,
                full_ranks,
                drawn_after,
            )
            stops = ~(needed > drawn_after)
            last = int(torch.where(stops.any(), stops.long().argmax(), len(blocks) - 1))
            self.generator.set_state(generator_state)
            for block in blocks[: last + 1]:  # the draws of the rounds kept, and no more
                torch.rand(block, self.n_anchors, generator=self.generator, device=self.source.device)
            if latest[last] >= 0:
                current = tuple(part[latest[last]] for part in chain)
        else:  # one round: its map is fitted whether or not it is adopted (no read)
            last = 0
            fitted = self._first_fits(top_inliers[0])
            current = tuple(torch.where(adopt[0], new, old) for new, old in zip(fitted, current))
        self.transform, self.inliers, self.refits, self.candidate, self.refining = current
        self.found, self.best_count, self.best_error = found[last], best_count[last], best_error[last]
        self.rejected, self.full_rank = rejected[last], full_ranks[last]
        self.drawn += ends[last]
        # The kept round's count again, on 0-dim tensors as one round at a time computes it
        # (a vector's kernels may round the logarithm differently).
        self._update_needed()

    def _by_round(self, values: torch.Tensor, fill: float) -> torch.Tensor:
        """Per-hypothesis ``values`` as (rounds, n_iter), a short last round padded with ``fill``."""
        rounds = -(-len(values) // self.n_iter)
        padding = values.new_full((rounds * self.n_iter - len(values),), fill)
        return torch.cat([values, padding]).view(rounds, self.n_iter)

    def _running_best(self, counts: torch.Tensor, errors: torch.Tensor):
        """The best score (most inliers, then smallest summed inlier error) after each round
        whose best hypothesis scored ``counts``, ``errors``, and whether that round beat the
        best before it with a consensus. Exact on integers and floats alike: round r's best
        is the earliest score, among the one before the search's rounds and rounds <= r,
        that no score among them beats (a scan of one tensor instead of a loop of rounds)."""
        counts = torch.cat([self.best_count.view(1), counts])
        errors = torch.cat([self.best_error.view(1), errors])
        beats = (counts[:, None] > counts[None, :]) | (
            (counts[:, None] == counts[None, :]) & (errors[:, None] < errors[None, :])
        )
        beaten = beats.long().cumsum(dim=0) > 0  # [r, k]: some score up to r beats score k
        prefix = torch.ones_like(beaten).tril()
        best = (prefix & ~beaten).long().argmax(dim=1)[1:]  # the earliest unbeaten score up to r
        rounds = torch.arange(1, len(counts), device=counts.device)
        adopt = (best == rounds) & (counts[1:] >= self.consensus)
        return counts.index_select(0, best), errors.index_select(0, best), adopt

    def _first_fits(self, inliers: torch.Tensor):
        """The map of each best hypothesis refitted on its inliers (rows of ``inliers``), as
        a search chain: (map, inliers, refits, the anchors within the threshold, refit due)."""
        fits, refits = self._fit(inliers)[0], torch.ones(inliers.shape[:-1], dtype=torch.int64, device=inliers.device)
        candidate, due = self._check(fits, inliers, refits)
        return fits, inliers, refits, candidate, due

    def _rounds_at_once(self, needed: float) -> int:
        """A quarter more rounds than are needed now (the count rises when later rounds
        lower the share of usable samples; rounds beyond the stop are not kept), as many as
        fit in :data:`ROUND_BATCH_BYTES` of per-anchor errors."""
        wanted = math.ceil(ROUND_MARGIN * (needed - self.drawn) / self.n_iter)
        per_round = self.n_iter * self.n_anchors * (self.source.shape[1] + 1) * 8
        return max(1, min(wanted, ROUND_BATCH_BYTES // per_round))

    def _needed(self, found, inlier_count, best_count, full_rank, drawn) -> torch.Tensor:
        """The hypotheses ``confidence`` needs, from the inlier ratio after local
        optimisation (the best estimate of the clean share) and the share of samples that
        fixed the map so far; between ``n_iter`` and ``max_iter``. Elementwise: one value
        per round in :meth:`_rounds`."""
        return self._confidence_needs(found, inlier_count, best_count, full_rank, drawn).clamp(
            min=self.n_iter, max=self.max_iter
        )

    def _confidence_needs(self, found, inlier_count, best_count, full_rank, drawn) -> torch.Tensor:
        """:meth:`_needed` before it is held between ``n_iter`` and ``max_iter``."""
        ratio = torch.where(found, inlier_count, best_count).double() / self.n_anchors
        usable = full_rank.clamp(min=1).double() / drawn
        return _hypotheses_needed(ratio, self.sample_size, self.confidence, usable)

    def _update_needed(self) -> None:
        self.needed = self._needed(self.found, self.inliers.sum(), self.best_count, self.full_rank, self.drawn)

    @property
    def pending(self) -> torch.Tensor:
        """0-dim bool tensor: the search needs more rounds, or its refits have not settled."""
        return (self.found & self.refining) | (self.needed > self.drawn)

    def settle(self) -> None:
        """Finish the search on the host: refit until the inlier set settles, then draw the
        rounds that ``confidence`` says are still needed, all at once (:meth:`_rounds`),
        until no more are needed or ``max_iter`` hypotheses are drawn. The outcome, counts
        and later draws are those of drawing one round at a time; the reads are one per
        refit and a few per batch of rounds (see :meth:`_rounds`), instead of one per round."""
        while True:
            refining, needed = torch.stack([(self.found & self.refining).double(), self.needed]).tolist()
            if refining:
                self.transform, self.inliers, self.refits, self.candidate, self.refining = self._refit(
                    self.transform, self.inliers, self.refits, self.candidate, self.refining
                )
                self._update_needed()
            elif self.drawn < self.max_iter and needed > self.drawn:
                self._rounds(self._rounds_at_once(needed) if self.batch_rounds else 1)
            else:
                return

    def result(self) -> AlignmentResult:
        """The search's map as it stands, with tensor fields (0-dim tensors for the flags
        and counts): the best map, or least squares on all anchors where no map had a
        consensus, or the best one blows the anchors up or explains them worse than the
        zero map would (see :func:`ransac_affine`)."""
        best_residuals = self._errors(self.transform)
        accept = (
            self.found
            & (alignment_gain(self.transform, self.source, self.target) <= self.max_gain)
            & (best_residuals.pow(2).mean().sqrt() <= self.target_rms)
        )
        fallback = self.fallback_transform
        transform = torch.where(accept, self.transform, fallback)
        residuals = torch.where(accept, best_residuals, self._errors(fallback))
        inliers = torch.where(accept, residuals < self.threshold, torch.ones_like(self.inliers))
        refits = torch.where(accept, self.refits, torch.zeros_like(self.refits))
        unsure = self._confidence_needs(
            self.found, self.inliers.sum(), self.best_count, self.full_rank, self.drawn
        ) > max(self.drawn, self.n_iter)
        return AlignmentResult(
            transform.to(self.dtype), inliers, residuals, ~accept, self.drawn, self.rejected, refits, unsure
        )

    def describe_fallback(self) -> str:
        """Why the search fell back, in words (reads the device: for the log only)."""
        tally = (
            f"best {int(self.best_count)} of {self.n_anchors} anchors within {float(self.threshold):g};"
            f" {int(self.rejected)} of {self.drawn} hypotheses rejected as blown up"
        )
        if not bool(self.found):
            reason = f"no hypothesis had a consensus of {self.consensus} inliers ({tally})"
        elif float(alignment_gain(self.transform, self.source, self.target)) > self.max_gain:
            reason = f"the best map ({int(self.inliers.sum())} inliers) blows the anchors up ({tally})"
        else:
            rms = float(self._errors(self.transform).pow(2).mean().sqrt())
            reason = (
                f"the best map ({int(self.inliers.sum())} inliers) misses the anchors by an RMS error of {rms:.3g},"
                f" more than the targets' RMS norm {float(self.target_rms):.3g} (mapping them all to zero would"
                " do better)"
            )
        return f"RANSAC: {reason}; falling back to least squares on all anchors"

    def describe_shortfall(self) -> str:
        """That the search ended short of its confidence, in words (reads the device)."""
        needs = float(
            self._confidence_needs(self.found, self.inliers.sum(), self.best_count, self.full_rank, self.drawn)
        )
        return (
            f"RANSAC: {self.confidence:.0%} confidence needs about {needs:.0f} hypotheses at the best inlier ratio"
            f" found ({int(self.inliers.sum() if bool(self.found) else self.best_count)} of {self.n_anchors}),"
            f" {self.drawn} were drawn (ransac_max_iter); the map may be wrong"
        )


def global_transform(
    previous_anchors: torch.Tensor, updated_anchors: torch.Tensor, **ransac_options
) -> AlignmentResult:
    """T_G of Algorithm 2: maps the anchors' embedding under updated features onto
    their embedding under the previous features (RANSAC, same options as
    :func:`ransac_affine`). Apply it to the whole updated embedding with
    :func:`apply_affine`."""
    return ransac_affine(updated_anchors, previous_anchors, **ransac_options)

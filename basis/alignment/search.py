"""RANSAC's search for an affine map (:class:`RansacSearch`), with every decision kept on the
anchors' device, and the rules of its consensus: which anchors are inliers
(:func:`inlier_threshold`) and how many hypotheses a confidence needs
(:func:`hypotheses_needed`).
"""

from __future__ import annotations

import bisect
import itertools
import math

import torch

from basis.alignment.affine import (
    AlignmentResult,
    _affine_solve,
    _affine_solves,
    _check_anchors,
    _row_errors,
    _solve,
    alignment_gain,
    anchors_needed,
    rms_row_norm,
)
from basis.alignment.ransac_settings import RANSAC_DEFAULTS, RansacSettings
from basis.choices import TOLERANCE_MODES
from basis.errors import InputError
from basis.runtime import device as devices


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
        settings: RansacSettings = RANSAC_DEFAULTS,
        *,
        generator: torch.Generator | None = None,
        first_draw: torch.Tensor | None = None,
        state: tuple[torch.Tensor, ...] | None = None,
        strata: torch.Tensor | None = None,
        n_strata: int | None = None,
    ):
        linear = settings.linear
        _check_anchors(source, target, linear)
        n_anchors, dim = source.shape
        settings.check(n_anchors, dim)
        minimal, _ = anchors_needed(dim, linear=linear)
        n_iter, sample_size, rcond = settings.n_iter, settings.sample_size, settings.rcond
        self.settings = settings
        self.dtype, device = source.dtype, source.device
        # float64 on every device: the fits are tiny (a few anchors x K), so precision is
        # free, and their rank decisions on clustered, rank-deficient anchor sets need it.
        self.source, self.target = source.double(), target.double()
        self.linear, self.rcond, self.max_gain = linear, rcond, settings.max_gain
        self.n_iter, self.max_iter, self.confidence = n_iter, settings.max_iter, settings.confidence
        self.sample_size = sample_size
        self.generator = generator or devices.generator(device, 0)
        self.n_anchors = n_anchors
        self.strata, self.n_strata = self._strata(strata, n_strata, n_anchors, sample_size, device)
        # Rounds at once where a read is a wait for the device; one at a time on the host,
        # where it costs nothing and a round's tensors stay in cache (the outcome is the same).
        batch_rounds = settings.batch_rounds
        self.batch_rounds = devices.is_cuda(device) if batch_rounds is None else batch_rounds
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
            torch.full((), settings.tolerance, dtype=torch.float64, device=device)
            if settings.tolerance_mode == "absolute"
            else settings.tolerance * target_rms
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

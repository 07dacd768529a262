"""BASiS, the paper's Algorithm 1: a network trained on batch embeddings aligned
to one reference through anchor nodes."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from basis.alignment import (
    anchors_needed,
    apply_affine,
)
from basis.errors import InputError
from basis.estimators.base import SpectralEstimator
from basis.estimators.parameters import BASiSParameters
from basis.estimators.targets import BatchTargets
from basis.estimators.training import FeaturesOf, StepTimer
from basis.runtime import device as devices
from basis.runtime.capture import CapturedSegment, SegmentedCapture
from basis.spectral import SubspaceEigensolver, count_roots

log = logging.getLogger(__name__)


#: The anchors of one RANSAC sample in the authors' code.
AUTHORS_SAMPLE_SIZE = 20


class BASiS(BASiSParameters, BatchTargets, SpectralEstimator):
    """Batch Aligned Spectral Embedding Space (Algorithm 1).

    After ``fit``: ``anchor_indices_``, ``reference_indices_`` and
    ``reference_embedding_`` (the reference batch V^ref and its embedding),
    ``reference_anchor_embedding_`` (what batches are aligned to; see
    :meth:`set_reference`), ``n_fallbacks_`` (RANSAC fallbacks to least squares),
    ``n_redrawn_batches_`` (batches redrawn because their graph was too disconnected to
    embed) and ``alignment_errors_`` (the :meth:`align` error of every aligned batch).

    Every step's info holds the alignment's diagnostics: ``inlier_fraction``,
    ``ransac_hypotheses`` and ``ransac_rejected`` (drawn, and rejected as blown up),
    ``aligned_norm_ratio`` (RMS row norm of the aligned batch over the reference anchors')
    and ``alignment_error`` (RMS error of the aligned anchors that hold their own node,
    over the reference anchors' RMS row norm).

    Every iteration embeds a fresh batch (anchors + m - l new points) analytically,
    aligns it to the reference embedding through the anchors (RANSAC over affine maps,
    ``eq:stepAffie_transformation_least_squares2``) and takes one MSE step
    (``ltsnet_loss``).

    Parameters (beyond :class:`SpectralEstimator`'s)
    ----------
    anchors : {"stratified", "random"}
        ``stratified`` draws ``anchors_per_class`` nodes from every class (needs ``y``);
        ``random`` draws ``n_anchors`` nodes. Drawn with the run's seed.
    anchors_per_class, n_anchors : int
        Anchor counts for the two modes (paper: 25 per class).
    anchor_indices : sequence of int or None
        Fixed anchor nodes (e.g. the toy examples' hand-placed ones); overrides the draw.
    alignment : {"ransac", "lstsq", "none"}
        How each batch is aligned to the reference; ``none`` and ``lstsq`` are ablations.
    anchor_outliers : float
        Fraction of the anchor slots of every batch after the reference batch that hold a
        random node of another class (any other node without labels) instead of the
        anchor: gross outliers in the anchor correspondence, for the alignment ablation.
        0 (default) in every real use.
    ransac_iter, ransac_max_iter, ransac_confidence, ransac_sample_size, ransac_tolerance, ransac_tolerance_mode :
        RANSAC settings (see :func:`basis.alignment.ransac_affine`). Hypotheses are drawn in
        rounds of ``ransac_iter`` (the authors' 100) until as many as ``ransac_confidence``
        (0.99) asks for, given the observed inlier ratio, have been drawn, at most
        ``ransac_max_iter`` (5,000). ``ransac_sample_size`` anchors make a sample: by
        default (None) the authors' 20, or the minimal sample K+1 (K for a linear map) where
        K is 20 or more; set it to K+1 for minimal samples. The tolerance is relative to the reference
        anchors' RMS row norm by default (0.25; see :func:`basis.alignment.inlier_threshold`);
        the authors used an absolute one (``ransac_tolerance=0.1,
        ransac_tolerance_mode="absolute"``; three moons: 5 anchors per sample and 0.01).
        A batch whose search drew ``ransac_max_iter`` hypotheses short of its confidence
        is counted in ``n_unsure_`` (a warning at the end of ``fit``).
    ransac_sampling : {"stratified", "uniform"}
        ``stratified`` (where the anchors' classes are known and a sample can hold them
        all): every RANSAC sample holds one anchor of each class, the rest drawn freely; on
        clustered embeddings a sample that misses a class cannot fix the map. ``uniform``:
        the authors' draw.
    alignment_map : {"affine", "linear"}
        The map each batch is aligned by: the paper's affine map, or a linear one (beyond
        the paper). Where the trivial eigenvector is kept, two batches' eigenvectors are
        samples of the same eigenfunctions and differ by a linear map, and the affine
        map's column of ones is nearly collinear with the trivial vector (an
        ill-conditioned fit). Where it is dropped, each batch's eigenvectors are made
        orthogonal to that batch's own trivial vector, a batch-dependent shift that only
        the affine map's translation undoes.
    reference : {"first_batch", "mean"}
        What batches are aligned to: the anchors' embedding in the first batch (the
        paper's), or their mean over ``reference_batches`` batches aligned to each other
        (generalised Procrustes; beyond the paper), which averages out the sampling noise
        a single batch carries through the whole run.
    reference_batches : int
        Batches averaged by ``reference="mean"``.
    eigensolver : {"auto", "exact", "subspace"}
        How the batches after the reference batch are solved: ``exact`` (LAPACK's subset
        driver on the CPU, ``eigh`` on CUDA), or ``subspace``, the Chebyshev-filtered
        subspace iteration of :class:`~basis.spectral.SubspaceEigensolver` (the affine map
        absorbs any basis of the K-dimensional subspace), whose batches that miss its
        tolerance are redone exactly (counted in ``n_exact_redos_``). ``auto``: subspace on
        CUDA, exact on the CPU, where the subset driver is as fast. The reference batch is
        always solved exactly.
    cuda_graphs : bool
        On CUDA, replay the step's parts from CUDA graphs: the batch graph and its
        components, and the gradient step, each as one graph
        (:class:`~basis.runtime.capture.CapturedSegment`); the subspace embedding, and RANSAC's
        first round with the aligned batch, each as a chain of graphs split at its
        decompositions (:class:`~basis.runtime.capture.SegmentedCapture`: the Rayleigh-Ritz
        ``eigh``; the three SVDs), which run eagerly between the graphs. Each part is
        recorded after two eager calls; RANSAC's further rounds, an exact redo and a
        redrawn batch run eagerly. The same kernels run, so the numbers do not change
        beyond the last bits. No effect on the CPU.
    average_tail : float
        Fraction of the last iterations whose network weights are averaged into the final
        network (Polyak-Ruppert averaging; 0, the paper's, keeps the last weights). Each
        batch's aligned target carries its own sampling and alignment noise; averaging
        the iterates averages that noise out of the network instead of keeping the last
        batches' share of it (beyond the paper).
    """

    #: Passes of the generalised Procrustes mean: align every batch to the current mean
    #: (the first batch at the start), then average.
    PROCRUSTES_PASSES = 2

    MAX_REDRAWS = 20

    def check_input(self, X: Any, y: Any = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Also the anchors against the data: the classes they are drawn from, and their
        count against the batch and the map (see :meth:`_check_anchor_count`)."""
        X, y = super().check_input(X, y)
        if self.anchor_indices is not None:
            n_anchors = len(self.anchor_indices)
        elif self.anchors == "random":
            n_anchors = self.n_anchors
        elif y is None:
            raise InputError("anchors='stratified' needs labels y; pass y to fit or use anchors='random'")
        else:
            labels, counts = np.unique(y, return_counts=True)
            if counts.min() < self.anchors_per_class:
                raise InputError(
                    f"class {labels[counts.argmin()]!r} has {counts.min()} points, fewer than"
                    f" anchors_per_class={self.anchors_per_class}"
                )
            n_anchors = self.anchors_per_class * len(labels)
        self._check_anchor_count(n_anchors)
        return X, y

    def ransac_sample(self) -> int:
        """Anchors per RANSAC sample: ``ransac_sample_size``, else the authors' 20 or, where
        the map needs more (K+1 >= 20 for an affine one), the minimal sample."""
        if self.ransac_sample_size is not None:
            return self.ransac_sample_size
        minimal, _ = anchors_needed(self.n_components, linear=self.alignment_map == "linear")
        return max(AUTHORS_SAMPLE_SIZE, minimal)

    def _check_anchor_count(self, n_anchors: int) -> None:
        """Enough anchors to fix the map and to sample RANSAC's hypotheses, and room in a batch."""
        minimal, count = anchors_needed(self.n_components, linear=self.alignment_map == "linear")
        if self.alignment != "none" and n_anchors < minimal:
            raise InputError(
                f"{n_anchors} anchors cannot fix an {self.alignment_map} map in K={self.n_components}:"
                f" at least {count}={minimal} needed"
            )
        sample = self.ransac_sample()
        if self.alignment == "ransac" and not minimal <= sample <= n_anchors:
            given = "" if self.ransac_sample_size is not None else " (its default)"
            raise InputError(
                f"ransac_sample_size must be between {count}={minimal} and the number of anchors {n_anchors},"
                f" got {sample}{given}; set it (a config's methods.basis and the protocol of"
                " experiments.variants, or --set ransac_sample_size=N), or draw more anchors (anchors_per_class)"
            )
        if n_anchors >= self.batch_size:
            raise InputError(f"{n_anchors} anchors leave no room in a batch of {self.batch_size}")

    def _choose_anchors(self, n: int, y: np.ndarray | None) -> torch.Tensor:
        if self.anchor_indices is not None:
            fixed = [int(i) for i in self.anchor_indices]
            idx = torch.as_tensor(fixed, dtype=torch.int64)
            if len(set(fixed)) != len(idx) or idx.min() < 0 or idx.max() >= n:
                raise InputError(f"anchor_indices must be distinct indices in [0, {n})")
            return idx
        if self.anchors == "random":
            return self._sample(n, self.n_anchors)
        chosen = []  # y and the class sizes were checked by check_input
        for label in np.unique(y):
            members = torch.from_numpy(np.flatnonzero(y == label))
            chosen.append(members[torch.randperm(len(members), generator=self.generator_)[: self.anchors_per_class]])
        return torch.cat(chosen)

    def _prepare(self, X: torch.Tensor, y: np.ndarray | None) -> None:
        anchors = self._choose_anchors(X.shape[0], y)  # their count was checked by check_input
        n_anchors = len(anchors)
        self.anchor_indices_ = anchors.to(self.device_)
        self.class_codes_ = None if y is None else torch.as_tensor(np.unique(y, return_inverse=True)[1])
        self.ransac_generator_ = devices.generator(self.device_, self.seed + 1)
        self.n_fallbacks_ = self.n_unsure_ = self.n_redrawn_batches_ = self.n_exact_redos_ = 0
        self.anchor_strata_ = None  # the anchors' class codes, for stratified RANSAC samples
        if self.ransac_sampling == "stratified" and self.class_codes_ is not None:
            codes = np.unique(self.class_codes_[anchors.cpu()].numpy(), return_inverse=True)[1]
            self.anchor_strata_ = (torch.as_tensor(codes, device=self.device_), int(codes.max()) + 1)
        self.alignment_errors_: list[float] = []
        subspace = self.eigensolver == "subspace" or (
            self.eigensolver == "auto" and devices.subspace_by_default(self.device_)
        )
        n_eig = self.n_components + int(self.drop_trivial)
        captures = self._captures_steps()
        self.subspace_solver_ = SubspaceEigensolver(n_eig, seed=self.seed) if subspace else None
        self._batch_graph = CapturedSegment(self._graph_and_components) if captures else self._graph_and_components
        recorded = captures and subspace
        self._subspace_embedding = SegmentedCapture(self._embedding_from_cut) if recorded else self._embedding_from_cut
        self._first_alignment = SegmentedCapture(self._aligned_first_round) if captures else self._aligned_first_round
        self.reference_indices_, _, self.reference_embedding_ = self._draw_embedded_batch(
            X.shape[0], self._training_features, StepTimer(self.device_)
        )
        self.reference_anchor_embedding_ = self.reference_embedding_[:n_anchors]
        if self.reference == "mean":
            self.reference_anchor_embedding_ = self._mean_reference(X.shape[0])

    def _mean_reference(self, n: int) -> torch.Tensor:
        """The anchors' embedding averaged over ``reference_batches`` batches of the n
        training nodes (the first one included), each aligned to the current mean:
        generalised Procrustes."""
        n_anchors, timer = len(self.anchor_indices_), StepTimer(self.device_)
        copies = [self.reference_anchor_embedding_]
        for _ in range(self.reference_batches - 1):
            copies.append(self._draw_embedded_batch(n, self._training_features, timer)[2][:n_anchors])
        mean = copies[0]
        for _ in range(self.PROCRUSTES_PASSES):
            mean = torch.stack([apply_affine(self._fit(copy, mean).transform, copy) for copy in copies]).mean(dim=0)
        return mean

    # -- the public pieces of Algorithm 1 that Algorithm 2 recombines -------------------
    def set_reference(self, anchor_embedding: torch.Tensor) -> None:
        """Align later batches to ``anchor_embedding`` (one row per anchor), e.g. the
        reference re-embedded on new features and mapped by T_G (Algorithm 2)."""
        if anchor_embedding.shape != self.reference_anchor_embedding_.shape:
            raise InputError(
                f"the reference anchor embedding must have shape {tuple(self.reference_anchor_embedding_.shape)},"
                f" got {tuple(anchor_embedding.shape)}"
            )
        self.reference_anchor_embedding_ = anchor_embedding

    def _captures_steps(self) -> bool:
        return bool(self.cuda_graphs) and devices.captures_on(self.device_)

    def captured_segments(self) -> dict[str, CapturedSegment]:
        """The step's parts replayed from CUDA graphs (``cuda_graphs``), by name: each
        says how often it was replayed, or why it could not be captured."""
        segments = {
            "graph": self._batch_graph,
            "eigensolve": self._subspace_embedding,
            "alignment": self._first_alignment,
            "gradient": self._gradient_step,
        }
        return {
            name: segment
            for name, segment in segments.items()
            if isinstance(segment, (CapturedSegment, SegmentedCapture))
        }

    def _corrupt_anchor_slots(self, batch: torch.Tensor, n: int) -> torch.Tensor:
        """``batch`` with ``anchor_outliers`` of its anchor slots holding a random node of
        another class, outside the batch (see the class parameters). An ablation: drawn on
        the host, with host reads."""
        n_anchors = len(self.anchor_indices_)
        slots = torch.randperm(n_anchors, generator=self.generator_)[: round(self.anchor_outliers * n_anchors)]
        corrupted = batch.cpu().clone()
        for slot in slots.tolist():
            allowed = torch.ones(n, dtype=torch.bool)
            allowed[corrupted] = False
            if self.class_codes_ is not None:
                allowed &= self.class_codes_ != self.class_codes_[corrupted[slot]]
            pool = allowed.nonzero().squeeze(1)
            corrupted[slot] = pool[torch.randint(len(pool), (1,), generator=self.generator_)]
        return corrupted.to(batch.device)

    def _draw_batch(self, n: int, features_of: FeaturesOf, corrupt: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Anchors + m - l random nodes of [0, n) and their features (from
        ``features_of(indices)``); with ``corrupt``, some anchor slots hold outliers
        (``anchor_outliers``)."""
        anchors = self.anchor_indices_
        batch = torch.cat([anchors, self._sample(n, self.batch_size - len(anchors), exclude=anchors)])
        if corrupt and self.anchor_outliers > 0:
            batch = self._corrupt_anchor_slots(batch, n)
        return batch, features_of(batch)

    def _too_disconnected(self) -> InputError:
        return InputError(
            f"{self.MAX_REDRAWS} batches in a row had a graph with more than"
            f" {self.n_components + int(self.drop_trivial)} connected components; increase graph.n_neighbors"
            " or batch_size"
        )

    def _draw_embedded_batch(
        self, n: int, features_of: FeaturesOf, timer: StepTimer
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A batch (see :meth:`_draw_batch`), its features and its exact embedding, for the
        reference. A batch whose graph splits into more components than eigenvectors has no
        defined embedding; it is redrawn (counted in ``n_redrawn_batches_``), up to
        ``MAX_REDRAWS`` times."""
        for _ in range(self.MAX_REDRAWS):
            batch, X_batch = self._draw_batch(n, features_of, corrupt=False)
            embedded = self._embed_batch(X_batch, timer, exact=True)
            if self._components_allowed(embedded):
                return batch, X_batch, embedded.phi
            self.n_redrawn_batches_ += 1
        raise self._too_disconnected()

    def _next_batch(self, features_of: FeaturesOf, n_train: int, timer: StepTimer) -> tuple[torch.Tensor, ...]:
        """A drawn batch, its features and its embedding aligned to the reference, with the
        alignment's info.

        Everything runs on the device first, as if the batch were usable: its graph's
        components, its embedding (by ``eigensolver``) and the alignment's search. One read
        then brings back whether it was (components settled and few enough, eigensolver
        converged, search finished) with the alignment's diagnostics. Only a batch that
        fails one of these costs more reads: it is redrawn (too many components; RANSAC's
        generator is rewound, so the draws are those of a check before the search),
        re-solved exactly, or its search is finished on the host."""
        n_anchors, limit = len(self.anchor_indices_), self.n_components + int(self.drop_trivial)
        for _ in range(self.MAX_REDRAWS):
            ransac_state = self.ransac_generator_.get_state()
            batch, X_batch = self._draw_batch(n_train, features_of, corrupt=True)
            embedded = self._embed_batch(X_batch, timer, exact=False)
            clean = batch[:n_anchors] == self.anchor_indices_
            with timer("alignment"):
                aligned, readings, search, n_hypotheses = self._readings_or_none(embedded.phi, clean)
                true = torch.ones((), dtype=torch.bool, device=embedded.phi.device)
                checks = torch.stack(
                    [
                        embedded.settled,
                        count_roots(embedded.labels) <= limit,
                        true if embedded.converged is None else embedded.converged,
                        ~true if search is None else search.pending,
                    ]
                )
                riders = self._take_riders()
                riders = readings.new_zeros(0) if riders is None else riders.double()
                read = torch.cat([checks.double(), readings, riders]).tolist()
                if len(riders):
                    self._riders_read(read[len(read) - len(riders) :])
                settled, few_enough, converged, pending, *values = read[: len(read) - len(riders)]
            if not settled:
                few_enough = self._components_allowed(embedded)
            if not few_enough:
                self.ransac_generator_.set_state(ransac_state)
                self.n_redrawn_batches_ += 1
                continue
            if not converged or pending:
                with timer("alignment"):
                    if not converged:
                        self.ransac_generator_.set_state(ransac_state)
                        self.n_exact_redos_ += 1
                        embedded = self._embed_batch(X_batch, timer, exact=True)
                        aligned, readings, search, n_hypotheses = self._readings_or_none(embedded.phi, clean)
                    if search is not None and bool(search.pending):
                        search.settle()
                        aligned, readings, search, n_hypotheses = self._alignment_readings(embedded.phi, clean, search)
                    values = readings.tolist()
            if self.alignment == "none":
                return X_batch, aligned, {"inlier_fraction": float("nan")}
            return X_batch, aligned, self._record_alignment(values, n_hypotheses)
        raise self._too_disconnected()

    def _readings_or_none(self, phi: torch.Tensor, clean: torch.Tensor):
        """:meth:`_alignment_readings`, or the batch as it is with no readings for
        ``alignment="none"``."""
        if self.alignment == "none":
            return phi, phi.new_zeros(0, dtype=torch.float64), None, 0
        return self._alignment_readings(phi, clean)

    def _after_step(self) -> None:
        first_averaged = self.n_iter - round(self.average_tail * self.n_iter)
        if self.average_tail > 0 and self.n_steps_ > first_averaged:
            averaged = self.n_steps_ - first_averaged
            weights = dict(self.model_.named_parameters())
            if averaged == 1:
                self.averaged_weights_ = {name: value.detach().clone() for name, value in weights.items()}
            else:  # running mean of the weights after each averaged step
                for name, value in weights.items():
                    self.averaged_weights_[name] += (value.detach() - self.averaged_weights_[name]) / averaged

    def finish(self) -> BASiS:
        averaged = getattr(self, "averaged_weights_", None)
        if averaged is not None:
            with torch.no_grad():
                for name, value in self.model_.named_parameters():
                    value.copy_(averaged[name])
            del self.averaged_weights_
        if getattr(self, "n_unsure_", 0):
            log.warning(
                "RANSAC ended short of its %s confidence in %d of %d aligned batches (ransac_max_iter=%d reached):"
                " their maps may be wrong; see ransac_unsure_batches",
                f"{self.ransac_confidence:.0%}",
                self.n_unsure_,
                len(self.alignment_errors_),
                self.ransac_max_iter,
            )
        return super().finish()

    def _loss_tensors(self, batch) -> tuple[tuple[torch.Tensor, ...], dict[str, float]]:
        X_batch, phi, info = batch
        return (X_batch, phi), info

    def _loss_of(self, X_batch: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
        return self._loss_with(self.model_, X_batch, phi)[0]

    def _loss_with(self, network, X_batch: torch.Tensor, phi: torch.Tensor) -> tuple[torch.Tensor, dict]:
        return basis_loss(network(X_batch), phi), {}


def basis_loss(Y: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """(1/m) sum_i ||y_i - phi_i||^2 against the aligned batch embedding (``ltsnet_loss``)."""
    return ((Y - phi) ** 2).sum(dim=1).mean()

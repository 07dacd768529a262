"""What BASiS trains each batch towards (:class:`BatchTargets`): the batch's analytic
embedding, aligned to the reference anchors' embedding (``eq:stepAlignment``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from basis.alignment import (
    AlignmentResult,
    RansacSearch,
    RansacSettings,
    align_affine,
    apply_affine,
    rms_row_norm,
)
from basis.estimators.training import StepTimer
from basis.graph import dense_affinity
from basis.spectral import SubspaceEigensolver, component_labels, embed_graph, settle_components


@dataclass
class EmbeddedBatch:
    """A batch's graph and embedding, with its checks still on the device."""

    W: torch.Tensor
    phi: torch.Tensor
    labels: torch.Tensor
    settled: torch.Tensor
    converged: torch.Tensor | None


class BatchTargets:
    """What BASiS trains a batch towards (Algorithm 1's first half): the batch graph's analytic
    embedding (``embedding_def``), aligned to the reference anchors' embedding by the map of
    ``eq:stepAlignment`` (RANSAC or least squares), with the alignment's diagnostics. The
    settings it reads (``alignment``, ``ransac_*``, ``operator``, ...) are
    :class:`~basis.estimators.BASiS`'s parameters."""

    def embed_batch(self, X_batch: torch.Tensor) -> torch.Tensor | None:
        """Analytic embedding of the graph of ``X_batch`` with this estimator's settings
        (exact), or None when the graph has more components than eigenvectors."""
        embedded = self._embed_batch(X_batch, StepTimer(self.device_), exact=True)
        return embedded.phi if self._components_allowed(embedded) else None

    def _embed_batch(self, X_batch: torch.Tensor, timer: StepTimer, exact: bool) -> EmbeddedBatch:
        """Analytic embedding of one batch's graph (``embedding_def``) with no host read:
        the embedding and, as tensors, the graph's component labels, whether they settled
        and whether the eigensolver converged (the exact one always does)."""
        with timer("graph"):
            W, labels, settled = self._batch_graph(X_batch)
        with timer("eigensolve"):
            solver = None if exact else self.subspace_solver_
            if solver is not None and solver.cut is not None:
                phi, converged, solver.cut = self._subspace_embedding(W, solver.cut)
            else:  # exact, or the subspace solver's first solve (exact too: it sets the cut)
                phi, _, converged = self._embedding(W, solver)
        return EmbeddedBatch(W, phi, labels, settled, converged)

    def _embedding(
        self, W: torch.Tensor, solver: SubspaceEigensolver | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The batch graph ``W``'s embedding by :func:`~basis.spectral.embed_graph` with this
        estimator's operator, exactly or by ``solver``."""
        return embed_graph(
            W,
            self.n_components,
            operator=self.operator,
            drop_trivial=self.drop_trivial,
            diffusion_time=self.diffusion_time,
            solver=solver,
        )

    def _embedding_from_cut(
        self, W: torch.Tensor, cut: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The subspace solver's embedding of the batch graph ``W`` with the filter cut at
        ``cut``, whether it converged and the next cut: a pure function of its tensors, which
        ``cuda_graphs`` records as a chain of CUDA graphs split at its ``eigh``."""
        solver = self.subspace_solver_
        solver.cut = cut
        phi, _, converged = self._embedding(W, solver)
        return phi, converged, solver.cut

    def _graph_and_components(self, X_batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The batch's affinity and its components (labels, settled), with no host read."""
        W = dense_affinity(X_batch, self.graph_)
        return (W, *component_labels(W))

    def _components_allowed(self, embedded: EmbeddedBatch) -> bool:
        """Whether the batch graph has no more components than eigenvectors (host read)."""
        n_components, _ = settle_components(embedded.W, embedded.labels, embedded.settled)
        return n_components <= self.n_components + int(self.drop_trivial)

    def ransac_settings(self) -> RansacSettings:
        """How this estimator's RANSAC searches (its ``ransac_*`` parameters and its map);
        its draws come from ``ransac_generator_``."""
        return RansacSettings(
            n_iter=self.ransac_iter,
            max_iter=self.ransac_max_iter,
            confidence=self.ransac_confidence,
            sample_size=self.ransac_sample(),
            tolerance=self.ransac_tolerance,
            tolerance_mode=self.ransac_tolerance_mode,
            linear=self.alignment_map == "linear",
        )

    def _fit(self, source: torch.Tensor, target: torch.Tensor) -> AlignmentResult:
        """The map (``alignment_map``) from ``source`` anchors onto ``target`` anchors, by
        least squares or RANSAC (``alignment``), with its flag and counts read."""
        search = self._search(source, target)
        if search is None:
            return align_affine(source, target, linear=self.alignment_map == "linear")
        search.settle()
        result = search.result().on_host()
        self.n_fallbacks_ += int(result.fallback)
        self.n_unsure_ += int(result.unsure)
        return result

    def _search(self, source: torch.Tensor, target: torch.Tensor, **first_round: Any) -> RansacSearch | None:
        """RANSAC's search from ``source`` onto ``target`` (None for ``alignment="lstsq"``);
        ``first_round``: its ``first_draw`` or ``state`` (see :class:`~basis.alignment.RansacSearch`)."""
        if self.alignment == "lstsq":
            return None
        strata, n_strata = self.anchor_strata_ or (None, None)
        return RansacSearch(
            source,
            target,
            self.ransac_settings(),
            generator=self.ransac_generator_,
            strata=strata,
            n_strata=n_strata,
            **first_round,
        )

    #: The diagnostics :meth:`align` returns, in the order of :meth:`_alignment_readings`.
    DIAGNOSTICS = ("inlier_fraction", "ransac_rejected", "aligned_norm_ratio", "alignment_error", "fallback", "unsure")

    def _alignment_readings(
        self, phi_batch: torch.Tensor, clean_slots: torch.Tensor | None, search: RansacSearch | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, RansacSearch | None, int]:
        """The aligned batch and its diagnostics as one float64 tensor (no host read), the
        search that made it (``search``, a settled one, or a new one; None for least
        squares) and the hypotheses it drew."""
        n_anchors, reference = len(self.anchor_indices_), self.reference_anchor_embedding_
        if clean_slots is None:
            clean_slots = torch.ones(n_anchors, dtype=torch.bool, device=phi_batch.device)
        if search is None and self.alignment == "ransac":
            noise = RansacSearch.first_noise(self.ransac_iter, n_anchors, self.ransac_generator_, phi_batch.device)
            aligned, readings, *state = self._first_alignment(phi_batch, reference, clean_slots, noise)
            search = self._search(phi_batch[:n_anchors], reference, state=tuple(state))
            return aligned, readings, search, search.drawn
        if search is None:
            result = align_affine(phi_batch[:n_anchors], reference, linear=self.alignment_map == "linear")
        else:
            result = search.result()
        return (*self._aligned(phi_batch, reference, clean_slots, result), search, result.n_hypotheses)

    def _aligned_first_round(
        self, phi_batch: torch.Tensor, reference: torch.Tensor, clean_slots: torch.Tensor, noise: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """RANSAC's first round (its uniform ``noise`` drawn beforehand) from the batch's
        anchors onto ``reference``, the batch aligned by its map and the diagnostics, then
        the search's state: a pure function of its tensors, which ``cuda_graphs`` records as
        a chain of CUDA graphs split at its SVDs (:class:`~basis.runtime.capture.SegmentedCapture`)."""
        search = self._search(phi_batch[: len(clean_slots)], reference, first_draw=noise)
        return (*self._aligned(phi_batch, reference, clean_slots, search.result()), *search.state())

    def _aligned(
        self, phi_batch: torch.Tensor, reference: torch.Tensor, clean_slots: torch.Tensor, result: AlignmentResult
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch aligned by ``result``'s map, and its diagnostics as one float64 tensor."""
        n_anchors = len(clean_slots)
        aligned = apply_affine(result.transform, phi_batch)
        misses = (aligned[:n_anchors] - reference).double().pow(2).sum(dim=1)
        clean = clean_slots.to(misses.dtype)
        reference_rms = rms_row_norm(reference)
        readings = torch.stack(
            [
                result.inliers.double().mean(),
                torch.as_tensor(result.n_rejected, device=misses.device).double(),
                rms_row_norm(aligned) / reference_rms,
                ((misses * clean).sum() / clean.sum()).sqrt() / reference_rms,
                torch.as_tensor(result.fallback, device=misses.device).double(),
                torch.as_tensor(result.unsure, device=misses.device).double(),
            ]
        )
        return aligned, readings

    def _record_alignment(self, values: list[float], n_hypotheses: int) -> dict[str, float]:
        """The diagnostics read from :meth:`_alignment_readings`, counted and as step info."""
        readings = dict(zip(self.DIAGNOSTICS, values))
        self.n_fallbacks_ += int(readings.pop("fallback"))
        self.n_unsure_ += int(readings.pop("unsure"))
        self.alignment_errors_.append(readings["alignment_error"])
        return {**readings, "ransac_hypotheses": float(n_hypotheses)}

    def align(
        self, phi_batch: torch.Tensor, clean_slots: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Align a batch embedding whose first rows are the anchors to the reference, with
        the alignment's diagnostics (see the class docs); ``clean_slots`` marks the anchor
        slots that hold their own node (all, unless ``anchor_outliers``)."""
        if self.alignment == "none":
            return phi_batch, {"inlier_fraction": float("nan")}
        aligned, readings, search, n_hypotheses = self._alignment_readings(phi_batch, clean_slots)
        if search is not None and bool(search.pending):
            search.settle()
            aligned, readings, search, n_hypotheses = self._alignment_readings(phi_batch, clean_slots, search)
        return aligned, self._record_alignment(readings.tolist(), n_hypotheses)

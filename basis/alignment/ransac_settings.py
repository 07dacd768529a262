"""How RANSAC searches for the map between two batches' anchors: its settings, checked."""

from __future__ import annotations

from dataclasses import dataclass

from basis.alignment.affine import MAX_GAIN, NOISE_RCOND, anchors_needed
from basis.choices import TOLERANCE_MODES
from basis.errors import InputError


@dataclass(frozen=True)
class RansacSettings:
    """How :class:`RansacSearch` searches (see :func:`~basis.alignment.ransac_affine` for
    each setting): ``n_iter`` hypotheses in the first round, up to ``max_iter`` for
    ``confidence``, each fitted on ``sample_size`` anchors and scored with the inlier
    ``tolerance`` (``tolerance_mode``), with the fits' noise ``rcond`` and gain cap
    ``max_gain``; a ``linear`` map or an affine one; ``batch_rounds``: the rounds still
    needed drawn at once (None: on CUDA)."""

    n_iter: int = 100
    max_iter: int = 5000
    confidence: float = 0.99
    sample_size: int = 20
    tolerance: float = 0.25
    tolerance_mode: str = "relative"
    rcond: float = NOISE_RCOND
    max_gain: float = MAX_GAIN
    linear: bool = False
    batch_rounds: bool | None = None

    def check(self, n_anchors: int, dim: int) -> None:
        """An InputError unless these settings can search ``n_anchors`` anchors in ``dim``."""
        minimal, _ = anchors_needed(dim, linear=self.linear)
        if not minimal <= self.sample_size <= n_anchors:
            raise InputError(
                f"sample_size must be between {minimal} (fixes the map in K={dim}) and the number of anchors"
                f" {n_anchors}, got {self.sample_size}"
            )
        if not 1 <= self.n_iter <= self.max_iter or not self.tolerance > 0 or not 0 < self.confidence < 1:
            raise InputError(
                "RANSAC needs 1 <= n_iter <= max_iter, tolerance > 0 and 0 < confidence < 1, got"
                f" n_iter={self.n_iter}, max_iter={self.max_iter}, tolerance={self.tolerance},"
                f" confidence={self.confidence}"
            )
        if self.tolerance_mode not in TOLERANCE_MODES:
            raise InputError(f"tolerance_mode must be one of {list(TOLERANCE_MODES)}, got {self.tolerance_mode!r}")


#: The settings :func:`~basis.alignment.ransac_affine` and the estimators default to.
RANSAC_DEFAULTS = RansacSettings()

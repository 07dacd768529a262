"""Affine alignment of one embedding to another through shared anchor nodes.

- :mod:`~basis.alignment.affine`: the least-squares map
  (``eq:stepAffie_transformation_least_squares2``) and its use on a batch;
- :mod:`~basis.alignment.ransac`: its robust estimate by RANSAC, the batch alignment of
  ``eq:stepAlignment``, and Algorithm 2's global transform T_G;
- :mod:`~basis.alignment.search`: RANSAC's search on the anchors' device, and the rules of
  its consensus.
"""

from basis.alignment.affine import (
    MAX_GAIN,
    NOISE_RCOND,
    AlignmentResult,
    affine_least_squares,
    align_affine,
    alignment_gain,
    anchors_needed,
    apply_affine,
    least_squares,
    machine_rcond,
    rms_row_norm,
)
from basis.alignment.ransac import global_transform, ransac_affine
from basis.alignment.ransac_settings import RansacSettings
from basis.alignment.search import (
    MAX_REFITS,
    RansacSearch,
    hypotheses_needed,
    inlier_threshold,
)
from basis.choices import MAPS, TOLERANCE_MODES

__all__ = [
    "MAPS",
    "MAX_GAIN",
    "MAX_REFITS",
    "NOISE_RCOND",
    "TOLERANCE_MODES",
    "AlignmentResult",
    "RansacSearch",
    "RansacSettings",
    "affine_least_squares",
    "align_affine",
    "alignment_gain",
    "anchors_needed",
    "apply_affine",
    "global_transform",
    "hypotheses_needed",
    "inlier_threshold",
    "least_squares",
    "machine_rcond",
    "ransac_affine",
    "rms_row_norm",
]

"""The robust estimate of the batch alignment (``eq:stepAlignment``) by RANSAC
(:func:`ransac_affine`), and Algorithm 2's global transform T_G (:func:`global_transform`).
"""

from __future__ import annotations

import logging

import torch

from basis.alignment.affine import MAX_GAIN, NOISE_RCOND, AlignmentResult
from basis.alignment.ransac_settings import RANSAC_DEFAULTS, RansacSettings
from basis.alignment.search import RansacSearch

log = logging.getLogger(__name__)


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
    settings = RansacSettings(
        n_iter=n_iter,
        max_iter=max_iter,
        confidence=confidence,
        sample_size=sample_size,
        tolerance=tolerance,
        tolerance_mode=tolerance_mode,
        rcond=rcond,
        max_gain=max_gain,
        linear=linear,
    )
    return _search_map(source, target, settings, generator, strata)


def _search_map(
    source: torch.Tensor,
    target: torch.Tensor,
    settings: RansacSettings,
    generator: torch.Generator | None,
    strata: torch.Tensor | None = None,
) -> AlignmentResult:
    """RANSAC's map from ``source`` onto ``target`` with ``settings``, read once at the end."""
    search = RansacSearch(source, target, settings, generator=generator, strata=strata)
    search.settle()
    result = search.result().on_host()
    if result.fallback:
        log.warning(search.describe_fallback())
    if result.unsure:
        log.warning(search.describe_shortfall())
    return result


def global_transform(
    previous_anchors: torch.Tensor,
    updated_anchors: torch.Tensor,
    settings: RansacSettings = RANSAC_DEFAULTS,
    *,
    generator: torch.Generator | None = None,
) -> AlignmentResult:
    """T_G of Algorithm 2: maps the anchors' embedding under updated features onto
    their embedding under the previous features (RANSAC with ``settings``, e.g. a BASiS
    estimator's :meth:`~basis.estimators.targets.BatchTargets.ransac_settings`). Apply it
    to the whole updated embedding with :func:`apply_affine`."""
    return _search_map(updated_anchors, previous_anchors, settings, generator)

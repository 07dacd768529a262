import numpy as np
import pytest
import torch

from basis.alignment import (
    affine_least_squares,
    align_affine,
    apply_affine,
    global_transform,
    least_squares,
    ransac_affine,
)


def _random_affine(rng, dim):
    A = torch.as_tensor(rng.normal(size=(dim, dim))) + 2 * torch.eye(dim, dtype=torch.float64)
    b = torch.as_tensor(rng.normal(size=(dim, 1)))
    return torch.cat([A, b], dim=1)


@pytest.mark.parametrize("dim", [2, 10])
def test_least_squares_recovers_affine_map_from_clean_anchors(rng, dim):
    T = _random_affine(rng, dim)
    source = torch.as_tensor(rng.normal(size=(5 * dim, dim)))
    target = apply_affine(T, source)
    assert torch.allclose(affine_least_squares(source, target), T, atol=1e-6)
    assert torch.allclose(ransac_affine(source, target, sample_size=dim + 1, tolerance=1e-6).transform, T, atol=1e-6)


def test_ransac_recovers_map_with_30_percent_corrupted_anchors(rng):
    dim, n = 10, 250
    T = _random_affine(rng, dim)
    source = torch.as_tensor(rng.normal(size=(n, dim)))
    target = apply_affine(T, source)
    corrupted = torch.as_tensor(rng.choice(n, size=int(0.3 * n), replace=False))
    target[corrupted] += torch.as_tensor(rng.normal(scale=5.0, size=(len(corrupted), dim)))
    plain = affine_least_squares(source, target)
    assert (plain - T).abs().max() > 1e-2  # the corruption does hurt plain least squares
    # Minimal samples (K+1): a clean one comes up with p = 0.7^11 = 2%, so 500 draws
    # all but guarantee one. (The authors' 20 per sample would need ~6,000 draws here.)
    result = ransac_affine(
        source, target, n_iter=500, sample_size=dim + 1, tolerance=0.1, generator=torch.Generator().manual_seed(0)
    )
    assert (result.transform - T).abs().max() < 1e-4
    assert not result.fallback
    expected_inliers = torch.ones(n, dtype=torch.bool)
    expected_inliers[corrupted] = False
    assert torch.equal(result.inliers, expected_inliers)


def test_ransac_falls_back_and_logs_when_no_hypothesis_has_inliers(rng, caplog):
    source = torch.as_tensor(rng.normal(size=(30, 2)))
    target = torch.as_tensor(rng.normal(size=(30, 2)))
    result = ransac_affine(source, target, sample_size=5, tolerance=1e-9)
    assert result.fallback
    assert "falling back" in caplog.text
    assert torch.allclose(result.transform, affine_least_squares(source, target))


def test_too_few_anchors_is_a_clear_error(rng):
    source = torch.as_tensor(rng.normal(size=(3, 3)))
    with pytest.raises(ValueError, match="at least K\\+1=4 anchors"):
        ransac_affine(source, source, sample_size=3)


def test_global_transform_maps_updated_anchors_onto_previous(rng):
    T = _random_affine(rng, 3)
    updated = torch.as_tensor(rng.normal(size=(40, 3)))
    previous = apply_affine(T, updated)
    result = global_transform(previous, updated, sample_size=10, tolerance=1e-6)
    assert torch.allclose(apply_affine(result.transform, updated), previous, atol=1e-8)


def _anchor_design_with_trivial_vector(rng, n=250, dim=10):
    """Anchor embeddings whose first column is the trivial vector, constant up to 1e-12:
    the design [phi, 1] is rank-deficient, as on real image features where it is nearly so."""
    phi = rng.normal(scale=0.05, size=(n, dim))
    phi[:, 0] = 1.0 / np.sqrt(512) + 1e-12 * rng.normal(size=n)
    return torch.as_tensor(phi)


def test_least_squares_is_minimum_norm_on_a_rank_deficient_design(rng):
    A = torch.as_tensor(rng.normal(size=(30, 4)))
    A = torch.cat([A, A[:, :1]], dim=1)  # two equal columns: rank 4 of 5
    B = torch.as_tensor(rng.normal(size=(30, 3)))
    X = least_squares(A, B)
    assert torch.isfinite(X).all()
    # The minimum-norm solution splits the weight of the repeated column evenly ...
    assert torch.allclose(X[0], X[4], atol=1e-10)
    # ... and is the pseudo-inverse's.
    assert torch.allclose(X, torch.linalg.pinv(A) @ B, atol=1e-10)


def test_least_squares_matches_the_cpu_lstsq_on_well_conditioned_designs(rng):
    A = torch.as_tensor(rng.normal(size=(7, 40, 11)))
    B = torch.as_tensor(rng.normal(size=(7, 40, 10)))
    assert torch.allclose(least_squares(A, B), torch.linalg.lstsq(A, B).solution, atol=1e-10)


def test_alignment_never_uses_lstsq_whose_semantics_depend_on_the_device(rng, monkeypatch):
    """The exact code path of a GPU: CUDA's lstsq (gels) raises on a rank-deficient design
    instead of returning a minimum-norm solution; here every lstsq call raises the same way."""

    def cuda_like_lstsq(*args, **kwargs):
        raise torch.linalg.LinAlgError("lstsq: the input matrix does not have full rank (CUDA gels)")

    monkeypatch.setattr(torch.linalg, "lstsq", cuda_like_lstsq)
    source = _anchor_design_with_trivial_vector(rng)
    T = _random_affine(rng, 10)
    target = apply_affine(T, source)
    for result in (
        align_affine(source, target),
        ransac_affine(source, target, sample_size=20, tolerance=1e-6),
        global_transform(target, source, sample_size=20, tolerance=1e-6),
    ):
        assert torch.isfinite(result.transform).all()
        # The fitted map reproduces the targets even though T itself is not identifiable.
        assert torch.allclose(apply_affine(result.transform, source), target, atol=1e-8)
        assert result.inliers.all()


def test_an_ill_conditioned_minimal_refit_does_not_blow_up(rng):
    """K+1 anchors whose design has condition number ~1e5: the exact interpolation has
    coefficients in the thousands; the truncated solve keeps the map at the data's scale."""
    dim = 9
    source = torch.as_tensor(rng.normal(scale=0.1, size=(dim + 1, dim)))
    source[-1] = source[:-1].mean(dim=0) + 1e-6 * torch.as_tensor(rng.normal(size=dim))  # nearly affinely dependent
    target = torch.as_tensor(rng.normal(scale=0.1, size=(dim + 1, dim)))
    exact = torch.linalg.solve(torch.cat([source, torch.ones(dim + 1, 1, dtype=source.dtype)], 1), target).T
    assert exact.abs().max() > 1e3
    assert affine_least_squares(source, target).abs().max() < 10


def test_relative_tolerance_does_not_depend_on_the_embedding_scale(rng):
    dim, n = 4, 60
    T = _random_affine(rng, dim)
    source = torch.as_tensor(rng.normal(size=(n, dim)))
    target = apply_affine(T, source)
    target[:12] += torch.as_tensor(rng.normal(scale=3.0, size=(12, dim)))  # gross outliers
    target += torch.as_tensor(rng.normal(scale=0.01, size=target.shape))  # small noise on every anchor
    options = dict(n_iter=300, sample_size=dim + 1, generator=None)
    inliers = [ransac_affine(scale * source, scale * target, tolerance=0.1, **options).inliers for scale in (1.0, 1e-3)]
    assert torch.equal(inliers[0], inliers[1])
    assert not inliers[0][:12].any() and inliers[0][12:].all()
    # the same absolute tolerance means something else at another scale: at 1e-3 every anchor passes
    assert ransac_affine(
        1e-3 * source, 1e-3 * target, tolerance=0.1, tolerance_mode="absolute", **options
    ).inliers.all()
    with pytest.raises(ValueError, match="tolerance_mode must be one of"):
        ransac_affine(source, target, tolerance_mode="percent")

import numpy as np
import pytest
import torch

from basis.alignment import affine_least_squares, apply_affine, global_transform, ransac_affine


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
    result = ransac_affine(source, target, n_iter=500, sample_size=dim + 1, tolerance=0.1,
                           generator=torch.Generator().manual_seed(0))
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

import numpy as np
import pytest
import torch

from basis.alignment import (
    RansacSettings,
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
    result = global_transform(previous, updated, RansacSettings(sample_size=10, tolerance=1e-6))
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
        global_transform(target, source, RansacSettings(sample_size=20, tolerance=1e-6)),
    ):
        assert torch.isfinite(result.transform).all()
        # The fitted map reproduces the targets even though T itself is not identifiable.
        assert torch.allclose(apply_affine(result.transform, source), target, atol=1e-8)
        assert result.inliers.all()


def test_an_exact_fit_stays_exact_on_an_ill_conditioned_full_rank_design(rng):
    """K+1 anchors whose design has condition number ~1e5 still fix the map: the fit is the
    exact interpolation, as numpy's, however large its coefficients (RANSAC, not the
    solver, keeps such maps out of an alignment: see the gain tests)."""
    dim = 9
    source = torch.as_tensor(rng.normal(scale=0.1, size=(dim + 1, dim)))
    source[-1] = source[:-1].mean(dim=0) + 1e-6 * torch.as_tensor(rng.normal(size=dim))  # nearly affinely dependent
    target = torch.as_tensor(rng.normal(scale=0.1, size=(dim + 1, dim)))
    exact = torch.linalg.solve(torch.cat([source, torch.ones(dim + 1, 1, dtype=source.dtype)], 1), target).T
    assert exact.abs().max() > 1e3
    assert torch.allclose(affine_least_squares(source, target), exact, rtol=1e-8, atol=0)


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


def _numpy_affine(source, target):
    design = np.hstack([source, np.ones((len(source), 1))])
    return np.linalg.lstsq(design, target, rcond=None)[0].T


@pytest.mark.parametrize("scale, shift", [(1.0, 0.0), (1e-6, 0.0), (1e4, 0.0), (1.0, 1e3), (1e-2, 1.0)])
def test_affine_fit_equals_numpy_however_the_columns_are_scaled_or_translated(rng, scale, shift):
    """numpy's lstsq on the well-scaled design, carried into the moved coordinates, is the
    exact answer; the fit on the moved design must equal it (numpy itself loses digits
    there, in proportion to the moved design's condition number)."""
    dim, n = 10, 40
    source = rng.normal(size=(n, dim))
    target = source @ rng.normal(size=(dim, dim)) + rng.normal(scale=0.05, size=(n, dim))
    column_scale = scale * np.logspace(-2, 2, dim)  # columns of very different units too
    moved = source * column_scale + shift
    exact = _numpy_affine(source, target)
    linear = exact[:, :dim] / column_scale
    expected = np.hstack([linear, exact[:, dim:] - linear @ np.full((dim, 1), shift)])
    fitted = affine_least_squares(torch.as_tensor(moved), torch.as_tensor(target)).numpy()
    np.testing.assert_allclose(fitted[:, :dim] * column_scale, exact[:, :dim], rtol=0, atol=1e-10)
    np.testing.assert_allclose(fitted[:, dim:], expected[:, dim:], rtol=1e-10, atol=1e-10)
    predictions = np.hstack([moved, np.ones((n, 1))]) @ fitted.T
    np.testing.assert_allclose(predictions, np.hstack([source, np.ones((n, 1))]) @ exact.T, rtol=0, atol=1e-10)
    if scale == 1.0 and shift == 0.0:  # where numpy's own answer is accurate, equal to it directly
        np.testing.assert_allclose(fitted, _numpy_affine(moved, target), rtol=0, atol=1e-10)


def test_a_column_near_a_constant_is_fitted_where_the_origin_does_not_matter(rng):
    """[1 + 1e-3 v, 1] with target v: the design is well posed once centred; the map is v <- 1e3 (x - 1)."""
    v = rng.normal(size=(50, 1))
    v -= v.mean()
    source = torch.as_tensor(1.0 + 1e-3 * v)
    T = affine_least_squares(source, torch.as_tensor(v))
    np.testing.assert_allclose(T.numpy(), [[1e3, -1e3]], rtol=1e-8)
    np.testing.assert_allclose(apply_affine(T, source).numpy(), v, atol=1e-10)


def clustered_anchors(rng, *, n_classes=10, per_class=25, outliers=0.0, noise=1e-10):
    """Anchors of two batches of a clustered (Siamese-like) embedding: in the batch being
    aligned, eigenvector k is the indicator of class k (normalised over its ~51 batch
    nodes) up to ``noise``; in the reference batch the eigenvectors are another basis of
    the same indicators, with the sampling noise of a different batch (1e-2 of the
    entries). ``outliers`` of the anchor slots hold a node of another class. Returns
    source, target, the clean map and the outlier mask."""
    labels = np.repeat(np.arange(n_classes), per_class)
    indicators = np.eye(n_classes)[labels] / np.sqrt(512 / n_classes)
    rotation = np.linalg.qr(rng.normal(size=(n_classes, n_classes)))[0]
    target = indicators @ rotation + 1e-2 * np.abs(indicators).max() * rng.normal(size=indicators.shape)
    seen = labels.copy()
    corrupted = rng.choice(len(labels), size=round(outliers * len(labels)), replace=False)
    seen[corrupted] = (labels[corrupted] + rng.integers(1, n_classes, size=len(corrupted))) % n_classes
    source = np.eye(n_classes)[seen] / np.sqrt(512 / n_classes) + noise * rng.normal(size=indicators.shape)
    is_outlier = np.zeros(len(labels), dtype=bool)
    is_outlier[corrupted] = True
    return torch.as_tensor(source), torch.as_tensor(target), torch.as_tensor(rotation.T), torch.as_tensor(is_outlier)


def _clean_error(result, source, target, is_outlier):
    """RMS row error on the clean anchors over the RMS row norm of the targets."""
    errors = torch.linalg.norm(apply_affine(result.transform, source) - target, dim=1)
    return float(errors[~is_outlier].pow(2).mean().sqrt() / target.pow(2).sum(dim=1).mean().sqrt())


def test_ransac_on_clustered_anchors_with_outliers_never_blows_up(rng):
    """The embeddings Table 1 aligns: a 20-anchor sample that misses a class holds that
    class's eigenvector at ~1e-10. Every batch is aligned to within the targets' noise,
    and every outlier is found."""
    for batch in range(12):
        source, target, _, is_outlier = clustered_anchors(rng, outliers=0.2)
        result = ransac_affine(source, target, generator=torch.Generator().manual_seed(batch))
        assert not result.fallback
        assert _clean_error(result, source, target, is_outlier) < 0.05
        assert torch.equal(result.inliers, ~is_outlier)


def test_ransac_hypotheses_follow_the_inlier_ratio(rng):
    """200 of 250 anchors clean: a clean 20-anchor sample has p = 0.8^20 = 0.0115, and on a
    clustered embedding only about one in five samples holds every class, so 99 % confidence
    needs about 2,000 hypotheses, not the authors' 100. Clean anchors need no more than the
    first round; the cap is honoured."""
    source, target, _, is_outlier = clustered_anchors(rng, outliers=0.2)
    authors = ransac_affine(source, target, generator=torch.Generator().manual_seed(0))
    assert 1000 <= authors.n_hypotheses <= 4000
    assert torch.equal(authors.inliers, ~is_outlier)
    clean = ransac_affine(*clustered_anchors(rng)[:2], generator=torch.Generator().manual_seed(0))
    assert clean.n_hypotheses == 100 and clean.inliers.all()
    capped = ransac_affine(source, target, n_iter=50, max_iter=150, generator=torch.Generator().manual_seed(0))
    assert capped.n_hypotheses == 150
    # In general position every sample fixes the map: 0.8^11 = 0.086 asks for ~50 minimal samples.
    dim, n = 10, 250
    general = torch.as_tensor(rng.normal(size=(n, dim)))
    mapped = apply_affine(_random_affine(rng, dim), general)
    mapped[:50] += torch.as_tensor(rng.normal(scale=5.0, size=(50, dim)))
    minimal = ransac_affine(general, mapped, sample_size=dim + 1, generator=torch.Generator().manual_seed(0))
    assert minimal.n_hypotheses == 100 and minimal.inliers[50:].all() and not minimal.inliers[:50].any()


def test_ransac_rejects_and_counts_blown_up_hypotheses(rng):
    """Without the noise tolerance (rcond at machine precision), the samples that miss a
    class give maps with coefficients ~1e8: each is rejected by its gain and counted, and
    the alignment is still right."""
    source, target, _, is_outlier = clustered_anchors(rng, outliers=0.2)
    result = ransac_affine(source, target, rcond=0.0, generator=torch.Generator().manual_seed(0))
    assert result.n_rejected > 0
    assert _clean_error(result, source, target, is_outlier) < 0.05
    # Every hypothesis blown up: none is accepted; the fallback is flagged.
    everything = ransac_affine(source, target, rcond=0.0, max_gain=1e-3, generator=torch.Generator().manual_seed(0))
    assert everything.fallback and everything.n_rejected == everything.n_hypotheses


def test_ransac_refits_until_the_inlier_set_is_stable():
    """The result is a fixed point: T is the least-squares fit on its own inliers, and its
    inliers are the anchors within the threshold under T."""
    rng = np.random.default_rng(5)  # data on which the first refit moves the inlier set
    dim, n = 4, 80
    T = _random_affine(rng, dim)
    source = torch.as_tensor(rng.normal(size=(n, dim)))
    target = apply_affine(T, source) + torch.as_tensor(rng.normal(scale=0.3, size=(n, dim)))
    target[:16] += torch.as_tensor(rng.normal(scale=3.0, size=(16, dim)))
    generator = torch.Generator().manual_seed(1)
    result = ransac_affine(source, target, sample_size=dim + 1, tolerance=0.3, generator=generator)
    assert result.n_refits >= 2  # the first refit moved the inlier set on this data
    refit = affine_least_squares(source[result.inliers], target[result.inliers])
    assert torch.allclose(result.transform, refit, atol=1e-12)
    errors = torch.linalg.norm(apply_affine(result.transform, source) - target, dim=1)
    assert torch.equal(result.inliers, errors < 0.3 * target.pow(2).sum(dim=1).mean().sqrt())


def test_ransac_never_misses_the_anchors_by_more_than_their_norm(rng):
    """Inconsistent anchor embeddings (spirals: six anchors, K = 1, no affine map fits):
    whatever RANSAC's best consensus, the map it returns misses the anchors, in RMS, by
    no more than the targets' RMS row norm (falling back to least squares otherwise)."""
    worst = 0.0
    for draw in range(60):
        source = torch.as_tensor(rng.normal(scale=0.06, size=(6, 1)))
        target = torch.as_tensor(rng.normal(scale=0.06, size=(6, 1)))
        target[:4] = 2.0 * source[:4] + 0.01 * torch.as_tensor(rng.normal(size=(4, 1)))  # 4 agree, 2 do not
        result = ransac_affine(
            source,
            target,
            sample_size=5,
            tolerance=0.01,
            tolerance_mode="absolute",
            generator=torch.Generator().manual_seed(draw),
        )
        error = float(result.residuals.pow(2).mean().sqrt() / target.pow(2).sum(dim=1).mean().sqrt())
        worst = max(worst, error)
    assert worst <= 1.0 + 1e-12


def _oracle_cases(rng):
    """Designs that break things: clustered with outliers, rank-deficient, translated,
    refits that move, linear maps, all-outlier fallbacks."""
    for outliers in (0.0, 0.2, 0.4):
        source, target, _, _ = clustered_anchors(rng, outliers=outliers)
        yield "clustered", source, target, {}
    source, target, _, _ = clustered_anchors(rng, outliers=0.2)
    yield "clustered, translated", source + 7.0, target - 3.0, {}
    design = _anchor_design_with_trivial_vector(rng, n=60, dim=4)
    yield "rank-deficient", design, design @ torch.as_tensor(rng.normal(size=(4, 4))), {"sample_size": 8}
    dim, n = 4, 80
    general = torch.as_tensor(rng.normal(size=(n, dim)))
    moved = apply_affine(_random_affine(rng, dim), general) + torch.as_tensor(rng.normal(scale=0.3, size=(n, dim)))
    moved[:16] += torch.as_tensor(rng.normal(scale=3.0, size=(16, dim)))
    yield "refits move", general, moved, {"sample_size": dim + 1, "tolerance": 0.3}
    yield "linear", general, general @ torch.as_tensor(rng.normal(size=(dim, dim))), {"linear": True, "sample_size": 6}
    noise = torch.as_tensor(rng.normal(size=(30, 2)))
    yield "fallback", noise, torch.as_tensor(rng.normal(size=(30, 2))), {"sample_size": 5, "tolerance": 1e-9}


def _assert_same_outcome(result, expected, name):
    """The same inliers, fallback and counts (hypotheses drawn, rejected, refits)."""
    assert torch.equal(result.inliers, expected.inliers), name
    counts = (result.fallback, result.n_hypotheses, result.n_rejected, result.n_refits)
    assert counts == (expected.fallback, expected.n_hypotheses, expected.n_rejected, expected.n_refits), name


def test_the_device_native_search_equals_the_host_loop_it_replaced(rng):
    """Issue #20: on the same samples (the same generator), the fixed-shape search gives
    the estimate of the host loop of commit 09065fe (tests/ransac_oracle.py) to 1e-10, with
    the same inliers, fallback and counts. The maps are compared relative to their size;
    without the noise tolerance a clustered design has condition number ~1e10, where no two
    orders of summation agree beyond cond x eps, and there the bound is 1e-6."""
    from ransac_oracle import ransac_affine_09065fe

    source, target, _, _ = clustered_anchors(rng, outliers=0.2)
    cases = [(*case, 1e-10) for case in _oracle_cases(rng)]
    cases.append(("clustered, no noise tolerance", source, target, {"rcond": 0.0}, 1e-6))
    for name, source, target, options, bound in cases:
        for seed in range(3):
            new = ransac_affine(source, target, generator=torch.Generator().manual_seed(seed), **options)
            old = ransac_affine_09065fe(source, target, generator=torch.Generator().manual_seed(seed), **options)
            assert (new.transform - old.transform).abs().max() <= bound * old.transform.abs().max(), name
            _assert_same_outcome(new, old, name)


def test_a_search_that_needs_no_more_rounds_reads_nothing_from_the_device(rng):
    """Clean clustered anchors: the first round is enough, so the search, its refits and the
    choice of its map are tensor work only, with the decision left to the caller's read."""
    from basis.alignment import RansacSearch
    from basis.runtime.syncs import HostSyncCounter

    source, target, _, _ = clustered_anchors(rng)
    with HostSyncCounter() as syncs:
        search = RansacSearch(source, target, generator=torch.Generator().manual_seed(0))
        result = search.result()
    assert syncs.total == 0, syncs.counts
    assert not bool(search.pending) and not bool(result.fallback)


def test_the_rounds_a_search_still_needs_are_drawn_at_once_with_the_same_outcome(rng):
    """A search that needs many rounds (anchors from the wrong class: 18 to 50 rounds of
    100 here) draws them in one batch and reads the device a few times, not once per round;
    it scores the rounds as one tensor and fits the adopted maps as one batch, so its
    kernel launches and decompositions do not grow with the rounds. Its inliers, counts and
    the generator's later draws are those of drawing one round at a time, its map equal to
    rounding (a batched fit rounds its last bit differently), and within 1e-10 of the host
    loop it replaced (tests/ransac_oracle.py)."""
    from ransac_oracle import ransac_affine_09065fe

    from basis.alignment import RansacSearch
    from basis.runtime.syncs import HostSyncCounter

    def one_round_at_a_time(search):
        while True:
            if bool(search.found & search.refining):
                refined = search._refit(
                    search.transform, search.inliers, search.refits, search.candidate, search.refining
                )
                search.transform, search.inliers, search.refits, search.candidate, search.refining = refined
                search._update_needed()
            elif search.drawn < search.max_iter and bool(search.needed > search.drawn):
                search._rounds()
            else:
                return search.result().on_host()

    for outliers, seed in [(0.2, 0), (0.2, 1), (0.3, 2)]:
        source, target, _, _ = clustered_anchors(rng, outliers=outliers)
        generators = [torch.Generator().manual_seed(seed) for _ in range(3)]
        old = ransac_affine_09065fe(source, target, generator=generators[0])
        single = one_round_at_a_time(RansacSearch(source, target, generator=generators[1]))
        batched = RansacSettings(batch_rounds=True)  # CUDA's default
        search = RansacSearch(source, target, batched, generator=generators[2])
        with HostSyncCounter() as syncs:
            search.settle()
        batched = search.result().on_host()
        rounds = single.n_hypotheses // 100
        assert rounds >= 15, rounds
        assert torch.equal(batched.inliers, single.inliers)
        assert (batched.transform - single.transform).abs().max() <= 1e-14 * single.transform.abs().max()
        counts = (batched.n_hypotheses, batched.n_rejected, batched.n_refits)
        assert counts == (single.n_hypotheses, single.n_rejected, single.n_refits)
        assert counts == (old.n_hypotheses, old.n_rejected, old.n_refits)
        assert (batched.transform - old.transform).abs().max() <= 1e-10 * old.transform.abs().max()
        draws = [torch.rand(5, generator=generator) for generator in generators]
        assert torch.equal(draws[0], draws[1]) and torch.equal(draws[1], draws[2])
        # settle's own reads, which rounds were adopted, their refits, and where to stop;
        # one round at a time read once per round and once per refit
        assert syncs.total <= 8, (syncs.counts, rounds)
        # one batched fit of the samples, one of the adopted maps, one per refit pass; the
        # round-by-round scan launched about 40 ops per round (1,333 to 3,358 here)
        assert syncs.linalg_checks["svd"] <= 4 and syncs.ops <= 700, (syncs.linalg_checks, syncs.ops, rounds)


def test_where_tall_designs_are_reduced_first_the_fits_are_the_same(rng, monkeypatch):
    """On CUDA a design taller than cuSOLVER's batched SVD takes (32 rows: all anchors, a
    refit on the inliers) is reduced to its triangular factor first. Run that path here:
    every SVD then sees at most 32 rows, and least squares and RANSAC give what the plain
    SVD gives, on the designs that break things: clustered with outliers, rank-deficient,
    translated, batched, linear maps, fallbacks."""
    from contextlib import nullcontext

    from basis.runtime.device import emulating_cuda

    def plain_then_reduced(function, *args, seed=None, **kwargs):
        """The function's results by each route (each with its own generator from ``seed``),
        the CPU's and CUDA's (emulated), and the row counts its SVDs saw by each."""
        results, rows = [], []
        for side in (nullcontext, emulating_cuda):
            with side():
                decomposed.clear()
                generator = {} if seed is None else {"generator": torch.Generator().manual_seed(seed)}
                results.append(function(*args, **kwargs, **generator))
                rows.append(list(decomposed))
        return (*results, *rows)

    decomposed, svd = [], torch.linalg.svd

    def recording_svd(A, *args, **kwargs):
        decomposed.append(A.shape[-2])
        return svd(A, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "svd", recording_svd)
    A, B = torch.as_tensor(rng.normal(size=(7, 40, 11))), torch.as_tensor(rng.normal(size=(7, 40, 10)))
    plain, reduced, _, _ = plain_then_reduced(least_squares, A, B)
    assert (reduced - plain).abs().max() <= 1e-12 * plain.abs().max()
    design = _anchor_design_with_trivial_vector(rng)
    mapped = apply_affine(_random_affine(rng, 10), design)
    for rcond in (None, 1e-3):
        plain, reduced, _, _ = plain_then_reduced(affine_least_squares, design, mapped, rcond=rcond)
        # the first column is constant up to 1e-12: its coefficient is fixed only to ~1e-5,
        # by either route, and moves the predictions by ~1e-17
        assert (apply_affine(reduced, design) - apply_affine(plain, design)).abs().max() <= 1e-12 * mapped.abs().max()
    for name, source, target, options in _oracle_cases(rng):
        for seed in range(2):
            plain, reduced, plain_rows, reduced_rows = plain_then_reduced(
                ransac_affine, source, target, seed=seed, **options
            )
            assert max(reduced_rows) <= 32 and (len(source) <= 32 or max(plain_rows) > 32), name
            if name == "rank-deficient":  # a column constant up to 1e-12: compare what the maps do
                plain_mapped, reduced_mapped = (
                    apply_affine(plain.transform, source),
                    apply_affine(reduced.transform, source),
                )
                assert (reduced_mapped - plain_mapped).abs().max() <= 1e-12 * plain_mapped.abs().max()
            else:
                assert (reduced.transform - plain.transform).abs().max() <= 1e-10 * plain.transform.abs().max(), name
            _assert_same_outcome(reduced, plain, name)


def test_a_first_draw_serves_one_round_only(rng):
    """The first round's noise, drawn beforehand, cannot stand for several rounds: the
    rewind of a batch of rounds would redraw noise the generator never drew."""
    from basis.alignment import RansacSearch

    source, target, _, _ = clustered_anchors(rng)
    generator = torch.Generator().manual_seed(0)
    noise = RansacSearch.first_noise(100, len(source), generator, source.device)
    search = RansacSearch(source, target, generator=generator, first_draw=noise)
    with pytest.raises(ValueError, match="one round"):
        search._rounds(2, first_draw=noise)


def test_stratified_samples_hold_every_class(rng):
    from basis.alignment import RansacSearch

    classes = torch.as_tensor(np.repeat(np.arange(10), 25))
    source, target, _, _ = clustered_anchors(rng)
    search = RansacSearch(source, target, strata=classes, generator=torch.Generator().manual_seed(0))
    samples = search._draw(200)
    assert all(set(classes[row].tolist()) == set(range(10)) for row in samples)
    assert samples.shape == (200, 20) and all(len(set(row.tolist())) == 20 for row in samples)
    # fewer hypotheses than uniform samples at the same inlier ratio (a uniform one misses a class 4 times in 5)
    source, target, _, is_outlier = clustered_anchors(rng, outliers=0.2)
    stratified = ransac_affine(source, target, strata=classes, generator=torch.Generator().manual_seed(0))
    uniform = ransac_affine(source, target, generator=torch.Generator().manual_seed(0))
    assert torch.equal(stratified.inliers, ~is_outlier) and torch.equal(uniform.inliers, ~is_outlier)
    assert stratified.n_hypotheses < uniform.n_hypotheses


def test_a_search_that_ends_short_of_its_confidence_says_so(rng, caplog):
    """40 % of the anchors wrong: 99 % confidence needs far more than 300 hypotheses; the
    map returned is flagged and the log says why. A clean search is not flagged."""
    source, target, _, _ = clustered_anchors(rng, outliers=0.4)
    short = ransac_affine(source, target, max_iter=300, generator=torch.Generator().manual_seed(0))
    assert short.unsure and short.n_hypotheses == 300
    assert "confidence needs about" in caplog.text and "300 were drawn" in caplog.text
    source, target, _, _ = clustered_anchors(rng)
    assert not ransac_affine(source, target, generator=torch.Generator().manual_seed(0)).unsure


def test_a_fallback_names_the_reason_it_fell_back(rng, caplog):
    """Half the anchors mapped exactly, half to the opposite point: the true map has a
    consensus of 125, but misses the others by twice their norm, worse than mapping all
    to zero; the message says that, not that no hypothesis had a consensus."""
    T = _random_affine(rng, 3)
    source = torch.as_tensor(rng.normal(size=(250, 3)))
    target = apply_affine(T, source)
    target[125:] *= -1
    result = ransac_affine(source, target, sample_size=5, generator=torch.Generator().manual_seed(0))
    assert result.fallback
    assert "misses the anchors by an RMS error" in caplog.text and "no hypothesis had" not in caplog.text

"""Beyond the paper: the BASiS variants each do what they claim, and the studies that
measure them (basis/studies/variants.py, basis/studies/alignment_error.py)."""

import numpy as np
import pytest
import torch

from basis.alignment import align_affine, apply_affine, ransac_affine
from basis.data import load_dataset
from basis.data.toy_sets import two_moons
from basis.estimators import BASiS
from basis.graph import GraphConfig, dense_affinity
from basis.references import analytic_embedding
from basis.spectral import spectral_embedding
from basis.studies.alignment_error import alignment_error, alignment_error_claims, eigengaps
from basis.studies.variants import VARIANTS, basis_variants, meets_floor, variants_claims

GRAPH = {"n_neighbors": 10, "scale": "global"}
TOY = {"graph": GRAPH, "operator": "unnormalized", "drop_trivial": True}


@pytest.fixture(scope="module")
def moons():
    return two_moons(1200, seed=0)


def _model(**options):
    return BASiS(1, **TOY, batch_size=150, n_iter=30, anchors_per_class=10, seed=0, device="cpu", lr=1e-3, **options)


def test_a_linear_map_needs_k_anchors_and_adds_no_translation():
    rng = np.random.default_rng(0)
    source = torch.as_tensor(rng.normal(size=(3, 3)))  # K anchors: too few for an affine map
    T = torch.as_tensor(rng.normal(size=(3, 3)))
    fit = align_affine(source, source @ T.T, linear=True)
    assert fit.transform.shape == (3, 3) and torch.allclose(fit.transform, T, atol=1e-8)
    assert torch.allclose(
        apply_affine(fit.transform, torch.zeros(1, 3, dtype=torch.float64)), torch.zeros(1, 3, dtype=torch.float64)
    )
    source = torch.as_tensor(rng.normal(size=(30, 3)))
    robust = ransac_affine(source, source @ T.T, sample_size=3, tolerance=1e-6, linear=True)
    assert torch.allclose(robust.transform, T, atol=1e-8)
    with pytest.raises(ValueError, match="needs at least K\\+1=4 anchors"):
        align_affine(source[:3], source[:3])


def test_linear_alignment_keeps_targets_in_the_batch_eigenspace(moons):
    """With L = D - W and the trivial vector dropped, a batch's eigenvectors are orthogonal
    to the constant vector; a linear map keeps the aligned targets in their span, while
    the affine map's translation adds a constant (which undoes the batch's own centring)."""
    X, y = moons
    means = {}
    for name in ("affine", "linear"):
        model = _model(alignment="lstsq", alignment_map=name).start(X, y)
        _, phi = model.prepare_batch().content[:2]
        means[name] = float(phi.mean(dim=0).abs().max())
    assert means["linear"] < 1e-6 and means["affine"] > 100 * means["linear"]


def test_a_mean_reference_is_closer_to_the_whole_graphs_eigenvectors():
    """The anchors' embedding averaged over aligned batches carries less of one batch's
    sampling noise: after the best affine map, it is nearer the whole graph's eigenvectors
    at the anchors than the first batch alone, for each seed (raw digits, K = 10)."""
    data = load_dataset("digits")
    X = data.X_train.reshape(len(data.X_train), -1)
    settings = {"graph": {"n_neighbors": 15, "scale": "local"}, "operator": "normalized", "drop_trivial": False}
    truth = torch.as_tensor(analytic_embedding(X, settings, 10))
    for seed in range(2):
        residuals = {}
        for reference in ("first_batch", "mean"):
            model = BASiS(
                10,
                **settings,
                batch_size=300,
                anchors_per_class=10,
                alignment="lstsq",
                reference=reference,
                reference_batches=20,
                seed=seed,
                device="cpu",
            ).start(X, data.y_train)
            at_anchors, target = model.reference_anchor_embedding_.double(), truth[model.anchor_indices_]
            fit = align_affine(at_anchors, target)
            residuals[reference] = float(torch.linalg.norm(apply_affine(fit.transform, at_anchors) - target))
        assert residuals["mean"] < residuals["first_batch"], (seed, residuals)


def test_weight_averaging_ends_on_the_mean_of_the_last_iterates(moons):
    X, y = moons
    model = _model(average_tail=0.5).start(X, y)
    iterates = []
    for _ in range(model.n_iter):
        model.step()
        iterates.append([p.detach().clone() for p in model.model_.parameters()])
    model.finish()
    for i, parameter in enumerate(model.model_.parameters()):
        expected = torch.stack([step[i] for step in iterates[15:]]).mean(dim=0)
        assert torch.allclose(parameter, expected, atol=1e-6)
    plain = _model().fit(X, y)  # the paper's BASiS ends on its last iterate, trained identically
    assert np.allclose(plain.loss_curve_, model.loss_curve_)
    assert not np.allclose(plain.transform(X), model.transform(X))


@pytest.mark.parametrize(
    "options, match",
    [
        ({"alignment_map": "projective"}, r"alignment_map='projective' .* expected Literal\['affine', 'linear'\]"),
        ({"reference": "median"}, r"reference='median' .* expected Literal\['first_batch', 'mean'\]"),
        ({"reference": "mean", "alignment": "none"}, "needs an alignment other than 'none'"),
        ({"average_tail": 1.0}, r"average_tail=1.0 is out of range: expected in \[0, 1\)"),
    ],
)
def test_bad_variant_options_are_named(moons, options, match):
    with pytest.raises(ValueError, match=match):
        _model(**options).fit(*moons)


def test_the_variants_study_scores_every_variant_seed_for_seed():
    result, arrays = basis_variants("two_moons", n_seeds=2, n_iter=5, n_samples=900, device="cpu")
    assert list(arrays["variants"]) == list(VARIANTS)
    for variant in VARIANTS:
        assert arrays[f"d_G/{variant}"].shape == (2,)
        assert result[f"{variant}/d_G_mean"] == pytest.approx(arrays[f"d_G/{variant}"].mean())
    assert result["paper/d_G_change"] == 0.0
    with pytest.raises(ValueError, match="unknown variants"):
        basis_variants("two_moons", variants=["bigger"])


def test_the_variants_floor_and_claim_fail_on_a_too_small_cut_or_a_score_loss():
    def result(d_G, nmi):
        return {
            "n_seeds": 10,
            **{f"paper/{m}_mean": v for m, v in (("d_G", 0.4), ("nmi", 0.9), ("acc", 0.9))},
            **{f"combined/{m}_mean": v for m, v in (("d_G", d_G), ("nmi", nmi), ("acc", 0.9))},
            "combined/d_G_change": d_G / 0.4 - 1,
        }

    assert meets_floor(result(0.29, 0.9), "combined")
    assert not meets_floor(result(0.31, 0.9), "combined")  # only 22.5 % lower
    assert not meets_floor(result(0.2, 0.89), "combined")  # NMI 0.01 lower
    rows = variants_claims({"digits": result(0.31, 0.9)})
    assert rows[0]["claim"].startswith("Beyond the paper") and not rows[0]["reproduced"]


def test_eigengaps_measure_the_distance_to_the_spectrum_outside_the_embedding():
    assert np.allclose(eigengaps(np.array([0.0, 0.0, 0.1, 0.5]), 3), [0.5, 0.5, 0.4])


def test_alignment_error_follows_davis_kahan_on_raw_digits():
    """The measured trend the error-analysis figure shows: error grows with 1 / eigengap
    (log-log slope near 1)."""
    result, arrays = alignment_error(
        "digits", batch_sizes=[200, 500], n_pairs=3, protocol={"graph": {"n_neighbors": 15, "scale": "local"}}
    )
    assert arrays["m200/error"].shape == arrays["m200/inverse_gap"].shape == (3, 10)
    for m in (200, 500):
        assert result[f"m{m}/correlation"] > 0.5 and 0.5 < result[f"m{m}/slope"] < 2
    assert alignment_error_claims({"digits": result})[0]["reproduced"]
    with pytest.raises(ValueError, match="do not fit"):
        alignment_error("digits", batch_sizes=[100])  # the 100 anchors and 50 held out fill it


def test_eigengap_of_a_batch_matches_its_spectrum():
    X, _ = two_moons(300, seed=1)
    W = dense_affinity(torch.as_tensor(X), GraphConfig.from_dict(GRAPH))
    _, values = spectral_embedding(W, 3, operator="normalized", drop_trivial=False, on_disconnected="ignore")
    assert np.allclose(eigengaps(values.numpy(), 2), values[2].item() - values[:2].numpy())

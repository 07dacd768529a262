"""BASiS (Algorithm 1) end to end on the paper's three moons, plus its contracts."""

import json

import numpy as np
import pytest
import torch
from sklearn.model_selection import train_test_split

from basis import metrics
from basis.data.toy_sets import three_moons, three_moons_anchors
from basis.errors import InputError
from basis.estimators import BASiS, SpectralEstimator
from basis.references import analytic_embedding
from basis.studies.consistency import anchor_spread

# The authors' toy set-up: L = D - W, K = 2 without the trivial vector, 9 anchors,
# batches of 256 + 9, RANSAC with 5 anchors per hypothesis and tolerance 0.01.
MOONS_GRAPH = {"n_neighbors": 15, "scale": "global", "scale_neighbor": 7}


@pytest.fixture(scope="module")
def moons():
    X, y = three_moons(seed=0)
    # an independent split (a mask from default_rng(0) would replay the moons' own angles)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    return X_train, y_train, X_test, y_test


@pytest.fixture(scope="module")
def fitted(moons):
    X_train, y_train, _, _ = moons
    steps = []
    model = BASiS(
        2,
        graph=MOONS_GRAPH,
        operator="unnormalized",
        drop_trivial=True,
        batch_size=265,
        n_iter=1000,
        anchor_indices=three_moons_anchors(X_train, y_train).tolist(),
        ransac_sample_size=5,
        ransac_tolerance=0.01,
        ransac_tolerance_mode="absolute",
        device="cpu",
        seed=0,
        callback=lambda step, info: steps.append(info),
    )
    return model.fit(X_train, y_train), steps


def test_three_moons_reaches_the_papers_quality(moons, fitted):
    _, _, X_test, y_test = moons
    model, _ = fitted
    Y = model.transform(X_test)
    reference = analytic_embedding(X_test, {"graph": MOONS_GRAPH, "operator": "unnormalized", "drop_trivial": True}, 2)
    result = metrics.evaluate_embedding(Y, y_test, reference, n_clusters=3)
    # authors: NMI 0.9966, ACC 0.9995, d_G 0.0041
    assert result["nmi"] >= 0.99
    assert result["acc"] >= 0.99
    assert result["d_G"] <= 0.05


def test_callback_sees_loss_and_timings_every_step(fitted):
    model, steps = fitted
    assert len(steps) == 1000
    assert {"loss", "ms_graph", "ms_eigensolve", "ms_alignment", "ms_gradient", "ms_step"} <= set(steps[0])
    assert np.mean(model.loss_curve_[-50:]) < 0.2 * np.mean(model.loss_curve_[:50])


def test_alignment_makes_anchor_embeddings_consistent_across_batches():
    X, y = three_moons(n_per_moon=3000, seed=1)
    spread = anchor_spread(X, three_moons_anchors(X, y), n_batches=20, batch_size=256, graph=MOONS_GRAPH)
    assert spread["before"].shape == (20, 9, 2)
    assert spread["reduction"] >= 10.0


def test_save_and_load_roundtrip(tmp_path, moons, fitted):
    model, _ = fitted
    path = tmp_path / "basis.pt"
    model.save(path)
    loaded = SpectralEstimator.load(path, device="cpu")
    assert isinstance(loaded, BASiS)
    np.testing.assert_array_equal(loaded.transform(moons[2]), model.transform(moons[2]))
    json.dumps(loaded.settings())  # settings stay JSON-friendly


def test_loading_a_non_checkpoint_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.pt"
    torch.save({"something": torch.zeros(2)}, bad)
    with pytest.raises(ValueError, match="is not a checkpoint of a basis estimator"):
        SpectralEstimator.load(bad)


def test_same_seed_same_numbers():
    X, y = three_moons(n_per_moon=400, seed=2)
    kwargs = dict(
        graph=MOONS_GRAPH,
        operator="unnormalized",
        drop_trivial=True,
        batch_size=100,
        n_iter=20,
        anchors="random",
        n_anchors=12,
        ransac_sample_size=5,
        device="cpu",
        seed=3,
    )
    a = BASiS(2, **kwargs).fit(X).transform(X)
    b = BASiS(2, **kwargs).fit(X).transform(X)
    np.testing.assert_array_equal(a, b)
    c = BASiS(2, **{**kwargs, "seed": 4}).fit(X).transform(X)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize(
    "params, X_change, match",
    [
        ({}, lambda X: X[:, :, None], "Found array with dim 3, while dim <= 2 is required"),
        ({}, lambda X: np.where(np.arange(len(X))[:, None] == 3, np.nan, X), "NaN or inf"),
        ({"batch_size": 50, "n_components": 50}, None, "n_components=50 must be smaller than batch_size=50"),
        ({"graph": {"n_neighbors": 60}}, None, "n_neighbors=60 must be smaller than batch_size=50"),
        ({"n_anchors": 2}, None, "at least K\\+1=3 needed"),
        ({"alignment": "procrustes"}, None, "alignment='procrustes' .* expected Literal\\['ransac'"),
        ({"operator": "laplace"}, None, "operator='laplace' .* expected Literal\\['unnormalized'"),
        ({"batch_size": 5000}, None, "exceeds the number of training points"),
        ({"device": "tpu:x"}, None, "device must be"),
    ],
)
def test_bad_input_fails_before_training(params, X_change, match):
    X, _ = three_moons(n_per_moon=100, seed=0)
    base = dict(
        graph={"n_neighbors": 10, "scale_neighbor": 5},
        batch_size=50,
        n_iter=5,
        anchors="random",
        n_anchors=10,
        ransac_sample_size=5,
        device="cpu",
    )
    graph = {**base["graph"], **params.pop("graph", {})}
    steps = []
    model = BASiS(**{"n_components": 2, **base, **params, "graph": graph}, callback=lambda s, i: steps.append(s))
    with pytest.raises(ValueError, match=match):
        model.fit(X_change(X) if X_change else X)
    assert steps == []


def test_ablation_without_alignment_runs():
    X, y = three_moons(n_per_moon=300, seed=0)
    model = BASiS(
        2,
        graph={"n_neighbors": 10, "scale_neighbor": 5},
        operator="unnormalized",
        drop_trivial=True,
        batch_size=100,
        n_iter=5,
        anchors="random",
        n_anchors=9,
        alignment="none",
        device="cpu",
    )
    assert model.fit(X).transform(X).shape == (900, 2)


def test_anchor_outliers_put_another_class_in_the_chosen_anchor_slots(moons):
    X_train, y_train, _, _ = moons
    model = BASiS(
        2,
        graph=MOONS_GRAPH,
        operator="unnormalized",
        drop_trivial=True,
        batch_size=200,
        n_iter=1,
        anchors_per_class=10,
        anchor_outliers=0.2,
        device="cpu",
        seed=0,
    )
    X_t, seen = torch.as_tensor(X_train, dtype=torch.float32), []

    def features_of(indices):  # records which nodes the next batch holds
        seen.append(indices)
        return X_t[indices]

    model.start(X_train, y_train)
    model.prepare_batch(features_of)
    batch = seen[-1]
    anchors = model.anchor_indices_
    replaced = batch[: len(anchors)] != anchors
    assert int(replaced.sum()) == 6  # 20 % of 30 anchor slots
    assert (y_train[batch[: len(anchors)][replaced]] != y_train[anchors[replaced]]).all()
    assert len(set(batch.tolist())) == len(batch)  # no node twice in a batch
    # the reference batch is clean: the alignment's target stays the true anchors
    assert torch.equal(model.reference_indices_[: len(anchors)], anchors)
    with pytest.raises(ValueError, match=r"anchor_outliers=1.0 is out of range: expected in \[0, 1\)"):
        BASiS(2, anchor_outliers=1.0, batch_size=200, device="cpu").fit(X_train, y_train)


def test_the_default_ransac_sample_follows_the_number_of_classes():
    """Twenty classes need 21 anchors a hypothesis, one more than the authors' sample of 20:
    by default the sample grows to K+1 (the default was a fixed 20, refused after the
    features job); below K = 20 it stays the authors' 20, so seeded runs are unchanged."""
    from basis.data.clusters import clustered_data

    X, y = clustered_data(600, dim=30, n_clusters=20, seed=0)
    model = BASiS(20, anchors_per_class=2, batch_size=100, n_iter=1, device="cpu").fit(X, y)
    assert model.ransac_sample() == 21 and model.ransac_sample_size is None
    assert BASiS(9).ransac_sample() == 20 and BASiS(9, alignment_map="linear").ransac_sample() == 20
    assert BASiS(25, alignment_map="linear").ransac_sample() == 25


def test_a_ransac_sample_the_anchors_cannot_fill_is_refused_naming_where_to_set_it():
    """Too few anchors for the sample (given, or the default): the message names the key and
    where it lives in a config, and the other way out (more anchors)."""
    X = np.random.default_rng(0).normal(size=(300, 30)).astype(np.float32)
    with pytest.raises(InputError, match=r"K\+1=21 .* got 30; set it \(a config's methods.basis"):
        BASiS(20, anchors="random", n_anchors=25, ransac_sample_size=30, batch_size=100, n_iter=1).fit(X)
    with pytest.raises(InputError, match=r"got 20 \(its default\); set it .* or draw more anchors"):
        BASiS(5, anchors="random", n_anchors=10, batch_size=100, n_iter=1).fit(X)

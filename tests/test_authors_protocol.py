"""The authors' evaluation protocol (``evaluation: authors``): test anchors first in the
training and test sets, and d_G as their code computed it (basis.metrics.authors_*)."""

import numpy as np
import pytest

from basis import metrics
from basis.catalog.settings import resolve_settings
from basis.data import load_inputs
from basis.experiment import authors_split, run_method


def _transcribed_authors_d_g(output, reference, base, seed, n_iter=100, sample_size=20, tolerance=0.1):
    """The protocol as written in words, step by step (no shared helper): hypotheses from
    ``sample_size`` anchors, each a least-squares affine map of inputs rounded to 4 decimals
    in float32; inliers by row-wise L2 error; the first best refitted on its inliers; then
    K minus the squared entries of the column-normalised cross product."""
    rng = np.random.default_rng(seed)
    n_anchors, K = base.shape

    def fit(rows):
        design = np.float32(np.round(np.c_[reference[rows], np.ones(len(rows))], 4))
        goal = np.float32(np.round(base[rows], 4))
        return np.linalg.lstsq(design, goal, rcond=None)[0]  # (K+1) x K

    best_rows = []
    for _ in range(n_iter):
        sample = rng.choice(n_anchors, size=sample_size, replace=False)
        coefficients = fit(sample)
        inliers = []
        for row in range(n_anchors):
            mapped = np.append(reference[row], 1.0) @ coefficients
            if np.sqrt(np.sum((mapped - base[row]) ** 2)) < tolerance:
                inliers.append(row)
        if len(inliers) > len(best_rows):
            best_rows = inliers
    coefficients = fit(np.array(best_rows))
    aligned = np.c_[reference, np.ones(len(reference))] @ coefficients
    q1 = output / np.linalg.norm(output, axis=0)
    q2 = aligned / np.linalg.norm(aligned, axis=0)
    return K - np.sum((q1.T @ q2) ** 2), len(best_rows)


@pytest.fixture
def problem():
    """A clustered reference (3 classes, K = 3), the base batch's anchors a rotation of its
    first 60 rows with a fifth of them replaced by other points (outliers), and an output
    near the aligned reference."""
    rng = np.random.default_rng(5)
    labels = np.tile(np.arange(3), 100)  # the first 60 rows, the anchors, hold every class
    reference = np.linalg.qr(np.eye(3)[labels] + 0.05 * rng.normal(size=(300, 3)))[0]
    rotation = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    base = reference[:60] @ rotation + 0.002 * rng.normal(size=(60, 3))
    base[rng.choice(60, 12, replace=False)] = rng.normal(scale=1.0, size=(12, 3))
    output = reference @ rotation + 0.01 * rng.normal(size=(300, 3))
    return output, reference, base


def test_the_authors_d_g_equals_a_transcription_of_their_protocol(problem):
    output, reference, base = problem
    for seed in (0, 1):
        ours = metrics.authors_grassmann_distance(output, reference, base, seed=seed)
        transcribed, inliers = _transcribed_authors_d_g(output, reference, base, seed)
        assert ours["d_G_code"] == pytest.approx(transcribed, abs=1e-6)
        assert ours["d_G_code_inliers"] == inliers > 30
        assert ours["d_G_code_skew"] < metrics.SKEW_LIMIT


def test_a_skewed_copy_and_a_collapsed_output_do_not_score_as_well_as_the_reference_unmarked(problem):
    """Against today's old d_G_code (reference aligned onto the output itself) a skewed copy
    scored -6 and a collapsed output -90, both below the reference's 0. Now the aligned
    reference does not depend on the output, and a value that is not a distance is marked."""
    _, reference, base = problem
    aligned = metrics.authors_ransac(reference[:60], base, seed=0)[0]
    ideal = np.c_[reference, np.ones(300)] @ aligned.T
    skewed = ideal @ (np.eye(3) + np.random.default_rng(0).normal(size=(3, 3)) / np.sqrt(3))
    collapsed = np.repeat(ideal[:, :1], 3, axis=1)
    scores = {
        name: metrics.authors_grassmann_distance(output, reference, base, seed=0)
        for name, output in (("ideal", ideal), ("skewed", skewed), ("collapsed", collapsed))
    }
    # on column-normalised bases even the aligned reference scores minus its own skew
    assert scores["ideal"]["d_G_code"] == pytest.approx(-scores["ideal"]["d_G_code_skew"])
    assert scores["ideal"]["d_G_code_skew"] <= 1e-3
    for name in ("skewed", "collapsed"):
        value, skew = scores[name]["d_G_code"], scores[name]["d_G_code_skew"]
        assert value > scores["ideal"]["d_G_code"] + 1e-6 or skew > metrics.SKEW_LIMIT, name
    assert scores["collapsed"]["d_G_code_skew"] > metrics.SKEW_LIMIT


def test_without_a_single_inlier_the_map_is_fitted_on_every_anchor_and_says_so(problem):
    output, reference, base = problem
    unrelated = np.random.default_rng(1).normal(scale=10.0, size=base.shape)
    result = metrics.authors_grassmann_distance(output, reference, unrelated, seed=0)
    assert result["d_G_code_inliers"] == 0 and np.isfinite(result["d_G_code"])


def test_the_authors_split_puts_the_test_anchors_first_in_both_sets():
    data = load_inputs("digits")
    split, order = authors_split(data, per_class=5, seed=3)
    n = 5 * data.n_classes
    np.testing.assert_array_equal(split.X_train[:n], split.X_test[:n])
    np.testing.assert_array_equal(split.X_train[n:], data.X_train)
    np.testing.assert_array_equal(split.X_test, data.X_test[order])
    assert sorted(order) == list(range(len(data.y_test)))
    assert all(np.bincount(split.y_test[:n]) == 5)


@pytest.mark.parametrize("method", ["basis", "specnet1"])
def test_a_run_under_the_authors_protocol_reports_their_d_g(method):
    data = load_inputs("digits")
    settings = resolve_settings(
        method, assignments=["evaluation=authors", "n_iter=3", "batch_size=300", "graph.n_neighbors=10"]
    )
    if method == "basis":
        settings["anchors_per_class"] = 5
    result = run_method(method, data, seed=0, device="cpu", settings=settings)
    assert np.isfinite(result.metrics["d_G_code"]) and "d_G_code_skew" in result.metrics
    if method == "basis":  # its anchors are the test anchors at the front of the training set
        assert result.estimator.anchor_indices_.tolist() == list(range(5 * 10))
        assert result.metrics["d_G_code_inliers"] >= 0
    else:  # no base space: the test set's embedding as it is
        assert "d_G_code_inliers" not in result.metrics
        expected = metrics.grassmann_distance(result.test_embedding, result.reference_embedding, variant="code")
        assert result.metrics["d_G_code"] == pytest.approx(expected)
    ours = run_method(method, data, seed=0, device="cpu", settings={**settings, "evaluation": "ours"})
    assert "d_G_code" not in ours.metrics

"""The scale study (basis.studies.scale): every method on the same points, the competitors'
embeddings in the exact one's convention, the time limit enforced, shown and never dropped,
and the budget BASiS needs to hold a d_G target."""

import os
import time

import numpy as np
import pytest
from sklearn.metrics.pairwise import rbf_kernel
from test_together import siamese_like

from basis.approximate import nystrom_embedding
from basis.data.clusters import clustered_data
from basis.errors import InputError
from basis.metrics import grassmann_distance
from basis.runtime.deadline import TimeLimitReached, Worker
from basis.runtime.threads import THREAD_VARIABLES
from basis.studies import save_study
from basis.studies.scale import (
    NOT_STARTED,
    PAST_LIMIT,
    STOPPED,
    WITHIN,
    draw_scale,
    scale_claims,
    scale_study,
)
from basis.verdicts import claims_markdown

SMALL = {"n_points": [600, 1200], "n_test": 200, "n_iter": 5, "landmarks": [100, 300]}
#: BASiS's numbers of a run whose fit time is flat in n, for the claims.
FLAT = {"basis/fit_slope": 0.02, "basis/largest_n": 1200, "basis/d_G_ratio": 1.0, "basis/transform_over_forward": 1.1}


@pytest.fixture(scope="module")
def study():
    return scale_study(methods=["basis", "exact", "sklearn", "nystrom"], device="cpu", **SMALL)


def test_nystrom_with_every_point_a_landmark_is_the_exact_operators_eigenvectors():
    """In-sample points extended from L = n landmarks are the rows of the eigenvectors of
    D^-1/2 K D^-1/2 computed directly: the normalisation and the extension are right."""
    X, _ = clustered_data(400, 16, 4, 0, spread=1.5)
    X = X.astype(np.float64)
    sigma = 3.0
    K = rbf_kernel(X, gamma=1 / (2 * sigma**2))
    root = np.sqrt(K.sum(axis=1))
    values, vectors = np.linalg.eigh(K / root[:, None] / root[None, :])
    exact = vectors[:, ::-1][:, :4]
    embedding, _ = nystrom_embedding(X, X[:150], 4, len(X), sigma, seed=0)
    assert grassmann_distance(embedding, exact[:150]) < 1e-6
    few, _ = nystrom_embedding(X, X[:150], 4, 20, sigma, seed=0)
    assert grassmann_distance(few, exact[:150]) > 1e-3  # 20 landmarks only approximate it


def test_every_method_is_measured_at_every_n_on_the_same_points(study):
    result, arrays = study
    curves = [str(c) for c in arrays["curves"]]
    assert curves == ["basis", "exact", "sklearn", "nystrom_100", "nystrom_300"]
    for method in curves:
        assert (arrays[f"{method}/status"] == WITHIN).all()
        for measure in ("fit_s", "peak_gb", "d_G", "d_perp", "nmi", "acc"):
            assert np.isfinite(arrays[f"{method}/{measure}"]).all(), (method, measure)
        assert np.isfinite(result[f"{method}/fit_slope"]) and result[f"{method}/largest_n"] == 1200
    assert (arrays["exact/d_G"] == 0).all() and (arrays["exact/nmi"] > 0.95).all()
    # scikit-learn's vectors, scaled back to the exact one's convention, span its subspace
    # nearly (its graph is binary kNN) and cluster as well: the trivial vector put first at unit norm
    assert (arrays["sklearn/d_G"] < 0.05).all() and (arrays["sklearn/nmi"] > 0.95).all()
    assert np.isnan(arrays["sklearn/transform_s"]).all()  # no transform: refitted on all points
    assert (arrays["basis/transform_s"] > 0).all() and result["basis/transform_over_forward"] > 0


def test_the_same_seed_gives_the_same_accuracy_numbers(study):
    _, again = scale_study(methods=["basis", "nystrom"], device="cpu", **SMALL)
    _, arrays = study
    for key in ("basis/d_G", "basis/nmi", "nystrom_100/d_G", "nystrom_300/d_perp"):
        np.testing.assert_array_equal(again[key], arrays[key])


def test_a_solver_past_the_limit_is_stopped_there_and_the_larger_n_say_they_did_not_finish(tmp_path):
    """Nyström runs in the worker process, which is ended at the limit: its points are not
    measured past it (they were measured in full before the limit was enforced)."""
    result, arrays = scale_study(methods=["exact", "nystrom"], device="cpu", time_limit_s=1e-9, **SMALL)
    for method in ("nystrom_100", "nystrom_300"):
        assert list(arrays[f"{method}/status"]) == [STOPPED, NOT_STARTED]
        assert np.isnan(arrays[f"{method}/d_G"]).all() and np.isnan(arrays[f"{method}/fit_s"]).all()
        assert np.isnan(result[f"{method}/fit_slope"])
    assert list(arrays["exact/status"]) == [PAST_LIMIT, PAST_LIMIT]  # the truth is always computed
    save_study(tmp_path / "run", result, arrays)
    table = draw_scale([tmp_path / "run"], tmp_path / "fig")
    rows = [line for line in table.splitlines() if line.startswith("| nystrom_300 |")]
    assert rows[0].endswith("| did not finish in 1e-09 s (stopped at the limit) |")
    assert rows[1].endswith("| did not finish in 1e-09 s (not started: past the limit at a smaller n) |")
    assert (tmp_path / "fig.png").exists()


def test_a_network_past_the_limit_stops_at_its_next_step():
    result, arrays = scale_study(methods=["basis"], device="cpu", time_limit_s=1e-9, **dict(SMALL, n_iter=10_000))
    assert list(arrays["basis/status"]) == [STOPPED, NOT_STARTED]
    assert np.isnan(arrays["basis/d_G"]).all() and np.isnan(result["basis/d_G_ratio"])


def test_the_worker_ends_a_call_at_the_limit_and_serves_the_next_in_a_fresh_process():
    with Worker() as worker:
        first = worker.run(60, os.getpid)
        assert worker.run(60, os.getpid) == first != os.getpid()  # one process for calls in turn
        with pytest.raises(TimeLimitReached):
            worker.run(0.2, time.sleep, 3600)  # an hour's call, ended at the limit
        assert worker.run(60, os.getpid) != first
        with pytest.raises(InputError, match="refused"):
            worker.run(60, _refuse)  # raised in the caller as itself


def _refuse():
    raise InputError("refused")


def test_the_worker_keeps_to_the_jobs_thread_budget(monkeypatch):
    """The solvers in the worker use the cores the job was given: its thread caps reach the
    worker's BLAS through the environment (limit_threads writes them there)."""
    for name in THREAD_VARIABLES:
        monkeypatch.setenv(name, "1")
    with Worker() as worker:
        assert worker.run(60, _blas_threads) == 1


def _blas_threads() -> int:
    import numpy  # noqa: F401  (loads its BLAS)
    from threadpoolctl import threadpool_info

    return max(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")


def test_basis_to_a_target_needs_the_fixed_budget_at_the_smallest_n_and_says_when_none_reaches_it(tmp_path):
    """The default target is BASiS's d_G at the smallest n and the fixed budget, so that
    budget, seeded alike, reaches it there exactly; a target no budget reaches is named."""
    settings = dict(SMALL, methods=["basis", "basis_target"], target_budgets=[20, 5])
    result, arrays = scale_study(device="cpu", **settings)
    assert arrays["basis_target/n_iter"][0] == 5
    assert arrays["basis_target/d_G"][0] == arrays["basis/d_G"][0] == result["basis_target/d_G_target"]
    assert arrays["basis_target/n_iter"][1] in (5, 20) or np.isnan(arrays["basis_target/n_iter"][1])
    # the basis curve's fit stands in for the budget it was trained at: training it again is the same run
    _, alone = scale_study(device="cpu", d_G_target=1.0, **dict(settings, methods=["basis_target"], target_budgets=[5]))
    np.testing.assert_array_equal(alone["basis_target/d_G"], arrays["basis/d_G"])
    result, arrays = scale_study(device="cpu", d_G_target=0.0, **dict(settings, methods=["basis_target"]))
    assert np.isnan(arrays["basis_target/n_iter"]).all() and np.isnan(result["basis_target/largest_n_iter"])
    save_study(tmp_path / "run", result, arrays)
    assert "| d_G target 0 not reached by the largest budget |" in draw_scale([tmp_path / "run"], tmp_path / "fig")
    assert "at some n no budget tried reached it" in scale_claims({"": dict(result, **FLAT)})[1]["measured"]


def test_basis_to_a_target_without_a_target_or_basis_is_refused():
    with pytest.raises(InputError, match="basis_target without basis: give d_G_target"):
        scale_study(methods=["exact", "basis_target"], device="cpu", **SMALL)


def test_the_claims_follow_the_measured_slope_and_ratio(study):
    result, _ = study
    rows = scale_claims({"": result})
    assert [row["reproduced"] for row in rows] == [
        result["basis/fit_slope"] <= 0.1,
        result["basis/d_G_ratio"] <= 1.25,
    ]
    assert "nystrom_300" in rows[0]["measured"] and "sklearn" in rows[0]["measured"]
    flat = scale_claims({"": {**result, **FLAT, "basis/d_G_ratio": 2.0}})
    assert [row["reproduced"] for row in flat] == [True, False]


def test_a_basis_point_past_the_time_limit_is_not_measured_here_never_not_reproduced(study, tmp_path):
    """A busy machine that stops BASiS at the limit measured the machine: both claims say
    so in words (no nan), the tally counts them apart, the figure and its table say why."""
    result, arrays = study
    busy = {**result, "basis/largest_n": float("nan"), "basis/fit_slope": float("nan"), "basis/d_G_ratio": float("nan")}
    rows = scale_claims({"": busy})
    for row in rows:
        assert row["reproduced"] == f"basis ran past {result['time_limit_s']:g} s on this machine at every n"
    text = claims_markdown(rows)
    assert "0 reproduced, 0 not reproduced, 2 not measured here" in text and "nan" not in text
    assert "**not reproduced**" not in text and "basis not measured (past" in text
    partly = scale_claims({"": {**result, "basis/largest_n": float(arrays["n_points"][0])}})
    assert partly[0]["reproduced"].endswith(f"beyond n = {arrays['n_points'][0]:,.0f}")
    stopped = {**arrays, "basis/status": np.full_like(arrays["basis/status"], STOPPED)}
    save_study(tmp_path / "busy", busy, stopped)
    assert "nan" not in draw_scale([tmp_path / "busy"], tmp_path / "fig")


def test_the_study_runs_on_a_data_sets_features_and_refuses_a_grid_they_cannot_hold(tmp_path):
    """Nearly piecewise-constant Siamese-like features in the features file's true format:
    the points and labels are the file's (its ten classes set K), both splits pooled."""
    X, y = siamese_like(n=1500, classes=10)
    split = {"X_train": X[:1200], "y_train": y[:1200], "X_test": X[1200:], "y_test": y[1200:]}
    np.savez(tmp_path / "digits.npz", **split, dataset="digits", data_seed=0)
    settings = dict(SMALL, methods=["basis", "exact", "nystrom"], landmarks=[100], device="cpu")
    result, arrays = scale_study(dataset="digits", features_dir=str(tmp_path), **settings)
    assert (arrays["exact/status"] == WITHIN).all() and (arrays["exact/nmi"] > 0.95).all()
    assert np.isfinite(arrays["basis/d_G"]).all() and np.isfinite(arrays["nystrom_100/d_G"]).all()
    with pytest.raises(InputError, match="need 1,600 points; digits's features have 1,500"):
        scale_study(dataset="digits", features_dir=str(tmp_path), **dict(settings, n_points=[600, 1400]))

"""One method on one data set: the evaluation protocol of Table 1.

Train on the training split, embed the test split, and compare with the analytic
embedding of the test split's own graph (same graph settings): d_G, d_perp, NMI and
ACC of K-means on the output, each also as the authors' code computed it (see
:mod:`basis.metrics`), BASiS's alignment errors, and two linear
probes trained on the training split's output (a converged one, and the authors').
SpecNet2's post-processing runs on the whole test set, as in the paper, and SpecNet2 is
scored in its own basis as well.

With ``evaluation: authors`` a run follows the authors' evaluation protocol instead
(:func:`authors_split`): ``anchors_per_class`` anchors of every class are drawn from the
*test* split (seeded) and put first in both the training set and the test set, every
method trains on that training set, and BASiS uses those rows as its anchors, so its base
batch and every training batch hold them. ``d_G_code`` is then the authors' d_G
(:func:`basis.metrics.authors_grassmann_distance`): the test set's analytic embedding
mapped into BASiS's base batch embedding through the anchors by the authors' RANSAC. A
method without anchors has no base space (the authors' repository holds no baseline
code); its ``d_G_code`` uses the test set's embedding as it is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from basis import metrics
from basis.catalog.settings import EVALUATION_KEYS, resolve_settings
from basis.data import Dataset
from basis.errors import InputError
from basis.estimators import SpecNet2, SpectralEstimator, default_parameter, make_estimator
from basis.graph import sparse_affinity
from basis.references import analytic_embedding, check_graph_size, load_reference
from basis.runtime.timing import timed

#: The methods that align batches through anchors (drawn at random on unlabelled data).
ANCHORED_METHODS = ("basis",)
#: The authors' test anchors per class, for a method that has no ``anchors_per_class``.
AUTHORS_ANCHORS_PER_CLASS = 25


@dataclass
class RunResult:
    metrics: dict[str, float]
    estimator: SpectralEstimator
    train_embedding: np.ndarray
    test_embedding: np.ndarray
    reference_embedding: np.ndarray
    params: dict[str, Any] = field(default_factory=dict)


def build_estimator(method: str, data: Dataset, settings: dict[str, Any], **run: Any) -> SpectralEstimator:
    """``method``'s estimator with ``settings`` (its ``n_components`` defaulting to the
    data's classes; on unlabelled data, BASiS's anchors drawn at random, ``anchors_per_class``
    per component) and the ``run`` options (seed, device, callback), which take precedence
    over a setting of the same name (a benchmark's shorter ``n_iter``)."""
    params = {k: v for k, v in settings.items() if k not in EVALUATION_KEYS}
    n_components = settings["n_components"] or data.n_components
    if not data.labelled and params.get("anchors", "stratified") == "stratified" and method in ANCHORED_METHODS:
        # no classes to draw anchors from: as many drawn at random as K classes would give
        per_class = params.get("anchors_per_class", default_parameter(method, "anchors_per_class"))
        params |= {"anchors": "random", "n_anchors": per_class * n_components}
    return make_estimator(method, n_components=n_components, **{**params, **run})


def authors_split(data: Dataset, per_class: int, seed: int) -> tuple[Dataset, np.ndarray]:
    """The authors' evaluation split: ``per_class`` test points of every class (drawn with
    ``seed``) put first in the training set (prepended) and in the test set (moved to the
    front); returns that data set and the test set's new order (``X_test[order]``)."""
    rng = np.random.default_rng(seed)
    anchors = np.concatenate(
        [rng.choice(np.flatnonzero(data.y_test == c), per_class, replace=False) for c in np.unique(data.y_test)]
    )
    order = np.concatenate([anchors, np.setdiff1d(np.arange(len(data.y_test)), anchors)])
    split = Dataset(
        data.name,
        np.concatenate([data.X_test[anchors], data.X_train]),
        np.concatenate([data.y_test[anchors], data.y_train]),
        data.X_test[order],
        data.y_test[order],
    )
    return split, order


def unlabelled_settings(data: Dataset, settings: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``settings`` as they apply to ``data``: on unlabelled data, the authors' evaluation
    (whose test anchors are drawn per class) gives way to ours; returns why, if it did."""
    if data.labelled or settings["evaluation"] != "authors":
        return settings, None
    why = (
        f"data set {data.name} has no labels: the authors' evaluation draws its test anchors per class,"
        " so its runs are evaluated by ours (evaluation: ours), and BASiS draws its anchors at random"
    )
    return {**settings, "evaluation": "ours"}, why


def check_method(method: str, data: Dataset, settings: dict[str, Any]) -> SpectralEstimator:
    """What ``method``'s ``settings`` must satisfy on ``data`` (batch size against the
    training set, anchors against the classes, ...): an InputError before any training,
    so that a tracked job refuses before its MLflow run opens. Returns the checked,
    unfitted estimator."""
    estimator = build_estimator(method, data, settings)
    estimator.check_input(data.X_train, data.y_train)
    check_graph_size(data, settings)
    if settings["evaluation"] == "authors" and data.labelled:
        per_class = settings.get("anchors_per_class", AUTHORS_ANCHORS_PER_CLASS)
        labels, counts = np.unique(data.y_test, return_counts=True)
        if counts.min() < per_class:
            raise InputError(
                f"data set {data.name}: the authors' evaluation draws {per_class} test anchors per class, and class"
                f" {labels[counts.argmin()]} has {counts.min()} test points; give it more or use evaluation: ours"
            )
    return estimator


@dataclass
class PlannedRun:
    """One seed's run before training: its estimator, the data it trains and is scored on
    (the authors' split where the protocol asks for it), and the stored reference in that
    data's order."""

    seed: int
    settings: dict[str, Any]
    data: Dataset
    estimator: SpectralEstimator
    stored: np.ndarray | None
    authors: bool


def plan_run(method: str, data: Dataset, seed: int, device: str, settings, callback, reference) -> PlannedRun:
    """What :func:`run_method` trains and scores (its arguments), set up but not trained."""
    settings = settings or resolve_settings(method)
    n_components = settings["n_components"] or data.n_components
    # A stored reference is checked before training, not after.
    stored = reference
    if isinstance(reference, (str, Path)):
        stored = load_reference(reference, settings, n_components, data.X_test)
    run = {"seed": seed, "device": device, "callback": callback}
    authors = settings["evaluation"] == "authors"
    if authors:
        per_class = settings.get("anchors_per_class", AUTHORS_ANCHORS_PER_CLASS)
        data, order = authors_split(data, per_class, seed)
        # The graph is equivariant to the order of its nodes: the stored embedding's rows, reordered.
        stored = None if stored is None else np.asarray(stored)[order]
    estimator = build_estimator(method, data, settings, **run)
    if authors and "anchor_indices" in estimator.get_params():
        estimator.set_params(anchor_indices=list(range(per_class * data.n_classes)))
    return PlannedRun(seed, settings, data, estimator, stored, authors)


def run_method(
    method: str,
    data: Dataset,
    *,
    seed: int = 0,
    device: str = "auto",
    settings: dict[str, Any] | None = None,
    callback=None,
    reference: str | Path | np.ndarray | None = None,
) -> RunResult:
    """Fit ``method`` on ``data``'s training split and evaluate on its test split,
    against a stored ``reference`` (a file from :func:`save_reference`, or its embedding
    as loaded by :func:`load_reference`) or one computed here."""
    planned = plan_run(method, data, seed, device, settings, callback, reference)
    start = time.perf_counter()
    with timed("train"):
        planned.estimator.fit(planned.data.X_train, planned.data.y_train)
        _postprocess(planned)
    return evaluate_run(planned, time.perf_counter() - start)


def run_seeds_together(
    method: str,
    data: Dataset,
    seeds: list[int],
    *,
    device: str = "auto",
    settings: dict[str, Any] | None = None,
    callbacks: dict[int, Any] | None = None,
    reference: str | Path | np.ndarray | None = None,
) -> dict[int, RunResult]:
    """:func:`run_method` for each of ``seeds``, their networks trained together as one
    batched network (:func:`basis.estimators.together.fit_together`); each seed's
    numbers are its solo run's to float rounding. ``train_seconds`` is the seeds' training
    time together."""
    from basis.estimators.together import fit_together

    callbacks = callbacks or {}
    planned = [plan_run(method, data, seed, device, settings, callbacks.get(seed), reference) for seed in seeds]
    start = time.perf_counter()
    with timed("train"):
        fit_together([run.estimator for run in planned], [(run.data.X_train, run.data.y_train) for run in planned])
        for run in planned:
            _postprocess(run)
    seconds = time.perf_counter() - start
    return {run.seed: evaluate_run(run, seconds) for run in planned}


def _postprocess(planned: PlannedRun) -> None:
    if isinstance(planned.estimator, SpecNet2):
        planned.estimator.postprocess(planned.data.X_test)  # on the whole test set, as in the paper


def _probe_accuracies(train_embedding, data: Dataset, test_embedding, ev: dict[str, Any], seed: int) -> dict:
    """The two linear probes, each trained on the training split's output, tested on the test split's."""
    splits = (train_embedding, data.y_train, test_embedding, data.y_test)
    with timed("probe"):
        accuracy = metrics.linear_probe_accuracy(*splits, C=ev["probe_C"], max_iter=ev["probe_max_iter"])
    with timed("authors_probe"):
        authors = metrics.authors_linear_probe_accuracy(
            *splits,
            epochs=ev["authors_probe_epochs"],
            lr=ev["authors_probe_lr"],
            batch_size=ev["authors_probe_batch_size"],
            seed=seed,
        )
    return {"accuracy": accuracy, "accuracy_authors": authors}


def evaluate_run(planned: PlannedRun, train_seconds: float) -> RunResult:
    """A trained run's scores on its test split (see the module's docstring)."""
    estimator, data, settings, seed = planned.estimator, planned.data, planned.settings, planned.seed
    n_components = settings["n_components"] or data.n_components
    stored, authors = planned.stored, planned.authors
    with timed("transform"):
        test_embedding = estimator.transform(data.X_test)
        train_embedding = estimator.transform(data.X_train)
    with timed("reference"):
        reference_embedding = (
            stored
            if stored is not None
            else analytic_embedding(data.X_test, settings, n_components, device=str(estimator.device_))
        )
    ev = settings["eval"]
    if data.labelled:
        result = metrics.evaluate_embedding(
            test_embedding,
            data.y_test,
            reference_embedding,
            n_clusters=data.n_classes,
            seed=seed,
            n_init=ev["kmeans_n_init"],
        )
    else:  # d_G and d_perp need no labels; the clusterings and the probes do
        result = metrics.unlabelled_scores(test_embedding, reference_embedding)
    if authors:
        with timed("d_G_code"):
            base = getattr(estimator, "reference_anchor_embedding_", None)
            base = None if base is None else base.detach().cpu().numpy()
            result |= metrics.authors_grassmann_distance(test_embedding, reference_embedding, base, seed=seed)
    if isinstance(estimator, SpecNet2):  # scored in its own basis as well (see metrics.own_basis_grassmann_distance)
        with timed("d_G"):
            degrees = np.asarray(
                sparse_affinity(data.X_test, estimator.graph_, device=str(estimator.device_)).sum(axis=1)
            ).ravel()
            result["d_G_own_basis"] = metrics.own_basis_grassmann_distance(test_embedding, reference_embedding, degrees)
    if data.labelled:
        result |= _probe_accuracies(train_embedding, data, test_embedding, ev, seed)
    errors = getattr(estimator, "alignment_errors_", None)
    if errors:  # how well the batches were aligned (see BASiS.align), and how sure RANSAC was
        result["alignment_error_median"], result["alignment_error_max"] = float(np.median(errors)), max(errors)
        result["ransac_fallbacks"] = float(estimator.n_fallbacks_)
        result["ransac_unsure_batches"] = float(estimator.n_unsure_)
    result["train_seconds"] = train_seconds
    params = {k: v for k, v in settings.items() if k != "eval"} | {"n_components": n_components}
    return RunResult(result, estimator, train_embedding, test_embedding, reference_embedding, params)

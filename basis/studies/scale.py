"""Beyond the paper: how cost and accuracy grow with the number of points n, BASiS beside
the exact and approximate alternatives a user would otherwise pick.

For each n of a grid, every method is fitted on the same n points and scored on the same
``n_test`` held-out points against the exact embedding of all n + ``n_test`` points at
that n (the project's reference path: exact neighbours up to ``exact_neighbors_up_to``,
FAISS IVF beyond). The points are touching 16-d Gaussian clusters, the Siamese stand-in of
:func:`basis.data.clusters.clustered_data` (one graph component, K small eigenvalues), or a
data set's own Siamese features.

The methods: the four networks at a fixed iteration budget (held-out points through their
``transform``); ``exact`` (its cost is that of the ground truth itself); scikit-learn's
``SpectralEmbedding`` with its own k-nearest-neighbour graph, which has no ``transform``,
so it is refitted on all n + ``n_test`` points and its held-out rows are scored; and a
Nyström extension per landmark count (``nystrom_<L>``): scikit-learn's ``Nystroem`` feature
map of the paper's Gaussian kernel at the project's bandwidth, normalised as the
symmetric graph operator, whose held-out rows are extended from the landmarks.

Each point has a time limit, ``time_limit_s``, for its fit and embedding together. A
network is stopped at its first training step past it (its set-up is not interrupted);
scikit-learn and Nyström run in a worker process that is ended at the limit, since
ARPACK or a factorisation cannot be stopped from within (:mod:`basis.runtime.deadline`).
Such a point and the larger n of that method are shown as "did not finish in T", never
dropped. The exact embedding is the ground truth of every n and always runs to the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Literal, NamedTuple, get_args

import numpy as np

from basis.estimators.parameters import PAPER_METHODS
from basis.runtime.memory import host_peak_gb, restart_host_peak
from basis.studies import Figure, Study, StudyResult

# the figure and the claims, declared by STUDY below, are the study's attributes
from basis.studies.scale_figure import (  # noqa: F401
    MEASURES,
    NOT_STARTED,
    PAST_LIMIT,
    STOPPED,
    WITHIN,
    draw_scale,
    scale_claims,
)

if TYPE_CHECKING:
    from basis.catalog.data_sources import DataSource

# What the study computes with is imported where it computes: drawing its figure (a
# workflow job of its own) imports numpy and matplotlib only.

#: What the study can compare (``nystrom``: one curve per landmark count; ``basis_target``:
#: BASiS trained to a d_G target); the workflow reads this alias to check ``methods`` at parse.
ScaleMethod = Literal["basis", "diffusion_net", "specnet1", "specnet2", "exact", "sklearn", "nystrom", "basis_target"]
#: The networks among them: Table 1's methods (a test checks that all of them are choices).
NETWORKS = tuple(method for method in get_args(ScaleMethod) if method in PAPER_METHODS)


def scale_study(
    *,
    n_points: list[int] = (10_000, 30_000, 100_000, 300_000, 1_000_000),
    n_test: int = 5000,
    methods: list[ScaleMethod] | None = None,
    landmarks: list[int] = (500, 2000),
    n_iter: int = 1000,
    target_budgets: list[int] = (250, 500, 1000, 2000, 4000),
    d_G_target: float | None = None,
    exact_neighbors_up_to: int = 100_000,
    time_limit_s: float = 1800.0,
    n_clusters: int = 10,
    dim: int = 16,
    spread: float = 1.5,
    dataset: str | None = None,
    features_dir: str | None = None,
    seed: int = 0,
    data_seed: int = 0,
    device: str = "auto",
    data_root: str = "resources/data",
    data_source: DataSource | None = None,
    callback: Callable | None = None,
) -> StudyResult:
    """Every method of ``methods`` (default: all of :data:`ScaleMethod`, ``nystrom`` one
    curve per count of ``landmarks``) at each n of ``n_points``, networks at ``n_iter``
    iterations with their Table 1 settings; ``basis_target`` is BASiS at the smallest of
    ``target_budgets`` that brings its d_G down to ``d_G_target`` (default: BASiS's d_G at
    the smallest n after ``n_iter`` iterations), the budgets tried in turn; see the module.
    The points are the Siamese stand-in, or given ``dataset``, that data set's features
    (``features_dir``, as Table 1's runs embed them; K its classes), its splits pooled and
    the first n + ``n_test`` of a seeded order taken at each n.

    Metrics: per method its log-log slope of fit seconds against n over the points measured
    within the limit (``<method>/fit_slope``) and the largest such n (``<method>/largest_n``);
    BASiS's d_G at the largest n over the smallest (``basis/d_G_ratio``) and its embedding's
    seconds over a bare forward pass of its network on the same points
    (``basis/transform_over_forward``, worst n). Arrays: ``n_points`` and, per method and
    measure of :data:`MEASURES`, one value per n, with ``<method>/status`` and
    ``basis_target/n_iter`` (the budget that reached the target, NaN: none did).
    """
    from basis.data.clusters import clustered_data
    from basis.errors import InputError
    from basis.runtime import device as devices
    from basis.runtime.deadline import Worker
    from basis.runtime.timing import Progress
    from basis.studies.protocols import pooled_features

    n_points = sorted(n_points)
    if dataset is not None:
        pooled, labels, n_clusters = pooled_features(
            dataset, features_dir=features_dir, data_seed=data_seed, data_root=data_root, data_source=data_source
        )
        if n_points[-1] + n_test > len(pooled):
            raise InputError(
                f"n_points up to {n_points[-1]:,} and n_test {n_test:,} need {n_points[-1] + n_test:,} points;"
                f" {dataset}'s features have {len(pooled):,}"
            )
    curves = _curves(methods or list(get_args(ScaleMethod)), list(landmarks), n_points[0], d_G_target)
    device = devices.resolve_device(device)
    table = _Table(curves, len(n_points), time_limit_s, n_clusters, seed)
    progress = Progress(len(n_points) * len(curves), "scale study:", unit="point")
    with Worker() as worker:  # scikit-learn's and Nyström's, ended at the limit
        for i, n in enumerate(n_points):
            if dataset is None:
                X, y = clustered_data(n + n_test, dim, n_clusters, data_seed + i, spread=spread)
            else:
                X, y = pooled[: n + n_test], labels[: n + n_test]
            exact = _exact_embedding(X, n, n_clusters, exact_neighbors_up_to, device)
            table.record("exact", i, exact, exact.embedding, y[n:])
            fit = partial(_fit_and_embed, X=X, y=y, n=n, n_clusters=n_clusters, seed=seed, device=device, worker=worker)
            for j, method in enumerate(curves):
                progress.update(i * len(curves) + j + 1, f"n = {n:,}: {method}")
                if method == "exact" or table.past_limit_before(method, i):
                    continue  # the truth is recorded above; past the limit at a smaller n: "did not finish in T"
                devices.reset_peak_memory(device)
                if method == "basis_target":
                    table.target = table.values["basis", "d_G"][0] if d_G_target is None else d_G_target
                    known = {n_iter: table.fits[i]._replace(forward_ratio=None)} if i in table.fits else {}
                    table.measure(method, i, exact.embedding, y[n:], _fit_to_target, fit, target_budgets, known)
                else:
                    logged = callback if method == "basis" and i == 0 else None  # one curve, as every study logs one
                    table.measure(method, i, exact.embedding, y[n:], fit, method, n_iter=n_iter, callback=logged)
    return _summary(n_points, curves, table, time_limit_s, n_iter)


def _exact_embedding(X: np.ndarray, n: int, n_clusters: int, exact_neighbors_up_to: int, device) -> _Fit:
    """The ground truth at this n: the exact embedding of all of ``X`` (exact neighbours up
    to ``exact_neighbors_up_to`` points, FAISS IVF beyond), its rows after the first ``n``,
    and its cost."""
    from basis.catalog.settings import resolve_settings
    from basis.references import analytic_embedding
    from basis.runtime import device as devices

    settings = resolve_settings("basis")
    backend = "exact" if len(X) <= exact_neighbors_up_to else "faiss-ivf"
    devices.reset_peak_memory(device)
    restart_host_peak()
    start = time.perf_counter()
    truth = analytic_embedding(
        X, dict(settings, graph=dict(settings["graph"], neighbors=backend)), n_clusters, device=str(device)
    )
    devices.synchronize(device)
    seconds = time.perf_counter() - start
    return _Fit(truth[n:], seconds, float("nan"), host_peak_gb(), devices.peak_memory_mb(device))


class _Fit(NamedTuple):
    """One method's outcome at one n: its held-out rows and what they cost."""

    embedding: np.ndarray
    fit_s: float
    transform_s: float  # NaN: no separate embedding step
    peak_gb: float
    device_peak_mb: float = float("nan")
    forward_ratio: float | None = None  # BASiS: its embedding over a bare forward pass


class _Table:
    """The study's numbers as they are measured: per method and measure one value per n, and
    per method its status per n."""

    def __init__(self, curves: list[str], count: int, time_limit_s: float, n_clusters: int, seed: int) -> None:
        self.values = {(m, measure): np.full(count, np.nan) for m in curves for measure in MEASURES}
        self.status = {m: np.full(count, NOT_STARTED) for m in curves}
        self.needed = np.full(count, np.nan)  # basis_target's budget per n
        self.forward_ratio: list[float] = []
        self.target = float("nan")  # basis_target's d_G target
        self.fits: dict[int, _Fit] = {}  # the basis curve's fit per n
        self.time_limit_s, self.n_clusters, self.seed = time_limit_s, n_clusters, seed

    def past_limit_before(self, method: str, i: int) -> bool:
        return bool((self.status[method][:i] != WITHIN).any())

    def measure(self, method: str, i: int, truth: np.ndarray, y: np.ndarray, fit: Callable, *args, **kwargs) -> None:
        """``fit(*args, **kwargs, time_limit_s=...)`` recorded as ``method``'s outcome at the
        ``i``-th n, or as stopped at the limit; ``basis_target``'s ``fit`` also gets the
        truth and the target, and returns the budget that reached it."""
        from basis.runtime.deadline import TimeLimitReached

        try:
            if method == "basis_target":
                fitted, self.needed[i] = fit(*args, truth, self.target, time_limit_s=self.time_limit_s)
            else:
                fitted = fit(*args, **kwargs, time_limit_s=self.time_limit_s)
        except TimeLimitReached:
            self.status[method][i] = STOPPED
            return
        self.record(method, i, fitted, truth, y)

    def record(self, method: str, i: int, fitted: _Fit, truth: np.ndarray, y: np.ndarray) -> None:
        """``method``'s outcome at the ``i``-th n, scored against the truth's held-out rows."""
        from basis import metrics

        if method not in self.status:
            return
        embedding = np.asarray(fitted.embedding, dtype=np.float64)
        labels = metrics.kmeans_labels(embedding, self.n_clusters, seed=self.seed)
        transform_s = fitted.transform_s
        scores = {
            "fit_s": fitted.fit_s,
            "transform_s": transform_s,
            "points_per_s": len(y) / transform_s if transform_s > 0 else np.nan,
            "peak_gb": fitted.peak_gb,
            "device_peak_mb": fitted.device_peak_mb,
            "d_G": 0.0 if method == "exact" else metrics.grassmann_distance(embedding, truth),
            "d_perp": metrics.orthogonality(embedding),
            "nmi": metrics.nmi(y, labels),
            "acc": metrics.clustering_accuracy(y, labels),
        }
        for measure, value in scores.items():
            self.values[method, measure][i] = value
        seconds = fitted.fit_s + (0.0 if np.isnan(transform_s) else transform_s)
        self.status[method][i] = WITHIN if seconds <= self.time_limit_s else PAST_LIMIT
        self.forward_ratio += [] if fitted.forward_ratio is None else [fitted.forward_ratio]
        if method == "basis":
            self.fits[i] = fitted


def _curves(methods: list[str], landmarks: list[int], smallest_n: int, d_G_target: float | None) -> list[str]:
    """The study's curves: ``methods`` with ``nystrom`` one per landmark count and
    ``basis_target`` after ``basis``; an InputError names an unknown method, a landmark count
    the smallest n cannot hold, or a target that is neither given nor measured."""
    from basis.errors import InputError

    valid = list(get_args(ScaleMethod))
    unknown = sorted(set(methods) - set(valid))
    if unknown:
        raise InputError(f"unknown methods {unknown}; valid: {valid}")
    if "basis_target" in methods and d_G_target is None and "basis" not in methods:
        raise InputError("methods has basis_target without basis: give d_G_target, or add basis to measure it")
    if "nystrom" in methods and smallest_n <= max(landmarks):
        raise InputError(f"every n must exceed the largest landmark count ({max(landmarks)}), got {smallest_n}")
    counts = [f"nystrom_{count}" for count in landmarks] if "nystrom" in methods else []
    return (
        [m for m in methods if m not in ("nystrom", "basis_target")]
        + counts
        + ["basis_target"] * ("basis_target" in methods)
    )


def _fit_to_target(
    fit: Callable[..., _Fit],
    budgets: list[int],
    known: dict[int, _Fit],
    truth: np.ndarray,
    target: float,
    *,
    time_limit_s: float,
) -> tuple[_Fit, float]:
    """BASiS (``fit``: :func:`_fit_and_embed` at one n) at each of ``budgets`` in turn until
    its d_G against ``truth`` is at most ``target``, all within ``time_limit_s``: the fit that
    reached it and its budget (else the largest budget's fit and NaN). A budget in ``known``
    takes that fit instead of training again: the same seed and points give the same run."""
    from basis import metrics

    spent = 0.0
    for budget in sorted(budgets):
        if budget in known:
            fitted = known[budget]
        else:
            fitted = fit(
                "basis", n_iter=budget, callback=None, time_limit_s=time_limit_s - spent, against_forward=False
            )
        spent += fitted.fit_s + fitted.transform_s
        if metrics.grassmann_distance(np.asarray(fitted.embedding, dtype=np.float64), truth) <= target:
            return fitted, float(budget)
    return fitted, float("nan")


def _fit_and_embed(
    method: str,
    X: np.ndarray,
    y: np.ndarray,
    n: int,
    n_clusters: int,
    *,
    n_iter: int,
    seed: int,
    device,
    callback,
    time_limit_s: float,
    worker,
    against_forward: bool = True,
) -> _Fit:
    """``method`` fitted on the first ``n`` rows of ``X`` and its embedding of the others,
    within ``time_limit_s`` (else :class:`~basis.runtime.deadline.TimeLimitReached`), the
    host's methods in ``worker`` (a :class:`~basis.runtime.deadline.Worker`); for BASiS,
    unless ``against_forward`` is false, its embedding against a bare forward pass."""
    from basis.catalog.settings import EVALUATION_KEYS, resolve_settings
    from basis.estimators import make_estimator
    from basis.runtime import device as devices
    from basis.runtime.deadline import Deadline

    if method not in NETWORKS:
        return _Fit(*worker.run(time_limit_s, _fit_on_host, method, X, n, n_clusters, seed))
    restart_host_peak()
    options = {k: v for k, v in resolve_settings(method).items() if k not in EVALUATION_KEYS}
    run = {"n_components": n_clusters, "seed": seed, "device": str(device), "n_iter": n_iter}
    estimator = make_estimator(method, **{**options, **run, "callback": Deadline(time_limit_s, callback)})
    start = time.perf_counter()
    estimator.fit(X[:n], y[:n])
    devices.synchronize(estimator.device_)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    embedding = estimator.transform(X[n:])
    transform_s = time.perf_counter() - start
    peaks = host_peak_gb(), devices.peak_memory_mb(device)
    ratio = _transform_over_forward(estimator, X[:n]) if method == "basis" and against_forward else None
    return _Fit(embedding, fit_s, transform_s, *peaks, ratio)


def _fit_on_host(method: str, X: np.ndarray, n: int, n_clusters: int, seed: int) -> tuple:
    """scikit-learn's embedding (refitted on all points) or a Nyström extension fitted on
    the first ``n`` rows of ``X`` (in the study's worker process): the held-out rows, fit
    and held-out seconds and the worker's peak host GB."""
    from basis.approximate import nystrom_embedding, sample_bandwidth, sklearn_embedding
    from basis.catalog.settings import resolve_settings
    from basis.graph import GraphConfig

    restart_host_peak()
    graph = GraphConfig.from_dict(resolve_settings("basis")["graph"])
    if method == "sklearn":
        start = time.perf_counter()
        embedding = sklearn_embedding(X, n_clusters, graph.n_neighbors, seed)[n:]
        return embedding, time.perf_counter() - start, float("nan"), host_peak_gb()
    sigma = sample_bandwidth(X[:n], graph.scale_neighbor, seed)
    start = time.perf_counter()
    embedding, fit_s = nystrom_embedding(X[:n], X[n:], n_clusters, int(method.split("_")[1]), sigma, seed)
    return embedding, fit_s, time.perf_counter() - start - fit_s, host_peak_gb()


def _transform_over_forward(estimator, X: np.ndarray) -> float:
    """The estimator's embedding of ``X`` over one bare forward pass of its network on the
    same chunks (warm: the first call is not timed)."""
    import torch

    from basis.runtime import device as devices

    estimator.transform(X[:1000])
    start = time.perf_counter()
    estimator.transform(X)
    transform_s = time.perf_counter() - start
    chunks = [torch.from_numpy(X[i : i + 8192]).to(estimator.device_) for i in range(0, len(X), 8192)]
    with torch.no_grad():
        start = time.perf_counter()
        for chunk in chunks:
            estimator.model_.embed(chunk)
        devices.synchronize(estimator.device_)
        forward_s = time.perf_counter() - start
    return transform_s / forward_s


def _slope(ns: np.ndarray, seconds: np.ndarray) -> float:
    """The log-log least-squares slope of ``seconds`` against ``ns`` (NaN under two points)."""
    keep = np.isfinite(seconds) & (seconds > 0)
    if keep.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(ns[keep]), np.log(seconds[keep]), 1)[0])


def _summary(n_points: list[int], curves: list[str], table: _Table, time_limit_s: float, n_iter: int) -> StudyResult:
    ns = np.asarray(n_points, dtype=np.float64)
    result: dict[str, float] = {"n_iter": n_iter, "time_limit_s": time_limit_s, "n_max": ns[-1]}
    for method in curves:
        within = table.status[method] == WITHIN
        result[f"{method}/fit_slope"] = _slope(ns[within], table.values[method, "fit_s"][within])
        result[f"{method}/largest_n"] = float(ns[within].max()) if within.any() else float("nan")
    if "basis" in curves:
        d_g = table.values["basis", "d_G"]
        result["basis/d_G_ratio"] = float(d_g[-1] / d_g[0])
        result["basis/transform_over_forward"] = max(table.forward_ratio, default=float("nan"))
    arrays = {"n_points": ns, "curves": np.asarray(curves)}
    arrays |= {f"{method}/{measure}": v for (method, measure), v in table.values.items()}
    arrays |= {f"{method}/status": s for method, s in table.status.items()}
    if "basis_target" in curves:
        arrays["basis_target/n_iter"] = table.needed
        result["basis_target/d_G_target"] = table.target
        needed = table.needed[table.status["basis_target"] == WITHIN]  # NaN where no budget reached it
        result["basis_target/largest_n_iter"] = float(needed.max()) if needed.size else float("nan")
    return result, arrays


STUDY = Study(
    function="scale_study",
    figures=(
        Figure(
            name="fig11_scale",
            draw="draw_scale",
            caption="Beyond the paper: fit seconds and peak host memory against the number of training points"
            " (log-log, each curve's slope in the legend) and d_G of the held-out points against the exact"
            " embedding at that n, for BASiS and the baselines at a fixed budget, the exact embedding,"
            " scikit-learn's SpectralEmbedding (refitted on all points) and Nyström extensions; and the iterations"
            " BASiS needs to reach a d_G target at each n. The table (.md)"
            " adds held-out seconds, points per second, device memory, NMI and ACC, and marks a method that did"
            " not finish in the time limit.",
            table=True,
        ),
    ),
    claims="scale_claims",
    gpu=True,
)

"""Learned spectral embeddings as scikit-learn-shaped estimators.

:class:`BASiS` (the paper's Algorithm 1) and the three baselines of Table 1,
:class:`DiffusionNet`, :class:`SpecNet1` and :class:`SpecNet2`, share one training
loop (:meth:`SpectralEstimator.fit`), one network family (:class:`~basis.models.SpectralMLP`)
and one graph builder. Each method supplies only its set-up, its per-step loss and,
where it has one, its post-processing.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import scipy.linalg
import torch
from threadpoolctl import threadpool_limits

from basis.alignment import TOLERANCE_MODES, align_affine, apply_affine, ransac_affine
from basis.graph import GraphConfig, dense_affinity, sparse_affinity
from basis.models import HIDDEN_WIDTHS, SpectralMLP
from basis.spectral import OPERATORS, connected_components, laplacian, normalized_laplacian, spectral_embedding

log = logging.getLogger(__name__)

StepCallback = Callable[[int, dict[str, float]], None]


def resolve_device(device: str) -> torch.device:
    """``"auto"`` is CUDA when present, else CPU; anything else is passed to torch."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from err


def check_features(X: Any, name: str = "X") -> np.ndarray:
    """A finite 2-D float array, or a ValueError that says what is wrong."""
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array (n_samples, n_features), got shape {X.shape}")
    if not np.isfinite(X).all():
        bad = int((~np.isfinite(X)).any(axis=1).sum())
        raise ValueError(f"{name} contains NaN or inf in {bad} row(s)")
    return X


@contextmanager
def _split_cores(device: torch.device):
    """Split this process's thread budget (torch's thread count, which ``--threads`` sets)
    between the gradient step (torch) and the worker's eigensolves (BLAS) on the CPU, so
    the two pipeline stages together use no more threads than the budget. Yields whether
    there is room for the worker at all (a budget of one thread runs the stages in turn).
    Thread settings are restored afterwards."""
    budget = torch.get_num_threads()
    if device.type != "cpu":
        yield True
        return
    if budget == 1:
        with threadpool_limits(limits=1, user_api="blas"):
            yield False
        return
    torch_threads = budget // 2
    torch.set_num_threads(torch_threads)
    try:
        with threadpool_limits(limits=budget - torch_threads, user_api="blas"):
            yield True
    finally:
        torch.set_num_threads(budget)


def _run_now(function: Callable, *args: Any) -> Future:
    """``function(*args)`` run at once, as a finished future (the worker's stand-in)."""
    future: Future = Future()
    future.set_result(function(*args))
    return future


class StepTimer:
    """Wall time per named part of a training step, in milliseconds."""

    def __init__(self, device: torch.device):
        self.device = device
        self.ms: dict[str, float] = {}

    @contextmanager
    def __call__(self, part: str):
        start = time.perf_counter()
        yield
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.ms[f"ms_{part}"] = self.ms.get(f"ms_{part}", 0.0) + (time.perf_counter() - start) * 1e3


class SpectralEstimator:
    """Common parameters, training loop, inference and persistence.

    Parameters
    ----------
    n_components : int
        K, the embedding dimension.
    graph : GraphConfig or dict
        How each batch's affinity is built (k, scale rule, kernel form, ...).
    operator : {"unnormalized", "normalized", "diffusion"}
        Whose eigenvectors are learnt: L, L_N or the random walk (diffusion map).
    drop_trivial : bool
        Leave out the trivial (constant-like) eigenvector.
    diffusion_time : float
        t of the diffusion-map coordinates (``operator="diffusion"`` only).
    batch_size : int
        m, nodes per batch.
    n_iter : int
        Training iterations (gradient steps).
    lr : float
        Adam learning rate.
    hidden : tuple of int
        Hidden widths of the MLP.
    device : str
        ``"auto"`` (CUDA when present), ``"cpu"`` or ``"cuda[:N]"``.
    seed : int
        Seeds network initialisation and every random draw of training.
    callback : callable or None
        ``callback(step, info)`` after every step; ``info`` holds ``loss`` and the
        milliseconds spent in each part of the step (``ms_graph``, ...).
    """

    #: Parameters whose defaults differ per method are overridden in subclasses.
    def __init__(
        self,
        n_components: int = 10,
        *,
        graph: GraphConfig | dict | None = None,
        operator: str = "normalized",
        drop_trivial: bool = False,
        diffusion_time: float = 1.0,
        batch_size: int = 512,
        n_iter: int = 1000,
        lr: float = 1e-4,
        hidden: tuple[int, ...] = HIDDEN_WIDTHS,
        device: str = "auto",
        seed: int = 0,
        callback: StepCallback | None = None,
    ):
        self.n_components = n_components
        self.graph = GraphConfig.from_dict(graph)
        self.operator = operator
        self.drop_trivial = drop_trivial
        self.diffusion_time = diffusion_time
        self.batch_size = batch_size
        self.n_iter = n_iter
        self.lr = lr
        self.hidden = tuple(hidden)
        self.device = device
        self.seed = seed
        self.callback = callback

    # -- parameters -------------------------------------------------------------------
    @classmethod
    def _param_names(cls) -> list[str]:
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            if "__init__" in vars(klass):
                for p in inspect.signature(klass.__init__).parameters.values():
                    if p.kind is p.KEYWORD_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "self"):
                        if p.name not in names:
                            names.append(p.name)
        return names

    def get_params(self) -> dict[str, Any]:
        """Constructor parameters (the callback left out), JSON-friendly."""
        params = {name: getattr(self, name) for name in self._param_names() if name != "callback"}
        params["graph"] = self.graph.to_dict()
        params["hidden"] = list(self.hidden)
        return params

    def _validate(self, n_samples: int) -> None:
        if self.operator not in OPERATORS:
            raise ValueError(f"operator must be one of {list(OPERATORS)}, got {self.operator!r}")
        for name in ("n_components", "batch_size", "n_iter"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        if self.batch_size > n_samples:
            raise ValueError(f"batch_size={self.batch_size} exceeds the number of training points {n_samples}")
        if self.n_components + int(self.drop_trivial) >= self.batch_size:
            raise ValueError(f"n_components={self.n_components} must be smaller than batch_size={self.batch_size}")
        if self.graph.n_neighbors >= self.batch_size:
            raise ValueError(
                f"graph.n_neighbors={self.graph.n_neighbors} must be smaller than batch_size={self.batch_size}"
            )
        resolve_device(self.device)

    # -- the shared loop ---------------------------------------------------------------
    def fit(self, X: Any, y: Any = None) -> "SpectralEstimator":
        """Train the network on features ``X`` (labels ``y`` are used only where a
        method needs them, e.g. BASiS's stratified anchors)."""
        X = check_features(X)
        if y is not None:
            y = np.asarray(y)
            if y.shape != (X.shape[0],):
                raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        X_t = self._start(X, y)
        self.model_.train()
        # The next batch and its analytic target do not depend on the network, so a
        # worker thread prepares batch t+1 while the main thread steps on batch t
        # (LAPACK and torch release the GIL). Draws happen in the same order either way,
        # so a one-thread budget, which prepares each batch in turn, gives the same run.
        with _split_cores(self.device_) as pipelined, ThreadPoolExecutor(max_workers=1) as worker:
            prepare = worker.submit if pipelined else _run_now
            pending = prepare(self._timed_batch, X_t)
            for step in range(self.n_iter):
                start = time.perf_counter()
                batch, timer = pending.result()
                if step + 1 < self.n_iter:
                    pending = prepare(self._timed_batch, X_t)
                loss, info = self._batch_loss(X_t, batch, timer)
                with timer("gradient"):
                    loss_value = self._gradient_step(loss)
                info = {"loss": loss_value, **info, **timer.ms, "ms_step": (time.perf_counter() - start) * 1e3}
                if self.callback is not None:
                    self.callback(step, info)
        self.model_.eval()
        self._finish(X_t)
        return self

    def _start(self, X: np.ndarray, y: np.ndarray | None) -> torch.Tensor:
        """Everything before the first step: checks, network, optimiser and the method's
        set-up (:meth:`_prepare`). Returns ``X`` as a tensor on the device."""
        self._validate(X.shape[0])
        self.device_ = resolve_device(self.device)
        self.n_features_in_ = X.shape[1]
        self.generator_ = torch.Generator().manual_seed(self.seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.model_ = self._build_model(X.shape[1]).to(self.device_)
        X_t = torch.from_numpy(X).to(self.device_)
        self._prepare(X_t, y)
        self.optimizer_ = self._optimizer()
        self.loss_curve_: list[float] = []
        return X_t

    def _gradient_step(self, loss: torch.Tensor) -> float:
        self.optimizer_.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer_.step()
        self.loss_curve_.append(float(loss.detach()))
        return self.loss_curve_[-1]

    def _timed_batch(self, X: torch.Tensor) -> tuple[Any, StepTimer]:
        timer = StepTimer(self.device_)
        return self._next_batch(X, timer), timer

    def _build_model(self, in_dim: int) -> SpectralMLP:
        return SpectralMLP(in_dim, self.n_components, self.hidden)

    def _optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model_.parameters(), lr=self.lr)

    def _sample(self, n: int, size: int, exclude: torch.Tensor | None = None) -> torch.Tensor:
        """``size`` distinct random indices of [0, n), avoiding ``exclude``."""
        if exclude is None:
            return torch.randperm(n, generator=self.generator_)[:size]
        allowed = torch.ones(n, dtype=torch.bool)
        allowed[exclude.cpu()] = False
        pool = allowed.nonzero().squeeze(1)
        return pool[torch.randperm(len(pool), generator=self.generator_)[:size]]

    def _embed_batch(self, X_batch: torch.Tensor, timer: StepTimer) -> torch.Tensor | None:
        """Analytic embedding of one batch's graph (``embedding_def``), or None when the
        batch graph has more components than eigenvectors requested (undefined)."""
        with timer("graph"):
            W = dense_affinity(X_batch, self.graph)
            if connected_components(W)[0] > self.n_components + int(self.drop_trivial):
                return None
        with timer("eigensolve"):
            phi, _ = spectral_embedding(
                W,
                self.n_components,
                operator=self.operator,
                drop_trivial=self.drop_trivial,
                diffusion_time=self.diffusion_time,
                on_disconnected="ignore",
            )
        return phi

    # -- hooks for the methods ---------------------------------------------------------
    def _prepare(self, X: torch.Tensor, y: np.ndarray | None) -> None:
        """Set-up before the first step (anchors, targets, graphs)."""

    def _next_batch(self, X: torch.Tensor, timer: StepTimer) -> Any:
        """Draw the next batch and everything about it that does not need the network."""
        raise NotImplementedError

    def _batch_loss(self, X: torch.Tensor, batch: Any, timer: StepTimer) -> tuple[torch.Tensor, dict[str, float]]:
        """The method's loss on one batch from :meth:`_next_batch`."""
        raise NotImplementedError

    def _finish(self, X: torch.Tensor) -> None:
        """Post-processing after the last step."""

    # -- inference and persistence -----------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise RuntimeError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def transform(self, X: Any, *, chunk_size: int = 8192) -> np.ndarray:
        """Embedding of new points, shape (n, n_components), float64."""
        self._check_fitted()
        X = check_features(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the model was fitted on {self.n_features_in_}")
        self.model_.eval()
        with torch.no_grad():
            parts = [
                self.model_.embed(torch.from_numpy(X[i : i + chunk_size]).to(self.device_)).cpu()
                for i in range(0, len(X), chunk_size)
            ]
        return torch.cat(parts).numpy()

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        return self.fit(X, y).transform(X)

    def save(self, path: str | Path) -> None:
        """Write parameters and weights to ``path`` (loadable with ``weights_only=True``)."""
        self._check_fitted()
        state = {
            "method": METHOD_NAMES[type(self)],
            "params": self.get_params(),
            "n_features_in": self.n_features_in_,
            "state_dict": {k: v.cpu() for k, v in self.model_.state_dict().items()},
        }
        torch.save(state, Path(path))

    @staticmethod
    def load(path: str | Path, *, device: str = "auto") -> "SpectralEstimator":
        """Rebuild a fitted estimator saved with :meth:`save`."""
        try:
            state = torch.load(Path(path), map_location="cpu", weights_only=True)
            cls = METHODS[state["method"]]
            params = dict(state["params"], device=device)
            estimator = cls(**params)
            estimator.device_ = resolve_device(device)
            estimator.n_features_in_ = int(state["n_features_in"])
            estimator.model_ = estimator._build_model(estimator.n_features_in_)
            estimator.model_.load_state_dict(state["state_dict"])
        except (KeyError, TypeError, RuntimeError, EOFError, OSError) as err:
            if isinstance(err, FileNotFoundError):
                raise
            raise ValueError(f"{path} is not a valid basis checkpoint: {err}") from err
        estimator.model_.to(estimator.device_).eval()
        return estimator

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.get_params().items())})"


class BASiS(SpectralEstimator):
    """Batch Aligned Spectral Embedding Space (Algorithm 1).

    After ``fit``: ``anchor_indices_``, ``reference_anchor_embedding_``,
    ``n_fallbacks_`` (RANSAC fallbacks to least squares) and ``n_redrawn_batches_``
    (batches redrawn because their graph was too disconnected to embed).

    Every iteration embeds a fresh batch (anchors + m - l new points) analytically,
    aligns it to the reference embedding through the anchors (RANSAC over affine maps,
    ``eq:stepAffie_transformation_least_squares2``) and takes one MSE step
    (``ltsnet_loss``).

    Parameters (beyond :class:`SpectralEstimator`'s)
    ----------
    anchors : {"stratified", "random"}
        ``stratified`` draws ``anchors_per_class`` nodes from every class (needs ``y``);
        ``random`` draws ``n_anchors`` nodes. Drawn with the run's seed.
    anchors_per_class, n_anchors : int
        Anchor counts for the two modes (paper: 25 per class).
    anchor_indices : sequence of int or None
        Fixed anchor nodes (e.g. the toy examples' hand-placed ones); overrides the draw.
    alignment : {"ransac", "lstsq", "none"}
        How each batch is aligned to the reference; ``none`` and ``lstsq`` are ablations.
    anchor_outliers : float
        Fraction of the anchor slots of every batch after the reference batch that hold a
        random node of another class (any other node without labels) instead of the
        anchor: gross outliers in the anchor correspondence, for the alignment ablation.
        0 (default) in every real use.
    ransac_iter, ransac_sample_size, ransac_tolerance, ransac_tolerance_mode :
        RANSAC settings. The tolerance is relative to the reference anchors' RMS row norm
        by default (0.25; see :func:`basis.alignment.inlier_threshold`); the authors used an
        absolute one (``ransac_tolerance=0.1, ransac_tolerance_mode="absolute"``; three
        moons: 5 anchors per sample and 0.01).
    """

    MAX_REDRAWS = 20

    def __init__(
        self,
        n_components: int = 10,
        *,
        anchors: str = "stratified",
        anchors_per_class: int = 25,
        n_anchors: int = 250,
        anchor_indices: list[int] | None = None,
        alignment: str = "ransac",
        anchor_outliers: float = 0.0,
        ransac_iter: int = 100,
        ransac_sample_size: int = 20,
        ransac_tolerance: float = 0.25,
        ransac_tolerance_mode: str = "relative",
        **common: Any,
    ):
        super().__init__(n_components, **common)
        self.anchors = anchors
        self.anchors_per_class = anchors_per_class
        self.n_anchors = n_anchors
        self.anchor_indices = None if anchor_indices is None else [int(i) for i in anchor_indices]
        self.alignment = alignment
        self.anchor_outliers = anchor_outliers
        self.ransac_iter = ransac_iter
        self.ransac_sample_size = ransac_sample_size
        self.ransac_tolerance = ransac_tolerance
        self.ransac_tolerance_mode = ransac_tolerance_mode

    def _validate(self, n_samples: int) -> None:
        super()._validate(n_samples)
        if self.anchors not in ("stratified", "random"):
            raise ValueError(f"anchors must be 'stratified' or 'random', got {self.anchors!r}")
        if self.alignment not in ("ransac", "lstsq", "none"):
            raise ValueError(f"alignment must be one of ['ransac', 'lstsq', 'none'], got {self.alignment!r}")
        if not 0.0 <= self.anchor_outliers < 1.0:
            raise ValueError(f"anchor_outliers must be in [0, 1), got {self.anchor_outliers!r}")
        if self.ransac_tolerance_mode not in TOLERANCE_MODES:
            raise ValueError(
                f"ransac_tolerance_mode must be one of {list(TOLERANCE_MODES)}, got {self.ransac_tolerance_mode!r}"
            )

    def _choose_anchors(self, n: int, y: np.ndarray | None) -> torch.Tensor:
        if self.anchor_indices is not None:
            idx = torch.as_tensor(self.anchor_indices, dtype=torch.int64)
            if len(set(self.anchor_indices)) != len(idx) or idx.min() < 0 or idx.max() >= n:
                raise ValueError(f"anchor_indices must be distinct indices in [0, {n})")
            return idx
        if self.anchors == "random":
            return self._sample(n, self.n_anchors)
        if y is None:
            raise ValueError("anchors='stratified' needs labels y; pass y to fit or use anchors='random'")
        chosen = []
        for label in np.unique(y):
            members = torch.from_numpy(np.flatnonzero(y == label))
            if len(members) < self.anchors_per_class:
                raise ValueError(
                    f"class {label!r} has {len(members)} points, fewer than anchors_per_class={self.anchors_per_class}"
                )
            chosen.append(members[torch.randperm(len(members), generator=self.generator_)[: self.anchors_per_class]])
        return torch.cat(chosen)

    def _prepare(self, X: torch.Tensor, y: np.ndarray | None) -> None:
        anchors = self._choose_anchors(X.shape[0], y)
        n_anchors, dim = len(anchors), self.n_components
        if self.alignment != "none" and n_anchors < dim + 1:
            raise ValueError(f"{n_anchors} anchors cannot fix an affine map in K={dim}: at least K+1={dim + 1} needed")
        if self.alignment == "ransac" and not dim + 1 <= self.ransac_sample_size <= n_anchors:
            raise ValueError(
                f"ransac_sample_size must be between K+1={dim + 1} and the number of anchors {n_anchors},"
                f" got {self.ransac_sample_size}"
            )
        if n_anchors >= self.batch_size:
            raise ValueError(f"{n_anchors} anchors leave no room in a batch of {self.batch_size}")
        self.anchor_indices_ = anchors
        self.labels_ = None if y is None else torch.as_tensor(np.unique(y, return_inverse=True)[1])
        self.ransac_generator_ = torch.Generator().manual_seed(self.seed + 1)
        self.n_fallbacks_ = self.n_redrawn_batches_ = 0
        self.reference_indices_, _, self.reference_embedding_ = self._draw_embedded_batch(
            X.shape[0], lambda batch: X[batch.to(X.device)], StepTimer(self.device_)
        )
        self.reference_anchor_embedding_ = self.reference_embedding_[:n_anchors]

    def align(self, phi_batch: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """Align a batch embedding whose first rows are the anchors to the reference."""
        n_anchors = len(self.anchor_indices_)
        source, target = phi_batch[:n_anchors], self.reference_anchor_embedding_
        if self.alignment == "none":
            return phi_batch, {"inlier_fraction": float("nan")}
        if self.alignment == "lstsq":
            result = align_affine(source, target)
        else:
            result = ransac_affine(
                source,
                target,
                n_iter=self.ransac_iter,
                sample_size=self.ransac_sample_size,
                tolerance=self.ransac_tolerance,
                tolerance_mode=self.ransac_tolerance_mode,
                generator=self.ransac_generator_,
            )
            self.n_fallbacks_ += int(result.fallback)
        return apply_affine(result.transform, phi_batch), {"inlier_fraction": float(result.inliers.float().mean())}

    def _corrupt_anchor_slots(self, batch: torch.Tensor, n: int) -> torch.Tensor:
        """``batch`` with ``anchor_outliers`` of its anchor slots holding a random node of
        another class, outside the batch (see the class parameters)."""
        n_anchors = len(self.anchor_indices_)
        slots = torch.randperm(n_anchors, generator=self.generator_)[: round(self.anchor_outliers * n_anchors)]
        batch = batch.clone()
        for slot in slots.tolist():
            allowed = torch.ones(n, dtype=torch.bool)
            allowed[batch] = False
            if self.labels_ is not None:
                allowed &= self.labels_ != self.labels_[batch[slot]]
            pool = allowed.nonzero().squeeze(1)
            batch[slot] = pool[torch.randint(len(pool), (1,), generator=self.generator_)]
        return batch

    def _draw_embedded_batch(
        self, n: int, features_of: Callable[[torch.Tensor], torch.Tensor], timer: StepTimer, corrupt: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Anchors + m - l random nodes of [0, n): their indices, features (from
        ``features_of(indices)``) and embedding; with ``corrupt``, some anchor slots hold
        outliers (``anchor_outliers``). A batch whose graph splits into more components than
        eigenvectors has no defined embedding; it is redrawn (counted in
        ``n_redrawn_batches_``), up to ``MAX_REDRAWS`` times."""
        anchors = self.anchor_indices_
        for _ in range(self.MAX_REDRAWS):
            batch = torch.cat([anchors, self._sample(n, self.batch_size - len(anchors), exclude=anchors)])
            if corrupt and self.anchor_outliers > 0:
                batch = self._corrupt_anchor_slots(batch, n)
            X_batch = features_of(batch)
            phi = self._embed_batch(X_batch, timer)
            if phi is not None:
                return batch, X_batch, phi
            self.n_redrawn_batches_ += 1
        raise ValueError(
            f"{self.MAX_REDRAWS} batches in a row had a graph with more than"
            f" {self.n_components + int(self.drop_trivial)} connected components; increase graph.n_neighbors"
            " or batch_size"
        )

    def _next_batch(self, X: torch.Tensor, timer: StepTimer) -> tuple[torch.Tensor, torch.Tensor, dict]:
        return self._aligned_batch(X.shape[0], lambda batch: X[batch.to(X.device)], timer)

    def _aligned_batch(
        self, n: int, features_of: Callable[[torch.Tensor], torch.Tensor], timer: StepTimer
    ) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """A drawn batch (see :meth:`_draw_embedded_batch`): its features and its embedding
        aligned to the reference, with the alignment's info."""
        _, X_batch, phi = self._draw_embedded_batch(n, features_of, timer, corrupt=True)
        with timer("alignment"):
            phi, info = self.align(phi)
        return X_batch, phi, info

    def _batch_loss(self, X: torch.Tensor, batch, timer: StepTimer) -> tuple[torch.Tensor, dict[str, float]]:
        X_batch, phi, info = batch
        with timer("gradient"):
            loss = basis_loss(self.model_(X_batch), phi)
        return loss, info


def basis_loss(Y: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """(1/m) sum_i ||y_i - phi_i||^2 against the aligned batch embedding (``ltsnet_loss``)."""
    return ((Y - phi) ** 2).sum(dim=1).mean()


class DiffusionNet(SpectralEstimator):
    """Diffusion Net's encoder (Mishne et al.), trained as in the BASiS paper.

    One sample of ``sample_size`` training points (default: one batch) is drawn per
    run; its analytic embedding is the target; the loss is
    ``diffusion_net_encoder_loss``: MSE to the target + (mu/2) sum of squared weights
    of all but the output layer + (eta/2m) sum_j ||(P - gamma_j I) o_j||^2, trained
    full-batch on that sample. With ``operator="diffusion"`` (its own paper) P is the
    row-stochastic D^-1 W, whose right eigenvectors are the diffusion coordinates (the
    BASiS paper prints the transpose W D^-1); for the Table 1 protocol the target is the
    L_N embedding and P, gamma are replaced by L_N and its eigenvalues.
    """

    def __init__(
        self,
        n_components: int = 10,
        *,
        mu: float = 1e-5,
        eta: float = 1.0,
        sample_size: int | None = None,
        operator: str = "diffusion",
        drop_trivial: bool = True,
        **common: Any,
    ):
        super().__init__(n_components, operator=operator, drop_trivial=drop_trivial, **common)
        self.mu = mu
        self.eta = eta
        self.sample_size = sample_size

    def _validate(self, n_samples: int) -> None:
        super()._validate(n_samples)
        if self.sample_size is not None and not self.batch_size <= self.sample_size <= n_samples:
            raise ValueError(f"sample_size must be between batch_size and {n_samples}, got {self.sample_size}")
        if self.mu < 0 or self.eta < 0:
            raise ValueError(f"mu and eta must be non-negative, got {self.mu} and {self.eta}")

    def _prepare(self, X: torch.Tensor, y: np.ndarray | None) -> None:
        size = self.sample_size or self.batch_size
        self.sample_indices_ = self._sample(X.shape[0], size)
        W = dense_affinity(X[self.sample_indices_.to(X.device)], self.graph)
        self.target_, self.eigenvalues_ = spectral_embedding(
            W,
            self.n_components,
            operator=self.operator,
            drop_trivial=self.drop_trivial,
            diffusion_time=self.diffusion_time,
            on_disconnected="warn",
        )
        # The operator whose eigenvectors the targets are, for the eigen-regulariser.
        if self.operator == "diffusion":
            self.operator_matrix_ = W / W.sum(dim=1, keepdim=True)
        elif self.operator == "normalized":
            self.operator_matrix_ = normalized_laplacian(W)
        else:
            self.operator_matrix_ = laplacian(W)

    def _next_batch(self, X: torch.Tensor, timer: StepTimer) -> None:
        return None  # full-batch training on the one sample

    def _batch_loss(self, X: torch.Tensor, batch: None, timer: StepTimer) -> tuple[torch.Tensor, dict[str, float]]:
        X_sample = X[self.sample_indices_.to(X.device)]
        with timer("gradient"):
            Z = self.model_(X_sample)
            n = Z.shape[0]
            data_term = ((Z - self.target_) ** 2).sum() / (2 * n)
            weights = self.model_.weight_matrices()[:-1]
            decay = self.mu / 2 * sum((w**2).sum() for w in weights)
            # (P - gamma_j I) z_j for every output column j at once.
            residual = self.operator_matrix_ @ Z - Z * self.eigenvalues_[None, :]
            eigen_term = self.eta / (2 * n) * (residual**2).sum()
            loss = data_term + decay + eigen_term
        return loss, {"data_term": float(data_term.detach()), "eigen_term": float(eigen_term.detach())}


class SpecNet1(SpectralEstimator):
    """SpectralNet (Shaham et al.): ratio-cut loss with an orthonormalisation layer.

    Each step computes the orthonormalisation weights W_orth = sqrt(m) R^-1 from the QR
    of the net's output on a separate batch (sign fixed so that diag R > 0; gradients
    flow through it, as in the PyTorch package 1.1.0), then minimises ``spectralnet_loss``
    (1/m^2) sum_ij W_ij ||y_i - y_j||^2 on the training
    batch. For L_N the outputs are divided by sqrt(degree) inside the loss. The last
    W_orth is stored for inference. SpectralNet learns the K smallest eigenvectors
    including the trivial one. Its last layer is bounded by ``output_activation``
    (tanh, as in SpectralNet) before the orthonormalisation.
    """

    def __init__(self, n_components: int = 10, *, output_activation: str | None = "tanh", **common: Any):
        super().__init__(n_components, **common)
        self.output_activation = output_activation

    def _build_model(self, in_dim: int) -> SpectralMLP:
        return SpectralMLP(in_dim, self.n_components, self.hidden, output_activation=self.output_activation)

    def _validate(self, n_samples: int) -> None:
        super()._validate(n_samples)
        if self.drop_trivial:
            raise ValueError(
                "SpecNet1 learns the K smallest eigenvectors including the trivial one: use drop_trivial=False"
            )
        if self.operator == "diffusion":
            raise ValueError("SpecNet1 learns L or L_N eigenvectors: operator must be 'unnormalized' or 'normalized'")

    def _orthonormal_weights(self, X_orth: torch.Tensor) -> torch.Tensor:
        """W_orth = sqrt(m) R^-1 from the QR of the net's output on ``X_orth`` (diag R > 0),
        in float64 and differentiable; the stored copy for inference is detached."""
        q, r = torch.linalg.qr(self.model_(X_orth).double())
        signs = torch.sign(torch.diagonal(r)).detach()
        signs[signs == 0] = 1
        w_orth = np.sqrt(X_orth.shape[0]) * torch.linalg.inv(r * signs[:, None])
        with torch.no_grad():
            self.model_.output_map.copy_(w_orth)
        return w_orth

    def orthonormalize(self, X_batch: torch.Tensor) -> torch.Tensor:
        """Recompute W_orth from ``X_batch`` and return the orthonormal output Y (m x K)
        with Y^T Y / m = I."""
        with torch.no_grad():
            w_orth = self._orthonormal_weights(X_batch)
            return self.model_(X_batch).double() @ w_orth

    def _next_batch(self, X: torch.Tensor, timer: StepTimer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        X_orth = X[self._sample(X.shape[0], self.batch_size).to(X.device)]
        X_batch = X[self._sample(X.shape[0], self.batch_size).to(X.device)]
        with timer("graph"):
            W = dense_affinity(X_batch, self.graph)
        return X_orth, X_batch, W

    def _batch_loss(self, X: torch.Tensor, batch, timer: StepTimer) -> tuple[torch.Tensor, dict[str, float]]:
        X_orth, X_batch, W = batch
        with timer("gradient"):
            # As in the PyTorch package, the gradient also flows through W_orth (the QR of
            # the orthonormalisation batch); with W_orth held fixed the net can lower the
            # loss by shrinking its output, which the next W_orth undoes, and it collapses.
            Y = self.model_(X_batch).double() @ self._orthonormal_weights(X_orth)
            W = W.double()
            if self.operator == "normalized":
                Y = Y / W.sum(dim=1, keepdim=True).sqrt()
            loss = spectralnet_loss(Y, W)
        return loss, {}

    def _finish(self, X: torch.Tensor) -> None:
        self.orthonormalize(X[self._sample(X.shape[0], self.batch_size).to(X.device)])


def spectralnet_loss(Y: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """(1/m^2) sum_ij W_ij ||y_i - y_j||^2 = (2/m^2) tr(Y^T L Y) (``spectralnet_loss``)."""
    m = Y.shape[0]
    degrees = W.sum(dim=1)
    return 2.0 / m**2 * ((Y * (degrees[:, None] * Y)).sum() - (Y * (W @ Y)).sum())


def specnet2_loss(Y: torch.Tensor, W: torch.Tensor, degrees: torch.Tensor) -> torch.Tensor:
    """(1/m^2) tr(-2 Y^T W Y + (1/m^2) Y^T D Y Y^T D Y) (``specnet2_loss``)."""
    m = Y.shape[0]
    ydy = Y.T @ (degrees[:, None] * Y)
    return (-2.0 * (Y * (W @ Y)).sum() + (ydy * ydy.T).sum() / m**2) / m**2


def deflate_trivial(W: torch.Tensor) -> torch.Tensor:
    """W - D 1 1^T D / vol: removes the trivial pair (1, 1) of the pencil (W, D)."""
    degrees = W.sum(dim=1)
    return W - torch.outer(degrees, degrees) / degrees.sum()


class SpecNet2(SpectralEstimator):
    """SpecNet2 (Chen et al.): the pencil (W, D) by an unconstrained loss, then a
    Rayleigh-Ritz post-processing.

    ``gradient="local"`` uses the batch's own graph; ``"neighbor"`` evaluates the
    network on the batch's neighbours in the whole training graph as well. After
    training, ``specnet2_ev_mat_calc`` (Y^T W Y) O = (Y^T D Y) O Lambda is solved on
    ``postprocess_set`` (call :meth:`postprocess` with the set; the paper used the
    whole test set) and U = Y O is the embedding. ``drop_trivial`` deflates W.

    ``operator`` only says what the output is compared with: the pencil's eigenvectors
    are the random walk's, D^-1/2 U for the eigenvectors U of L_N, so ``"normalized"``
    (Table 1) leaves a d_G floor (see :func:`basis.metrics.own_basis_grassmann_distance`)
    and ``"unnormalized"`` is refused. ``gradient`` defaults to ``"local"`` (the batch's
    own graph, cost independent of n; the BASiS paper does not say which SpecNet2 used).
    """

    def __init__(self, n_components: int = 10, *, gradient: str = "local", **common: Any):
        super().__init__(n_components, **common)
        self.gradient = gradient

    def _validate(self, n_samples: int) -> None:
        super()._validate(n_samples)
        if self.gradient not in ("local", "neighbor"):
            raise ValueError(f"gradient must be 'local' or 'neighbor', got {self.gradient!r}")
        if self.operator == "unnormalized":
            raise ValueError(
                "SpecNet2 learns the pencil (W, D), i.e. the random walk's eigenvectors D^-1/2 U of L_N; it has no"
                " form for L = D - W: use operator 'normalized' (scored against L_N, as in the paper) or 'diffusion'"
            )

    def _prepare(self, X: torch.Tensor, y: np.ndarray | None) -> None:
        if self.gradient == "neighbor":
            W = sparse_affinity(X.cpu().numpy(), self.graph, device=str(X.device))
            self.full_graph_ = W
            self.full_degrees_ = torch.from_numpy(np.asarray(W.sum(axis=1)).ravel())

    def _batch_graph(self, X_batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        W = dense_affinity(X_batch, self.graph)
        if self.drop_trivial:
            return deflate_trivial(W), W.sum(dim=1)
        return W, W.sum(dim=1)

    def _next_batch(self, X: torch.Tensor, timer: StepTimer) -> dict[str, torch.Tensor]:
        batch = self._sample(X.shape[0], self.batch_size)
        with timer("graph"):
            if self.gradient == "local":
                X_batch = X[batch.to(X.device)]
                W, degrees = self._batch_graph(X_batch)
                return {"X_batch": X_batch, "W": W, "degrees": degrees}
            # Rows of the whole training graph for the batch, over the batch's neighbours.
            rows = self.full_graph_[batch.numpy()].tocoo()
            union, inverse = np.unique(np.concatenate([batch.numpy(), rows.col]), return_inverse=True)
            W_rows = torch.zeros((len(batch), len(union)), dtype=X.dtype)
            W_rows[torch.from_numpy(rows.row), torch.from_numpy(inverse[len(batch) :])] = torch.from_numpy(
                rows.data
            ).to(X.dtype)
            degrees = self.full_degrees_[batch].to(X.dtype)
            if self.drop_trivial:
                union_degrees = self.full_degrees_[torch.from_numpy(union)].to(X.dtype)
                W_rows = W_rows - torch.outer(degrees, union_degrees) / self.full_degrees_.sum()
            union = torch.from_numpy(union).to(X.device)
            return {
                "X_union": X[union],
                "batch_position": torch.from_numpy(inverse[: len(batch)]).to(X.device),
                "W_rows": W_rows.to(X.device),
                "degrees": degrees.to(X.device),
            }

    def _batch_loss(self, X: torch.Tensor, batch: dict, timer: StepTimer) -> tuple[torch.Tensor, dict[str, float]]:
        with timer("gradient"):
            if self.gradient == "local":
                return specnet2_loss(self.model_(batch["X_batch"]), batch["W"], batch["degrees"]), {}
            Y_union = self.model_(batch["X_union"])
            Y_batch = Y_union[batch["batch_position"]]
            m = Y_batch.shape[0]
            # specnet2_loss with W Y estimated from the batch's rows of the whole graph.
            cross = (Y_batch * (batch["W_rows"] @ Y_union)).sum()
            ydy = Y_batch.T @ (batch["degrees"][:, None] * Y_batch)
            loss = (-2.0 * cross + (ydy * ydy.T).sum() / m**2) / m**2
        return loss, {}

    def postprocess(self, X_set: Any) -> "SpecNet2":
        """Solve ``specnet2_ev_mat_calc`` on ``X_set`` and store O for :meth:`transform`."""
        self._check_fitted()
        X_set = check_features(X_set, "X_set")
        with torch.no_grad():
            Y = self.model_(torch.from_numpy(X_set).to(self.device_)).double().cpu().numpy()
        W = sparse_affinity(X_set, self.graph, device=str(self.device_))
        degrees = np.asarray(W.sum(axis=1)).ravel()
        ywy = Y.T @ (W @ Y)
        if self.drop_trivial:
            dy = degrees @ Y
            ywy = ywy - np.outer(dy, dy) / degrees.sum()
        ydy = Y.T @ (degrees[:, None] * Y)
        O = specnet2_rotation(ywy, ydy)
        self.model_.output_map.copy_(torch.from_numpy(O))
        return self

    def _finish(self, X: torch.Tensor) -> None:
        # Until postprocess() is called on the evaluation set, use a training batch.
        self.postprocess(X[self._sample(X.shape[0], self.batch_size).to(X.device)].cpu().numpy())


def specnet2_rotation(ywy: np.ndarray, ydy: np.ndarray) -> np.ndarray:
    """O of (Y^T W Y) O = (Y^T D Y) O Lambda, eigenvalues descending (``specnet2_ev_mat_calc``)."""
    vals, O = scipy.linalg.eigh(ywy, ydy, driver="gv")
    return O[:, np.argsort(vals)[::-1]]


METHODS: dict[str, type[SpectralEstimator]] = {
    "basis": BASiS,
    "diffusion_net": DiffusionNet,
    "specnet1": SpecNet1,
    "specnet2": SpecNet2,
}
METHOD_NAMES = {cls: name for name, cls in METHODS.items()}


def make_estimator(method: str, **params: Any) -> SpectralEstimator:
    """Build a method by name, naming valid methods and parameters on a mistake."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; valid: {sorted(METHODS)}")
    cls = METHODS[method]
    valid = set(cls._param_names())
    unknown = sorted(set(params) - valid)
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for method {method!r}; valid: {sorted(valid)}")
    return cls(**params)

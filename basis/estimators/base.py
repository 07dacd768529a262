"""What every learned spectral embedding shares: parameters, the training loop, the
public step API, inference, persistence and the registry the methods join.

A method is declared by its parameters class (:mod:`basis.estimators.parameters`, which
names the estimator class) and computed by a subclass of both that class and
:class:`SpectralEstimator` (a user's estimator joins in process with ``@register("name")``),
which supplies its hooks: ``_prepare`` (set-up before the first
step), ``_next_batch`` (everything about a batch that does not need the network),
``_batch_loss`` (its loss on that batch) and, where it has one, ``_finish``
(post-processing). :meth:`SpectralEstimator.fit` runs the loop; a loop of one's own
(Algorithm 2's, or a user's) calls :meth:`~SpectralEstimator.start`,
:meth:`~SpectralEstimator.prepare_batch`, :meth:`~SpectralEstimator.step` and
:meth:`~SpectralEstimator.finish`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_array

from basis.errors import InputError
from basis.estimators.parameters import DECLARED, SpectralParameters, check_parameters, declare
from basis.estimators.training import FeaturesOf, StepTimer, TrainingLoop
from basis.graph import GraphConfig
from basis.models import SpectralMLP
from basis.runtime.capture import CapturedSegment
from basis.runtime.device import resolve_device, side_stream
from basis.runtime.inputs import load_checkpoint
from basis.runtime.optim import adam_for
from basis.runtime.outputs import atomic_path


class _Methods(Mapping):
    """Method name -> estimator class: the declared methods
    (:data:`basis.estimators.parameters.DECLARED`), each module imported on first use."""

    def __getitem__(self, name: str) -> type[SpectralEstimator]:
        declared = DECLARED[name]
        if issubclass(declared, SpectralEstimator):  # registered in process (:func:`register`)
            return declared
        module, class_name = declared.estimator.split(":")
        return getattr(import_module(module), class_name)

    def __iter__(self) -> Iterator[str]:
        return iter(DECLARED)

    def __len__(self) -> int:
        return len(DECLARED)


#: Method name -> estimator class.
METHODS: Mapping[str, type[SpectralEstimator]] = _Methods()


def register(name: str, *, label: str | None = None) -> Callable[[type[SpectralEstimator]], type[SpectralEstimator]]:
    """Class decorator: make an estimator defined outside :mod:`basis.estimators.parameters`
    (a user's, in a notebook) available by ``name`` in this process: the CLI's runs,
    :func:`make_estimator` and checkpoints."""

    def join(cls: type[SpectralEstimator]) -> type[SpectralEstimator]:
        return declare(name, label=label or name, estimator=f"{cls.__module__}:{cls.__qualname__}")(cls)

    return join


def make_estimator(method: str, **params: Any) -> SpectralEstimator:
    """Build a method by name, naming valid methods and parameters on a mistake."""
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}; valid: {sorted(METHODS)}")
    cls = METHODS[method]
    valid = set(cls.parameter_names())
    unknown = sorted(set(params) - valid)
    if unknown:
        raise InputError(f"unknown parameter(s) {unknown} for method {method!r}; valid: {sorted(valid)}")
    return cls(**params)


def default_parameter(method: str, name: str) -> Any:
    """The default of ``method``'s parameter ``name`` (its ``__init__``'s)."""
    return DECLARED[method].defaults()[name]


def check_features(X: Any, name: str = "X") -> np.ndarray:
    """A finite 2-D float32 array, or a ValueError that says what is wrong (scikit-learn's
    checks and messages for shape, sparse and complex input; rows with NaN or inf counted)."""
    X = check_array(X, dtype=np.float32, ensure_all_finite=False, input_name=name)
    if not np.isfinite(X).all():
        bad = int((~np.isfinite(X)).any(axis=1).sum())
        raise InputError(f"{name} contains NaN or inf in {bad} row(s)")
    return X


class SpectralEstimator(SpectralParameters, TrainingLoop, TransformerMixin, BaseEstimator):
    """Common parameters, training loop, inference and persistence.

    Parameters
    ----------
    n_components : int
        K, the embedding dimension.
    graph : GraphConfig, dict or None
        How each batch's affinity is built (k, scale rule, kernel form, ...); None: the
        defaults of :class:`~basis.graph.GraphConfig`.
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

    Attributes
    ----------
    model_ : SpectralMLP
        The trained network; ``graph_`` the resolved graph settings, ``device_`` the
        device, ``n_features_in_`` the input dimension, ``loss_curve_`` the loss per step.
    """

    # -- parameters -------------------------------------------------------------------
    @classmethod
    def _get_param_names(cls) -> list[str]:
        # scikit-learn's get_params, set_params and clone read the parameters from here;
        # its own version refuses the **common that subclasses pass on.
        return cls.parameter_names()

    def settings(self) -> dict[str, Any]:
        """The parameters as JSON-friendly values (the callback left out): what
        :meth:`save` stores and tracking logs."""
        params = self.get_params(deep=False)
        del params["callback"]
        params["graph"] = GraphConfig.from_dict(self.graph).to_dict()
        params["hidden"] = list(self.hidden)
        return params

    def _resolve(self) -> None:
        """Parameters in the form the computation uses (fitted attributes)."""
        self.graph_ = GraphConfig.from_dict(self.graph)
        self.hidden_ = tuple(int(width) for width in self.hidden)

    def _validate(self, n_samples: int) -> None:
        check_parameters(type(self), self.get_params(deep=False))
        self._resolve()
        if self.batch_size > n_samples:
            raise InputError(
                f"batch_size={self.batch_size} exceeds the number of training points (n_samples={n_samples})"
            )
        if self.n_components + int(self.drop_trivial) >= self.batch_size:
            raise InputError(f"n_components={self.n_components} must be smaller than batch_size={self.batch_size}")
        if self.graph_.n_neighbors >= self.batch_size:
            raise InputError(
                f"graph.n_neighbors={self.graph_.n_neighbors} must be smaller than batch_size={self.batch_size}"
            )
        resolve_device(self.device)

    # -- the shared loop ---------------------------------------------------------------
    def fit(self, X: Any, y: Any = None) -> SpectralEstimator:
        """Train the network on features ``X`` (labels ``y`` are used only where a
        method needs them, e.g. BASiS's stratified anchors)."""
        self.start(X, y)
        self.fit_steps(self.n_iter)
        return self.finish()

    def start(self, X: Any, y: Any = None) -> SpectralEstimator:
        """Everything before the first step: input and parameter checks, network,
        optimiser and the method's set-up (anchors, reference, targets). After it,
        :meth:`step` trains one step at a time and :meth:`finish` ends training."""
        X, y = self.check_input(X, y)
        self.device_ = resolve_device(self.device)
        self.n_features_in_ = X.shape[1]
        self.generator_ = torch.Generator().manual_seed(self.seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.model_ = self._build_model(X.shape[1]).to(self.device_)
        self._training_data = torch.from_numpy(X).to(self.device_)
        self._prepare_stream = None  # the set-up runs on the default stream
        self._prepare(self._training_data, y)
        # Batches are prepared on a stream of their own on CUDA (see prepare_batch).
        self._prepare_stream = side_stream(self.device_)
        captures = self._captures_steps()
        self.optimizer_ = adam_for(self.model_.parameters(), self.lr, self.device_, capturable=captures)
        self._gradient_step = CapturedSegment(self._gradient_step_on) if captures else None
        self.loss_curve_: list[float] = []
        self.n_steps_ = 0
        self.model_.train()
        return self

    def check_input(self, X: Any, y: Any = None) -> tuple[np.ndarray, np.ndarray | None]:
        """``X`` and ``y`` as arrays, once the parameters are checked against them (batch
        size against the training set, ...): an InputError before any training."""
        X = check_features(X)
        if y is not None:
            y = np.asarray(y)
            if y.shape != (X.shape[0],):
                raise InputError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        self._validate(X.shape[0])
        return X, y

    def _after_step(self) -> None:
        """A method's work after each gradient step (BASiS: weight averaging)."""

    def finish(self) -> SpectralEstimator:
        """End training: the method's post-processing; the training data is let go."""
        self.model_.eval()
        self._finish(self._training_features, len(self._training_data))
        del self._training_data
        return self

    def _build_model(self, in_dim: int) -> SpectralMLP:
        return SpectralMLP(in_dim, self.n_components, self.hidden_)

    # -- hooks for the methods ---------------------------------------------------------
    def _prepare(self, X: torch.Tensor, y: np.ndarray | None) -> None:
        """Set-up before the first step (anchors, targets, graphs)."""

    def _next_batch(self, features_of: FeaturesOf, n_train: int, timer: StepTimer) -> Any:
        """Draw the next batch of [0, n_train) and everything about it that does not
        need the network."""
        raise NotImplementedError

    def _batch_loss(self, batch: Any, timer: StepTimer) -> tuple[torch.Tensor, dict[str, float | torch.Tensor]]:
        """The method's loss on one batch from :meth:`_next_batch`, and its info: numbers, or
        0-d tensors that the training loop reads from the device with the losses. By
        default :meth:`_loss_with` of the model on :meth:`_loss_tensors`' tensors."""
        tensors, info = self._loss_tensors(batch)
        with timer("gradient"):
            loss, terms = self._loss_with(self.model_, *tensors)
        return loss, {**info, **terms}

    def _finish(self, features_of: FeaturesOf, n_train: int) -> None:
        """Post-processing after the last step."""

    def _captures_steps(self) -> bool:
        """Whether the step's fixed-shape parts are replayed from CUDA graphs; a method
        that says so supplies :meth:`_loss_tensors` and :meth:`_loss_of`."""
        return False

    def _loss_tensors(self, batch: Any) -> tuple[tuple[torch.Tensor, ...], dict[str, float]]:
        """The tensors the method's loss on a batch is a function of, and the step's info."""
        raise NotImplementedError

    def _loss_of(self, *tensors: torch.Tensor) -> torch.Tensor:
        """The method's loss as a function of :meth:`_loss_tensors`' tensors alone."""
        raise NotImplementedError

    def _loss_with(
        self, network: Callable[[torch.Tensor], torch.Tensor], *tensors: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The method's loss with ``network`` on :meth:`_loss_tensors`' tensors, and the terms
        it logs per step (0-d tensors, read with the losses). ``network`` is called on a batch
        and has :meth:`~basis.models.SpectralMLP.weight_matrices`. A method that supplies
        it can train its seeds together (:func:`basis.estimators.together.fit_together`)."""
        raise NotImplementedError

    def _why_not_together(self) -> str | None:
        """Why this estimator's seeds cannot train together, or None where they can: a
        method that states its loss with :meth:`_loss_with` can, unless its settings are
        among those its class declares in :attr:`SEEDS_APART_WHEN`."""
        if self.SEEDS_NEVER_TOGETHER:
            return self.SEEDS_NEVER_TOGETHER
        if type(self)._loss_with is SpectralEstimator._loss_with:
            return "its loss is not stated as a function of the network (_loss_with)"
        return next((why for key, (value, why) in self.SEEDS_APART_WHEN.items() if getattr(self, key) == value), None)

    # -- inference and persistence -----------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def transform(self, X: Any, *, chunk_size: int = 8192) -> np.ndarray:
        """Embedding of new points, shape (n, n_components), float64."""
        self._check_fitted()
        X = check_features(X)
        if X.shape[1] != self.n_features_in_:
            raise InputError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting {self.n_features_in_} features"
                " as input"
            )
        self.model_.eval()
        with torch.no_grad():
            parts = [
                self.model_.embed(torch.from_numpy(X[i : i + chunk_size]).to(self.device_)).cpu()
                for i in range(0, len(X), chunk_size)
            ]
        return torch.cat(parts).numpy()

    def save(self, path: str | Path) -> None:
        """Write parameters and weights to ``path`` (loadable with ``weights_only=True``)."""
        self._check_fitted()
        state = {
            "method": self.method_name,
            "params": self.settings(),
            "n_features_in": self.n_features_in_,
            "state_dict": {k: v.cpu() for k, v in self.model_.state_dict().items()},
        }
        with atomic_path(path) as partial:
            torch.save(state, partial)

    @staticmethod
    def load(path: str | Path, *, device: str = "auto") -> SpectralEstimator:
        """Rebuild a fitted estimator saved with :meth:`save`."""
        state = load_checkpoint(path, "model checkpoint")
        try:
            cls = METHODS[state["method"]]
            estimator = cls(**dict(state["params"], device=device))
            estimator._resolve()
            estimator.device_ = resolve_device(device)
            estimator.n_features_in_ = int(state["n_features_in"])
            estimator.model_ = estimator._build_model(estimator.n_features_in_)
            estimator.model_.load_state_dict(state["state_dict"])
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            raise InputError(f"model checkpoint {path} is not a checkpoint of a basis estimator ({err!r})") from None
        estimator.model_.to(estimator.device_).eval()
        return estimator

"""Every method's parameters, stated once and importable without torch.

A method is declared here by a parameters class: its ``__init__`` is the estimator's (names,
types, defaults; an estimator class inherits it), ``_parameter_constraints`` beside it holds
the ranges (choices are the ``Literal`` annotations of :mod:`basis.choices`), and
:func:`declare` gives it its name, its label in tables and figures, and the estimator class
that computes it; a package of one's own declares its methods the same way and names the
module that does so in the ``basis.methods`` entry-point group (:data:`PLUGIN_GROUP`).
:func:`check_parameters` is the one validator: the workflow calls it on a
config at parse time (through :mod:`basis.catalog`), and ``fit`` on the estimator's
parameters. As scikit-learn declares ``_parameter_constraints`` on its estimators.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from basis.choices import (
    Alignment,
    AlignmentMap,
    Eigensolver,
    Operator,
    ToleranceMode,
    annotation_as_text,
    check_value,
    spelt_out,
)
from basis.errors import InputError
from basis.graph.config import GraphConfig

#: What a training loop calls after every step: ``callback(step, info)``.
StepCallback = Callable[[int, dict[str, float]], None]

#: Hidden widths of every method's MLP (:class:`basis.models.SpectralMLP`): the authors' 5-layer network.
HIDDEN_WIDTHS = (256, 512, 512, 256)


@dataclass(frozen=True)
class Interval:
    """The range of a numeric parameter (of each item, for a sequence of numbers): ``low``
    and ``high`` (None: unbounded), each end included unless it is ``open``."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = True

    def __contains__(self, value: float) -> bool:
        above = self.low is None or (value > self.low if self.open_low else value >= self.low)
        below = self.high is None or (value < self.high if self.open_high else value <= self.high)
        return above and below

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.open_low else '>='} {self.low:g}"
        left, right = "(" if self.open_low else "[", ")" if self.open_high else "]"
        return f"in {left}{self.low:g}, {self.high:g}{right}"


#: A count: 1 or more.
COUNT = Interval(1)
#: A positive number.
POSITIVE = Interval(0, open_low=True)
#: A fraction in [0, 1).
FRACTION = Interval(0, 1)

#: Method name -> its parameters class, in the order of Table 1's rows (filled by :func:`declare`).
DECLARED: dict[str, type[SpectralParameters]] = {}


def declare(name: str, *, label: str, estimator: str, in_paper: bool = False) -> Callable[[type], type]:
    """Class decorator: make the parameters class a method called ``name``, labelled
    ``label`` in tables and figures and computed by ``estimator`` (``"module:Class"``, a
    subclass of the parameters class, imported only when the method runs); ``in_paper``:
    one of Table 1's methods."""

    def join(cls: type[SpectralParameters]) -> type[SpectralParameters]:
        if name in DECLARED:
            raise InputError(f"method name {name!r} is taken by {DECLARED[name].__name__}")
        cls.method_name, cls.label, cls.estimator, cls.in_paper = name, label, estimator, in_paper
        DECLARED[name] = cls
        return cls

    return join


def annotation_text(cls: type, name: str) -> str:
    """Parameter ``name``'s annotation as text, with the ``Literal`` aliases it names
    spelt out (``Operator`` -> ``Literal['unnormalized', ...]``): what
    :func:`basis.choices.check_value` reads."""
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is not None and name in inspect.signature(init).parameters:
            text = annotation_as_text(inspect.signature(init).parameters[name].annotation)
            namespace = vars(sys.modules[klass.__module__])
            break
    else:
        raise KeyError(name)
    return spelt_out(text, namespace)


def check_parameters(cls: type[SpectralParameters], values: Mapping[str, Any]) -> None:
    """The one check of a method's parameters (those given; None passes where it is
    allowed): each of its annotated type, finite, in its declared range, then the class's
    rules between parameters (:meth:`SpectralParameters.check_combination`). An
    InputError naming the first parameter at fault."""
    constraints = cls.parameter_constraints()
    for name, value in values.items():
        if name not in constraints:
            continue
        value = _plain(value)
        check_value(name, value, annotation_text(cls, name))
        check_range(name, value, constraints[name])
    cls.check_combination({**cls.defaults(), **{name: _plain(value) for name, value in values.items()}})


def check_range(name: str, value: Any, interval: Interval | None) -> None:
    """``value`` (each number of it, for a sequence) finite and within ``interval`` (None:
    any finite number), or an InputError naming ``name``; booleans and text pass."""
    items = value if isinstance(value, list | tuple) else [value]
    numbers = [v for v in items if isinstance(v, int | float) and not isinstance(v, bool)]
    if any(not math.isfinite(v) for v in numbers):
        raise InputError(f"{name}={value!r} is not a finite number")
    if interval is not None and any(v not in interval for v in numbers):
        raise InputError(f"{name}={_shown(value)} is out of range: expected {interval}")


def _plain(value: Any) -> Any:
    """NumPy scalars and arrays as the Python values they hold (a user's ``np.int64(5)``)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list | tuple):
        return type(value)(_plain(item) for item in value)
    return value.item() if isinstance(value, np.generic) else value


def _shown(value: Any) -> str:
    return repr(list(value)) if isinstance(value, tuple) else repr(value)


class SpectralParameters:
    """The parameters every method takes (documented on
    :class:`~basis.estimators.base.SpectralEstimator`)."""

    method_name: ClassVar[str]
    label: ClassVar[str]
    estimator: ClassVar[str]
    in_paper: ClassVar[bool]
    #: Parameter -> its range; a parameter not named has no range beyond its type.
    _parameter_constraints: ClassVar[dict[str, Interval]] = {
        "n_components": COUNT,
        "diffusion_time": POSITIVE,
        "batch_size": Interval(2),
        "n_iter": COUNT,
        # Adam's step: at 1 or more every weight moves by its whole size per step
        "lr": Interval(0, 1, open_low=True),
        "hidden": COUNT,
    }
    #: Settings with which a method's seeds cannot train together, and why: parameter ->
    #: (value, why) (:meth:`~basis.estimators.base.SpectralEstimator._why_not_together`).
    SEEDS_APART_WHEN: ClassVar[dict[str, tuple[Any, str]]] = {}
    #: Why a method's seeds never train together whatever its settings, or None.
    SEEDS_NEVER_TOGETHER: ClassVar[str | None] = None

    def __init__(
        self,
        n_components: int = 10,
        *,
        graph: GraphConfig | dict | None = None,
        operator: Operator = "normalized",
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
        self.graph = graph
        self.operator = operator
        self.drop_trivial = drop_trivial
        self.diffusion_time = diffusion_time
        self.batch_size = batch_size
        self.n_iter = n_iter
        self.lr = lr
        self.hidden = hidden
        self.device = device
        self.seed = seed
        self.callback = callback

    @classmethod
    def parameter_constraints(cls) -> dict[str, Interval | None]:
        """Every parameter of the method, its own and those it passes on (the constructors'
        signatures), with its range (None: its type says everything)."""
        names = list(dict.fromkeys(parameter.name for parameter in cls._constructor_parameters()))
        ranges: dict[str, Interval] = {}
        for klass in reversed(cls.__mro__):
            ranges.update(vars(klass).get("_parameter_constraints", {}))
        stray = sorted(set(ranges) - set(names))
        if stray:  # a range for a parameter no constructor takes: a typo in the declaration
            raise TypeError(f"{cls.__name__} declares ranges for {stray}, which are not its parameters")
        return {name: ranges.get(name) for name in names}

    @classmethod
    def parameter_names(cls) -> list[str]:
        """Every constructor parameter, the method's and those it passes on (``**common``)."""
        return sorted(cls.parameter_constraints())

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each parameter's default, as the constructors state it (a subclass's wins)."""
        return {p.name: p.default for p in cls._constructor_parameters() if p.default is not p.empty}

    @classmethod
    def _constructor_parameters(cls) -> Iterator[inspect.Parameter]:
        """The parameters of every constructor from :class:`SpectralParameters` down to
        ``cls`` (``self`` and ``**common`` left out)."""
        for klass in reversed(cls.__mro__):
            if "__init__" in vars(klass) and issubclass(klass, SpectralParameters):
                for parameter in list(inspect.signature(vars(klass)["__init__"]).parameters.values())[1:]:
                    if parameter.kind is not parameter.VAR_KEYWORD:
                        yield parameter

    @classmethod
    def check_combination(cls, values: Mapping[str, Any]) -> None:
        """Rules between parameters that need no data (a subclass adds its own)."""


@declare("diffusion_net", label="Diffusion-Net", estimator="basis.estimators.diffusion_net:DiffusionNet", in_paper=True)
class DiffusionNetParameters(SpectralParameters):
    _parameter_constraints: ClassVar = {"mu": Interval(0), "eta": Interval(0), "sample_size": COUNT}

    def __init__(
        self,
        n_components: int = 10,
        *,
        mu: float = 1e-5,
        eta: float = 1.0,
        sample_size: int | None = None,
        operator: Operator = "diffusion",
        drop_trivial: bool = True,
        **common: Any,
    ):
        super().__init__(n_components, operator=operator, drop_trivial=drop_trivial, **common)
        self.mu = mu
        self.eta = eta
        self.sample_size = sample_size


@declare("specnet1", label="SpecNet1", estimator="basis.estimators.spectralnet:SpectralNet", in_paper=True)
class SpectralNetParameters(SpectralParameters):
    def __init__(self, n_components: int = 10, *, output_activation: Literal["tanh"] | None = "tanh", **common: Any):
        super().__init__(n_components, **common)
        self.output_activation = output_activation

    @classmethod
    def check_combination(cls, values: Mapping[str, Any]) -> None:
        if values["drop_trivial"]:
            raise InputError(
                "SpectralNet learns the K smallest eigenvectors including the trivial one: use drop_trivial=False"
            )
        if values["operator"] == "diffusion":
            raise InputError(
                "SpectralNet learns L or L_N eigenvectors: operator must be 'unnormalized' or 'normalized'"
            )


@declare("specnet2", label="SpecNet2", estimator="basis.estimators.specnet2:SpecNet2", in_paper=True)
class SpecNet2Parameters(SpectralParameters):
    SEEDS_APART_WHEN: ClassVar = {
        "gradient": (
            "neighbor",
            "with gradient='neighbor' its batches (a batch and its neighbours) differ in size from seed to seed",
        )
    }

    def __init__(self, n_components: int = 10, *, gradient: Literal["local", "neighbor"] = "local", **common: Any):
        super().__init__(n_components, **common)
        self.gradient = gradient

    @classmethod
    def check_combination(cls, values: Mapping[str, Any]) -> None:
        if values["operator"] == "unnormalized":
            raise InputError(
                "SpecNet2 learns the pencil (W, D), i.e. the random walk's eigenvectors D^-1/2 U of L_N; it has no"
                " form for L = D - W: use operator 'normalized' (scored against L_N, as in the paper) or 'diffusion'"
            )


@declare(
    "specnet1_published",
    label="SpecNet1 (published code)",
    estimator="basis.estimators.spectralnet_published:PublishedSpectralNet",
)
class PublishedSpectralNetParameters(SpectralParameters):
    _parameter_constraints: ClassVar = {"n_epochs": COUNT}
    SEEDS_NEVER_TOGETHER: ClassVar = "the spectralnet package trains one network at a time"

    def __init__(
        self,
        n_components: int = 10,
        *,
        n_epochs: int = 30,
        graph_from: Literal["package", "protocol"] = "package",
        **common: Any,
    ):
        super().__init__(n_components, **common)
        self.n_epochs = n_epochs
        self.graph_from = graph_from


@declare(
    "specnet1_published_paper_graph",
    label="SpecNet1 (published code, paper's graph)",
    estimator="basis.estimators.spectralnet_published:PublishedSpectralNetOnPaperGraph",
)
class PublishedOnPaperGraphParameters(PublishedSpectralNetParameters):
    def __init__(
        self,
        n_components: int = 10,
        *,
        n_epochs: int = 30,
        graph_from: Literal["package", "protocol"] = "protocol",
        **common: Any,
    ):
        super().__init__(n_components, n_epochs=n_epochs, graph_from=graph_from, **common)


@declare("basis", label="BASiS (Ours)", estimator="basis.estimators.basis:BASiS", in_paper=True)
class BASiSParameters(SpectralParameters):
    _parameter_constraints: ClassVar = {
        "anchors_per_class": COUNT,
        "n_anchors": COUNT,
        "anchor_indices": Interval(0),
        "anchor_outliers": FRACTION,
        "ransac_iter": COUNT,
        "ransac_max_iter": COUNT,
        "ransac_confidence": Interval(0, 1, open_low=True),
        "ransac_sample_size": COUNT,
        "ransac_tolerance": POSITIVE,
        "reference_batches": COUNT,
        "average_tail": FRACTION,
    }

    def __init__(
        self,
        n_components: int = 10,
        *,
        anchors: Literal["stratified", "random"] = "stratified",
        anchors_per_class: int = 25,
        n_anchors: int = 250,
        anchor_indices: list[int] | None = None,
        alignment: Alignment = "ransac",
        anchor_outliers: float = 0.0,
        ransac_iter: int = 100,
        ransac_max_iter: int = 5000,
        ransac_confidence: float = 0.99,
        ransac_sample_size: int | None = None,
        ransac_tolerance: float = 0.25,
        ransac_tolerance_mode: ToleranceMode = "relative",
        ransac_sampling: Literal["stratified", "uniform"] = "stratified",
        alignment_map: AlignmentMap = "affine",
        reference: Literal["first_batch", "mean"] = "first_batch",
        reference_batches: int = 10,
        eigensolver: Eigensolver = "auto",
        cuda_graphs: bool = False,
        average_tail: float = 0.0,
        **common: Any,
    ):
        super().__init__(n_components, **common)
        self.anchors = anchors
        self.anchors_per_class = anchors_per_class
        self.n_anchors = n_anchors
        self.anchor_indices = anchor_indices
        self.alignment = alignment
        self.anchor_outliers = anchor_outliers
        self.ransac_iter = ransac_iter
        self.ransac_max_iter = ransac_max_iter
        self.ransac_confidence = ransac_confidence
        self.ransac_sample_size = ransac_sample_size
        self.ransac_tolerance = ransac_tolerance
        self.ransac_tolerance_mode = ransac_tolerance_mode
        self.ransac_sampling = ransac_sampling
        self.alignment_map = alignment_map
        self.reference = reference
        self.reference_batches = reference_batches
        self.eigensolver = eigensolver
        self.cuda_graphs = cuda_graphs
        self.average_tail = average_tail

    @classmethod
    def check_combination(cls, values: Mapping[str, Any]) -> None:
        if values["ransac_iter"] > values["ransac_max_iter"]:
            raise InputError(
                f"ransac_iter={values['ransac_iter']} exceeds ransac_max_iter={values['ransac_max_iter']}:"
                " the first round cannot be larger than the cap"
            )
        if values["reference"] == "mean" and (values["alignment"] == "none" or values["reference_batches"] < 2):
            raise InputError(
                "reference='mean' averages aligned batches: it needs an alignment other than 'none' and"
                f" reference_batches >= 2, got alignment={values['alignment']!r},"
                f" reference_batches={values['reference_batches']}"
            )


#: Table 1's methods, in its row order.
PAPER_METHODS = tuple(name for name, declared in DECLARED.items() if declared.in_paper)

#: The entry-point group through which an installed package declares methods of its own:
#: each entry names a torch-free module whose parameters classes call :func:`declare`.
PLUGIN_GROUP = "basis.methods"


def _declare_plugins() -> None:
    """Import the declarations of every installed package's methods (:data:`PLUGIN_GROUP`),
    so that the workflow and the command line know them by name as the package's own."""
    from importlib.metadata import entry_points

    for entry in entry_points(group=PLUGIN_GROUP):
        try:
            entry.load()
        except Exception as err:  # a broken plugin is named, not a traceback of basis
            where = f"{entry.value} ({PLUGIN_GROUP} entry point)"
            raise InputError(f"the methods of {where} failed to load: {err}") from err


_declare_plugins()

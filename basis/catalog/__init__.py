"""What the package offers, by name, without importing it: data sets, methods and their
parameters, studies and their settings.

The workflow checks a config against these at parse time, and a dry run must not pay
for torch. So the methods and studies are read from the source: a method is a class
decorated with ``@register("name")`` in ``basis/estimators/``, a study a module of
``basis/studies/`` with a ``STUDY = Study(...)`` declaration, and their parameters are
their signatures. Nothing
is listed twice: the data sets' names are stated here and read by the modules that load
them; ``tests/test_settings.py`` checks the rest against the imported objects.
"""

from __future__ import annotations

import ast
import hashlib
import math
import os
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

from basis.catalog.annotations import check_value
from basis.catalog.studies import Figure, Study
from basis.errors import InputError

PACKAGE = Path(__file__).resolve().parent.parent

#: How a whole set's sparse graph is solved: Lanczos on the host, or a Chebyshev-filtered
#: block iteration on the graph's device (:func:`basis.spectral.sparse_spectral_embedding`).
SPARSE_SOLVERS = ("arpack", "chebyshev")
#: What ``bench step`` trains on: the stand-in (clusters that are the graph's connected
#: components), Siamese-like features (clusters that touch: one component, ten small
#: eigenvalues, as trained features give) and raw scikit-learn digits (64-d pixels).
STEP_DATA = ("clusters", "touching", "digits")

#: The toy sets and their number of classes.
TOY_CLASSES = {"three_moons": 3, "two_moons": 2, "circles": 2, "blobs": 4, "spirals": 2}
TOY_SETS = tuple(TOY_CLASSES)
IMAGE_SETS = ("mnist", "fashion_mnist", "svhn", "cifar10")
#: Each image set's official splits, (training images, test images, (channels, height, width)).
IMAGE_SHAPES = {
    "mnist": (60_000, 10_000, (1, 28, 28)),
    "fashion_mnist": (60_000, 10_000, (1, 28, 28)),
    "svhn": (73_257, 26_032, (3, 32, 32)),
    "cifar10": (50_000, 10_000, (3, 32, 32)),
}
#: Image sets whose runs embed Siamese features rather than raw pixels.
FEATURE_SETS = (*IMAGE_SETS, "digits")
DATASETS = (*TOY_SETS, "digits", "bunny", *IMAGE_SETS)
#: BASiS's alignments of one batch onto the reference (Table 2's ablation compares them).
ALIGNMENTS = ("ransac", "lstsq", "none")
#: How tables and figures name each method and image set.
METHOD_LABELS = {
    "diffusion_net": "Diffusion-Net",
    "specnet1": "SpecNet1",
    "specnet2": "SpecNet2",
    "specnet1_published": "SpecNet1 (published code)",
    "specnet1_published_paper_graph": "SpecNet1 (published code, paper's graph)",
    "basis": "BASiS (Ours)",
}
DATASET_LABELS = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST", "svhn": "SVHN", "cifar10": "CIFAR-10"}
#: The share of a generated set (toy sets, digits) held out as its test split.
TEST_FRACTION = 0.2
#: Nodes per batch of the toy protocol (Fig. 1), before its anchors are added.
TOY_BATCH_SIZE = 256

#: Parameters every method takes that the run command sets itself, not a config.
RUN_PARAMETERS = ("callback", "device", "seed")
#: Options a study takes from the command line's common flags, not from its settings.
STUDY_RUN_OPTIONS = ("seed", "data_seed", "device", "data_root", "data_source", "callback")


def _arguments(function: ast.FunctionDef) -> list[ast.arg]:
    arguments = function.args
    return [a for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs) if a.arg != "self"]


def _parameters(function: ast.FunctionDef) -> list[str]:
    return [a.arg for a in _arguments(function)]


def _annotations(function: ast.FunctionDef) -> dict[str, str]:
    return {a.arg: ast.unparse(a.annotation) if a.annotation is not None else "Any" for a in _arguments(function)}


def _init(tree: ast.Module, class_name: str) -> ast.FunctionDef:
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")


@cache
def _methods() -> dict[str, tuple[str, ...]]:
    return {name: tuple(sorted(annotations)) for name, (annotations, _, _) in _method_sources().items()}


@cache
def _method_sources() -> dict[str, tuple[dict[str, str], Path, str]]:
    """Method name -> (its parameters' annotations, the module that defines it, its class name)."""
    base = _annotations(_init(ast.parse((PACKAGE / "estimators" / "base.py").read_text()), "SpectralEstimator"))
    methods = {}
    for path in sorted((PACKAGE / "estimators").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "register":
                    init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
                    passes_on = init.args.kwarg is not None  # **common goes to SpectralEstimator
                    annotations = {**(base if passes_on else {}), **_annotations(init)}
                    methods[decorator.args[0].value] = (annotations, path, node.name)
    return methods


#: The literal class attributes, read from the source, in which a method declares what keeps
#: its seeds apart (:meth:`basis.estimators.base.SpectralEstimator._why_not_together`).
SEEDS_APART_DECLARATION = "SEEDS_APART_WHEN"
SEEDS_NEVER_TOGETHER_DECLARATION = "SEEDS_NEVER_TOGETHER"


def _class_declaration(method: str, attribute: str, default: Any) -> Any:
    """A literal class attribute of ``method``'s class or of a base class in its module."""
    method_parameters(method)
    _, path, class_name = _method_sources()[method]
    classes = {n.name: n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)}
    cls = classes[class_name]
    while cls is not None:
        for node in cls.body:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
            if any(isinstance(t, ast.Name) and t.id == attribute for t in targets):
                return ast.literal_eval(node.value)
        cls = next((classes[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in classes), None)
    return default


@cache
def seeds_apart_when(method: str) -> dict[str, tuple[Any, str]]:
    """The settings with which ``method`` cannot train its seeds together: parameter -> (value, why)."""
    return _class_declaration(method, SEEDS_APART_DECLARATION, {})


@cache
def seeds_never_together(method: str) -> str | None:
    """Why ``method``'s seeds never train together whatever its settings, or None."""
    return _class_declaration(method, SEEDS_NEVER_TOGETHER_DECLARATION, None)


def method_names() -> list[str]:
    """Every registered method."""
    return sorted(_methods())


def method_parameters(method: str) -> tuple[str, ...]:
    """Constructor parameters of a method, those it passes on to the base class included."""
    if method not in _methods():
        raise InputError(f"unknown method {method!r}; valid: {method_names()}")
    return _methods()[method]


def method_annotations(method: str) -> dict[str, str]:
    """Each constructor parameter's type annotation, as written in the source."""
    method_parameters(method)
    return dict(_method_sources()[method][0])


def _class_init(class_name: str) -> ast.FunctionDef:
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.ClassDef) and n.name == class_name for n in tree.body):
            return _init(tree, class_name)
    raise LookupError(f"no class {class_name} in {PACKAGE}")


def _study_settings(function: ast.FunctionDef) -> dict[str, str]:
    """A study's keyword options and their annotations; those of a ``**settings``
    catch-all are the options of the class the study passes them to (``feature_change``
    -> ``FeatureChangeTrainer``)."""
    settings = _annotations(function)
    if function.args.kwarg is not None:
        catch_all = function.args.kwarg.arg
        for call in ast.walk(function):
            if isinstance(call, ast.Call) and any(
                k.arg is None and getattr(k.value, "id", None) == catch_all for k in call.keywords
            ):
                passed_on = _annotations(_class_init(call.func.id))
                settings |= {n: a for n, a in passed_on.items() if n not in (*RUN_PARAMETERS, *settings)}
    return settings


def _declared(node: ast.expr):
    """A declaration read from the source: ``Study(...)`` and ``Figure(...)`` calls become
    the dataclasses, tuples and lists tuples, anything else a literal."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Study", "Figure"):
        cls = Study if node.func.id == "Study" else Figure
        return cls(**{keyword.arg: _declared(keyword.value) for keyword in node.keywords})
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_declared(item) for item in node.elts)
    return ast.literal_eval(node)


#: Modules of ``basis/studies/`` that are not studies themselves: drawing and saving figures,
#: the training protocols of the studies beyond the paper, and the scale study's figure.
STUDY_HELPERS = ("__init__", "figures", "protocols", "scale_figure")


@cache
def _study_sources() -> dict[str, tuple[Study, ast.Module, Path]]:
    """Study name -> (its declaration, the module's syntax tree, the module's path)."""
    studies = {}
    for path in sorted((PACKAGE / "studies").glob("*.py")):
        if path.stem in STUDY_HELPERS:
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["STUDY"]:
                studies[path.stem] = (_declared(node.value), tree, path)
    return studies


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _literal_aliases(tree: ast.Module) -> dict[str, str]:
    """A module's ``Name = Literal[...]`` aliases: name -> the ``Literal[...]`` they stand for."""
    return {
        node.targets[0].id: ast.unparse(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Subscript)
        and getattr(node.value.value, "id", None) == "Literal"
    }


@cache
def _studies() -> dict[str, dict[str, str]]:
    studies = {}
    for name, (declaration, tree, _) in _study_sources().items():
        aliases = _literal_aliases(tree)
        settings = _study_settings(_function(tree, declaration.function))
        for alias, literal in aliases.items():  # the values a setting may take, spelt out
            settings = {key: re.sub(rf"\b{alias}\b", literal, text) for key, text in settings.items()}
        studies[name] = settings
    return studies


def study_names() -> list[str]:
    """Every study of ``basis/studies/``, in the order of their first figures (the paper's)."""
    declarations = {name: declaration for name, (declaration, _, _) in _study_sources().items()}
    return sorted(declarations, key=lambda n: ([f.name for f in declarations[n].figures] or ["~"], n))


def study_declaration(name: str) -> Study:
    """What study ``name`` declares: its function, runs, figures, claims and GPU use."""
    study_parameters(name)
    return _study_sources()[name][0]


def study_parameters(name: str, include_common: bool = False) -> list[str]:
    """Settings a study takes from its config section; with ``include_common``, also
    those the command line sets (seed, data seed, device, data root, a data set of one's
    own, callback)."""
    if name not in _studies():
        raise InputError(f"unknown study {name!r}; valid: {study_names()}")
    return [p for p in _studies()[name] if include_common or p not in STUDY_RUN_OPTIONS]


def study_defaults(name: str) -> dict[str, Any]:
    """The default of each study setting that the source states as a literal."""
    declaration = study_declaration(name)
    arguments = _function(_study_sources()[name][1], declaration.function).args
    pairs = [*zip(arguments.args[::-1], arguments.defaults[::-1]), *zip(arguments.kwonlyargs, arguments.kw_defaults)]
    defaults = {}
    for argument, default in pairs:
        try:
            defaults[argument.arg] = ast.literal_eval(default)
        except ValueError:  # no default (None), or one computed at call time
            continue
    return defaults


def study_annotations(name: str) -> dict[str, str]:
    """Each study setting's type annotation, as written in the source."""
    study_parameters(name)
    return dict(_studies()[name])


def study_runs(name: str, section: dict) -> dict[str, dict]:
    """The jobs of study ``name`` from its config section: run name -> settings (see
    :class:`basis.studies.Study`; a study of one run has the run name ``""``). Raises an
    InputError naming the section's problem: a missing or unexpected key, or a setting
    the study does not take or of the wrong type."""
    runs = study_declaration(name).runs
    where = f"experiments.{name}"
    if not isinstance(section, dict):
        raise InputError(f"{where} must be a mapping, got {section!r}")
    expected = {"settings"} | ({runs} if isinstance(runs, str) else set(runs or ()))
    unexpected = sorted(set(section) - expected)
    if unexpected:
        raise InputError(f"{where} has unexpected keys {unexpected}; valid: {sorted(expected)}")
    shared = section.get("settings") or {}
    if runs is None:
        jobs = {"": dict(shared)}
    elif runs == "datasets":
        if not section.get("datasets"):
            raise InputError(f"{where}.datasets must list at least one data set")
        jobs = {dataset: {**shared, "dataset": dataset} for dataset in section["datasets"]}
    else:
        missing = [run for run in runs if run not in section]
        if missing:
            raise InputError(f"{where} needs a section per run; missing {missing}")
        jobs = {run: {**shared, **(section[run] or {})} for run in runs}
    valid = study_parameters(name)
    for run, settings in jobs.items():
        unknown = sorted(set(settings) - set(valid))
        if unknown:
            raise InputError(f"{where}: {name} takes no setting {unknown[0]!r}; valid: {sorted(valid)}")
        try:
            check_study_settings(name, settings)
        except InputError as err:
            raise InputError(f"{where}{f' ({run})' if run else ''}: {err}") from None
    return jobs


#: The class labels of every data set with classes to pick (the feature sets: ten each) and
#: of the toy sets.
CLASS_LABELS = {name: tuple(range(10)) for name in FEATURE_SETS} | {
    name: tuple(range(n)) for name, n in TOY_CLASSES.items()
}
#: Anchors per class that the toy protocol adds to every batch (:func:`basis.data.toy_sets.three_moons_anchors`).
TOY_ANCHORS_PER_CLASS = 3


def check_study_settings(name: str, settings: dict[str, Any]) -> None:
    """Study ``name``'s settings one by one (:func:`check_study_setting`), and ``classes``
    against the labels of its ``dataset`` where those are known without loading it."""
    for key, value in settings.items():
        check_study_setting(name, key, value)
    classes, labels = settings.get("classes"), CLASS_LABELS.get(settings.get("dataset"))
    if classes and labels is not None and not set(classes) <= set(labels):
        unknown = sorted(set(classes) - set(labels))
        raise InputError(f"classes {unknown} are not labels of {settings['dataset']} ({labels[0]}-{labels[-1]})")
    values = study_defaults(name) | settings
    if values.get("n_points"):
        _check_points(values)
    dataset = values.get("dataset")
    if "n_samples" in values and dataset in TOY_SETS:  # the toy protocol: a split, batches with anchors
        batch = values.get("batch_size", TOY_BATCH_SIZE) + TOY_ANCHORS_PER_CLASS * len(CLASS_LABELS[dataset])
        if _toy_training_size(dataset, values["n_samples"]) < batch:
            least = next(n for n in range(batch, 2 * batch + 10) if _toy_training_size(dataset, n) >= batch)
            raise InputError(
                f"n_samples={values['n_samples']} is too small for {dataset}: its training split must hold a batch"
                f" of {batch} nodes (batch_size and the anchors); expected n_samples >= {least}"
            )


def _check_points(values: dict[str, Any]) -> None:
    """The scale study's grid of n against what it needs: more points than Nyström's
    landmarks, and no more than an image set has."""
    points, landmarks, dataset = values["n_points"], values.get("landmarks"), values.get("dataset")
    points = list(points) if isinstance(points, (list, tuple)) else [points]  # a study may take one n
    if landmarks and "nystrom" in (values.get("methods") or ["nystrom"]) and min(points) <= max(landmarks):
        raise InputError(
            f"every n of n_points must exceed the largest of landmarks ({max(landmarks)}), got {min(points)}"
        )
    if dataset in IMAGE_SHAPES and max(points) + values.get("n_test", 0) > sum(IMAGE_SHAPES[dataset][:2]):
        available = sum(IMAGE_SHAPES[dataset][:2])
        raise InputError(f"n_points up to {max(points):,} and n_test need more than {dataset}'s {available:,} points")
    if dataset is None:  # synthetic points: refuse what this machine cannot even hold
        need = (max(points) + values.get("n_test", 0)) * values.get("dim", 1) * 4
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if need > have:
            raise InputError(
                f"n_points up to {max(points):,} needs {need / 2**30:,.1f} GiB for its points alone;"
                f" this machine has {have / 2**30:,.1f} GiB"
            )


def _toy_training_size(dataset: str, n_samples: int) -> int:
    """Nodes in the training split of toy set ``dataset`` generated with ``n_samples``."""
    generated = 3 * (n_samples // 3) if dataset == "three_moons" else n_samples  # n // 3 per moon
    return generated - math.ceil(TEST_FRACTION * generated)


#: Endings of the study settings that count or size something (besides ``n_*``).
COUNT_SUFFIXES = ("_size", "_sizes", "_every", "_iter", "_dim", "_per_class", "_per_cluster", "_per_step", "resolution")


def check_study_setting(name: str, key: str, value: Any) -> None:
    """One setting of study ``name``: of the type its parameter is annotated with, finite
    where it is a number, and at least 1 where it is a count or a size (``n_*``,
    ``*_size``, ``*_iter``, ...: :data:`COUNT_SUFFIXES`)."""
    check_value(key, value, study_annotations(name)[key])
    values = value if isinstance(value, (list, tuple)) else [value]
    if any(isinstance(v, float) and not math.isfinite(v) for v in values):
        raise InputError(f"{key}={value!r} is not a finite number")
    counts = key.startswith("n_") or key.endswith(COUNT_SUFFIXES)
    if counts and any(isinstance(v, int) and not isinstance(v, bool) and v < 1 for v in values):
        raise InputError(f"{key}={value!r} is out of range: expected a count >= 1")
    if isinstance(value, (list, tuple)) and not value:
        raise InputError(f"{key}=[] is empty: expected at least one value")
    # a limit in seconds of 0 or less would stop every point at once and leave nothing measured
    if key.endswith("_s") and any(isinstance(v, int | float) and not isinstance(v, bool) and v <= 0 for v in values):
        raise InputError(f"{key}={value!r} is out of range: expected seconds > 0")


def study_folder(name: str, run: str = "") -> str:
    """Where a study run writes, relative to the results folder."""
    return f"studies/{name}/{run}" if run else f"studies/{name}"


# -- code versions: what a job's result depends on, for the workflow's rerun triggers ----------
def source_hash(paths: list[Path], texts: list[str] = ()) -> str:
    """Short hash of the given source files (names and contents) and source texts."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes())
    for text in texts:
        digest.update(b"\0" + text.encode())
    return digest.hexdigest()[:12]


#: Modules that only draw and tabulate results; computing jobs do not depend on them.
PRESENTATION = ("studies/figures.py", "paper.py", "verdicts.py")


def _study_parts(name: str) -> tuple[str, str]:
    """A study module's code split in two: what its jobs compute with, and what only
    presents the results (its declaration, figure drawing and claims). Comments and
    formatting are left out, so that only a change of the code reruns jobs."""
    declaration, tree, _ = _study_sources()[name]
    presenting = {figure.draw for figure in declaration.figures} | {declaration.claims}
    computing, presentation = [], []
    for node in tree.body:
        shown = isinstance(node, ast.FunctionDef) and node.name in presenting
        shown |= isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["STUDY"]
        (presentation if shown else computing).append(ast.unparse(node))
    return "\n".join(computing), "\n".join(presentation)


def library_sources() -> list[Path]:
    """Every module a computing job may use: the package without the methods' own modules,
    the study modules and the presentation modules."""
    excluded = {path for paths in _method_files().values() for path in paths}
    excluded |= {PACKAGE / name for name in PRESENTATION}
    excluded |= {path for _, _, path in _study_sources().values()}
    return [path for path in PACKAGE.rglob("*.py") if path not in excluded]


def code_version(
    methods: tuple[str, ...] | list[str] = (), *, study: str | None = None, presentation: bool = False
) -> str:
    """Version of the code a job runs, for the workflow's rerun trigger: the shared library
    plus the modules of ``methods`` (an edit to one method's module changes the version of
    that method's jobs only) or the computing part of ``study``'s module with the modules
    of the methods it trains (see :func:`_methods_used`); or, with
    ``presentation``, the figure and table code (of every study included)."""
    if presentation:
        shown = [_study_parts(name)[1] for name in sorted(_study_sources())]
        return source_hash([PACKAGE / name for name in PRESENTATION], shown)
    for method in methods:
        method_parameters(method)  # a clear error for an unknown name
    computing = []
    if study is not None:
        study_parameters(study)
        computing.append(_study_parts(study)[0])
        methods = _methods_used(_study_sources()[study][2])
    return source_hash(library_sources() + [path for m in methods for path in _method_files()[m]], computing)


@cache
def _method_files() -> dict[str, list[Path]]:
    """Method name -> its own source files: the module that defines it, and the modules of
    ``basis/estimators/`` that no other method's module imports (BASiS's batch targets)."""
    own = {name: path for name, (_, path, _) in _method_sources().items()}
    imported = {
        name: {
            _module_path(node.module)
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("basis.estimators.")
        }
        for name, path in own.items()
    }
    imports = Counter(path for paths in imported.values() for path in paths)
    alone = {
        name: {path for path in paths if imports[path] == 1} - set(own.values()) for name, paths in imported.items()
    }
    return {name: [own[name], *sorted(alone[name])] for name in own}


def _methods_used(path: Path) -> list[str]:
    """The methods a module trains, directly or through the library modules it imports:
    the estimator classes imported from ``basis.estimators`` along its imports within the
    package (e.g. the feature-change study -> ``basis.changing_features`` -> BASiS)."""
    by_class = {class_name: name for name, (_, _, class_name) in _method_sources().items()}
    used, seen, queue = set(), set(), [path]
    while queue:
        current = queue.pop()
        if current in seen or not current.is_file():
            continue
        seen.add(current)
        for node in ast.walk(ast.parse(current.read_text())):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("basis"):
                continue
            if node.module == "basis.estimators":
                used |= {by_class[a.name] for a in node.names if a.name in by_class}
            elif not node.module.startswith("basis.estimators"):
                # the module, and the names it imports that are modules (from basis import metrics)
                queue += [_module_path(node.module)] + [_module_path(f"{node.module}.{a.name}") for a in node.names]
    return sorted(used)


def _module_path(dotted: str) -> Path:
    """The source file of module ``basis.<...>``: a module's file or a package's
    ``__init__.py`` (a path that does not exist when ``dotted`` names no module)."""
    path = PACKAGE.joinpath(*dotted.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")

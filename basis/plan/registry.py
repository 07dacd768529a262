"""The studies as the workflow plans them: each module of ``basis/studies/`` declares itself
(``STUDY = Study(...)`` and its study function's keyword settings, their types, choices and
defaults), and this registry reads the declarations by importing the modules, which import
at their top only what a declaration needs (no torch, no matplotlib): a dry run stays light.
"""

from __future__ import annotations

import inspect
import math
import os
import pkgutil
from functools import cache
from importlib import import_module
from types import ModuleType
from typing import Any

from basis.catalog import (
    FEATURE_SETS,
    IMAGE_SHAPES,
    RUN_PARAMETERS,
    TEST_FRACTION,
    TOY_BATCH_SIZE,
    TOY_CLASSES,
    TOY_SETS,
)
from basis.choices import annotation_as_text, check_value, spelt_out
from basis.errors import InputError
from basis.studies import Study, study_module

#: Modules of ``basis/studies/`` that are not studies themselves: drawing and saving figures,
#: the training protocols of the studies beyond the paper, and the scale study's figure.
STUDY_HELPERS = ("figures", "protocols", "scale_figure")
#: Options a study takes from the command line's common flags, not from its settings.
STUDY_RUN_OPTIONS = ("seed", "data_seed", "device", "data_root", "data_source", "callback")


@cache
def _modules() -> dict[str, ModuleType]:
    """Study name -> its module, for every module of ``basis/studies/`` but the helpers."""
    import basis.studies

    names = [m.name for m in pkgutil.iter_modules(basis.studies.__path__) if m.name not in STUDY_HELPERS]
    return {name: study_module(name) for name in sorted(names)}


def _parameters(function: Any) -> dict[str, inspect.Parameter]:
    return {
        name: parameter
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)
    }


@cache
def _settings(name: str) -> dict[str, tuple[inspect.Parameter, ModuleType]]:
    """A study's keyword settings, each with the module that declares it; those of a
    ``**settings`` catch-all are the parameters of the class its declaration passes them
    to (``settings_to``)."""
    module = _modules()[name]
    settings = {n: (p, module) for n, p in _parameters(getattr(module, module.STUDY.function)).items()}
    if module.STUDY.settings_to is not None:
        owner, class_name = module.STUDY.settings_to.split(":")
        owner_module = import_module(owner)
        passed_on = _parameters(getattr(owner_module, class_name))
        settings |= {n: (p, owner_module) for n, p in passed_on.items() if n not in (*RUN_PARAMETERS, *settings)}
    return settings


def _annotation(name: str, setting: str) -> str:
    """The annotation of a study setting as text, its ``Literal`` aliases spelt out."""
    parameter, module = _settings(name)[setting]
    return spelt_out(annotation_as_text(parameter.annotation), vars(module))


def study_names() -> list[str]:
    """Every study of ``basis/studies/``, in the order of their first figures (the paper's)."""
    declarations = {name: module.STUDY for name, module in _modules().items()}
    return sorted(declarations, key=lambda n: ([f.name for f in declarations[n].figures] or ["~"], n))


def study_declaration(name: str) -> Study:
    """What study ``name`` declares: its function, runs, figures, claims and GPU use."""
    study_parameters(name)
    return _modules()[name].STUDY


def study_parameters(name: str, include_common: bool = False) -> list[str]:
    """Settings a study takes from its config section; with ``include_common``, also
    those the command line sets (seed, data seed, device, data root, a data set of one's
    own, callback)."""
    if name not in _modules():
        raise InputError(f"unknown study {name!r}; valid: {study_names()}")
    return [p for p in _settings(name) if include_common or p not in STUDY_RUN_OPTIONS]


def study_defaults(name: str) -> dict[str, Any]:
    """The default of each study setting that has one."""
    study_parameters(name)
    return {key: p.default for key, (p, _) in _settings(name).items() if p.default is not inspect.Parameter.empty}


def study_annotations(name: str) -> dict[str, str]:
    """Each study setting's type annotation, as text with its choices spelt out."""
    study_parameters(name)
    return {setting: _annotation(name, setting) for setting in _settings(name)}


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

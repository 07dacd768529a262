"""The workflow's config: the checks its JSON schema cannot state, and the settings each
job is given, torch-free (the workflow reads them at parse time, a dry run included).

``workflow/rules/common.smk`` validates the config against
``workflow/schemas/config.schema.yaml`` and then calls :func:`check_workflow_config`;
the rules build their commands from :func:`method_assignments` and
:func:`protocol_assignments`, so that the checks and the jobs read the same settings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from basis.catalog import DATASETS, TOY_SETS
from basis.catalog.data_sources import DataSource, data_sources
from basis.catalog.settings import resolve_settings, why_seeds_apart
from basis.choices import ALIGNMENTS
from basis.errors import InputError
from basis.plan.registry import study_names, study_runs
from basis.plan.sizes import check_sizes


def assignments(settings: Mapping[str, Any]) -> list[str]:
    """``key=value`` assignments with JSON values (which the command line reads as YAML):
    the one route by which settings reach a job (see :mod:`basis.catalog.settings`)."""
    return [f"{key}={json.dumps(value)}" for key, value in settings.items()]


def protocol_assignments(config: Mapping[str, Any], keys: Iterable[str] | None = None) -> list[str]:
    """Assignments of the shared protocol, or of its ``keys`` only (a reference embedding
    depends on the graph and the operator, not on the training budget)."""
    keys = None if keys is None else set(keys)
    return assignments({k: v for k, v in config["protocol"].items() if keys is None or k in keys})


def method_assignments(config: Mapping[str, Any], method: str) -> list[str]:
    """Assignments for one method: the shared protocol, then the method's own settings."""
    return protocol_assignments(config) + assignments(config["methods"][method])


def ablation_variants(outliers: bool) -> list[str]:
    """The ablation's variants: each alignment on clean anchors and, with ``outliers``
    (the config's ``experiments.ablation.outlier_fraction`` set), with that fraction of
    every batch's anchor slots holding another class's node (``<alignment>-outliers``)."""
    suffixes = ["", *(["-outliers"] if outliers else [])]
    return [f"{alignment}{suffix}" for suffix in suffixes for alignment in ALIGNMENTS]


def ablation_protocol(config: Mapping[str, Any], dataset: str) -> list[str]:
    """The assignments an ablation run starts from: BASiS's Table 1 settings, except on a
    toy set (whose own defaults hold); the ablation's settings follow and win."""
    return [] if dataset in TOY_SETS else method_assignments(config, "basis")


def workflow_study_runs(config: Mapping[str, Any]) -> dict[str, dict[str, dict]]:
    """Each study's runs (:func:`basis.plan.registry.study_runs`) from the config's
    ``experiments``; an InputError names a missing section, a bad setting or an unknown
    data set."""
    sections = config["experiments"]
    missing = sorted(set(study_names()) - set(sections))
    if missing:
        raise InputError(
            f"config: experiments has no section for the studies {missing} (basis/studies/<name>.py);"
            " add one (an empty mapping runs a study with its defaults)"
        )
    try:
        runs = {name: study_runs(name, sections[name] or {}) for name in study_names()}
    except InputError as err:
        raise InputError(f"config: {err}") from None
    known = {*DATASETS, *(config.get("data_sources") or {})}  # the catalog's, and one's own
    unknown = sorted(
        {s["dataset"] for jobs in runs.values() for s in jobs.values() if s.get("dataset", DATASETS[0]) not in known}
    )
    if unknown:
        raise InputError(f"config: experiments: unknown data sets {unknown}; valid: {sorted(known)}")
    return runs


def _check_resolves(method: str, where: str, **how) -> dict[str, Any]:
    try:
        return resolve_settings(method, **how)
    except ValueError as err:
        raise InputError(f"config: {where}: {err}") from None


def _check_fits_batch(where: str, n_neighbors: list[int], batch_size: int) -> None:
    """A batch's graph needs more nodes than neighbours (the kNN sweep's k's included)."""
    too_large = [k for k in n_neighbors if k >= batch_size]
    if too_large:
        given = too_large[0] if len(n_neighbors) == 1 else too_large
        raise InputError(f"config: {where} ({given}) must be smaller than protocol.batch_size ({batch_size})")


def check_dataset_names(config: Mapping[str, Any], runs: dict[str, dict[str, dict]]) -> dict[str, DataSource]:
    """Each data set the config runs (``datasets``, the kNN sweep's, the ablation's) is the
    catalog's or declared in ``data_sources`` (each declaration checked), and a study's
    (``runs``) of one's own is labelled; returns the declarations."""
    sources = data_sources(config)
    studies = config["experiments"]
    named = {
        "datasets": config["datasets"],
        "experiments.knn.dataset": [studies["knn"]["dataset"]],
        "experiments.ablation.datasets": studies["ablation"]["datasets"],
    }
    for name, study in runs.items():
        own = {run["dataset"] for run in study.values() if run.get("dataset") in sources}
        unlabelled = sorted(dataset for dataset in own if not sources[dataset].has_labels())
        if unlabelled:
            raise InputError(
                f"config: experiments.{name}: data set {unlabelled[0]} has no labels; the study draws anchors per class"
            )
    for where, names in named.items():
        unknown = [name for name in names if name not in DATASETS and name not in sources]
        if unknown:
            declared = f" (declared: {sorted(sources)})" if sources else ""
            raise InputError(
                f"config: {where}: {unknown[0]!r} is neither a catalog data set nor declared in data_sources{declared}"
            )
    return sources


def check_workflow_config(config: Mapping[str, Any]) -> dict[str, dict[str, dict]]:
    """What a schema-valid config must also be, before any job: every study section valid
    (:func:`workflow_study_runs`), every data set named the catalog's or declared
    (:func:`check_dataset_names`), every method's settings resolvable, the graph smaller
    than a batch (the protocol's and every k of the kNN sweep), ``seeds_together: true``
    only where the seeds share a job and every method can train them together, the kNN
    sweep's methods among the config's, the ablation's and the variants study's settings
    resolvable on top of the protocol, and every setting that fits the size of a data set
    of one's own it runs on (:func:`~basis.plan.sizes.check_sizes`, all misfits at once).
    An InputError names the first problem; otherwise returns each study's runs, as checked."""
    studies = config["experiments"]
    runs = workflow_study_runs(config)
    sources = check_dataset_names(config, runs)
    protocol = config["protocol"]
    _check_fits_batch("protocol.graph.n_neighbors", [protocol["graph"]["n_neighbors"]], protocol["batch_size"])
    _check_fits_batch("experiments.knn.n_neighbors", studies["knn"]["n_neighbors"], protocol["batch_size"])
    resolved = {
        method: _check_resolves(method, f"methods.{method} or protocol", assignments=method_assignments(config, method))
        for method in config["methods"]
    }
    if config["seeds_together"] is True:
        if not config.get("seeds_in_one_job", False):
            raise InputError(
                "config: seeds_together: true needs seeds_in_one_job: true (a job of one seed trains nothing together)"
            )
        for method, settings in resolved.items():
            reason = why_seeds_apart(method, settings)
            if reason:
                raise InputError(
                    f"config: seeds_together: true, but {method} cannot train its seeds together: {reason}"
                )
    unknown_methods = sorted(set(studies["knn"]["methods"]) - set(config["methods"]))
    if unknown_methods:
        raise InputError(
            f"config: experiments.knn.methods {unknown_methods} are not in methods {sorted(config['methods'])}"
        )
    ablation = studies["ablation"]
    for dataset in ablation["datasets"]:
        own = assignments({**ablation.get("settings", {}), "alignment": "ransac"})
        where = "experiments.ablation.settings"
        _check_resolves("basis", where, assignments=[*ablation_protocol(config, dataset), *own], dataset=dataset)
    variants = studies.get("variants", {}).get("settings", {})
    if variants.get("protocol") is not None:
        if not isinstance(variants["protocol"], dict):
            raise InputError("config: experiments.variants.settings.protocol must be a mapping of protocol keys")
        _check_resolves("basis", "experiments.variants.settings.protocol", overrides=variants["protocol"])
    check_sizes(config, runs, sources)  # every misfit with one's own data at once
    return runs

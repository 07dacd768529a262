"""Settings, typed and checked once, without importing torch.

:class:`~basis.graph.GraphConfig` (how a kNN graph is built) and :data:`PROTOCOL` (Table 1's
training and evaluation protocol) state every default once; :func:`resolve_settings`
builds a run's settings from them, the toy-set overrides and the ``key=value``
assignments of the command line, naming any unknown key with the valid ones.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from basis.catalog import (
    RUN_PARAMETERS,
    TOY_SETS,
    method_annotations,
    method_parameters,
    seeds_apart_when,
    seeds_never_together,
)
from basis.choices import check_value
from basis.errors import InputError
from basis.estimators.parameters import COUNT, DECLARED, POSITIVE, Interval, check_parameters, check_range
from basis.graph.config import GraphConfig, check_choice

#: Protocol keys that are not an estimator's parameters (how a run is evaluated, and the K
#: that the estimator gets as ``n_components`` once the data's classes are known).
EVALUATION_KEYS = ("eval", "evaluation", "n_components")
#: The evaluation protocols of ``evaluation`` (see :mod:`basis.experiment`).
EVALUATIONS = ("ours", "authors")


#: Table 1's protocol (paper Sec. 5.2 and the authors' code); every key can be overridden.
PROTOCOL: dict[str, Any] = {
    "n_components": None,  # None: the number of classes
    "operator": "normalized",
    "drop_trivial": False,
    "batch_size": 512,
    "n_iter": 1000,
    "lr": 1e-4,
    "diffusion_time": 1.0,  # t of diffusion-map coordinates (operator "diffusion" only)
    # "ours": anchors from the training split; "authors": the authors' evaluation protocol
    # (anchors from the test split, d_G_code as their code computed it; basis.experiment)
    "evaluation": "ours",
    "graph": GraphConfig().to_dict(),  # its defaults are the paper's
    "eval": {
        "kmeans_n_init": 10,
        "probe_C": 1.0,
        "probe_max_iter": 1000,
        "authors_probe_epochs": 100,
        "authors_probe_lr": 1e-4,
        "authors_probe_batch_size": 262,
    },
}


#: Toy sets (2-D, a few thousand points) get a graph of their own: with k = 50 and a local
#: scale, neighbouring moons share edges inside a batch. lr 1e-3 as in config/quick.yaml.
TOY_OVERRIDES: dict[str, Any] = {"graph": {"n_neighbors": 15, "scale": "global"}, "lr": 1e-3}


#: The ranges of the evaluation settings (``eval.*``), whose types are their defaults' in
#: :data:`PROTOCOL`; a method's parameters declare theirs (:mod:`basis.estimators.parameters`).
EVAL_RANGES: dict[str, Interval] = {
    "kmeans_n_init": COUNT,
    "probe_C": POSITIVE,
    "probe_max_iter": COUNT,
    "authors_probe_epochs": COUNT,
    "authors_probe_lr": POSITIVE,
    "authors_probe_batch_size": COUNT,
}


def check_protocol(method: str, settings: dict[str, Any]) -> None:
    """A run's settings, checked at parse time before any data is read: the method's
    parameters by their declaration (:func:`basis.estimators.parameters.check_parameters`,
    as ``fit`` checks them) and the ``eval`` settings by :data:`EVAL_RANGES`; an InputError
    naming the first at fault. ``n_components`` None (as many as the data has classes)
    passes. Ranges that depend on the data (batch size against the training set, anchors
    against a class) are checked by the estimator's ``check_input`` before training."""
    for key, value in (settings.get("eval") or {}).items():
        check_range(f"eval.{key}", value, EVAL_RANGES[key])
    parameters = set(method_parameters(method))
    given = {k: v for k, v in settings.items() if k in parameters and not (k == "n_components" and v is None)}
    check_parameters(DECLARED[method], given)


def check_config_schema(
    config: dict, schema_path: str | Any, files: list[str], command_line: Mapping[str, Any] | None = None
) -> None:
    """The config against its JSON schema, the first violation as one line: where the value
    came from (the config files, or ``--config`` for a key in ``command_line``), the key path,
    what was expected and what was given (an InputError); the full validation (and the
    schema's defaults) stays with Snakemake's ``validate``."""
    import jsonschema
    import yaml

    with open(schema_path) as handle:
        schema = yaml.safe_load(handle)
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if error is None:
        return
    path = list(error.absolute_path)
    where = ".".join(str(part) for part in path) or "(top level)"
    if path and path[0] in (command_line or {}):
        # Snakemake reads --config values as numbers, True/False or strings, not as YAML's on/off/yes/no.
        hint = ""
        if isinstance(error.instance, str) and error.instance.lower() in ("on", "off", "yes", "no", "true", "false"):
            hint = " (a boolean is written True or False in --config)"
        raise InputError(f"--config {where}: {error.message}{hint}")
    raise InputError(f"config {', '.join(map(str, files)) or '(--config)'}: {where}: {error.message}")


def why_seeds_apart(method: str, settings: Mapping[str, Any]) -> str | None:
    """Why ``method`` with ``settings`` cannot train its seeds together, where its settings
    decide it (its class's declaration, :func:`basis.catalog.seeds_apart_when`), or None;
    torch-free, so that a dry run checks a config with it."""
    if seeds_never_together(method):
        return seeds_never_together(method)
    for key, (value, why) in seeds_apart_when(method).items():
        if settings.get(key) == value:
            return why
    return None


def check_yaml_file(path: str | Any) -> None:
    """Refuse a YAML file in which a mapping states one key twice (YAML loaders keep the
    last silently): an InputError naming the key and both lines."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        pass

    def construct_mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise InputError(f"{path}: key {key!r} is given twice, on lines {seen[key]} and {line}")
            seen[key] = line
        return loader.construct_mapping(node, deep=deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    try:
        with open(path) as handle:
            loader = StrictLoader(handle)
            try:
                node = loader.get_single_node()
                if node is not None:
                    size = _expanded_size(node, {})
                    if size > MAX_CONFIG_VALUES:
                        raise InputError(
                            f"{path}: its aliases (*name) expand to {size:.3g} values, more than a config"
                            f" holds ({MAX_CONFIG_VALUES}); write the values out"
                        )
                    loader.construct_document(node)
            finally:
                loader.dispose()
    except yaml.MarkedYAMLError as err:  # one line: where, what, and where the open block began
        mark = err.problem_mark or err.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        began = ""
        if err.context and err.context_mark and err.context_mark is not mark:
            began = f" ({err.context} that begins on line {err.context_mark.line + 1})"
        raise InputError(f"{path}{where}: not valid YAML: {err.problem or err.context}{began}") from None
    except yaml.YAMLError as err:
        raise InputError(f"{path} is not valid YAML ({' '.join(str(err).split())})") from None
    except RecursionError:
        raise InputError(f"{path} is nested too deeply to be a config") from None


#: The most values (scalars, lists and mappings, aliases expanded) a config may hold: the
#: paper's has a few hundred. An alias bomb expands to billions and would stall the
#: schema's validation and every job's config hash.
MAX_CONFIG_VALUES = 100_000


def _expanded_size(node: Any, sizes: dict[int, int]) -> int:
    """How many values a YAML node stands for with its aliases expanded; each node's count
    is computed once, so a bomb is counted in time linear in its text."""
    import yaml

    key = id(node)
    if key not in sizes:
        sizes[key] = 1  # a node that holds itself (a recursive alias) counts once
        children = node.value if isinstance(node, yaml.SequenceNode) else []
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        sizes[key] = 1 + sum(_expanded_size(child, sizes) for child in children)
    return sizes[key]


def parse_assignment(text: str) -> tuple[list[str], Any]:
    """``"graph.n_neighbors=20"`` -> (["graph", "n_neighbors"], 20); values are YAML."""
    import yaml

    if "=" not in text:
        raise InputError(f"--set expects key=value, got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise InputError(f"--set {key.strip()}={raw!r}: the value is not valid YAML ({err.problem})") from None
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            value = float(value)
        except ValueError:
            pass
    return key.strip().split("."), value


def _annotation(section: str, key: str, method: str) -> str:
    """The type a setting must have: a graph field's, an eval default's, or the method's."""
    if section == "graph":
        return next(f.type for f in fields(GraphConfig) if f.name == key)
    if section == "eval":
        return type(PROTOCOL["eval"][key]).__name__
    if key == "n_components":
        return "int | None"  # None: as many as the data set has classes
    if key == "evaluation":
        return "str"
    return method_annotations(method)[key]


def resolve_settings(
    method: str, overrides: dict[str, Any] | None = None, assignments: list[str] = (), dataset: str | None = None
) -> dict[str, Any]:
    """The protocol (with the toy-set defaults for a toy ``dataset``), then overrides and
    ``key=value`` assignments; an unknown key is named with the valid ones, a value of
    the wrong type with the type it must have (an InputError, before any compute)."""
    method_keys = set(method_parameters(method)) - set(RUN_PARAMETERS)
    settings = copy.deepcopy(PROTOCOL)
    if dataset in TOY_SETS:
        settings["graph"].update(TOY_OVERRIDES["graph"])
        settings.update({k: v for k, v in TOY_OVERRIDES.items() if k != "graph"})
    items = list((overrides or {}).items()) + [
        (".".join(path), value) for path, value in (parse_assignment(a) for a in assignments)
    ]
    # graph={...} and eval={...} set their keys one by one
    items = [
        (f"{dotted}.{key}", item) if dotted in ("graph", "eval") and isinstance(value, dict) else (dotted, value)
        for dotted, value in items
        for key, item in (value.items() if dotted in ("graph", "eval") and isinstance(value, dict) else [(None, None)])
    ]
    for dotted, value in items:
        path = dotted.split(".")
        if path[0] in ("graph", "eval") and len(path) == 2:
            known = {f.name for f in fields(GraphConfig)} if path[0] == "graph" else set(settings["eval"])
            if path[1] not in known:
                raise InputError(f"unknown key {dotted!r}; valid {path[0]} keys: {sorted(known)}")
            check_value(dotted, value, _annotation(path[0], path[1], method))
            settings[path[0]][path[1]] = value
        elif path[0] in ("graph", "eval") and len(path) == 1:
            raise InputError(f"{dotted}={value!r} is not valid: expected a mapping of {dotted}.* keys")
        elif len(path) == 1 and (path[0] in settings or path[0] in method_keys):
            check_value(dotted, value, _annotation("", path[0], method))
            settings[path[0]] = value
        else:
            valid = (
                sorted((set(settings) | method_keys) - {"graph", "eval"})
                + [f"graph.{f.name}" for f in fields(GraphConfig)]
                + [f"eval.{k}" for k in PROTOCOL["eval"]]
            )
            raise InputError(f"unknown key {dotted!r} for method {method!r}; valid: {valid}")
    # Checked early, and in its recorded form (neighbour-search fields at their default left out).
    settings["graph"] = GraphConfig.from_dict(settings["graph"]).to_dict()
    check_choice("evaluation", settings["evaluation"], EVALUATIONS)
    check_protocol(method, settings)
    return settings


#: Settings that define the analytic reference embedding.
REFERENCE_KEYS = ("graph", "operator", "drop_trivial", "diffusion_time")


def reference_settings(settings: dict[str, Any], n_components: int) -> dict[str, Any]:
    """What a stored reference embedding was computed with (checked when it is reused)."""
    return {"n_components": n_components, **{k: settings[k] for k in REFERENCE_KEYS}}

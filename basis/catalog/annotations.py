"""Whether a config value fits the annotation its parameter has in the source, read as
text: the workflow checks settings at parse time without importing what they configure.
"""

from __future__ import annotations

import ast

from basis.errors import InputError


def _options(annotation: str) -> list[str]:
    """``"list[int] | None"`` -> ``["list[int]", "None"]`` (a union's top-level members)."""
    return _top_level(annotation, "|")


def _top_level(text: str, separator: str) -> list[str]:
    """``text`` split at each ``separator`` outside brackets, each part stripped."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char == "["
        depth -= char == "]"
        if char == separator and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()]


def matches_annotation(value: object, annotation: str) -> bool:
    """Whether a config value fits a source annotation (int, float, bool, str, dict,
    Literal[...], tuple[...] / list[...], unions with None). Booleans are not integers here."""
    for option in _options(annotation):
        if option in ("Any", "Callable", "StepCallback"):
            return True
        if option == "None" and value is None:
            return True
        if option == "bool" and isinstance(value, bool):
            return True
        if isinstance(value, bool):
            continue
        if option == "int" and isinstance(value, int):
            return True
        if option == "float" and isinstance(value, int | float):
            return True
        if option == "str" and isinstance(value, str):
            return True
        if option in ("dict", "GraphConfig") and isinstance(value, dict):
            return True
        if option.startswith("Literal[") and value in ast.literal_eval(f"({option[8:-1]},)"):
            return True
        if option.startswith(("tuple[", "list[")) and isinstance(value, list | tuple):
            inner = _top_level(option[option.index("[") + 1 : -1], ",")[0]  # tuple[int, ...]: int
            if all(matches_annotation(item, inner) for item in value):
                return True
    return False


def check_value(key: str, value: object, annotation: str) -> None:
    """An InputError naming ``key``, the value and the expected type when they do not fit."""
    if not matches_annotation(value, annotation):
        raise InputError(f"{key}={value!r} ({type(value).__name__}) is not valid: expected {annotation}")

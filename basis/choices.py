"""The values a setting may take: the choices that modules on several floors check, each a
``Literal`` stated once (what a parameter is annotated with) with its tuple derived for the
code that branches on it, and :func:`check_value`, whether a value fits an annotation read
as text (the workflow checks settings at parse time without importing what they configure).
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Mapping
from typing import Any, Literal, get_args, get_origin

from basis.errors import InputError

#: Whose eigenvectors are embedded: L = D - W, L_N = I - D^-1/2 W D^-1/2, or the random walk D^-1 W.
Operator = Literal["unnormalized", "normalized", "diffusion"]
OPERATORS: tuple[str, ...] = get_args(Operator)

#: How BASiS aligns a batch to the reference (Table 2's ablation compares them).
Alignment = Literal["ransac", "lstsq", "none"]
ALIGNMENTS: tuple[str, ...] = get_args(Alignment)

#: The maps a batch can be aligned by: ``affine`` (the paper's, T in R^{K x (K+1)}) or
#: ``linear`` (no translation, T in R^{K x K}; beyond the paper).
AlignmentMap = Literal["affine", "linear"]
MAPS: tuple[str, ...] = get_args(AlignmentMap)

#: How RANSAC's inlier tolerance is read (see :func:`basis.alignment.inlier_threshold`).
ToleranceMode = Literal["relative", "absolute"]
TOLERANCE_MODES: tuple[str, ...] = get_args(ToleranceMode)

#: How BASiS solves the batches it aligns.
Eigensolver = Literal["auto", "exact", "subspace"]
EIGENSOLVERS: tuple[str, ...] = get_args(Eigensolver)


def annotation_as_text(annotation: Any) -> str:
    """A signature's annotation as its source text: a module without ``from __future__
    import annotations`` gives the objects (``float``, ``int | None``, ``Literal['a']``)."""
    if isinstance(annotation, str):
        return annotation
    if annotation is inspect.Parameter.empty:
        return "Any"
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")


def spelt_out(annotation: str, namespace: Mapping[str, Any]) -> str:
    """An annotation's text with the ``Literal`` aliases it names (looked up in the
    ``namespace`` of its module) spelt out: ``Operator`` -> ``Literal['unnormalized', ...]``."""

    def spell(match: re.Match) -> str:
        value = namespace.get(match.group(0))
        return f"Literal[{', '.join(map(repr, get_args(value)))}]" if get_origin(value) is Literal else match.group(0)

    return re.sub(r"\b[A-Z]\w*\b", spell, annotation)


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
        if option == "GraphConfig" and type(value).__name__ == "GraphConfig":
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

"""Code versions: what a job's result depends on, for the workflow's rerun triggers.

A job's version hashes the shared library, the modules of the methods it trains and the
computing part of its study's module (comments and formatting left out, so that only a
change of the code reruns jobs); figures and tables hash the presentation code.
"""

from __future__ import annotations

import ast
import hashlib
from collections import Counter
from functools import cache
from importlib.util import find_spec
from pathlib import Path

from basis.catalog import PACKAGE, method_parameters
from basis.estimators.parameters import DECLARED
from basis.plan.registry import study_declaration, study_names, study_parameters


def _study_path(name: str) -> Path:
    study_parameters(name)  # a clear error for an unknown name
    return PACKAGE / "studies" / f"{name}.py"


@cache
def _study_tree(name: str) -> ast.Module:
    return ast.parse(_study_path(name).read_text())


def source_hash(paths: list[Path], texts: list[str] = ()) -> str:
    """Short hash of the given source files (names and contents) and source texts."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        # a method of an installed package of one's own lies outside: its file name stands for it
        name = path.relative_to(PACKAGE) if path.is_relative_to(PACKAGE) else path.name
        digest.update(str(name).encode() + b"\0" + path.read_bytes())
    for text in texts:
        digest.update(b"\0" + text.encode())
    return digest.hexdigest()[:12]


#: Modules that only draw and tabulate results; computing jobs do not depend on them.
PRESENTATION = ("studies/figures.py", "paper.py", "verdicts.py")


def _study_parts(name: str) -> tuple[str, str]:
    """A study module's code split in two: what its jobs compute with, and what only
    presents the results (its declaration, figure drawing and claims). Comments and
    formatting are left out, so that only a change of the code reruns jobs."""
    declaration, tree = study_declaration(name), _study_tree(name)
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
    excluded |= {_study_path(name) for name in study_names()}
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
        shown = [_study_parts(name)[1] for name in sorted(study_names())]
        return source_hash([PACKAGE / name for name in PRESENTATION], shown)
    for method in methods:
        method_parameters(method)  # a clear error for an unknown name
    computing = []
    if study is not None:
        study_parameters(study)
        computing.append(_study_parts(study)[0])
        methods = _methods_used(_study_path(study))
    return source_hash(library_sources() + [path for m in methods for path in _method_files()[m]], computing)


@cache
def _method_files() -> dict[str, list[Path]]:
    """Method name -> its own source files: the module that defines it (found without
    importing it), and the modules of ``basis/estimators/`` that no other method's module
    imports (BASiS's batch targets)."""
    own = {name: Path(find_spec(_estimator(name)[0]).origin) for name in DECLARED}
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
    by_class = {_estimator(name)[1]: name for name in DECLARED}
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


def _estimator(method: str) -> tuple[str, str]:
    """The module and the class name of ``method``'s estimator."""
    module, class_name = DECLARED[method].estimator.split(":")
    return module, class_name


def _module_path(dotted: str) -> Path:
    """The source file of module ``basis.<...>``: a module's file or a package's
    ``__init__.py`` (a path that does not exist when ``dotted`` names no module)."""
    path = PACKAGE.joinpath(*dotted.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")

"""The paper's experiments beyond Table 1: one module per study (Figs. 1-4 and 6-8).

A study module holds everything about its experiment: the function that runs it, the
functions that draw its figures and check its claims, and one declaration of them::

    STUDY = Study(
        function="toy_example",        # (**settings) -> (metrics, arrays)
        runs="datasets",               # how its config section splits into runs (jobs)
        figures=[Figure(name="fig1_toy_examples", draw="draw_toy_examples", caption="...")],
        claims="toy_claims",           # ({run: metrics}) -> rows of the comparison
        gpu=True,
    )

The workflow reads the declarations at parse by importing the modules
(:mod:`basis.plan.registry`), so a study module imports at its top nothing heavier than
numpy (matplotlib loads when a figure is drawn, torch and the estimators inside the study
function) and names its functions rather than referencing them. A study whose function
passes ``**settings`` on to a class names it in ``settings_to``. A new study is one module
here plus one section under ``experiments`` in the config: the workflow gives it a rule,
its figures and its comparison rows. Table 1, the kNN sweep (Fig. 5) and the
alignment ablation are runs of the methods (``python -m basis run``) instead.

Each figure is drawn by a job of its own from the study's saved arrays, so what a study
computes with (torch, the estimators, the metrics) is imported inside its study function:
a figure job does not pay torch's and scikit-learn's start-up.

Study settings are keyword arguments of the study's function (the paper's values are the
defaults); ``python -m basis study NAME`` runs one and writes ``metrics.json`` and
``arrays.npz``.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from basis.catalog.studies import ClaimRow, Figure, Study, StudyResult

if TYPE_CHECKING:
    import numpy as np

__all__ = ["ClaimRow", "Figure", "Study", "StudyResult", "save_study", "study_function", "study_module"]


def study_module(name: str) -> ModuleType:
    """The module of study ``name`` (importing it imports what drawing needs, not what the
    study computes with)."""
    module = import_module(f"{__name__}.{name}")
    if not isinstance(getattr(module, "STUDY", None), Study):
        raise LookupError(f"{module.__name__} declares no STUDY")
    return module


def study_function(name: str, role: str = "function", figure: str | None = None):
    """A function a study declares: ``function``, ``claims`` or the ``draw`` of ``figure``."""
    module = study_module(name)
    if figure is not None:
        declared = next(f for f in module.STUDY.figures if f.name == figure)
        return getattr(module, declared.draw)
    return getattr(module, getattr(module.STUDY, role))


def save_study(folder: str | Path, result: dict[str, float], arrays: dict[str, np.ndarray]) -> None:
    """``metrics.json`` and ``arrays.npz`` of one study run, each written atomically."""
    import numpy as np

    from basis.runtime.outputs import atomic_path, write_json

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / "arrays.npz") as partial:
        np.savez_compressed(partial, **{k: np.asarray(v) for k, v in arrays.items() if v is not None})
    write_json(folder / "metrics.json", {k: float(v) for k, v in result.items()})

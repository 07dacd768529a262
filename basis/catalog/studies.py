"""How a study declares itself (``STUDY = Study(...)`` in its module of ``basis/studies/``):
the types of the declarations, which the workflow reads by importing the study modules
(:mod:`basis.plan.registry`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: What a study function returns: scalar metrics (comparison, MLflow) and the arrays its
#: figures are drawn from.
StudyResult = tuple[dict[str, float], dict[str, "np.ndarray"]]
#: One row of the paper-vs-reproduced comparison: claim, criterion, measured, reproduced.
ClaimRow = dict[str, Any]


@dataclass(frozen=True)
class Figure:
    """A figure drawn from a study's runs.

    name: file name under ``results/paper/figures/`` (PNG and PDF).
    draw: function of the study's module, ``draw(folders: list[Path], out: Path)``.
    caption: its caption in the Snakemake report and in MLflow (reStructuredText).
    runs: the study runs it is drawn from, in order; empty for all of them.
    table: whether ``draw`` also returns the figure's numbers as a markdown table, written
        next to the figure (``.md``).
    """

    name: str
    draw: str
    caption: str
    runs: tuple[str, ...] = ()
    table: bool = False


@dataclass(frozen=True)
class Study:
    """One study's declaration, read by the workflow and the command line.

    function: the study function of the module.
    runs: how the config section ``experiments.<study>`` becomes runs, a job each, each
        run's settings being ``settings`` with the run's own on top:

        - ``None``: one run, from ``settings``;
        - ``"datasets"``: one run per data set listed under ``datasets``, as ``dataset``
          (with the config's ``runs_in_one_job``, all of them in one job:
          ``python -m basis study NAME --datasets ...``);
        - a tuple of names: one run per name, each with its own section of settings.
    figures: the figures drawn from its runs.
    claims: function of the module, ``claims({run: metrics}) -> rows`` for the comparison.
    gpu: whether its jobs train on the GPU (they claim one of the workflow's GPU slots).
    settings_to: where a ``**settings`` catch-all of the study function goes
        (``"module:Class"``): that class's parameters are the study's settings too.
    """

    function: str
    runs: str | tuple[str, ...] | None = None
    figures: tuple[Figure, ...] = field(default_factory=tuple)
    claims: str | None = None
    gpu: bool = False
    settings_to: str | None = None

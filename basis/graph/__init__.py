"""Gaussian kNN affinity graphs, dense on a batch and sparse for a whole data set.

:class:`GraphConfig` (:mod:`basis.graph.config`) says how a graph is built and imports no
torch, so that a config is checked at the workflow's parse time; the graphs themselves
(:mod:`basis.graph.affinity`) load on first use.
"""

from importlib import import_module

from basis.graph.config import NEIGHBOR_BACKENDS as NEIGHBOR_BACKENDS  # re-exported
from basis.graph.config import GraphConfig as GraphConfig


def __getattr__(name: str):
    return getattr(import_module("basis.graph.affinity"), name)

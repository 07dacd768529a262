"""How a kNN graph is built (:class:`GraphConfig`), checked on creation; torch-free, so that
a config is checked at the workflow's parse time without importing torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from basis.errors import InputError

SCALE_RULES = ("local", "global", "fixed")
KERNELS = ("paper", "code")
SYMMETRIZATIONS = ("mean", "max")
#: How a whole-set graph finds each node's neighbours: exactly (brute force, on any device)
#: or through a FAISS index (IVF-Flat, or HNSW), for sets too large for the exact search.
NEIGHBOR_BACKENDS = ("exact", "faiss-ivf", "faiss-hnsw")


@dataclass(frozen=True)
class GraphConfig:
    """How a kNN Gaussian affinity is built.

    Parameters
    ----------
    n_neighbors : int
        Neighbours per node, the node itself included (as in the authors' code).
    scale : {"local", "global", "fixed"}
        ``local``: sigma_i is the distance from node i to its ``scale_neighbor``-th
        neighbour. ``global``: one sigma, the median of those distances.
        ``fixed``: ``sigma`` as given.
    scale_neighbor : int
        Which neighbour sets the scale (0 is the node itself).
    sigma : float or None
        The bandwidth for ``scale="fixed"``.
    kernel : {"paper", "code"}
        ``paper``: exp(-d^2 / (2 sigma^2)) as printed; ``code``: exp(-d^2 / sigma^2).
    symmetrize : {"mean", "max"}
        (W + W^T) / 2 (authors' code) or the elementwise maximum.
    self_loops : bool
        Keep W_ii = 1 (authors' code) or zero the diagonal.
    neighbors : {"exact", "faiss-ivf", "faiss-hnsw"}
        How a whole-set graph (a reference, a study's analytic embedding) finds the k
        neighbours: ``exact`` brute force (the default; its numbers are the reference), or
        an approximate FAISS index (``pip install '.[faiss]'``): ``faiss-ivf`` (IVF-Flat:
        deterministic for a given thread count) or ``faiss-hnsw`` (HNSW, 32 links; its
        parallel build is not). A batch's graph is always exact.
    faiss_probe : int or None
        The index's accuracy knob: inverted lists scanned per query (IVF, default 64) or
        the search breadth efSearch (HNSW, default 128). Higher is slower and more exact.
        The defaults reach recall@50 >= 0.99 on 70k 16-d clustered points (BENCHMARKS.md).
    faiss_lists : int or None
        IVF's number of lists (default 4 sqrt(n), at least 39 points each).
    """

    n_neighbors: int = 50
    scale: str = "local"
    scale_neighbor: int = 7
    sigma: float | None = None
    kernel: str = "paper"
    symmetrize: str = "mean"
    self_loops: bool = True
    neighbors: str = "exact"
    faiss_probe: int | None = None
    faiss_lists: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.n_neighbors, int) or self.n_neighbors < 2:
            raise InputError(f"n_neighbors must be an integer >= 2, got {self.n_neighbors!r}")
        check_choice("scale", self.scale, SCALE_RULES)
        check_choice("kernel", self.kernel, KERNELS)
        check_choice("symmetrize", self.symmetrize, SYMMETRIZATIONS)
        check_choice("neighbors", self.neighbors, NEIGHBOR_BACKENDS)
        for name in ("faiss_probe", "faiss_lists"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InputError(f"{name} must be a positive integer or null, got {value!r}")
        if self.scale == "fixed" and (self.sigma is None or not self.sigma > 0):
            raise InputError("sigma must be a positive number when scale='fixed'")
        if self.scale != "fixed" and not 0 < self.scale_neighbor < self.n_neighbors:
            raise InputError(
                f"scale_neighbor must be in [1, n_neighbors - 1] = [1, {self.n_neighbors - 1}],"
                f" got {self.scale_neighbor}"
            )

    @classmethod
    def from_dict(cls, values: dict[str, Any] | "GraphConfig" | None) -> "GraphConfig":
        """Build from a mapping, naming any unknown key in the error."""
        if isinstance(values, GraphConfig):
            return values
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InputError(f"unknown graph option(s) {unknown}; valid: {sorted(known)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The settings, leaving out the neighbour-search fields at their defaults: those
        give the graph it always was, so settings, stored references and checkpoints
        written before the fields existed stay valid."""
        return {k: v for k, v in asdict(self).items() if k not in ADDED_DEFAULTS or v != ADDED_DEFAULTS[k]}


#: Fields added to GraphConfig after references were first stored, with the default that
#: reproduces the graph from before (recorded only when set otherwise).
ADDED_DEFAULTS: dict[str, Any] = {"neighbors": "exact", "faiss_probe": None, "faiss_lists": None}


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InputError(f"{name} must be one of {list(choices)}, got {value!r}")

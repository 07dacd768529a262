"""Graph operators, their components, and a batch's leading eigenvectors.

Symmetric solvers only: a batch is solved densely (LAPACK's subset driver on the CPU,
``torch.linalg.eigh`` on a GPU) or, where only its invariant subspace matters, by a
Chebyshev-filtered subspace iteration (:class:`SubspaceEigensolver`). Every eigenvector
gets a deterministic sign, and a disconnected graph is detected instead of silently
handing back an arbitrary basis; a graph's components are found on its own device
(:func:`component_labels`, :func:`sparse_component_labels`).
"""

from __future__ import annotations

import logging
import warnings

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.csgraph
import scipy.sparse.linalg
import torch

from basis.choices import OPERATORS
from basis.errors import InputError
from basis.graph import csr_rows
from basis.runtime import device as devices
from basis.runtime.capture import checked

log = logging.getLogger(__name__)

ON_DISCONNECTED = ("warn", "raise", "ignore")


class DisconnectedGraphWarning(UserWarning):
    """The graph has several connected components."""


def laplacian(W: torch.Tensor) -> torch.Tensor:
    """Unnormalised graph Laplacian L = D - W (``Laplacian_def``)."""
    return torch.diag(W.sum(dim=1)) - W


def normalized_laplacian(W: torch.Tensor) -> torch.Tensor:
    """Symmetric normalised Laplacian L_N = I - D^-1/2 W D^-1/2 (``normalized laplacian``)."""
    d_inv_sqrt = W.sum(dim=1).rsqrt()
    return torch.eye(W.shape[0], dtype=W.dtype, device=W.device) - d_inv_sqrt[:, None] * W * d_inv_sqrt[None, :]


def random_walk_matrix(W: torch.Tensor) -> torch.Tensor:
    """Random-walk matrix P = W D^-1 (``eq:random_walk_matrix``), column stochastic."""
    return W / W.sum(dim=0, keepdim=True)


def transition_matrix(W: torch.Tensor) -> torch.Tensor:
    """Row-stochastic P = D^-1 W, whose right eigenvectors are the diffusion coordinates
    (the transpose of :func:`random_walk_matrix`, as Diffusion Maps and Diffusion Net use it)."""
    return W / W.sum(dim=1, keepdim=True)


def operator_matrix(W: torch.Tensor, operator: str) -> torch.Tensor:
    """The matrix whose eigenvectors ``operator`` embeds: D^-1 W (``diffusion``), L_N
    (``normalized``) or L (``unnormalized``)."""
    if operator not in OPERATORS:
        raise InputError(f"operator must be one of {list(OPERATORS)}, got {operator!r}")
    if operator == "diffusion":
        return transition_matrix(W)
    return normalized_laplacian(W) if operator == "normalized" else laplacian(W)


def fix_signs(U: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """Flip each column so that its entry of largest magnitude is positive."""
    lib = torch if isinstance(U, torch.Tensor) else np
    rows = lib.argmax(lib.abs(U), **({"dim": 0} if lib is torch else {"axis": 0}))
    columns = torch.arange(U.shape[1], device=U.device) if lib is torch else np.arange(U.shape[1])
    signs = lib.sign(U[rows, columns])
    return U * lib.where(signs == 0, 1, signs)


#: FastSV rounds :func:`component_labels` runs before it reports whether the labels have
#: settled: a random path of 512 nodes settles in 7, kNN batch graphs in at most 6.
COMPONENT_ROUNDS = 8


def _fastsv_round(adjacent: torch.Tensor, parent: torch.Tensor) -> torch.Tensor:
    """One round of FastSV (Zhang, Azad and Hu, 2020): hook each tree onto the smallest
    grandparent among its nodes' neighbours, then shortcut."""
    n = parent.shape[0]
    grandparent = parent[parent]
    # The smallest neighbour grandparent of every node, as a max of products: an int16
    # masked reduction is ~20x faster on the CPU than where()+amin() on int64.
    flipped = (n - grandparent).to(adjacent.dtype)
    neighbour_min = n - (adjacent * flipped).amax(dim=1).long()
    parent = parent.scatter_reduce(0, parent, neighbour_min, "amin")  # stochastic hooking
    parent = torch.minimum(parent, torch.minimum(neighbour_min, grandparent))  # aggressive hooking, shortcut
    return parent[parent]


def component_labels(W: torch.Tensor, rounds: int = COMPONENT_ROUNDS) -> tuple[torch.Tensor, torch.Tensor]:
    """Connected components of the dense symmetric graph ``W`` on its own device, with no
    host read: each node's label (the smallest node of its component, once settled) and a
    0-dim bool tensor saying whether the labels have settled after ``rounds`` rounds of
    FastSV (every edge joins equal labels). Continue with :func:`settle_components`."""
    n = W.shape[0]
    adjacent = (W != 0).to(torch.int16 if n < 2**15 else torch.int32)
    parent = torch.arange(n, device=W.device)
    for _ in range(rounds):
        parent = _fastsv_round(adjacent, parent)
    return parent, _labels_settled(adjacent, parent)


def _labels_settled(adjacent: torch.Tensor, parent: torch.Tensor) -> torch.Tensor:
    n = parent.shape[0]
    neighbour_max = (adjacent * (parent + 1).to(adjacent.dtype)).amax(dim=1).long() - 1
    neighbour_min = n - (adjacent * (n - parent).to(adjacent.dtype)).amax(dim=1).long()
    isolated = neighbour_max < 0
    return ((neighbour_min == parent) & (neighbour_max == parent) | isolated).all() & (parent[parent] == parent).all()


def settle_components(W: torch.Tensor, labels: torch.Tensor, settled: torch.Tensor) -> tuple[int, torch.Tensor]:
    """The number of components and the settled labels, running further FastSV rounds
    until the labels settle (one host read per round, and one for the count)."""
    adjacent = (W != 0).to(torch.int16 if W.shape[0] < 2**15 else torch.int32)
    while not bool(settled):
        labels = _fastsv_round(adjacent, labels)
        settled = _labels_settled(adjacent, labels)
    return int(count_roots(labels)), labels


def count_roots(labels: torch.Tensor) -> torch.Tensor:
    """The number of distinct settled labels (0-dim tensor): the components."""
    return (labels == torch.arange(labels.shape[0], device=labels.device)).sum()


def sparse_component_labels(W: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Connected components of a sparse CSR graph on its own device: their number and
    each node's label (its component's smallest node), by FastSV over the edge list (one
    host read per round; a kNN graph settles in a few rounds)."""
    n = W.shape[0]
    rows = csr_rows(W)
    cols = W.col_indices()
    parent = torch.arange(n, device=W.device)
    while True:
        grandparent = parent[parent]
        neighbour_min = grandparent.scatter_reduce(0, rows, grandparent[cols], "amin")
        parent = parent.scatter_reduce(0, parent, neighbour_min, "amin")
        parent = torch.minimum(parent, torch.minimum(neighbour_min, grandparent))
        parent = parent[parent]
        if bool((parent[rows] == parent[cols]).all() & (parent[parent] == parent).all()):
            return int(count_roots(parent)), parent


def connected_components(W: np.ndarray | torch.Tensor | sp.spmatrix) -> tuple[int, np.ndarray]:
    """Number of connected components of the graph with adjacency ``W`` and each node's
    component (0 to count - 1; a sparse torch graph is labelled on its device, by its
    components' smallest nodes)."""
    if isinstance(W, torch.Tensor) and W.layout == torch.sparse_csr:
        return sparse_component_labels(W)
    if isinstance(W, torch.Tensor):
        n_components, labels = settle_components(W, *component_labels(W))
        return n_components, np.unique(labels.cpu().numpy(), return_inverse=True)[1]
    graph = W if sp.issparse(W) else sp.csr_matrix(np.asarray(W) != 0)
    n_components, labels = scipy.sparse.csgraph.connected_components(graph, directed=False)
    return int(n_components), labels


def check_connected(W, n_eigenvectors: int, on_disconnected: str = "warn") -> tuple[int, np.ndarray]:
    """Report a disconnected graph; refuse one whose null space exceeds the request.
    Returns the number of components and each node's component (computed once here, for
    the caller to reuse).

    With c components the smallest eigenvalue has multiplicity c. If c exceeds the
    number of eigenvectors asked for, any returned basis is an arbitrary slice of that
    eigenspace, so this always raises. Otherwise the result is still a valid
    eigenspace, and ``on_disconnected`` says whether to warn, raise or stay quiet.
    """
    if on_disconnected not in ON_DISCONNECTED:
        raise InputError(f"on_disconnected must be one of {list(ON_DISCONNECTED)}, got {on_disconnected!r}")
    n_components, labels = connected_components(W)
    if n_components == 1:
        return 1, labels
    message = (
        f"the graph has {n_components} connected components; its leading eigenvectors are"
        " indicator-like and the trivial vector is not unique. Increase n_neighbors or the"
        " kernel scale to connect it."
    )
    if n_components > n_eigenvectors or on_disconnected == "raise":
        raise InputError(message + f" ({n_eigenvectors} eigenvectors were requested)")
    if on_disconnected == "warn":
        warnings.warn(message, DisconnectedGraphWarning, stacklevel=3)
    return n_components, labels


def _check_request(operator: str, n_components: int, n_nodes: int, drop_trivial: bool) -> int:
    if operator not in OPERATORS:
        raise InputError(f"operator must be one of {list(OPERATORS)}, got {operator!r}")
    n_eig = n_components + int(drop_trivial)
    if not 1 <= n_components or n_eig >= n_nodes:
        raise InputError(
            f"n_components={n_components} (plus {int(drop_trivial)} trivial) must be at least 1 and"
            f" smaller than the number of nodes {n_nodes}"
        )
    return n_eig


def remove_trivial(vecs: torch.Tensor, trivial: torch.Tensor, apply_operator) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the trivial direction from an invariant subspace of K+1 eigenvectors.

    The trivial vector (constant for L, sqrt(degree) for L_N) lies in the computed
    subspace. Projecting it out and re-diagonalising the operator on what is left
    (Rayleigh-Ritz) returns the K non-trivial eigenpairs. Unlike dropping the first
    column, this stays right when the smallest eigenvalue is repeated (a graph with
    several components), where the first column is an arbitrary mix.
    """
    trivial = trivial / torch.linalg.norm(trivial)
    projected = vecs - trivial[:, None] * (trivial @ vecs)[None, :]
    basis = checked(torch.linalg.svd, projected, full_matrices=False)[0][:, : vecs.shape[1] - 1]
    vals, rotation = checked(torch.linalg.eigh, basis.T @ apply_operator(basis))
    return vals, basis @ rotation


def diffusion_coordinates(psi, eigenvalues, diffusion_time: float):
    """Diffusion-map coordinates gamma_j^t Phi_j (``dm_embedding_def``)."""
    return psi * eigenvalues[None, :] ** diffusion_time


def spectral_embedding(
    W: torch.Tensor,
    n_components: int,
    *,
    operator: str = "normalized",
    drop_trivial: bool = False,
    diffusion_time: float = 1.0,
    on_disconnected: str = "warn",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Leading eigenvectors of a dense graph (``embedding_def``), on W's device.

    ``operator`` is ``"unnormalized"`` (smallest of L), ``"normalized"`` (smallest of
    L_N) or ``"diffusion"`` (largest of the random walk, returned as diffusion-map
    coordinates with time ``diffusion_time``). Columns have unit norm and a fixed sign.
    Returns the (m, n_components) embedding and its eigenvalues (of L, L_N, or P).
    """
    n_eig = _check_request(operator, n_components, W.shape[0], drop_trivial)
    check_connected(W, n_eig, on_disconnected)
    return embed_graph(W, n_components, operator=operator, drop_trivial=drop_trivial, diffusion_time=diffusion_time)[:2]


def embed_graph(
    W: torch.Tensor,
    n_components: int,
    *,
    operator: str = "normalized",
    drop_trivial: bool = False,
    diffusion_time: float = 1.0,
    solver: SubspaceEigensolver | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """:func:`spectral_embedding` without its checks (the caller has counted the graph's
    components), by the exact dense solver or by ``solver``. Returns the embedding, its
    eigenvalues and, from ``solver``, whether it converged (a 0-dim bool tensor; None for
    the exact solver)."""
    n_eig = n_components + int(drop_trivial)
    dtype = devices.eigensolver_dtype(W)
    matrix = (laplacian(W) if operator == "unnormalized" else normalized_laplacian(W)).to(dtype)
    degrees = W.to(dtype).sum(dim=1)
    converged = None
    if solver is not None:
        upper = 2.0 * degrees.max() if operator == "unnormalized" else 2.0  # Gershgorin; L_N's spectrum is in [0, 2]
        vals, vecs, converged = solver.solve(matrix, upper)
    elif devices.host_eigensolve(W):
        # LAPACK's subset driver computes only the n_eig wanted pairs: ~10x faster than a
        # full decomposition at m = 512.
        vals, vecs = scipy.linalg.eigh(matrix.numpy(), subset_by_index=[0, n_eig - 1], driver="evx", check_finite=False)
        vals, vecs = torch.from_numpy(vals), torch.from_numpy(vecs)
    else:
        vals, vecs = checked(torch.linalg.eigh, matrix)
        vals, vecs = vals[:n_eig], vecs[:, :n_eig]
    if drop_trivial:
        trivial = torch.ones_like(degrees) if operator == "unnormalized" else degrees.sqrt()
        vals, vecs = remove_trivial(vecs, trivial, lambda Q: matrix @ Q)
    if operator == "diffusion":
        vecs = vecs * degrees.rsqrt()[:, None]
        vecs = vecs / torch.linalg.norm(vecs, dim=0, keepdim=True)
        vals = 1.0 - vals
        vecs = diffusion_coordinates(fix_signs(vecs), vals, diffusion_time)
    else:
        vecs = fix_signs(vecs)
    return vecs.to(device=W.device, dtype=W.dtype), vals.to(device=W.device, dtype=W.dtype), converged


class SubspaceEigensolver:
    """The ``n_eig`` smallest eigenpairs of a batch's Laplacian by Chebyshev-filtered
    subspace iteration (Zhou and Saad, 2007), all on the matrix's device and in its
    precision.

    A batch that is aligned to another needs only the invariant subspace of its K
    smallest eigenvectors: the affine map absorbs any basis of it. A block of ``n_eig +
    guard`` vectors (a fixed seeded start) is filtered ``iterations`` times by a Chebyshev
    polynomial of ``degree`` that damps the interval [cut, upper] (cut: the largest Ritz
    value of the previous solve, so the first solve is exact and sets it) and amplifies
    what lies below, re-orthonormalised after each filter (QR); one Rayleigh-Ritz step at
    the end gives the eigenpairs, so where the wanted eigenvalues are distinct they are
    eigh's to rounding. Convergence is checked on the device by the Davis-Kahan bound on
    the subspace's angle, max residual norm / (theta_n - theta_{n-1}) <= ``tolerance``
    (at least a thousand rounding units of the matrix's precision, :meth:`tolerance_for`),
    and returned as a 0-dim bool tensor: the caller redoes a batch that fails it with the
    exact solver (a small eigengap, where the bound is loose). After the first solve,
    :meth:`solve` makes no host read and one decomposition (the Rayleigh-Ritz ``eigh``,
    called through :func:`~basis.runtime.capture.checked`), so that a caller can record it, with
    the cut as an input and an output, as a chain of CUDA graphs.
    """

    def __init__(
        self,
        n_eig: int,
        *,
        guard: int = 6,
        degree: int = 16,
        iterations: int = 4,
        tolerance: float = 1e-8,
        seed: int = 0,
    ):
        self.n_eig, self.guard, self.degree, self.iterations, self.tolerance = (
            n_eig,
            guard,
            degree,
            iterations,
            tolerance,
        )
        self.seed = seed
        self.start: torch.Tensor | None = None
        self.cut: torch.Tensor | None = None

    def solve(
        self, matrix: torch.Tensor, upper: float | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The smallest eigenvalues and eigenvectors of symmetric ``matrix`` (spectrum in
        [0, upper]), and whether the subspace met the tolerance."""
        m, block = matrix.shape[0], min(self.n_eig + self.guard, matrix.shape[0])
        if self.cut is None:  # the first solve is exact and sets where the filter cuts
            vals, vecs = torch.linalg.eigh(matrix)
            self.cut = vals[block - 1]
            return vals[: self.n_eig], vecs[:, : self.n_eig], torch.ones((), dtype=torch.bool, device=matrix.device)
        if self.start is None or self.start.shape != (m, block) or self.start.dtype != matrix.dtype:
            generator = torch.Generator().manual_seed(self.seed)
            start = torch.randn(m, block, generator=generator, dtype=torch.float64)
            self.start = start.to(device=matrix.device, dtype=matrix.dtype)
        # The damped interval must not be empty (no host value is read, nor one copied over).
        cut = self.cut.clamp(max=0.9 * upper) if isinstance(upper, float) else torch.minimum(self.cut, 0.9 * upper)
        half_width, centre = (upper - cut) / 2, (upper + cut) / 2
        X, projected = self._filtered_block(matrix, self.start, centre, half_width)
        theta, rotation = checked(torch.linalg.eigh, projected)
        X = X @ rotation
        wanted = X[:, : self.n_eig]
        residual = torch.linalg.norm(matrix @ wanted - wanted * theta[: self.n_eig], dim=0).max()
        gap = theta[self.n_eig] - theta[self.n_eig - 1] if block > self.n_eig else torch.zeros_like(residual)
        converged = (gap > 0) & (residual <= self.tolerance_for(matrix.dtype) * gap)
        self.cut = theta[-1]
        return theta[: self.n_eig], wanted, converged

    def tolerance_for(self, dtype: torch.dtype) -> float:
        """The subspace tolerance in ``dtype``: ``tolerance``, or a thousand rounding units
        where that is finer than the precision resolves (float32's residuals sit at ~10
        units: 1e-8 would send every float32 batch to the exact redo)."""
        return max(self.tolerance, 1e3 * torch.finfo(dtype).eps)

    def _filtered_block(
        self, matrix: torch.Tensor, start: torch.Tensor, centre: torch.Tensor, half_width: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The start block filtered and re-orthonormalised ``iterations`` times, and the
        matrix projected on it (for Rayleigh-Ritz): no host read, fixed shapes."""
        X = start
        for _ in range(self.iterations):
            X = torch.linalg.qr(_chebyshev_filter(matrix, X, self.degree, centre, half_width)).Q
        return X, X.T @ matrix @ X


def _chebyshev_filter(
    matrix: torch.Tensor, X: torch.Tensor, degree: int, centre: torch.Tensor, half_width: torch.Tensor
) -> torch.Tensor:
    """T_degree((matrix - centre) / half_width) X by the three-term recurrence: bounded on
    [centre - half_width, centre + half_width], growing fast below it. The recurrence's
    operator 2 (matrix - centre) / half_width is built once, so each degree is one fused
    matrix product (``addmm``): one kernel on a GPU."""
    eye = torch.eye(matrix.shape[0], dtype=matrix.dtype, device=matrix.device)
    shifted = (matrix - centre * eye) * (2.0 / half_width)
    previous, current = X, 0.5 * (shifted @ X)
    for _ in range(degree - 1):
        previous, current = current, torch.addmm(previous, shifted, current, beta=-1.0)
    return current

"""Graph operators and their leading eigenvectors.

Symmetric solvers only: a batch is solved densely (LAPACK's subset driver on the CPU,
``torch.linalg.eigh`` on a GPU) or, where only its invariant subspace matters, by a
Chebyshev-filtered subspace iteration (:class:`SubspaceEigensolver`); a whole data set is
solved with Lanczos on the sparse graph. Every eigenvector gets a deterministic sign, and
a disconnected graph is detected instead of silently handing back an arbitrary basis;
a dense graph's components are found on its own device (:func:`component_labels`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.csgraph
import scipy.sparse.linalg
import torch

from basis.capture import checked
from basis.errors import InputError
from basis.graph import csr_rows, csr_tensor
from basis.settings import SPARSE_SOLVERS

log = logging.getLogger(__name__)

OPERATORS = ("unnormalized", "normalized", "diffusion")
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
    matrix = (laplacian(W) if operator == "unnormalized" else normalized_laplacian(W)).double()
    degrees = W.double().sum(dim=1)
    converged = None
    if solver is not None:
        upper = 2.0 * degrees.max() if operator == "unnormalized" else 2.0  # Gershgorin; L_N's spectrum is in [0, 2]
        vals, vecs, converged = solver.solve(matrix, upper)
    elif W.device.type == "cpu":
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
    subspace iteration (Zhou and Saad, 2007), all on the matrix's device.

    A batch that is aligned to another needs only the invariant subspace of its K
    smallest eigenvectors: the affine map absorbs any basis of it. A block of ``n_eig +
    guard`` vectors (a fixed seeded start) is filtered ``iterations`` times by a Chebyshev
    polynomial of ``degree`` that damps the interval [cut, upper] (cut: the largest Ritz
    value of the previous solve, so the first solve is exact and sets it) and amplifies
    what lies below, re-orthonormalised after each filter (QR); one Rayleigh-Ritz step at
    the end gives the eigenpairs, so where the wanted eigenvalues are distinct they are
    eigh's to rounding. Convergence is checked on the device by the Davis-Kahan bound on
    the subspace's angle, max residual norm / (theta_n - theta_{n-1}) <= ``tolerance``,
    and returned as a 0-dim bool tensor: the caller redoes a batch that fails it with the
    exact solver (a small eigengap, where the bound is loose). After the first solve,
    :meth:`solve` makes no host read and one decomposition (the Rayleigh-Ritz ``eigh``,
    called through :func:`~basis.capture.checked`), so that a caller can record it, with
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
        if self.start is None or self.start.shape != (m, block):
            generator = torch.Generator().manual_seed(self.seed)
            self.start = torch.randn(m, block, generator=generator, dtype=torch.float64).to(matrix.device)
        # The damped interval must not be empty (no host value is read, nor one copied over).
        cut = self.cut.clamp(max=0.9 * upper) if isinstance(upper, float) else torch.minimum(self.cut, 0.9 * upper)
        half_width, centre = (upper - cut) / 2, (upper + cut) / 2
        X, projected = self._filtered_block(matrix, self.start, centre, half_width)
        theta, rotation = checked(torch.linalg.eigh, projected)
        X = X @ rotation
        wanted = X[:, : self.n_eig]
        residual = torch.linalg.norm(matrix @ wanted - wanted * theta[: self.n_eig], dim=0).max()
        gap = theta[self.n_eig] - theta[self.n_eig - 1] if block > self.n_eig else torch.zeros_like(residual)
        converged = (gap > 0) & (residual <= self.tolerance * gap)
        self.cut = theta[-1]
        return theta[: self.n_eig], wanted, converged

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


def sparse_spectral_embedding(
    W: sp.spmatrix | torch.Tensor,
    n_components: int,
    *,
    operator: str = "normalized",
    drop_trivial: bool = False,
    diffusion_time: float = 1.0,
    on_disconnected: str = "warn",
    tol: float = 1e-8,
    seed: int = 0,
    solver: str = "arpack",
) -> tuple[np.ndarray, np.ndarray]:
    """Leading eigenvectors of a whole-data-set sparse graph.

    Same conventions as :func:`spectral_embedding`. ``solver`` ``"arpack"`` runs Lanczos
    (ARPACK) on the host; ``"chebyshev"`` a Chebyshev-filtered block iteration
    (:func:`chebyshev_eigensolve`) on the device of ``W`` (a torch sparse CSR tensor, from
    :func:`~basis.graph.device_affinity`; a scipy matrix is solved on the CPU). The start
    is drawn from ``seed`` so that the result is reproducible. Returns numpy arrays.
    """
    if solver not in SPARSE_SOLVERS:
        raise InputError(f"solver must be one of {list(SPARSE_SOLVERS)}, got {solver!r}")
    if solver == "chebyshev":
        return _device_sparse_embedding(
            W, n_components, operator, drop_trivial, diffusion_time, on_disconnected, seed=seed
        )
    if isinstance(W, torch.Tensor):
        W = W.cpu()
        W = sp.csr_matrix((W.values().numpy(), W.col_indices().numpy(), W.crow_indices().numpy()), shape=W.shape)
    W = sp.csr_matrix(W, dtype=np.float64)
    n = W.shape[0]
    n_eig = _check_request(operator, n_components, n, drop_trivial)
    n_null, labels = check_connected(W, n_eig, on_disconnected)
    degrees = np.asarray(W.sum(axis=1)).ravel()
    if operator == "unnormalized":
        lap, shift = sp.diags(degrees) - W, 2.0 * degrees.max()
    else:
        d_inv_sqrt = sp.diags(1.0 / np.sqrt(degrees))
        lap, shift = sp.eye(n) - d_inv_sqrt @ W @ d_inv_sqrt, 2.0
    # Smallest of the Laplacian = largest of shift * I - Laplacian, with the shift an upper
    # bound of its spectrum (Gershgorin for L, 2 for L_N), which Lanczos finds fastest.
    flipped = shift * sp.eye(n) - lap
    v0 = np.random.default_rng(seed).standard_normal(n)
    if n_null == 1:
        vals, vecs = scipy.sparse.linalg.eigsh(flipped, k=n_eig, which="LA", v0=v0, tol=tol)
    else:
        # Lanczos misses copies of a repeated eigenvalue, so the null space (one vector
        # per component) is written down and Lanczos runs on its complement only.
        null = sp.csr_matrix((np.ones(n) if operator == "unnormalized" else np.sqrt(degrees), (np.arange(n), labels)))
        null = null.multiply(1.0 / np.sqrt(null.power(2).sum(axis=0))).toarray()
        vals, vecs = np.full(n_null, shift), null
        if n_eig > n_null:
            project = lambda x: x - null @ (null.T @ x)  # noqa: E731
            restricted = scipy.sparse.linalg.LinearOperator(
                (n, n), matvec=lambda x: project(flipped @ project(x)), dtype=np.float64
            )
            rest_vals, rest_vecs = scipy.sparse.linalg.eigsh(
                restricted, k=n_eig - n_null, which="LA", v0=project(v0), tol=tol
            )
            vals, vecs = np.concatenate([vals, rest_vals]), np.hstack([vecs, rest_vecs])
    order = np.argsort(shift - vals)
    vals, vecs = (shift - vals)[order], vecs[:, order]
    if drop_trivial:
        trivial = np.ones(n) if operator == "unnormalized" else np.sqrt(degrees)
        vals, vecs = remove_trivial(
            torch.from_numpy(vecs), torch.from_numpy(trivial), lambda Q: torch.from_numpy(lap @ Q.numpy())
        )
        vals, vecs = vals.numpy(), vecs.numpy()
    return _signed_coordinates(vals, vecs, degrees, operator, diffusion_time)


def _signed_coordinates(vals, vecs, degrees, operator: str, diffusion_time: float):
    """The embedding from the Laplacian's eigenpairs (numpy or torch): diffusion-map
    coordinates for ``operator="diffusion"``, the eigenvectors otherwise, signs fixed."""
    if operator != "diffusion":
        return fix_signs(vecs), vals
    if isinstance(vecs, torch.Tensor):
        vecs = vecs / degrees.sqrt()[:, None]
        vecs = vecs / torch.linalg.norm(vecs, dim=0, keepdim=True)
    else:
        vecs = vecs / np.sqrt(degrees)[:, None]
        vecs = vecs / np.linalg.norm(vecs, axis=0, keepdims=True)
    vals = 1.0 - vals
    return diffusion_coordinates(fix_signs(vecs), vals, diffusion_time), vals


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


def laplacian_operator(W: torch.Tensor, operator: str) -> tuple[Callable, torch.Tensor, float]:
    """The product X -> L X of a sparse CSR graph's Laplacian (L_N for ``normalized`` and
    ``diffusion``, L for ``unnormalized``), with the degrees and an upper bound of its
    spectrum (2 for L_N; Gershgorin, twice the largest degree, for L). L_N's off-diagonal
    part is W with its values scaled by d_i^-1/2 d_j^-1/2: no sparse product is built."""
    rows = csr_rows(W)
    cols, values = W.col_indices(), W.values()
    # Each row's entries summed in order, by one thread per row: the same bytes on every
    # run and device (index_add_ adds a row's ~2k entries by atomics on CUDA, in whatever
    # order its threads run, so two runs of one reference could differ; basis.determinism).
    degrees = torch.segment_reduce(values, "sum", offsets=W.crow_indices())
    if operator == "unnormalized":
        return (lambda X: degrees[:, None] * X - W @ X), degrees, float(2.0 * degrees.max())
    d_inv_sqrt = degrees.rsqrt()
    scaled = csr_tensor(W.crow_indices(), cols, values * d_inv_sqrt[rows] * d_inv_sqrt[cols], W.shape)
    return (lambda X: X - scaled @ X), degrees, 2.0


def chebyshev_eigensolve(
    apply: Callable[[torch.Tensor], torch.Tensor],
    n: int,
    n_eig: int,
    upper: float,
    *,
    device: torch.device | str = "cpu",
    null: torch.Tensor | None = None,
    seed: int = 0,
    tol: float = 1e-10,
    degree: int = 12,
    max_iterations: int = 500,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``n_eig`` smallest eigenpairs of a symmetric positive semi-definite operator
    ``apply`` (spectrum in [0, ``upper``]) by Chebyshev-filtered subspace iteration
    (Zhou and Saad, 2007) on ``device``, for a whole data set's sparse Laplacian.

    A block of ``2 n_eig`` (at least ``n_eig + 8``) vectors, drawn from ``seed``, is
    filtered by a Chebyshev polynomial of ``degree`` that damps [cut, upper] (cut: the
    block's largest Ritz value) and re-orthonormalised (QR); a Rayleigh-Ritz step after
    each filter gives the Ritz pairs. It stops when every wanted pair's residual norm is
    at most ``tol * upper``. ``null``, orthonormal columns, is an invariant subspace kept
    out of the block (a disconnected graph's null space, written down by the caller).
    """
    block = min(max(2 * n_eig, n_eig + 8), n - (0 if null is None else null.shape[1]))
    generator = torch.Generator().manual_seed(seed)
    X = torch.randn(n, block, generator=generator, dtype=torch.float64).to(device)

    def deflate(Y: torch.Tensor) -> torch.Tensor:
        return Y if null is None else Y - null @ (null.T @ Y)

    X = torch.linalg.qr(deflate(X)).Q
    for _ in range(max_iterations):
        applied = deflate(apply(X))
        theta, rotation = torch.linalg.eigh(X.T @ applied)
        X, applied = X @ rotation, applied @ rotation
        residual = torch.linalg.norm(applied[:, :n_eig] - X[:, :n_eig] * theta[:n_eig], dim=0).max()
        if float(residual) <= tol * upper:
            return theta[:n_eig], X[:, :n_eig]
        cut = float(theta[-1])
        centre, half_width = (upper + cut) / 2, (upper - cut) / 2
        # T_degree((L - centre) / half_width) X by the three-term recurrence. The filter
        # grows what lies below the cut, ``null`` (eigenvalue 0) the most, so the rounding
        # that re-enters it is projected out at every degree.
        previous, current = X, (apply(X) - centre * X) / half_width
        for _ in range(degree - 1):
            previous, current = current, deflate(2.0 * (apply(current) - centre * current) / half_width - previous)
        X = torch.linalg.qr(current).Q
    raise RuntimeError(
        f"the Chebyshev eigensolver did not reach a residual of {tol * upper:.1e} in {max_iterations} iterations"
        f" (last {float(residual):.1e}); use solver='arpack'"
    )


def _device_sparse_embedding(
    W: sp.spmatrix | torch.Tensor,
    n_components: int,
    operator: str,
    drop_trivial: bool,
    diffusion_time: float,
    on_disconnected: str,
    *,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`sparse_spectral_embedding` with ``solver="chebyshev"``, on W's device."""
    if not isinstance(W, torch.Tensor):
        W = sp.csr_matrix(W, dtype=np.float64)
        W = csr_tensor(
            torch.from_numpy(W.indptr.astype(np.int64)),
            torch.from_numpy(W.indices.astype(np.int64)),
            torch.from_numpy(W.data),
            W.shape,
        )
    n = W.shape[0]
    n_eig = _check_request(operator, n_components, n, drop_trivial)
    n_null, labels = check_connected(W, n_eig, on_disconnected)
    apply, degrees, upper = laplacian_operator(W, operator)
    trivial = torch.ones_like(degrees) if operator == "unnormalized" else degrees.sqrt()
    null = None
    if n_null > 1:  # the null space, one vector per component, written down (as for ARPACK)
        _, component = torch.unique(labels, return_inverse=True)
        null = torch.zeros(n, n_null, dtype=torch.float64, device=W.device)
        null[torch.arange(n, device=W.device), component] = trivial
        null = null / torch.linalg.norm(null, dim=0, keepdim=True)
    if null is not None and n_null >= n_eig:
        vals, vecs = torch.zeros(n_eig, dtype=torch.float64, device=W.device), null[:, :n_eig]
    else:
        vals, vecs = chebyshev_eigensolve(
            apply, n, n_eig - n_null if null is not None else n_eig, upper, device=W.device, null=null, seed=seed
        )
        if null is not None:
            vals = torch.cat([torch.zeros(n_null, dtype=vals.dtype, device=vals.device), vals])
            vecs = torch.cat([null, vecs], dim=1)
    if drop_trivial:
        vals, vecs = remove_trivial(vecs, trivial, apply)
    vecs, vals = _signed_coordinates(vals, vecs, degrees, operator, diffusion_time)
    return vecs.cpu().numpy(), vals.cpu().numpy()

"""Graph operators and their leading eigenvectors.

Symmetric solvers only: a batch is solved densely (LAPACK's subset driver on the CPU,
``torch.linalg.eigh`` on a GPU); a whole data set is solved with Lanczos on the
sparse graph. Every eigenvector gets a deterministic sign, and a disconnected graph
is detected instead of silently handing back an arbitrary basis.
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

from basis.errors import InputError

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
    signs = lib.sign(U[rows, lib.arange(U.shape[1])])
    signs[signs == 0] = 1
    return U * signs


def connected_components(W: np.ndarray | torch.Tensor | sp.spmatrix) -> tuple[int, np.ndarray]:
    """Number of connected components of the graph with adjacency ``W`` and each node's component."""
    if isinstance(W, torch.Tensor):
        W = W.detach().cpu().numpy()
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
    basis = torch.linalg.svd(projected, full_matrices=False).U[:, : vecs.shape[1] - 1]
    vals, rotation = torch.linalg.eigh(basis.T @ apply_operator(basis))
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
    matrix = (laplacian(W) if operator == "unnormalized" else normalized_laplacian(W)).double()
    if W.device.type == "cpu":
        # LAPACK's subset driver computes only the n_eig wanted pairs: ~10x faster than a
        # full decomposition at m = 512.
        vals, vecs = scipy.linalg.eigh(matrix.numpy(), subset_by_index=[0, n_eig - 1], driver="evx", check_finite=False)
        vals, vecs = torch.from_numpy(vals), torch.from_numpy(vecs)
    else:
        vals, vecs = torch.linalg.eigh(matrix)
        vals, vecs = vals[:n_eig], vecs[:, :n_eig]
    degrees = W.double().sum(dim=1)
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
    return vecs.to(device=W.device, dtype=W.dtype), vals.to(device=W.device, dtype=W.dtype)


def sparse_spectral_embedding(
    W: sp.spmatrix,
    n_components: int,
    *,
    operator: str = "normalized",
    drop_trivial: bool = False,
    diffusion_time: float = 1.0,
    on_disconnected: str = "warn",
    tol: float = 1e-8,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Leading eigenvectors of a whole-data-set sparse graph by Lanczos (ARPACK).

    Same conventions as :func:`spectral_embedding`. The start vector is drawn from
    ``seed`` so that the result is reproducible.
    """
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
    if operator == "diffusion":
        vecs = vecs / np.sqrt(degrees)[:, None]
        vecs = vecs / np.linalg.norm(vecs, axis=0, keepdims=True)
        vals = 1.0 - vals
        return diffusion_coordinates(fix_signs(vecs), vals, diffusion_time), vals
    return fix_signs(vecs), vals

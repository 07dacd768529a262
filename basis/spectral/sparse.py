"""A whole data set's embedding from its sparse graph (:func:`sparse_spectral_embedding`):
Lanczos (ARPACK) on the host, or a Chebyshev-filtered block iteration on the graph's
device, with the same signs and the same check for a disconnected graph as a batch.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.csgraph
import scipy.sparse.linalg
import torch

from basis.catalog import SPARSE_SOLVERS
from basis.errors import InputError
from basis.graph import csr_rows, csr_tensor
from basis.spectral.dense import (
    _check_request,
    check_connected,
    diffusion_coordinates,
    fix_signs,
    remove_trivial,
)


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


def laplacian_operator(W: torch.Tensor, operator: str) -> tuple[Callable, torch.Tensor, float]:
    """The product X -> L X of a sparse CSR graph's Laplacian (L_N for ``normalized`` and
    ``diffusion``, L for ``unnormalized``), with the degrees and an upper bound of its
    spectrum (2 for L_N; Gershgorin, twice the largest degree, for L). L_N's off-diagonal
    part is W with its values scaled by d_i^-1/2 d_j^-1/2: no sparse product is built."""
    rows = csr_rows(W)
    cols, values = W.col_indices(), W.values()
    # Each row's entries summed in order, by one thread per row: the same bytes on every
    # run and device (index_add_ adds a row's ~2k entries by atomics on CUDA, in whatever
    # order its threads run, so two runs of one reference could differ; basis.runtime.determinism).
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
    # float64 on a GPU too: this is the yardstick every d_G is measured against, solved
    # once per data set to a residual of 1e-10 (float32 stalls near 1e-6), not a hot loop.
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

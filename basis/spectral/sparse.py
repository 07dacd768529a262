"""A whole data set's embedding from its sparse graph (:func:`sparse_spectral_embedding`):
Lanczos (ARPACK) on the host, or a Chebyshev-filtered block iteration on the graph's
device, with the same signs and the same check for a disconnected graph as a batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.csgraph
import scipy.sparse.linalg
import torch

from basis.catalog import SPARSE_SOLVERS
from basis.errors import InputError
from basis.graph import csr_rows, csr_tensor
from basis.spectral.certificate import Certificate, UncertifiedEigenvectors, certify
from basis.spectral.chebyshev import chebyshev_eigensolve
from basis.spectral.dense import (
    _check_request,
    check_connected,
    diffusion_coordinates,
    fix_signs,
    remove_trivial,
)

log = logging.getLogger(__name__)


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
    report: dict[str, Any] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Leading eigenvectors of a whole-data-set sparse graph, certified.

    Same conventions as :func:`spectral_embedding`. ``solver`` ``"arpack"`` runs Lanczos
    (ARPACK) on the host; ``"chebyshev"`` a Chebyshev-filtered block iteration
    (:func:`chebyshev_eigensolve`) on the device of ``W`` (a torch sparse CSR tensor, from
    :func:`~basis.graph.device_affinity`; a scipy matrix is solved on the CPU). The start
    is drawn from ``seed`` so that the result is reproducible. Returns numpy arrays.

    Every solve is checked by its :class:`~basis.spectral.certificate.Certificate`
    (residuals, orthonormality, and the eigengap on the subspace's complement, which
    exposes a missed eigenvalue). Lanczos from one start vector misses members of a
    cluster of nearly equal eigenvalues, which a graph whose classes are joined only by
    tiny weights has near 0, while its residuals stay tiny; where ARPACK's certificate
    fails, the block iteration (whose convergence depends on the gap after the block, not
    within it) solves the graph again on the CPU. A graph neither solver certifies raises
    :class:`~basis.spectral.certificate.UncertifiedEigenvectors`. ``report``, when given,
    receives the certificate's figures under ``"certificate"``.
    """
    if solver not in SPARSE_SOLVERS:
        raise InputError(f"solver must be one of {list(SPARSE_SOLVERS)}, got {solver!r}")
    W = _as_torch_csr(W) if solver == "chebyshev" else _as_scipy_csr(W)
    n_eig = _check_request(operator, n_components, W.shape[0], drop_trivial)
    n_null, labels = check_connected(W, n_eig, on_disconnected)
    layout = {"operator": operator, "drop_trivial": drop_trivial, "diffusion_time": diffusion_time}
    chebyshev = partial(_device_sparse_embedding, n_eig=n_eig, n_null=n_null, seed=seed, **layout)
    if solver == "chebyshev":
        vecs, vals, certificate = chebyshev(W, labels=torch.as_tensor(labels))
    else:
        vecs, vals, certificate = _host_sparse_embedding(W, n_eig, n_null, labels, tol=tol, seed=seed, **layout)
        if not certificate.passed:
            log.warning("%s; solving again with the Chebyshev block iteration", certificate.summary())
            vecs, vals, certificate = chebyshev(_as_torch_csr(W), labels=torch.as_tensor(labels))
    if report is not None:
        report["certificate"] = certificate.to_dict()
    if not certificate.passed:
        raise UncertifiedEigenvectors(certificate.summary())
    return vecs, vals


def _as_scipy_csr(W: sp.spmatrix | torch.Tensor) -> sp.csr_matrix:
    if isinstance(W, torch.Tensor):
        W = W.cpu()
        W = sp.csr_matrix((W.values().numpy(), W.col_indices().numpy(), W.crow_indices().numpy()), shape=W.shape)
    return sp.csr_matrix(W, dtype=np.float64)


def _as_torch_csr(W: sp.spmatrix | torch.Tensor) -> torch.Tensor:
    if isinstance(W, torch.Tensor):
        return W
    W = sp.csr_matrix(W, dtype=np.float64)
    return csr_tensor(
        torch.from_numpy(W.indptr.astype(np.int64)),
        torch.from_numpy(W.indices.astype(np.int64)),
        torch.from_numpy(W.data),
        W.shape,
    )


def _host_sparse_embedding(
    W: sp.csr_matrix,
    n_eig: int,
    n_null: int,
    labels: np.ndarray,
    *,
    operator: str,
    drop_trivial: bool,
    diffusion_time: float,
    tol: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, Certificate]:
    """:func:`sparse_spectral_embedding` by ARPACK, with the certificate of the Laplacian's
    ``n_eig`` smallest eigenpairs it found."""
    n = W.shape[0]
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
    apply = lambda X: torch.from_numpy(lap @ X.numpy())  # noqa: E731
    certificate = certify(apply, torch.from_numpy(vals), torch.from_numpy(vecs), shift, solver="arpack", seed=seed)
    if drop_trivial:
        trivial = np.ones(n) if operator == "unnormalized" else np.sqrt(degrees)
        vals, vecs = remove_trivial(torch.from_numpy(vecs), torch.from_numpy(trivial), apply)
        vals, vecs = vals.numpy(), vecs.numpy()
    return (*_signed_coordinates(vals, vecs, degrees, operator, diffusion_time), certificate)


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


def _device_sparse_embedding(
    W: torch.Tensor,
    *,
    n_eig: int,
    n_null: int,
    labels: torch.Tensor,
    operator: str,
    drop_trivial: bool,
    diffusion_time: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, Certificate]:
    """:func:`sparse_spectral_embedding` by the Chebyshev block iteration on W's device,
    with the certificate of the Laplacian's ``n_eig`` smallest eigenpairs it found."""
    n = W.shape[0]
    apply, degrees, upper = laplacian_operator(W, operator)
    trivial = torch.ones_like(degrees) if operator == "unnormalized" else degrees.sqrt()
    null = None
    if n_null > 1:  # the null space, one vector per component, written down (as for ARPACK)
        _, component = torch.unique(labels.to(W.device), return_inverse=True)
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
    certificate = certify(apply, vals, vecs, upper, solver="chebyshev", seed=seed)
    if drop_trivial:
        vals, vecs = remove_trivial(vecs, trivial, apply)
    vecs, vals = _signed_coordinates(vals, vecs, degrees, operator, diffusion_time)
    return vecs.cpu().numpy(), vals.cpu().numpy(), certificate

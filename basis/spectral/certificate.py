"""A certificate for a computed invariant subspace: how far the eigenvectors a solver hands
back can be from the exact ones, measured on the operator itself (:func:`certify`).

A Lanczos solver started from one vector can miss members of a cluster of nearly equal
eigenvalues (a graph whose classes are joined only by tiny weights has K of them near 0)
and still return eigenpairs whose residuals are tiny: the residuals alone do not show it.
The certificate therefore also measures the eigengap after the returned eigenvalues as
the smallest eigenvalue of the operator on the returned subspace's orthogonal complement,
found by a block iteration (which, unlike Lanczos from one vector, resolves clusters). A
missed eigenvalue lies in that complement, so the gap comes out negative and the
certificate fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from basis.errors import InputError
from basis.spectral.chebyshev import chebyshev_eigensolve

#: Largest residual ``||L u - lambda u||`` accepted, relative to the operator's spectral
#: bound (2 for L_N): ARPACK's own stopping tolerance.
RESIDUAL_TOLERANCE = 1e-8
#: Largest ``|U^T U - I|`` entry accepted.
ORTHONORMALITY_TOLERANCE = 1e-8
#: The largest Davis-Kahan bound on d_G between the returned and the exact subspace for
#: the subspace to count as determined: a thousandth of the last digit a table reports.
D_G_TOLERANCE = 1e-6
#: The residual, relative to the spectral bound, to which the eigenpair past the subspace is
#: solved for the eigengap. Its Ritz value is an upper bound of the complement's smallest
#: eigenvalue whatever the residual (so a missed eigenvalue is found exactly), and the
#: Davis-Kahan bound takes the gap less this residual; a tighter solve costs 5x more where
#: the spectrum past the K-th eigenvalue is a dense band (touching clusters).
GAP_TOLERANCE = 1e-2


class UncertifiedEigenvectors(InputError):
    """No solver produced eigenvectors that pass their certificate: refused like bad input
    (exit 2, one line naming the failing figure), and nothing is written."""


@dataclass(frozen=True)
class Certificate:
    """What a solve is checked against (all measured on the operator, in float64).

    Attributes
    ----------
    solver : str
        The solver whose eigenvectors were certified.
    residual : float
        The largest residual norm ``||L u_i - lambda_i u_i||`` of the returned pairs.
    orthonormality : float
        The largest entry of ``|U^T U - I|``.
    eigengap : float
        The smallest eigenvalue of L on the returned subspace's complement minus the
        largest returned eigenvalue: the gap after the K-th eigenvalue when no eigenvalue
        was missed, negative when one was.
    d_G_bound : float
        The Davis-Kahan sin-theta bound ``(||R||_F / delta)^2`` on the Grassmann distance
        ``K - ||Q^T Q_exact||_F^2`` between the returned subspace and the exact one, with
        delta the eigengap less the residual of its own solve (infinite where delta is not
        positive).
    upper : float
        The operator's spectral bound, which the residual tolerance is relative to.
    """

    solver: str
    residual: float
    orthonormality: float
    eigengap: float
    d_G_bound: float
    upper: float

    @property
    def passed(self) -> bool:
        """The solver did its job: small residuals, orthonormal vectors, and no eigenvalue
        below the returned ones missed (a gap of at least minus the residual tolerance)."""
        slack = RESIDUAL_TOLERANCE * self.upper
        return self.residual <= slack and self.orthonormality <= ORTHONORMALITY_TOLERANCE and self.eigengap >= -slack

    @property
    def determined(self) -> bool:
        """The subspace is determined by the operator to within :data:`D_G_TOLERANCE` in
        d_G (Davis-Kahan): only then is a d_G measured against it a measurement."""
        return self.passed and self.d_G_bound <= D_G_TOLERANCE

    @property
    def failure(self) -> str | None:
        """The first failing figure, in words; None when the certificate passes."""
        slack = RESIDUAL_TOLERANCE * self.upper
        if self.residual > slack:
            return f"residual {self.residual:.1e} above {slack:.0e}"
        if self.orthonormality > ORTHONORMALITY_TOLERANCE:
            return f"orthonormality {self.orthonormality:.1e} above {ORTHONORMALITY_TOLERANCE:.0e}"
        if self.eigengap == -math.inf:
            return "the smallest eigenvalue outside the returned ones did not settle (no eigengap known)"
        if self.eigengap < -slack:
            return f"an eigenvalue below the largest returned one was missed (eigengap {self.eigengap:.2g})"
        return None

    def summary(self) -> str:
        """One line for a log or a report."""
        if not self.passed:
            return f"reference NOT certified ({self.solver}): {self.failure}"
        line = f"reference certified ({self.solver}): residual {self.residual:.0e}, gap {self.eigengap:.2g}"
        if not self.determined:
            line += f"; subspace not determined (d_G bound {self.d_G_bound:.1e}): its d_G are not measurements"
        return line

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed, "determined": self.determined}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Certificate:
        return cls(**{name: values[name] for name in cls.__dataclass_fields__})


def certify(
    apply: Callable[[torch.Tensor], torch.Tensor],
    vals: torch.Tensor,
    vecs: torch.Tensor,
    upper: float,
    *,
    solver: str,
    seed: int = 0,
) -> Certificate:
    """The :class:`Certificate` of the eigenpairs ``vals``, ``vecs`` (float64, on any
    device) of the symmetric operator ``apply`` (X -> L X, spectrum in [0, ``upper``]).

    The gap comes from the smallest eigenpair of L restricted to the complement of
    ``vecs``, by the Chebyshev-filtered block iteration with ``vecs`` deflated
    (:func:`~basis.spectral.chebyshev_eigensolve`, started from ``seed``).
    """
    n, n_eig = vecs.shape
    residuals = torch.linalg.norm(apply(vecs) - vecs * vals[None, :], dim=0)
    gram = vecs.T @ vecs
    orthonormality = float((gram - torch.eye(n_eig, dtype=gram.dtype, device=gram.device)).abs().max())
    largest = float(vals.max())
    if n_eig >= n - 1:  # nothing left outside the subspace to miss
        complement = math.inf
    else:
        orthonormal = torch.linalg.qr(vecs).Q
        try:
            smallest, _ = chebyshev_eigensolve(
                apply, n, 1, upper, device=vecs.device, null=orthonormal, seed=seed, tol=GAP_TOLERANCE, degree=8
            )
            complement = float(smallest[0])
        except RuntimeError:  # the complement's smallest eigenvalue did not settle: no gap known
            complement = -math.inf
    gap = complement - largest
    surely = gap - GAP_TOLERANCE * upper  # the gap less what the complement's solve leaves open
    bound = (float(torch.linalg.norm(residuals)) / surely) ** 2 if surely > 0 else math.inf
    return Certificate(solver, float(residuals.max()), orthonormality, gap, bound, float(upper))

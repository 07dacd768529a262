"""Graph operators and their leading eigenvectors.

- :mod:`~basis.spectral.dense`: a batch's operators, components and eigenvectors (dense,
  or by a Chebyshev-filtered subspace iteration);
- :mod:`~basis.spectral.sparse`: a whole data set's, from its sparse graph (Lanczos on the
  host, or a Chebyshev-filtered block iteration on the graph's device);
- :mod:`~basis.spectral.certificate`: how far a solve's eigenvectors can be from the exact
  ones, measured on the operator.
"""

from basis.spectral.certificate import Certificate, UncertifiedEigenvectors, certify
from basis.spectral.chebyshev import chebyshev_eigensolve
from basis.spectral.dense import (
    ON_DISCONNECTED,
    OPERATORS,
    DisconnectedGraphWarning,
    SubspaceEigensolver,
    check_connected,
    component_labels,
    connected_components,
    count_roots,
    diffusion_coordinates,
    embed_graph,
    fix_signs,
    laplacian,
    normalized_laplacian,
    operator_matrix,
    random_walk_matrix,
    remove_trivial,
    settle_components,
    sparse_component_labels,
    spectral_embedding,
    transition_matrix,
)
from basis.spectral.sparse import laplacian_operator, sparse_spectral_embedding

__all__ = [
    "Certificate",
    "UncertifiedEigenvectors",
    "certify",
    "ON_DISCONNECTED",
    "OPERATORS",
    "DisconnectedGraphWarning",
    "SubspaceEigensolver",
    "check_connected",
    "chebyshev_eigensolve",
    "component_labels",
    "connected_components",
    "count_roots",
    "diffusion_coordinates",
    "embed_graph",
    "fix_signs",
    "laplacian",
    "laplacian_operator",
    "normalized_laplacian",
    "operator_matrix",
    "random_walk_matrix",
    "remove_trivial",
    "settle_components",
    "sparse_component_labels",
    "sparse_spectral_embedding",
    "spectral_embedding",
    "transition_matrix",
]

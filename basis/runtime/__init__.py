"""What makes a job fast and safe on a device and in a workflow, apart from the science it
runs: CUDA-graph capture (:mod:`~basis.runtime.capture`), the host-sync audit
(:mod:`~basis.runtime.syncs`), order-dependent sums (:mod:`~basis.runtime.determinism`),
phase timings (:mod:`~basis.runtime.timing`), thread budgets (:mod:`~basis.runtime.threads`),
a CPU Adam (:mod:`~basis.runtime.optim`), device choice (:mod:`~basis.runtime.device`),
stopping on SIGTERM (:mod:`~basis.runtime.stopping`), time limits
(:mod:`~basis.runtime.deadline`), peak host memory (:mod:`~basis.runtime.memory`), and files
in (:mod:`~basis.runtime.inputs`, stores by :mod:`~basis.runtime.stores`) and out
(:mod:`~basis.runtime.outputs`).

These modules import no other part of ``basis`` but :mod:`basis.errors`.
"""

"""How many CPU threads a job may use, and making every thread pool honour that number.

A job started by Snakemake gets ``threads`` cores; left alone, torch, OpenBLAS and OpenMP
would each start one thread per core of the machine, so N jobs on C cores run N x C
threads. :func:`limit_threads` caps all of them: torch's intra-op pool, every BLAS and
OpenMP library already loaded (threadpoolctl), and, through the environment, those loaded
later (scikit-learn's OpenMP reads ``OMP_NUM_THREADS`` when it loads). The training loop
splits the same budget between its two pipeline stages (see
:meth:`basis.estimators.SpectralEstimator.fit`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from basis.errors import InputError

#: Environment variables read by OpenMP and the BLAS libraries when they load.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, e.g. under taskset or a batch
    scheduler), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def limit_threads(n_threads: int | None = None) -> int:
    """Cap every thread pool of this process at ``n_threads`` (default: the available
    cores) and return the number used."""
    from threadpoolctl import threadpool_limits

    cores = available_cores()
    n_threads = cores if n_threads is None else n_threads
    if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
        raise InputError(f"threads must be a positive integer, got {n_threads!r}")
    if n_threads > cores:
        # More threads than cores only oversubscribes them, and a fresh `import torch` caps
        # its pool at the cores while set_num_threads does not: the count, and with it the
        # order of floating-point sums, would depend on when torch was imported.
        print(f"note: --threads {n_threads} capped at the {cores} cores this job may use", file=sys.stderr)
        n_threads = cores
    for name in THREAD_VARIABLES:
        os.environ[name] = str(n_threads)
    if "torch" in sys.modules:  # else torch reads OMP_NUM_THREADS when it is first imported
        sys.modules["torch"].set_num_threads(n_threads)
    threadpool_limits(limits=n_threads)
    return n_threads


def thread_report() -> dict[str, int]:
    """Threads each pool of this process would use now: torch's and every loaded
    BLAS/OpenMP library's (the largest per kind)."""
    import torch
    from threadpoolctl import threadpool_info

    report = {"torch": torch.get_num_threads()}
    for pool in threadpool_info():
        key = pool["user_api"]
        report[key] = max(report.get(key, 0), pool["num_threads"])
    return report


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch on one thread within the block, its thread count restored after it: a training
    loop then runs its pipeline's stages in turn on the calling thread, where a thread-local
    audit (:mod:`basis.runtime.syncs`, :mod:`basis.runtime.determinism`) sees every op."""
    import torch

    budget = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(budget)

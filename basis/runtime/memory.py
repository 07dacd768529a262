"""Peak host memory of this process, per phase: :func:`restart_host_peak` starts the peak
again from the current resident memory, :func:`host_peak_gb` reads it.

This module imports only the standard library.
"""

from __future__ import annotations

import resource
from pathlib import Path


def restart_host_peak() -> None:
    """Start the peak resident memory again from the current one (Linux's ``clear_refs``;
    elsewhere the peak counts from the process's start)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def host_peak_gb() -> float:
    """Peak resident memory of this process since :func:`restart_host_peak`, in GB."""
    try:
        status = Path("/proc/self/status").read_text().splitlines()
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 2**20
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20

"""How a ``python -m basis`` command runs and ends.

Every command runs in a process of its own, so its numbers do not depend on how it was
started: a shell, Snakemake, SLURM, a test. Start-up is kept short by loading only what a
command uses (scikit-learn, MLflow and matplotlib are imported where they are needed) and
by fewer, larger jobs (``seeds_in_one_job``), not by reusing a process. How it stops on
SIGTERM: :mod:`basis.runtime.stopping`.

This module imports only the standard library.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import NoReturn


def exit_now(code: int | str | None) -> NoReturn:
    """End the process with ``code`` (as ``sys.exit`` reads it) as the interpreter's own exit
    begins (its thread-exit hooks run, which stop the idle workers of thread pools, and its
    non-daemon threads are joined; its exit handlers run; its standard streams are flushed),
    without the interpreter's teardown. Freeing torch, scikit-learn and MLflow module by module takes
    1-2 s at the end of every job (0.7 s after a bare ``import torch``) and does nothing a
    finished command needs: its files are closed, its MLflow run is ended, its logging
    handlers and temporary folders are closed by the exit handlers. A process under a
    profiler or tracer (``python -m cProfile``, coverage) exits normally, so that it writes
    its report at the end."""
    import atexit

    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    # CPython's own first steps of an exit (Py_FinalizeEx): threading's exit hooks and joins
    # (concurrent.futures stops its pools' idle workers there), then the exit handlers.
    threading._shutdown()
    atexit._run_exitfuncs()  # also used by multiprocessing
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream has nothing left to flush
            pass
    os._exit(code or 0)


def run_command(argv: list[str] | None = None) -> int | str | None:
    """:func:`basis.cli.main` on ``argv``, with argparse's exits (usage errors, ``--help``)
    turned into their codes."""
    from basis.cli import main

    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code

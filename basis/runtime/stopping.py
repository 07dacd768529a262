"""How a command stops: SIGTERM (a scheduler's cancel or time limit, Snakemake stopping
its jobs), SIGHUP (its terminal closed) and SIGINT (Ctrl-C) are turned into
:class:`basis.errors.Terminated` in the main thread, which unwinds: the command's MLflow
run is closed as KILLED and no partial output is kept. Only the first stop signal raises: a
job often gets several (SLURM signals every process
of a timed-out job and ``srun`` forwards the signal to its step again), and a second
exception raised inside the clean-up of the first would break it off, leaving the run
RUNNING.

Python runs that handler only between bytecodes, so a command inside one long C call (an
``eigh``, a matrix product) would keep computing until the call returns; a watcher thread,
woken by the signal itself (:func:`signal.set_wakeup_fd`), therefore ends the process
:data:`GRACE_S` seconds later if it has not ended by then, after the same clean-up
(:func:`on_stop`). A clean-up runs at most once: the watcher waits for one that the main
thread has begun rather than ending the process in the middle of it, up to
:data:`CLEAN_UP_S` seconds for all of them. SIGKILL cannot be caught: the run stays
RUNNING, as after a power loss, and the next invocation of the workflow closes it
(:func:`basis.tracking.close_stale_runs`).

This module imports only the standard library.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

from basis.errors import Terminated

#: Seconds the main thread has to unwind after SIGTERM before the watcher ends the process.
GRACE_S = 0.5
#: Seconds the watcher gives the clean-ups in all (an MLflow store that does not answer must
#: not keep a stopped process alive); well within SLURM's KillWait (30 s by default).
CLEAN_UP_S = 3.0
#: The signals that stop a command as a cancel does; SIGINT is Ctrl-C, which a terminal sends
#: to Snakemake and to every job it started.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def stopped_status(signum: int) -> int:
    """The exit status of a command stopped by signal ``signum``, as a shell reports it."""
    return 128 + signum


_clean_ups: dict[int, Callable[[], None]] = {}
_clean_ups_lock = threading.Lock()
_stopper_installed = False
_stopping = threading.Event()


def once(action: Callable[[], None]) -> Callable[[], None]:
    """``action`` made safe to call from the main thread's unwinding and from the watcher
    alike: it runs until it succeeds once; a second caller waits for a call under way and
    then does nothing."""
    lock = threading.Lock()
    done = False

    def run() -> None:
        nonlocal done
        with lock:
            if not done:
                action()
                done = True

    return run


def on_stop(clean_up: Callable[[], None]) -> Callable[[], None]:
    """Register ``clean_up`` to run if the watcher has to end the process (SIGTERM while the
    main thread is stuck in a long call); returns the function that unregisters it. Used for
    what the main thread's unwinding would otherwise do: close the MLflow run, remove a
    partial output. Wrap it in :func:`once` when the unwinding calls it too."""
    key = id(clean_up)
    with _clean_ups_lock:
        _clean_ups[key] = clean_up

    def forget() -> None:
        with _clean_ups_lock:
            _clean_ups.pop(key, None)

    return forget


def stop_on_sigterm() -> None:
    """Install the SIGTERM handling described in the module's docstring (main thread only;
    a second call does nothing)."""
    global _stopper_installed
    if _stopper_installed or threading.current_thread() is not threading.main_thread():
        return

    def unwind(signum, frame):
        if _stopping.is_set():
            return  # the stop is under way (see the module's docstring); the watcher bounds it
        _stopping.set()
        raise Terminated(f"signal {signum}", signum)

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    for number in STOP_SIGNALS:
        if signal.getsignal(number) is not signal.SIG_IGN:  # a background job ignores Ctrl-C, and keeps to it
            signal.signal(number, unwind)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(read_end,), name="basis-sigterm-watcher", daemon=True).start()
    _stopper_installed = True


def _watch(read_end: int) -> None:
    """Wait for a stop signal's byte on the wake-up pipe; then give the main thread
    :data:`GRACE_S` seconds to unwind and end the process if it has not."""
    stop = None
    while stop is None:
        try:
            received = os.read(read_end, 64)
        except InterruptedError:
            continue
        if not received:
            return
        stop = next((number for number in received if number in STOP_SIGNALS), None)
    threading.Event().wait(GRACE_S)
    cleaning = threading.Thread(target=_clean_up, name="basis-stop-clean-up", daemon=True)
    cleaning.start()
    cleaning.join(CLEAN_UP_S)
    if cleaning.is_alive():
        cleaned = f"the clean-up after the stop took over {CLEAN_UP_S:g} s; ended without it"
    else:
        cleaned = "its MLflow run is closed as KILLED, partial outputs removed"
    print(
        f"error: stopped by signal {stop} during a long computation; ended without waiting for it ({cleaned})",
        file=sys.stderr,
        flush=True,
    )
    os._exit(stopped_status(stop))


def _clean_up() -> None:
    with _clean_ups_lock:
        clean_ups = list(_clean_ups.values())
    for clean_up in reversed(clean_ups):
        try:
            clean_up()
        except Exception as err:  # the process ends either way; say what was not cleaned
            print(f"error: a clean-up after the stop failed: {err}", file=sys.stderr, flush=True)

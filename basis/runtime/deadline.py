"""Time limits on work that may not finish: a per-point limit of a cost study, where a
method that is past the limit must be stopped there rather than left computing for hours.

Two ways, for two kinds of work. A training loop stops itself: :class:`Deadline` is checked
from its per-step callback and raises :class:`TimeLimitReached` at the first step past the
limit. A solver that runs inside one long C call (ARPACK, a sparse factorisation) cannot
be stopped from within, so :class:`Worker` runs it in a process of its own and ends that
process at the limit. The child inherits the thread caps through the environment
(:func:`basis.runtime.threads.limit_threads` writes them there) and ends itself when its
parent is gone, so a cancelled job leaves no solver behind.

This module imports only the standard library.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from typing import Any

#: How long a worker may take to begin a call (a fresh interpreter, its imports, the
#: arguments), not counted in the limit, which begins when the worker begins the call.
START_S = 300.0


class TimeLimitReached(Exception):
    """The work did not finish within its time limit and was stopped."""


class Deadline:
    """A limit of ``seconds`` from now, for a training loop's callback: calling it raises
    :class:`TimeLimitReached` once the limit has passed, and calls ``then(step, info)``
    before that (the callback it wraps, or None)."""

    def __init__(self, seconds: float, then: Callable | None = None) -> None:
        self.seconds, self.then = seconds, then
        self.ends = time.perf_counter() + seconds

    def __call__(self, step: int, info: dict) -> None:
        if time.perf_counter() > self.ends:
            raise TimeLimitReached(f"stopped at step {step}, past the limit of {self.seconds:g} s")
        if self.then is not None:
            self.then(step, info)


class Worker:
    """A worker process for work that may have to be ended at a time limit: :meth:`run`
    hands it one call at a time and returns the result, or ends the process at the limit
    (the next call starts a fresh one). Use it as a context manager: the process ends with
    the block."""

    def __init__(self) -> None:
        self._child = self._tasks = self._results = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run(self, seconds: float, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` in the worker and its result, or :class:`TimeLimitReached`
        if it has not returned ``seconds`` after the worker began it; an exception it raises
        is raised here. ``function``, its arguments and its result must pickle."""
        if self._child is None:
            self._start()
        self._tasks.send((function, args))
        try:
            if not self._results.poll(START_S):
                raise TimeLimitReached(f"the worker process did not begin the work in {START_S:g} s")
            self._results.recv()  # begun: the limit counts from here
            if not self._results.poll(seconds):
                raise TimeLimitReached(f"did not finish in {seconds:g} s")
            kind, value = self._results.recv()
        except EOFError:
            code = self._child.exitcode
            self.close()
            raise RuntimeError(f"the worker process died (exit code {code})") from None
        except TimeLimitReached:
            self.close()
            raise
        if kind == "error":
            raise value
        return value

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads
        tasks, self._tasks = context.Pipe(duplex=False)
        self._results, results = context.Pipe(duplex=False)
        self._child = context.Process(target=_serve, args=(tasks, results, os.getpid()), daemon=True)
        self._child.start()
        tasks.close()
        results.close()

    def close(self) -> None:
        """End the worker process, if one runs."""
        if self._child is None:
            return
        self._tasks.close()
        self._results.close()
        self._child.terminate()
        self._child.join(10)
        if self._child.is_alive():
            self._child.kill()
        self._child = self._tasks = self._results = None


def _serve(tasks, results, parent: int) -> None:
    """The worker's side of :class:`Worker`: one call at a time until its parent closes."""
    threading.Thread(target=_end_with_parent, args=(parent,), daemon=True).start()
    while True:
        try:
            function, args = tasks.recv()
        except EOFError:
            return
        results.send("begun")
        try:
            message = ("result", function(*args))
        except Exception as err:  # raised in the parent
            message = ("error", err)
        results.send(message)


def _end_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)

"""Where a job's wall time goes: named phases, recorded only while a job asks for them.

``with recording() as seconds:`` collects the wall seconds of every ``with timed(name):``
block run inside it (in this thread or context), summed by name and exclusive: a block
timed inside another counts for its own phase only (a tracking flush inside training is
tracking), so the phases add up to at most the job's wall time. Outside a recording
``timed`` costs one lookup. The command line records each command's phases (start-up,
loading, training, each metric, tracking) and prints them to stderr under ``--json``,
where ``python -m benchmarks jobs profile`` reads them back from the jobs' logs.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

F = TypeVar("F", bound=Callable)


class _Recording:
    """The phases, the time spent in nested blocks of each open block, and the clock's
    reading where the job's time starts counting (its start, or its start-up's end)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.nested: list[float] = []
        self.started = time.perf_counter()
        self.before_start = 0.0  # the start-up's seconds, once recorded


_current: ContextVar[_Recording | None] = ContextVar("basis_timings", default=None)

#: The prefix of the line that carries a job's timings in its log.
TIMINGS_PREFIX = "# timings "


@contextmanager
def recording() -> Iterator[dict[str, float]]:
    """Collect the phases timed inside the block into the dict it yields."""
    current = _Recording()
    token = _current.set(current)
    try:
        yield current.seconds
    finally:
        _current.reset(token)


@contextmanager
def timed(name: str) -> Iterator[None]:
    """Add the block's wall seconds to phase ``name`` of the current recording, if any."""
    current = _current.get()
    if current is None:
        yield
        return
    seconds, nested = current.seconds, current.nested
    nested.append(0.0)
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        seconds[name] = seconds.get(name, 0.0) + elapsed - nested.pop()
        if nested:
            nested[-1] += elapsed


def timed_calls(name: str) -> Callable[[F], F]:
    """Decorator: every call of the function is timed as phase ``name``."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with timed(name):
                return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def process_started() -> float | None:
    """When this process started, in seconds of system uptime (Linux: from /proc), or None
    where unknown."""
    try:
        with open("/proc/self/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def process_age() -> float | None:
    """Seconds since this process started, or None where unknown: the start-up a job pays
    before its first line of work (interpreter and imports)."""
    started = process_started()
    try:
        with open("/proc/uptime") as uptime:
            return None if started is None else float(uptime.read().split()[0]) - started
    except (OSError, ValueError, IndexError):
        return None


def mark_startup() -> None:
    """Record, once, the process's age as phase ``startup``: called where a command's first
    work begins, after its imports."""
    current = _current.get()
    if current is not None and "startup" not in current.seconds:
        age = process_age()
        if age is not None:
            current.seconds["startup"] = current.before_start = age
            current.started = time.perf_counter()


def job_seconds() -> float:
    """The current recording's wall seconds so far, start-up included once it is recorded.
    Measured on the same clock as the phases (the process age is read once, at the
    start-up's end, since /proc counts in 10 ms ticks), so the phases never add up to more."""
    current = _current.get()
    if current is None:
        raise RuntimeError("job_seconds() is only meaningful inside recording()")
    return current.before_start + time.perf_counter() - current.started


def report(seconds: dict[str, float], total: float) -> None:
    """One stderr line with the phases and the job's ``total``, for the job's log. Phases
    are rounded down and the total up, so the printed phases add up to at most the total."""
    line = {k: math.floor(v * 1e4) / 1e4 for k, v in seconds.items()}
    line["total"] = math.ceil(total * 1e4) / 1e4
    print(TIMINGS_PREFIX + json.dumps(line), file=sys.stderr, flush=True)


class Progress:
    """Progress lines on stderr for a job's log: ``label done/total``, the time per unit
    and the time left, at most one line per ``interval`` seconds, and always the last.
    Lines, not a redrawn bar, so that a log file reads well; stderr, so that ``--json``
    keeps stdout for its one object."""

    def __init__(self, total: int, label: str, *, unit: str = "step", interval: float = 5.0):
        self.total, self.label, self.unit, self.interval = total, label, unit, interval
        self.started = self.printed = time.perf_counter()

    def update(self, done: int, detail: str = "") -> None:
        now = time.perf_counter()
        if done < self.total and now - self.printed < self.interval:
            return
        self.printed = now
        per_unit = (now - self.started) / max(done, 1)
        print(
            f"{self.label} {done}/{self.total}  {detail + '  ' if detail else ''}"
            f"{per_unit * 1e3:.1f} ms/{self.unit}  ETA {per_unit * (self.total - done):.0f} s",
            file=sys.stderr,
            flush=True,
        )

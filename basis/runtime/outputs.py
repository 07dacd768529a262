"""Results written whole or not at all, and read back with a message that says how to
redo them."""

from __future__ import annotations

import errno
import json
import math
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from basis.errors import InputError
from basis.runtime.stopping import on_stop


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed onto ``path`` when the block
    ends without error (a rename is atomic), removed otherwise. A killed job therefore
    leaves either the old file or the new one, never a truncated one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}.partial{path.suffix}")  # keeps .npz, which np.savez would add
    forget = on_stop(lambda: partial.unlink(missing_ok=True))  # a stop mid-write (basis.cli.launcher)
    try:
        yield partial
        os.replace(partial, path)
    except Exception as err:
        if full_disk(err):
            raise InputError(
                f"{path} could not be written: its file system is full; free space or write elsewhere"
            ) from None
        raise
    finally:
        partial.unlink(missing_ok=True)
        forget()


#: What a write to a full file system raises: the errno, or the message of a library that
#: wraps it (SQLite's, and torch's zip writer, whose short write reads "unexpected pos").
_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_FULL_MESSAGES = ("database or disk is full", "No space left on device", "unexpected pos", "file write failed")


def full_disk(err: BaseException | None) -> bool:
    """Whether ``err``, or an error it was raised from, is a write to a full file system."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in _FULL_ERRNOS:
            return True
        if any(message in str(err) for message in _FULL_MESSAGES):
            return True
        err = err.__cause__ or err.__context__
    return False


def write_text(path: str | Path, text: str) -> None:
    """``path`` holds ``text``, written whole or not at all."""
    with atomic_path(path) as partial:
        partial.write_text(text)


def write_json(path: str | Path, values: dict) -> None:
    write_text(path, json.dumps(values, indent=2))


def read_metrics(path: str | Path, required: Iterable[str] = (), numbers: Iterable[str] = ()) -> dict:
    """A job's ``metrics.json``, or an InputError that names it and how to redo it.

    Each measure in ``required`` must be there (unless the file lists it under
    ``not_available``) and hold a finite number; each in ``numbers`` that is there must
    hold a number. An aggregate that averaged what it found would otherwise show one seed
    as a mean, or fail halfway on a string."""
    redo = f"rerun the job that writes it: snakemake --cores all --forcerun {path}"
    try:
        values = json.loads(Path(path).read_text())
        if not isinstance(values, dict):
            raise ValueError(f"a JSON object was expected, found {type(values).__name__}")
    except (OSError, ValueError) as err:
        raise InputError(f"{path} is missing or corrupt ({err}); {redo}") from None
    required = tuple(required)
    for key in required:
        if key not in values and key not in (values.get("not_available") or {}):
            raise InputError(f"{path} lacks the measure {key!r}; {redo}")
    for key in (*required, *numbers):
        value = values.get(key, 0.0)
        finite = key not in required or (isinstance(value, int | float) and math.isfinite(value))
        if isinstance(value, bool) or not isinstance(value, int | float) or not finite:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
            raise InputError(f"{path}: the measure {key!r} holds {shown}, not a number; {redo}")
    return values

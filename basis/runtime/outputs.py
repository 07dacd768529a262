"""Results written whole or not at all, and read back with a message that says how to
redo them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
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
    finally:
        partial.unlink(missing_ok=True)
        forget()


def write_json(path: str | Path, values: dict) -> None:
    with atomic_path(path) as partial:
        partial.write_text(json.dumps(values, indent=2))


def read_metrics(path: str | Path) -> dict:
    """A job's ``metrics.json``, or an InputError that names it and how to redo it."""
    try:
        values = json.loads(Path(path).read_text())
        if not isinstance(values, dict):
            raise ValueError(f"a JSON object was expected, found {type(values).__name__}")
        return values
    except (OSError, ValueError) as err:
        raise InputError(
            f"{path} is missing or corrupt ({err}); rerun the job that writes it:"
            f" snakemake --cores all --forcerun {path}"
        ) from None

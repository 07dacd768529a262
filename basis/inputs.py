"""The door every file and number a user hands over comes through: point arrays,
checkpoints, output paths, MLflow stores and seeds.

Each check runs when the input enters, before any compute and before any MLflow run is
opened, and fails with an :class:`~basis.errors.InputError` whose one line says what was
given, what was expected and what to do. The command line prints that line and exits
with status 2. Torch is imported only by :func:`load_checkpoint`.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from basis.errors import InputError

#: Seeds are handed to torch, numpy and scikit-learn (whose random_state stops at 2^32 - 1);
#: a run also derives seed + 1 for its RANSAC draws.
MAX_SEED = 2**32 - 2


def check_seed(seed: Any, name: str = "--seed") -> int:
    """``seed`` as an int in [0, :data:`MAX_SEED`]."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise InputError(f"{name} {seed!r} is not a valid seed: expected an integer from 0 to {MAX_SEED}")
    return int(seed)


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_output(path: str | Path, *, folder: bool, name: str = "--out") -> None:
    """Refuse, before any compute, an output that cannot be written as asked: a folder
    that is a file (or the reverse), or a place where nothing can be created. The test
    writes one temporary file in the nearest existing folder and removes it, so it also
    holds for root, for whom permission bits do not count."""
    target = Path(path)
    if folder and target.exists() and not target.is_dir():
        raise InputError(f"{name} {path} is an existing file; {name} names a folder for the results")
    if not folder and target.is_dir():
        raise InputError(f"{name} {path} is a folder; {name} names the file to write")
    existing = _nearest_existing(target if folder else target.parent)
    if not existing.is_dir():
        raise InputError(f"{name} {path} lies under {existing}, which is a file, not a folder")
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".basis-write-test-", dir=existing)
    except OSError as err:
        raise InputError(
            f"{name} {path} cannot be written ({existing}: {err.strerror}); choose a writable place"
        ) from None
    os.close(descriptor)
    os.unlink(probe)


def load_points(path: str | Path, *, name: str = "--input", images: bool = False) -> np.ndarray:
    """A ``.npy`` array of points, one row each: 2-D (points x features), or with
    ``images`` 4-D (points x channels x height x width); numeric, finite and
    not empty. Pickled objects are never loaded."""
    path = Path(path)
    expected = "images (n x channels x height x width)" if images else "points (n x d)"
    if not path.is_file():
        raise InputError(f"{name} {path} does not exist; expected a .npy array of {expected}")
    try:
        array = np.load(path, allow_pickle=False)
    except ValueError as err:
        if "allow_pickle" in str(err):
            raise InputError(f"{name} {path} holds Python objects; expected a .npy array of numbers") from None
        raise InputError(f"{name} {path} is not a readable .npy array ({err})") from None
    except (OSError, EOFError) as err:
        raise InputError(f"{name} {path} is empty, truncated or not a .npy file ({err})") from None
    if isinstance(array, np.lib.npyio.NpzFile):
        array.close()
        raise InputError(f"{name} {path} is an .npz archive; expected one .npy array of {expected}")
    ranks = (4,) if images else (2,)
    if array.ndim not in ranks:
        raise InputError(f"{name} {path} has shape {array.shape}; expected {expected}")
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise InputError(f"{name} {path} holds {array.dtype} values; expected numbers")
    if array.shape[0] == 0 or array.size == 0:
        raise InputError(f"{name} {path} holds no points (shape {array.shape})")
    if not np.isfinite(array).all():
        raise InputError(f"{name} {path} holds NaN or infinite values")
    return array


def load_checkpoint(path: str | Path, what: str) -> dict[str, Any]:
    """The state a basis checkpoint holds (``torch.load`` with ``weights_only``: a file that
    holds anything but tensors and plain values is refused, never executed)."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{what} {path} does not exist")
    if not zipfile.is_zipfile(path):  # basis writes torch's zip format; nothing else is unpickled
        raise InputError(f"{what} {path} is not a checkpoint written by basis (not a torch zip archive)")
    try:
        with warnings.catch_warnings(record=True):  # torch's notes on the pickle protocol: not the user's concern
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise InputError(
            f"{what} {path} holds Python objects beyond weights; it was not written by basis and is not loaded"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise InputError(f"{what} {path} is not a readable checkpoint ({reason})") from None
    if not isinstance(state, dict):
        raise InputError(f"{what} {path} holds a {type(state).__name__}, not a checkpoint written by basis")
    return state


SQLITE_HEADER = b"SQLite format 3\x00"


def check_store(store: str | Path, *, creates: bool) -> None:
    """A local MLflow store (a folder holding ``mlflow.db``) that can be used: not a file,
    its database an SQLite file, and, where the command writes (``creates``), writable.
    Nothing to check when ``MLFLOW_TRACKING_URI`` names another store."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return
    folder = Path(store)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--store {store} is a file; --store names the folder that holds mlflow.db")
    database = folder / "mlflow.db"
    if database.exists():
        if not database.is_file():
            raise InputError(f"--store {store}: {database} is not a file")
        try:
            with database.open("rb") as handle:
                header = handle.read(len(SQLITE_HEADER))
        except OSError as err:
            raise InputError(f"--store {store}: {database} cannot be read ({err.strerror})") from None
        if header and header != SQLITE_HEADER:
            raise InputError(
                f"--store {store}: {database} is not an SQLite database; move it away or name another --store"
            )
    elif not creates:
        raise InputError(f"--store {store} holds no mlflow.db; name the folder the runs were logged to")
    if creates:
        check_output(folder, folder=True, name="--store")

"""The door every file and number a user hands over comes through: point arrays,
checkpoints, output paths and seeds (MLflow stores: :mod:`basis.runtime.stores`).

Each check runs when the input enters, before any compute and before any MLflow run is
opened, and fails with an :class:`~basis.errors.InputError` whose one line says what was
given, what was expected and what to do. The command line prints that line and exits
with status 2. Torch is imported only by :func:`load_checkpoint`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from basis.errors import InputError

#: Beyond this magnitude the float32 squared distances of the kNN graph overflow (and a
#: network's float32 forward pass).
MAX_FEATURE_MAGNITUDE = 1e15

#: Seeds are handed to torch, numpy and scikit-learn (whose random_state stops at 2^32 - 1);
#: a run also derives seed + 1 for its RANSAC draws.
MAX_SEED = 2**32 - 2


def file_md5(path: str | Path) -> str:
    """The MD5 sum of a file, read in blocks (data sets are hundreds of MB)."""
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_seed(seed: Any, name: str = "--seed") -> int:
    """``seed`` as an int in [0, :data:`MAX_SEED`]."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise InputError(f"{name} {seed!r} is not a valid seed: expected an integer from 0 to {MAX_SEED}")
    return int(seed)


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not _exists(path) and path != path.parent:
        path = path.parent
    return path


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # e.g. a name too long to look up: nothing of that name can exist
        return False


#: A partial output is written beside its file as ``.<stem>.partial<suffix>`` (basis.runtime.outputs).
_PARTIAL_EXTRA = len("..partial")


def check_path_length(path: str | Path, name: str, *, extra: int = 0) -> None:
    """Refuse a path the system cannot hold: a part longer than the file system's name
    limit (``extra`` characters more where a partial file is written beside it) or a whole
    path over its path limit. Without this, the first ``open`` or ``stat`` fails deep inside
    a command."""
    absolute = os.fsencode(Path(path).absolute())
    existing = _nearest_existing(Path(path) if Path(path).is_absolute() else Path.cwd() / path)
    try:
        name_max, path_max = os.pathconf(existing, "PC_NAME_MAX"), os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    longest = max((len(part) for part in absolute.split(b"/")), default=0)
    if longest + extra > name_max or len(absolute) + extra >= path_max:
        raise InputError(
            f"{name} {str(path)[:60]}... is too long for the file system (a name may have {name_max - extra}"
            f" bytes here, a path {path_max - 1 - extra}); choose a shorter one"
        )


def check_output(
    path: str | Path, *, folder: bool, name: str = "--out", suffix: str | None = None, claim: bool = True
) -> None:
    """Refuse, before any compute, an output that cannot be written as asked: a file
    without the ``suffix`` it must have, a symbolic link (dangling or not: the result would
    replace the link or land elsewhere), something that is not a regular file or folder (a
    device such as /dev/null, a pipe), a folder that is a file (or the reverse), a name too
    long for the file system, a place where nothing can be created, or (with ``claim``) an
    output another basis command is writing now (:func:`claim_output`). The write test creates one
    temporary file in the nearest existing folder and removes it, so it also holds for
    root, for whom permission bits do not count."""
    target = Path(path)
    kind = "folder" if folder else "file"
    if not str(path):
        raise InputError(f"{name} is empty; name the {kind} to write")
    check_path_length(target, name, extra=0 if folder else _PARTIAL_EXTRA)
    if target.is_symlink():
        dangling = "a dangling symbolic link" if not target.exists() else "a symbolic link"
        raise InputError(f"{name} {path} is {dangling}; name the {kind} itself")
    if folder and target.exists() and not target.is_dir():
        raise InputError(f"{name} {path} is an existing file; {name} names a folder for the results")
    if not folder and target.is_dir():
        raise InputError(f"{name} {path} is a folder; {name} names the file to write")
    if not folder and target.exists() and not target.is_file():
        raise InputError(f"{name} {path} is not a regular file (a device or a pipe); name a file to write")
    if suffix is not None and target.suffix.lower() != suffix:
        raise InputError(f"{name} {path} does not end in {suffix}; name the {suffix} {kind} to write")
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
    check_apart_from_inputs(target, name, folder=folder)
    if claim:
        claim_output(target, name)


#: The command's inputs, by flag (:func:`declare_inputs`), that no output may replace.
_inputs: list[tuple[str, Path]] = []


def declare_inputs(inputs: dict[str, str | Path | list | None]) -> None:
    """Name the files and folders a command reads (flag -> path, list of paths or None),
    so that :func:`check_output` refuses any output over one of them."""
    _inputs.clear()
    for flag, paths in inputs.items():
        for path in paths if isinstance(paths, (list, tuple)) else [paths]:
            if path is not None and str(path):
                _inputs.append((flag, Path(path)))


#: The inputs that are a data set's folder, inside which no output may be written (the next
#: read of the folder would take it for data).
_DATA_FLAGS = ("--data", "--test-data")


def check_apart_from_inputs(path: str | Path, name: str = "--out", *, folder: bool) -> None:
    """Refuse an output that is one of the declared inputs (by any spelling, through a
    symbolic link in its path, or as a hard link of it), for a folder one that holds an
    input, and any output inside a data set's folder: writing it would replace or add to
    what the command is reading."""
    output = Path(os.path.realpath(path))
    for flag, source in _inputs:
        if flag == name:  # the store: read and written by design
            continue
        real = Path(os.path.realpath(source))
        if output == real or _same_file(path, source):
            raise InputError(f"{name} {path} is the input {flag} {source}; write the output somewhere else")
        if folder and output in real.parents:
            raise InputError(f"{name} {path} holds the input {flag} {source}; write the output somewhere else")
        if flag in _DATA_FLAGS and real in output.parents:  # a file in an image folder reads as an image
            raise InputError(f"{name} {path} lies inside the input {flag} {source}; write the output somewhere else")


def _same_file(first: str | Path, second: str | Path) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


_claims: list[tuple[int, Path]] = []


def claim_output(path: Path, name: str = "--out") -> None:
    """Hold, until :func:`release_outputs` or the process's end, a lock on ``path`` (by its
    absolute path, in a private folder of the temporary directory, so nothing is left
    beside the results): a second basis command writing the same output at once is refused
    instead of both writing it. The lock file goes with the release."""
    import fcntl

    folder = Path(tempfile.gettempdir()) / f"basis-outputs-{os.getuid()}"
    lock = folder / f"{hashlib.sha256(os.fsencode(path.absolute())).hexdigest()[:24]}.lock"
    while True:
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return  # no private place for locks: the output is written unguarded, as before
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)
            raise InputError(
                f"{name} {path} is being written by another basis command now; wait for it or choose another"
            ) from None
        # The holder before us may have removed the file between our open and our lock:
        # then the lock is on a file nobody else can find, and the claim starts again.
        try:
            current = os.stat(lock).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(descriptor).st_ino:
            _claims.append((descriptor, lock))
            return
        os.close(descriptor)


def release_outputs() -> None:
    """Release every output :func:`claim_output` holds (a command's end), removing its lock
    file while still holding it (a claim that opened it meanwhile sees it gone and retries)."""
    while _claims:
        descriptor, lock = _claims.pop()
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(descriptor)


def load_points(path: str | Path, *, name: str = "--input", images: bool = False) -> np.ndarray:
    """A ``.npy`` array of points, one row each: 2-D (points x features), or with
    ``images`` 4-D (points x channels x height x width); numeric, finite and
    not empty. Pickled objects are never loaded."""
    path = Path(path)
    expected = "images (n x channels x height x width)" if images else "points (n x d)"
    check_path_length(path, name)
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
    if np.abs(array).max() > MAX_FEATURE_MAGNITUDE:
        raise InputError(f"{name} {path} holds values beyond {MAX_FEATURE_MAGNITUDE:g} in magnitude; rescale them")
    return array


def load_checkpoint(path: str | Path, what: str) -> dict[str, Any]:
    """The state a basis checkpoint holds (``torch.load`` with ``weights_only``: a file that
    holds anything but tensors and plain values is refused, never executed)."""
    import torch

    path = Path(path)
    check_path_length(path, what)
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
    if not _all_finite(state):
        raise InputError(f"{what} {path} holds NaN or infinite weights; retrain the model that wrote it")
    return state


def _all_finite(value: Any) -> bool:
    """Whether every floating-point tensor or array inside ``value`` (nested dicts, lists)
    is finite."""
    import torch

    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() or bool(torch.isfinite(value).all())
    if isinstance(value, np.ndarray):
        return not np.issubdtype(value.dtype, np.floating) or bool(np.isfinite(value).all())
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_all_finite(v) for v in value)
    return True

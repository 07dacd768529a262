"""The door every file and number a user hands over comes through: point arrays,
checkpoints, output paths, MLflow stores and seeds.

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


def check_apart_from_inputs(path: str | Path, name: str = "--out", *, folder: bool) -> None:
    """Refuse an output that is one of the declared inputs (by any spelling, through a
    symbolic link in its path, or as a hard link of it), or, for a folder, one that holds an
    input: writing it would replace what the command is reading."""
    output = Path(os.path.realpath(path))
    for flag, source in _inputs:
        if flag == name:  # the store: read and written by design
            continue
        real = Path(os.path.realpath(source))
        if output == real or _same_file(path, source):
            raise InputError(f"{name} {path} is the input {flag} {source}; write the output somewhere else")
        if folder and output in real.parents:
            raise InputError(f"{name} {path} holds the input {flag} {source}; write the output somewhere else")


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


SQLITE_HEADER = b"SQLite format 3\x00"


def check_store(store: str | Path, *, creates: bool) -> None:
    """A local MLflow store (a folder holding ``mlflow.db``) that can be used: not a file,
    its database an SQLite file, and, where the command writes (``creates``), writable.
    With ``MLFLOW_TRACKING_URI`` set, that store is checked instead (:func:`check_tracking_uri`)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        check_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
        return
    check_path_length(store, "--store")
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
        if not creates and not _holds_mlflow_tables(database):  # MLflow would write its schema into it
            raise InputError(f"--store {store}: {database} holds no MLflow runs (empty); run the workflow first")
    elif not creates:
        raise InputError(f"--store {store} holds no mlflow.db; name the folder the runs were logged to")
    if creates:
        check_output(folder, folder=True, name="--store", claim=False)  # a store is shared by design


def _holds_mlflow_tables(database: Path) -> bool:
    """Whether an SQLite file holds MLflow's tables, read in read-only mode."""
    import sqlite3

    try:
        with sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True) as connection:
            query = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('experiments', 'runs')"
            return connection.execute(query).fetchone()[0] == 2
    except sqlite3.Error:
        return False


#: Database schemes MLflow accepts, and the module each one's driver is imported as.
_DATABASE_DRIVERS = {"postgresql": "psycopg2", "mysql": "pymysql", "mssql": "pyodbc"}
#: Seconds a tracking server has to accept a connection before it is called unreachable.
SERVER_TIMEOUT_S = 5.0


def redacted_uri(uri: str) -> str:
    """``uri`` as a message or a file may show it: without the user and password of its
    address (``http://user:secret@host`` -> ``http://host``), nor a ``password`` or ``token``
    in its query."""
    from urllib.parse import parse_qsl, urlencode, urlsplit

    try:
        parts = urlsplit(uri)
    except ValueError:  # an address urlsplit cannot read: its credentials, if any, are not shown
        return uri.rsplit("@", 1)[-1] if "@" in uri else uri
    hidden = ("password", "passwd", "pwd", "token", "secret")
    query = [(key, "***" if key.lower() in hidden else value) for key, value in parse_qsl(parts.query)]
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1], query=urlencode(query, safe="*")).geturl()


def redacted_text(text: str) -> str:
    """``text`` (a message, a traceback) without the credentials it might carry: those of any
    address in it (:func:`redacted_uri`'s rule) and the values of the variables that hold
    MLflow's password and token."""
    import re

    text = re.sub(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s'\"]+@", r"\1", text)
    for name in ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        if len(os.environ.get(name, "")) >= 4:  # a short value would hide ordinary text
            text = text.replace(os.environ[name], "***")
    return text


def check_tracking_uri(uri: str, *, reach: bool = True) -> None:
    """An ``MLFLOW_TRACKING_URI`` that can be used: a server (http, https) that accepts a
    connection within :data:`SERVER_TIMEOUT_S` (asked only with ``reach``: the workflow's
    parse checks the address alone, its start the server); a SQLite file whose folder exists
    (MLflow would create the folder, and put artifacts in ./mlruns); a database whose driver
    is installed; or a local folder (file:)."""
    import importlib.util
    import socket
    from urllib.parse import urlparse

    parsed, shown = urlparse(uri), redacted_uri(uri)
    scheme = parsed.scheme.lower()
    expected = "expected http(s)://host:port, sqlite:////absolute/path.db or a database URI"
    if scheme in ("http", "https"):
        if not parsed.hostname:
            raise InputError(f"MLFLOW_TRACKING_URI {shown} names no host; {expected}")
        if not reach:
            return
        try:
            port = parsed.port or (443 if scheme == "https" else 80)
            with socket.create_connection((parsed.hostname, port), timeout=SERVER_TIMEOUT_S):
                pass
        except (OSError, ValueError) as err:
            raise InputError(
                f"MLFLOW_TRACKING_URI {shown}: no tracking server answers there ({err}); start it or unset the variable"
            ) from None
        _check_credentials(uri, shown)
    elif scheme == "sqlite":
        # sqlite:///name.db is relative to the folder a command starts in (each job its own
        # store); sqlite:////folder/name.db is the absolute path /folder/name.db.
        if not parsed.path.startswith("//"):
            raise InputError(
                f"MLFLOW_TRACKING_URI {shown} names a path relative to the current folder;"
                f" give an absolute one: sqlite:////absolute/path.db"
            )
        database = Path(parsed.path[1:])
        if not database.parent.is_dir():
            raise InputError(f"MLFLOW_TRACKING_URI {shown}: the folder of {database} does not exist; create it first")
    elif scheme.split("+")[0] in _DATABASE_DRIVERS:
        driver = _DATABASE_DRIVERS[scheme.split("+")[0]]
        if importlib.util.find_spec(driver) is None:
            raise InputError(f"MLFLOW_TRACKING_URI {shown} needs the {driver} driver: pip install {driver}")
        if reach:
            _check_database(uri, shown, driver)
    elif scheme == "file" or (not scheme and uri.startswith("/")):
        folder = Path(parsed.path or uri)
        if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() != "true":  # MLflow 3 refuses it otherwise
            raise InputError(
                f"MLFLOW_TRACKING_URI {shown}: MLflow keeps its file store for old runs only; give a database"
                " (sqlite:////absolute/path.db), or set MLFLOW_ALLOW_FILE_STORE=true to use the folder"
            )
        if folder.exists() and not folder.is_dir():
            raise InputError(f"MLFLOW_TRACKING_URI {shown} is a file; a file store is a folder")
    else:
        raise InputError(f"MLFLOW_TRACKING_URI {shown} is not a tracking store URI; {expected}")


def _check_database(uri: str, shown: str, driver: str) -> None:
    """Refuse a database server that does not answer within :data:`SERVER_TIMEOUT_S` or turns
    the connection away (a wrong password, no such database), before MLflow's client would
    raise it as a traceback mid-run."""
    import sqlalchemy

    timeout = {"pyodbc": "timeout"}.get(driver, "connect_timeout")
    engine = sqlalchemy.create_engine(uri, connect_args={timeout: int(SERVER_TIMEOUT_S)})
    try:
        with engine.connect():
            pass
    except sqlalchemy.exc.SQLAlchemyError as err:
        reason = redacted_text(str(getattr(err, "orig", err) or err).strip().splitlines()[0])
        raise InputError(
            f"MLFLOW_TRACKING_URI {shown}: the database refuses the connection or does not answer"
            f" ({reason}); start it or check the URI"
        ) from None
    finally:
        engine.dispose()


def _check_credentials(uri: str, shown: str) -> None:
    """One read of the experiments list, as MLflow's client makes it (its TLS settings and
    credentials), refusing in one line what would hang or fail a run: no answer within
    :data:`SERVER_TIMEOUT_S`, an untrusted certificate, not MLflow (404), credentials turned
    away (401, 403). A server error (5xx) is left to the run's retries."""
    from urllib.parse import urlsplit

    import requests

    headers, auth = {}, None
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:  # MLflow's order: the user and password (both), else the token
        auth = (user, password)
    elif os.environ.get("MLFLOW_TRACKING_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"
    verify = os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or (
        os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() != "true"
    )
    try:  # requests takes user:password@ from the address itself
        answer = requests.get(
            f"{uri.rstrip('/')}/api/2.0/mlflow/experiments/search",
            params={"max_results": 1},
            headers=headers,
            auth=auth,
            timeout=SERVER_TIMEOUT_S,
            verify=verify,
        )
    except requests.exceptions.SSLError:
        raise InputError(
            f"MLFLOW_TRACKING_URI {shown}: its TLS certificate is not trusted here; give its CA's certificate"
            " as MLFLOW_TRACKING_SERVER_CERT_PATH (or set MLFLOW_TRACKING_INSECURE_TLS=true)"
        ) from None
    except requests.Timeout:
        raise InputError(
            f"MLFLOW_TRACKING_URI {shown} takes the connection but does not answer an MLflow request within"
            f" {SERVER_TIMEOUT_S:g} s; check that an MLflow tracking server runs there"
        ) from None
    except requests.RequestException as err:
        reason = redacted_text(str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__)
        raise InputError(f"MLFLOW_TRACKING_URI {shown}: the request to the server failed ({reason})") from None
    given = bool(headers or auth or urlsplit(uri).username)
    if answer.status_code == 401:
        what = "refused the user and password given" if given else "asks for a user and password"
        raise InputError(
            f"MLFLOW_TRACKING_URI {shown} {what} (HTTP 401);"
            " set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
        )
    if answer.status_code == 403:
        raise InputError(f"MLFLOW_TRACKING_URI {shown}: the user given may not read its experiments (HTTP 403)")
    if answer.status_code == 404:
        raise InputError(
            f"MLFLOW_TRACKING_URI {shown} answers, but not as an MLflow tracking server (HTTP 404 for its"
            " experiments); check the address"
        )


#: MLflow keeps an experiment's name in a column of 500 characters; names stay well inside.
MAX_EXPERIMENT_NAME = 200


def check_experiment_name(name: str, flag: str = "--track") -> None:
    """An MLflow experiment name: not empty, printable, at most :data:`MAX_EXPERIMENT_NAME` characters."""
    if not name.strip():
        raise InputError(f"{flag} is empty; name the MLflow experiment to log to")
    if len(name) > MAX_EXPERIMENT_NAME or not name.isprintable():
        raise InputError(
            f"{flag} {name[:40]!r}... is not a usable experiment name:"
            f" at most {MAX_EXPERIMENT_NAME} printable characters"
        )

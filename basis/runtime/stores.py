"""The door a tracking store comes through: a local store's folder (``--store``), an
``MLFLOW_TRACKING_URI`` of every form the docs list (a server, an SQLite file, a database,
a file store), and an experiment's name; and how a message shows a store's address
(without its credentials).

Like :mod:`basis.runtime.inputs`, each check runs before any compute and before any MLflow
run opens, and fails with an :class:`~basis.errors.InputError` of one line.
"""

from __future__ import annotations

import os
from pathlib import Path

from basis.errors import InputError
from basis.runtime.inputs import check_output, check_path_length

#: The first bytes of an SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"


def check_store(store: str | Path, *, creates: bool) -> None:
    """A local MLflow store (a folder holding ``mlflow.db``) that can be used: not a file,
    its database an SQLite file, and, where the command writes (``creates``), writable.
    With ``MLFLOW_TRACKING_URI`` set, that store is checked instead (:func:`check_tracking_uri`)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        check_tracking_uri(os.environ["MLFLOW_TRACKING_URI"], writes=creates)
        return
    check_path_length(store, "--store")
    folder = Path(store)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--store {store} is a file; --store names the folder that holds mlflow.db")
    database = folder / "mlflow.db"
    if database.exists():
        _check_sqlite(database, f"--store {store}", writes=creates)
        if not creates and not _holds_mlflow_tables(database):  # MLflow would write its schema into it
            raise InputError(f"--store {store}: {database} holds no MLflow runs (empty); run the workflow first")
    elif not creates:
        raise InputError(f"--store {store} holds no mlflow.db; name the folder the runs were logged to")
    if creates:
        check_output(folder, folder=True, name="--store", claim=False)  # a store is shared by design


#: Seconds the door waits for a lock on an SQLite store that another process holds (the
#: workflow's own jobs hold theirs for well under a second).
LOCK_WAIT_S = 10.0


def _check_sqlite(database: Path, shown: str, *, writes: bool) -> None:
    """An SQLite store's file that MLflow can use: a file, an SQLite database, and not locked
    by another process (where the command ``writes``, a write lock can be taken)."""
    import sqlite3

    if not database.is_file():
        raise InputError(f"{shown}: {database} is not a file")
    try:
        with database.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as err:
        raise InputError(f"{shown}: {database} cannot be read ({err.strerror})") from None
    if header and header != SQLITE_HEADER:
        raise InputError(f"{shown}: {database} is not an SQLite database; move it away or name another store")
    mode = "rw" if writes else "ro"
    try:
        connection = sqlite3.connect(f"{database.resolve().as_uri()}?mode={mode}", uri=True, timeout=LOCK_WAIT_S)
    except sqlite3.Error as err:
        raise InputError(f"{shown}: {database} cannot be opened ({err})") from None
    try:
        connection.execute("BEGIN IMMEDIATE" if writes else "SELECT COUNT(*) FROM sqlite_master")
    except sqlite3.OperationalError as err:
        if "locked" in str(err):
            raise InputError(
                f"{shown}: {database} is locked by another process (waited {LOCK_WAIT_S:g} s);"
                " close what holds it (an sqlite3 shell, a database browser) and retry"
            ) from None
        raise InputError(f"{shown}: {database} cannot be {'written' if writes else 'read'} ({err})") from None
    finally:
        connection.close()


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
#: Seconds a tracking server has to answer the door's MLflow request: a server on a busy
#: host takes seconds to answer its first request; one that stalls still ends the command
#: in one line well within a minute.
REQUEST_TIMEOUT_S = 20.0


def redacted_uri(uri: str) -> str:
    """``uri`` as a message or a file may show it: without the user and password of its
    address (``http://user:secret@host`` -> ``http://host``), nor a ``password`` or ``token``
    in its query."""
    from urllib.parse import parse_qsl, urlencode, urlsplit

    try:
        parts = urlsplit(uri)
    except ValueError:  # an address urlsplit cannot read: its credentials, if any, are not shown
        return uri.rsplit("@", 1)[-1] if "@" in uri else uri
    if "@" in uri and "@" not in parts.netloc:  # user:password@host without a scheme urlsplit reads
        scheme, _, rest = uri.rpartition("://")
        user, _, host = rest.rpartition("@")
        if "/" not in user:
            return f"{scheme}://{host}" if scheme else host
    hidden = ("password", "passwd", "pwd", "token", "secret")
    pairs = parse_qsl(parts.query)
    if "@" not in parts.netloc and not any(key.lower() in hidden for key, _ in pairs):
        return uri  # nothing to hide: shown as given (sqlite:////abs keeps its four slashes)
    query = [(key, "***" if key.lower() in hidden else value) for key, value in pairs]
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


def check_tracking_uri(uri: str, *, reach: bool = True, writes: bool = False) -> None:
    """An ``MLFLOW_TRACKING_URI`` that can be used: a server (http, https) that accepts a
    connection within :data:`SERVER_TIMEOUT_S` (asked only with ``reach``: the workflow's
    parse checks the address alone, its start the server); a SQLite file whose folder exists
    (MLflow would create the folder, and put artifacts in ./mlruns), not locked, and
    writable where the command ``writes``; a database whose driver is installed; or a local
    folder (file:)."""
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
        if database.exists():
            _check_sqlite(database, f"MLFLOW_TRACKING_URI {shown}", writes=writes)
        if writes:  # MLflow writes its journal beside the database, and creates it if missing
            check_output(database.parent, folder=True, name=f"MLFLOW_TRACKING_URI {shown}: the folder", claim=False)
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
    :data:`REQUEST_TIMEOUT_S`, an untrusted certificate, not MLflow (404), credentials turned
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
            timeout=(SERVER_TIMEOUT_S, REQUEST_TIMEOUT_S),  # to connect, and to answer
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
            f" {REQUEST_TIMEOUT_S:g} s; check that an MLflow tracking server runs there"
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

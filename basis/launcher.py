"""How a ``python -m basis`` command runs and ends.

A job spends seconds importing torch, scikit-learn and MLflow before its first line of
work, and the workflow runs hundreds of short jobs. So, by default, a command runs in a
fork of a **persistent worker**: an interpreter that has imported those libraries once and
waits on a Unix socket in a private folder. The command's process (the client) hands the
worker its arguments, working folder, environment, CPU affinity and standard streams (the
file descriptors themselves, so output goes exactly where it would have gone); the worker
forks a child that becomes the command, and the client forwards signals to it and exits
with its status. A child imports the library (``basis``) afresh, so an edit takes effect at
once; the worker imports only third-party libraries, and a worker serves only clients
whose interpreter, import path and import-time environment match its own (:func:`worker_key`).
It exits after ``BASIS_WORKER_IDLE`` seconds (default 120) without a command.

The command runs in this process instead where a worker cannot serve it faithfully or is
not wanted: ``BASIS_WORKER=off``; under SLURM (each job is a fresh allocation); under a
profiler or tracer (cProfile, coverage), or with ``-X``, ``-W``, ``-O``, ``-I``, ``-E`` or ``-s``; on a
system without ``fork`` and Unix sockets; or when the worker cannot be reached or started.
What differs from a process of its own: a benchmark that measures the process tree (e.g.
Snakemake's ``benchmark:`` ``cpu_time`` and ``max_rss``) sees only the client; the job's own
phase timings (``# timings``) count from the client's start.

This module imports only the standard library, so that a client costs an interpreter's
start-up and no more.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import signal
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

from basis.timing import process_started  # standard library only, like this module

#: The switch: ``off`` (or ``0``, ``false``, ``no``) runs every command in its own process.
SWITCH = "BASIS_WORKER"
#: Seconds a worker waits for a command before it exits.
IDLE = "BASIS_WORKER_IDLE"
DEFAULT_IDLE_S = 120.0
#: The third-party modules a worker imports once: what training, evaluation, tracking and
#: figure jobs import (optional ones are skipped where they are not installed).
PRELOADED = (
    "numpy",
    "scipy.linalg",
    "scipy.sparse",
    "scipy.sparse.csgraph",
    "scipy.sparse.linalg",
    "scipy.stats",
    "torch",
    "torch.nn",
    "torch.optim",
    "threadpoolctl",
    "sklearn",
    "sklearn.cluster",
    "sklearn.datasets",
    "sklearn.linear_model",
    "sklearn.metrics",
    "sklearn.neighbors",
    "yaml",
    "matplotlib",
    "matplotlib.pyplot",
    "mlflow",
    "mlflow.pytorch",
    "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.system_metrics.system_metrics_monitor",
)
#: Environment variables read when those libraries load (thread pools, BLAS, CUDA, locale,
#: the interpreter's own): a worker serves only clients whose values match its own.
IMPORT_TIME_VARIABLES = (
    "PYTHON",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "GOTO",
    "BLIS_",
    "VECLIB_",
    "NUMEXPR_",
    "TORCH",
    "PYTORCH_",
    "CUDA_",
    "NVIDIA_",
    "LD_",
    "LANG",
    "LC_",
    "MPL",
    "MATPLOTLIB",
    "MLFLOW_",
    "HOME",
    "XDG_",
    "TMPDIR",
)
#: Signals the client passes on to the command (SIGKILL cannot be caught: a child whose
#: client is gone is sent SIGTERM by its own watcher thread instead).
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_FDS = (0, 1, 2)
_STARTUP_TIMEOUT_S = 600.0
#: A Unix socket's path is at most 107 bytes on Linux (104 on macOS).
_LONGEST_SOCKET_PATH = 100


# -- how a command ends ---------------------------------------------------------------------
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
    import threading

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


# -- the client ------------------------------------------------------------------------------
def wanted() -> bool:
    """Whether this command may run in a worker (see the module's docstring)."""
    if os.environ.get(SWITCH, "").strip().lower() in ("off", "0", "false", "no"):
        return False
    if "SLURM_JOB_ID" in os.environ or sys.getprofile() is not None or sys.gettrace() is not None:
        return False
    if sys._xoptions or sys.warnoptions:
        return False
    flags = sys.flags  # a worker starts as plain `python`: one started with -O, -I, -E or -s runs here
    if flags.optimize or flags.isolated or flags.ignore_environment or flags.no_site or flags.no_user_site:
        return False
    return hasattr(os, "fork") and hasattr(socket, "AF_UNIX") and hasattr(socket, "send_fds")


def worker_key() -> str:
    """What a worker's imports depend on: the interpreter and its flags, the import path
    (and when its folders last changed: an upgrade), the import-time environment, the
    resource limits, priority and control group, and this module's own source."""

    def stamp(path: str) -> int | None:
        try:
            return os.stat(path).st_mtime_ns
        except OSError:
            return None

    def read(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError:
            return ""

    limits = (resource.RLIMIT_AS, resource.RLIMIT_DATA, resource.RLIMIT_NOFILE, resource.RLIMIT_STACK)
    facts = {
        "executable": sys.executable,
        "version": sys.version,
        "flags": list(sys.flags),
        "path": [(entry, stamp(entry)) for entry in sys.path[1:]],
        "environment": sorted(
            (name, value) for name, value in os.environ.items() if name.startswith(IMPORT_TIME_VARIABLES)
        ),
        "limits": [resource.getrlimit(limit) for limit in limits],
        "priority": os.getpriority(os.PRIO_PROCESS, 0),
        "cgroup": read("/proc/self/cgroup"),
        "launcher": stamp(__file__),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:20]


def worker_folder() -> Path | None:
    """This user's private folder of worker sockets, or None where it is not private."""
    folder = Path(tempfile.gettempdir()) / f"basis-worker-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return None
    private = info.st_uid == os.getuid() and not info.st_mode & 0o077 and not folder.is_symlink()
    return folder if private else None


def run_in_worker(argv: list[str]) -> int | None:
    """Run ``python -m basis`` with ``argv`` (``sys.argv``) in a worker, starting one if
    none is waiting; its exit status (a command ended by a signal ends this process by the
    same signal), or None where it must run in this process."""
    if not wanted():
        return None
    folder = worker_folder()
    if folder is None:
        return None
    key = worker_key()
    address = folder / f"{key}.sock"
    if len(os.fsencode(address)) > _LONGEST_SOCKET_PATH:
        return None  # a deep TMPDIR: no Unix socket can be bound there
    connection = _connect(address) or _start_worker(folder, key, address)
    if connection is None:
        return None
    with connection:
        request = {
            "argv": argv,
            "cwd": os.getcwd(),
            "path0": sys.path[0],
            "environment": dict(os.environ),
            "umask": _umask(),
            "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "started": process_started(),
            "unbuffered": bool(getattr(sys.stdout, "write_through", False)),
        }
        try:
            _send(connection, request)
            reply = _Lines(connection)
            child = int(reply.next()["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # the worker went away before it forked: nothing has run
        for number in FORWARDED:
            signal.signal(number, lambda number, frame: _forward(child, number))
        try:
            status = int(reply.next()["status"])
        except (OSError, ValueError, KeyError, TypeError):
            print(f"error: the basis worker ended before command {child} reported its status", file=sys.stderr)
            return 1
    if status < 0:  # ended by a signal: end the same way
        for number in FORWARDED:
            signal.signal(number, signal.SIG_DFL)
        sys.stdout.flush()
        os.kill(os.getpid(), -status)
        return 128 - status
    return status


def _forward(child: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, number)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _connect(address: Path) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(address))
    except OSError:
        connection.close()
        return None
    return connection


def _start_worker(folder: Path, key: str, address: Path) -> socket.socket | None:
    """Start a worker for ``key`` (one at a time: the others wait on a lock) and connect."""
    import fcntl
    import subprocess

    with open(folder / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        connection = _connect(address)  # another client may have started it meanwhile
        if connection is not None:
            return connection
        with contextlib.suppress(FileNotFoundError):
            address.unlink()  # a worker that is gone left its socket
        package_root = Path(__file__).resolve().parents[1]
        with open(folder / f"{key}.log", "ab") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "basis.launcher", str(address)],
                cwd=package_root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # not in the job's process group: a job's end does not end it
            )
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and worker.poll() is None:
            connection = _connect(address)
            if connection is not None:
                return connection
            time.sleep(0.02)
        return None


# -- the wire: length-prefixed JSON, the streams' descriptors with the request ---------------
def _send(connection: socket.socket, request: dict[str, Any]) -> None:
    data = json.dumps(request).encode()
    socket.send_fds(connection, [struct.pack("!I", len(data))], list(_FDS))
    connection.sendall(data)


def _receive(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    head, fds, _, _ = socket.recv_fds(connection, 4, len(_FDS))
    if len(head) < 4:
        head += _exactly(connection, 4 - len(head))
    return json.loads(_exactly(connection, struct.unpack("!I", head)[0])), fds


def _exactly(connection: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = connection.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("the client went away")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class _Lines:
    """JSON objects, one per line, as the worker writes them."""

    def __init__(self, connection: socket.socket):
        self.reader = connection.makefile("rb")

    def next(self) -> dict[str, Any]:
        line = self.reader.readline()
        if not line:
            raise ConnectionError("the worker went away")
        return json.loads(line)


# -- the worker ------------------------------------------------------------------------------
def serve(address: Path) -> NoReturn:
    """Import :data:`PRELOADED`, then fork a child for each client's command on ``address``
    until none has come for ``BASIS_WORKER_IDLE`` seconds."""
    import gc
    import importlib
    import selectors

    for name in PRELOADED:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    idle_s = float(os.environ.get(IDLE, DEFAULT_IDLE_S))
    gc.collect()
    gc.freeze()  # the children share these objects' pages instead of copying them on access
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(address))
    bound = address.stat().st_ino  # the socket file this worker made (a later worker may replace it)
    listener.listen(64)
    print(f"worker {os.getpid()} ready", flush=True)  # its log: which process serves this folder's clients
    wake_read, wake_write = socket.socketpair()
    wake_read.setblocking(False)
    wake_write.setblocking(False)
    signal.set_wakeup_fd(wake_write.fileno())
    signal.signal(signal.SIGCHLD, lambda number, frame: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    clients: dict[int, socket.socket] = {}
    last_seen = time.monotonic()
    while clients or time.monotonic() - last_seen < idle_s:
        if not address.exists():
            break  # its folder was cleaned: no client can find this worker any more
        for ready, _ in selector.select(timeout=min(idle_s, 5.0)):
            if ready.fileobj is wake_read:
                with contextlib.suppress(BlockingIOError):
                    wake_read.recv(4096)
                continue
            connection, _ = listener.accept()
            last_seen = time.monotonic()
            try:
                request, fds = _receive(connection)
            except (OSError, ValueError):
                connection.close()
                continue
            pid = os.fork()
            if pid == 0:
                for other in [listener, wake_read, wake_write, *clients.values()]:
                    other.close()
                selector.close()
                _become(request, fds, connection)
            for fd in fds:
                os.close(fd)
            clients[pid] = connection
            _tell(connection, {"pid": pid})
        _reap(clients)
        if clients:
            last_seen = time.monotonic()
    with contextlib.suppress(FileNotFoundError):
        if address.stat().st_ino == bound:
            address.unlink()
    os._exit(0)


def _reap(clients: dict[int, socket.socket]) -> None:
    """Report each ended child's status to its client."""
    for pid in list(clients):
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended:
            connection = clients.pop(pid)
            _tell(connection, {"status": os.waitstatus_to_exitcode(status)})
            connection.close()


def _tell(connection: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # a client that is gone has nothing to hear
        connection.sendall(json.dumps(message).encode() + b"\n")


def _become(request: dict[str, Any], fds: list[int], connection: socket.socket) -> NoReturn:
    """In the forked child: take on the client's streams, folder, environment, mask and
    cores, import the library afresh, run the command and exit with its code."""
    import io
    import threading

    code: int | str | None = 1
    try:
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, *FORWARDED):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in zip(_FDS, fds):
            os.dup2(fd, target)
            os.close(fd)
        unbuffered = request["unbuffered"]  # python -u or PYTHONUNBUFFERED
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=sys.stdin.encoding)
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False),
            encoding=sys.stdout.encoding,
            errors=sys.stdout.errors,
            line_buffering=os.isatty(1),
            write_through=unbuffered,
        )
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False),
            encoding=sys.stderr.encoding,
            errors="backslashreplace",
            line_buffering=True,
            write_through=unbuffered,
        )
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["environment"])
        os.umask(request["umask"])
        if request["affinity"] is not None:
            os.sched_setaffinity(0, request["affinity"])
        sys.argv = list(request["argv"])
        sys.path[0] = request["path0"]
        for name in [name for name in sys.modules if name == "basis" or name.startswith("basis.")]:
            del sys.modules[name]  # the library as the client's folder has it now
        # The client may die without a word (SIGKILL): end the command as a cancel would.
        threading.Thread(target=_watch, args=(connection,), daemon=True).start()
        from basis import timing

        timing.PROCESS_STARTED = request["started"]
        code = run_command(sys.argv[1:])
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # never return into the worker's loop
        import traceback

        traceback.print_exc()
    exit_now(code)


def _watch(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while connection.recv(1):
            pass
    os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))

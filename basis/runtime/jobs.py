"""A workflow job's log and its failure, for the scripts of ``workflow/scripts/``.

Snakemake keeps a job's earlier outputs until the job succeeds and puts them back when it
fails (every output is declared ``update()``), so a failed rerun loses nothing. What this
module adds: the job's one-line reason on the console as well as in its log (which is
never left empty), and the kept outputs' modification times put back after Snakemake
restores them (and Snakemake's record of the failed job dropped), so that the failed job
is still out of date and the next run tries it again instead of taking the old results
for current.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from basis.errors import InputError

#: Where a failed job leaves the modification times of its kept outputs
#: (:func:`age_restored_outputs` applies them once Snakemake has restored the outputs).
FAILED_NOTES = Path("results/logs/failed")


def _note_path(log: str | Path) -> Path:
    import hashlib

    return FAILED_NOTES / f"{hashlib.sha256(os.fsencode(Path(log).absolute())).hexdigest()[:24]}.json"


def _remember_outputs(outputs: Sequence[str | Path], log: str | Path) -> None:
    """Note the outputs' modification times as the job found them (the previous generation)."""
    times = {}
    for output in map(Path, outputs):
        try:
            times[str(output.absolute())] = output.stat().st_mtime_ns
        except OSError:
            continue  # not there yet: nothing to put back
    if times:
        note = _note_path(log)
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(json.dumps(times))


def age_restored_outputs(folder: str | Path = FAILED_NOTES) -> list[str]:
    """Give the outputs that Snakemake restored after a failed job their earlier
    modification times (Snakemake's copy makes them new, and the failed job would look
    done); an output is only ever made older, never newer. Returns the outputs put back,
    relative to the current folder (the workflow's), for their Snakemake records to be
    dropped as well: Snakemake records a failed job as finished, with its inputs' checksums
    of the moment, and would take the corrupt input for the one the outputs were made from.
    The notes are removed. Run by the workflow's ``onerror`` (and ``onstart``, for notes a
    killed workflow left)."""
    restored = []
    for note in sorted(Path(folder).glob("*.json")):
        try:
            times = json.loads(note.read_text())
        except (OSError, ValueError):
            times = {}
        for path, mtime_ns in times.items() if isinstance(times, dict) else ():
            try:
                current = os.stat(path)
            except OSError:
                continue
            if isinstance(mtime_ns, int) and mtime_ns < current.st_mtime_ns:
                os.utime(path, ns=(current.st_atime_ns, mtime_ns), follow_symlinks=False)
                restored.append(os.path.relpath(path))
        note.unlink(missing_ok=True)
    return restored


def _fail(log: TextIO | None, line: str, status: int) -> None:
    """End the job: ``line`` in its log and on the console, exit ``status``."""
    if log is not None:
        log.write(f"{line}\n")
        log.flush()
    print(line, file=sys.__stderr__, flush=True)
    raise SystemExit(status)


#: How a job's first console line starts: what it runs (a rule with ``script:`` has no shell
#: command for Snakemake to print).
JOB_COMMAND = "    command: "


@contextmanager
def job_log(log_path: str | Path, outputs: Sequence[str | Path] = ()) -> Iterator[TextIO]:
    """Run a workflow script's body with its output and errors in its log. Bad input
    (:class:`~basis.errors.InputError`) ends the job with its one line and status 2; any
    other error with its traceback in the log, one line naming it on the console, status 1.
    ``outputs``: the job's outputs, whose times are put back if it fails. The console gets
    the line that says what runs (the script; Snakemake itself has no command to print)."""
    # Snakemake runs a copy of the script, .snakemake/scripts/tmp<random>.<name>.py
    script = re.sub(r"^tmp[^.]*\.", "", Path(sys.argv[0] if sys.argv else "").name) or "a workflow script"
    print(f"{JOB_COMMAND}workflow/scripts/{script} (Snakemake script; log: {log_path})", file=sys.stderr, flush=True)
    _remember_outputs(outputs, log_path)
    with open(log_path, "w") as log:
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = log
        try:
            yield log
        except InputError as err:
            sys.stdout, sys.stderr = saved
            _fail(log, f"error: {err}", 2)
        except KeyboardInterrupt:  # Ctrl-C: Snakemake stops the whole workflow; no traceback
            sys.stdout, sys.stderr = saved
            _fail(log, "error: stopped by Ctrl-C", 128 + signal.SIGINT)
        except Exception as err:
            traceback.print_exc(file=log)
            sys.stdout, sys.stderr = saved
            reason = str(err).splitlines()[0] if str(err) else ""
            _fail(log, f"error: {type(err).__name__}: {reason} (a bug in basis; the traceback is in {log_path})", 1)
        finally:
            sys.stdout, sys.stderr = saved
    _note_path(log_path).unlink(missing_ok=True)


#: Seconds a job's command has to close its run after Ctrl-C before it is sent SIGTERM (its
#: own stop handling ends it within a few seconds; basis.runtime.stopping).
CHILD_STOP_S = 10.0


def run_logged(command: list[str], log_path: str | Path, outputs: Sequence[str | Path] = (), **kwargs) -> None:
    """Run ``command`` (an argument list) with its output in the job's log, which starts
    with the command itself. A failure ends the job with the command's exit status and its
    last ``error:`` line on the console too."""
    import shlex

    _remember_outputs(outputs, log_path)
    shown = shlex.join(command[1:]).replace("-m basis", "python -m basis", 1)
    print(f"{JOB_COMMAND}{shown} (log: {log_path})", file=sys.stderr, flush=True)  # Snakemake's output shows it
    with open(log_path, "w") as log:
        # The exact command first, so that a user can copy it from the log to rerun the job.
        log.write(f"# {shown}\n")
        log.flush()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, **kwargs)
        try:
            status = process.wait()
        except KeyboardInterrupt:
            # Ctrl-C reached the command as well (one process group): it closes its MLflow
            # run and ends. subprocess.run would kill it at once, leaving the run RUNNING.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                status = process.wait(timeout=CHILD_STOP_S)
            except subprocess.TimeoutExpired:
                process.terminate()
                status = process.wait()
    if status != 0:
        lines = Path(log_path).read_text(errors="replace").splitlines()
        errors = [line for line in lines if line.startswith("error:")]
        line = errors[-1] if errors else f"error: {shlex.join(command[1:3])} ended with status {status}"
        print(f"{line} (log: {log_path})", file=sys.stderr, flush=True)
        raise SystemExit(status)
    _note_path(log_path).unlink(missing_ok=True)


def run_basis_job(smk, command: str) -> None:
    """A workflow job that runs ``python -m basis <command>`` (the script its rule names is
    the command's), with the rule's ``params.command`` as its arguments, ``--threads`` the
    cores Snakemake gave the job (inside a SLURM allocation never more than SLURM gave it:
    a group's jobs share theirs) and :func:`job_tags` as ``--tag`` options (MLflow tags of
    tracked commands; none for the others). The library is imported from the checkout
    the workflow lies in, whatever environment runs the job."""
    arguments = list(map(str, smk.params.command))
    if arguments[:1] != [command]:
        raise InputError(f"the rule's params.command {arguments[:1]} is not `{command}`, the command its script runs")
    root = str(Path(smk.scriptdir).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    threads = smk.threads
    if os.environ.get("SLURM_CPUS_PER_TASK", "").isdigit():
        threads = max(1, min(threads, int(os.environ["SLURM_CPUS_PER_TASK"])))
    full = [sys.executable, "-m", "basis", *arguments, "--threads", str(threads), "--json"]
    for key, value in job_tags(smk).items():
        full += ["--tag", f"{key}={value}"]
    run_logged(full, smk.log[0], smk.output, env=env)


def job_tags(smk) -> dict[str, str]:
    """The MLflow tags of a tracked job: its rule's ``params.tags`` (``key=value``), and the
    name of the config it ran under, read from the config rather than from the params,
    which Snakemake compares to decide a rerun: renaming a config reruns no job."""
    tags = dict(tag.split("=", 1) for tag in smk.params.tags)
    return tags | {"config_name": str(smk.config["name"])} if tags else tags

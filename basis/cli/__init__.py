"""The command line, ``python -m basis <command>``: :func:`main` checks what every command
shares, runs the command (:mod:`basis.cli.commands`, arguments in :mod:`basis.cli.parser`)
and turns bad input into one line and exit status 2. How the process starts and ends:
:mod:`basis.cli.launcher`; the speed benchmarks: :mod:`basis.cli.bench`.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import warnings
from pathlib import Path

from basis.cli.parser import build_parser
from basis.errors import InputError, Terminated
from basis.runtime.inputs import check_output, check_seed, declare_inputs, release_outputs
from basis.runtime.stopping import stop_on_sigterm, stopped_status
from basis.runtime.stores import check_experiment_name, check_store
from basis.runtime.threads import limit_threads
from basis.runtime.timing import job_seconds, recording, report


def check_common(args: argparse.Namespace) -> None:
    """The inputs every command shares, checked before it starts: the seed, and the MLflow
    store of a command that logs to it (``--track``) or reads from it (``embed`` of a
    ``runs:/`` model)."""
    check_seed(args.seed)
    check_seed(args.data_seed, "--data-seed")
    if hasattr(args, "test_data"):  # a command that takes a data set: a catalog name or one's own
        from basis.catalog.data_sources import command_line_source

        flags = ("label_column", "test_data", "test_fraction", "test_seed", "image_size", "n_components")
        options = {"--" + flag.replace("_", "-"): getattr(args, flag) for flag in flags}
        args.dataset, args.source = command_line_source(args.dataset, args.data, options)
        if args.test_seed is not None:
            check_seed(args.test_seed, "--test-seed")
    declare_inputs(command_inputs(args))
    if getattr(args, "track", None) is not None:
        check_experiment_name(args.track)
        check_store(args.store, creates=True)
    data_root = Path(args.data_root)
    if data_root.exists() and not data_root.is_dir():
        raise InputError(f"--data-root {args.data_root} is not a folder; name the folder that holds the data sets")
    if args.command == "download":  # written into
        check_output(data_root, folder=True, name="--data-root", claim=False)
    if args.command == "run" and getattr(args, "siamese", None) and not Path(args.siamese).is_file():
        raise InputError(f"--siamese {args.siamese} does not exist; name the features' Siamese checkpoint")
    if args.command == "tracking" and args.action == "url" and len(args.experiment) > 1:
        raise InputError(f"tracking url shows one experiment, got --experiment {args.experiment}")
    for experiment in getattr(args, "experiment", None) or []:
        check_experiment_name(experiment, "--experiment")
    if args.command == "tracking":
        # closing the runs of a local store that does not exist closes none
        if args.action in ("setup", "url") or Path(args.store).exists() or os.environ.get("MLFLOW_TRACKING_URI"):
            check_store(args.store, creates=args.action == "setup")
        if args.action == "url":
            check_ui_address(args.ui)
        if args.flag:
            check_output(args.flag, folder=False, name="--flag")
    if args.command == "embed" and Path(args.model).suffix != ".pt" and not Path(args.model).is_file():
        check_store(args.store, creates=False)  # an MLflow model URI (runs:/..., models:/...)


def check_ui_address(address: str) -> None:
    """``tracking url --ui``: an http(s) address with a host."""
    from urllib.parse import urlsplit

    parts = urlsplit(address)
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in address):
        raise InputError(f"--ui {address!r} is not the address of the MLflow UI; expected e.g. http://127.0.0.1:5000")


def command_inputs(args: argparse.Namespace) -> dict[str, str | list | None]:
    """The files and folders a command reads, by flag: no output of it may replace one
    (:func:`~basis.runtime.inputs.check_output`). ``download`` writes into its data root;
    the local store (its folder and its database) is an input of the commands that use it."""
    model = getattr(args, "model", None)
    inputs = {
        "--features": getattr(args, "features", None),
        "--reference": getattr(args, "reference", None),
        "--siamese": getattr(args, "siamese", None),
        "--model": None if model is None or "://" in model or ":/" in model else model,  # not an MLflow URI
        "--input": getattr(args, "input", None),
        "--data": None if args.command == "bench" else getattr(args, "data", None),  # bench's names its data
        "--test-data": getattr(args, "test_data", None),
        "--data-root": None if args.command == "download" else getattr(args, "data_root", None),
    }
    logs = getattr(args, "track", None) is not None or args.command == "tracking"
    if logs and not os.environ.get("MLFLOW_TRACKING_URI"):
        inputs["--store"] = [args.store, Path(args.store) / "mlflow.db"]
    return inputs


def _store_name(store: str) -> str:
    """The store a command logs to, as a message may name it (a server's URI without its credentials)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        return f"{store}/mlflow.db"
    from basis.runtime.stores import redacted_uri

    return redacted_uri(uri)


def one_line_warning(message, category, filename, lineno, line=None) -> str:  # noqa: ARG001 (warnings' signature)
    """A warning as a command prints it: one line, ``warning: <message> (<category>)``, not
    Python's file, line number and the source line beneath it."""
    text = " ".join(str(message).split())
    return f"warning: {text} ({category.__name__})\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.formatwarning = one_line_warning
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # MLflow logs a store's database error with its traceback before raising it; the error
    # reaches the user as one line (a full disk) or as the traceback of a bug, once.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    try:
        check_common(args)
        stop_on_sigterm()
        args.threads = limit_threads(args.threads)
        with recording() as seconds:
            code = args.func(args)
            total = job_seconds()
        if args.json and seconds:  # a job's phases, for its log (python -m benchmarks jobs profile)
            report(seconds, total)
        return code
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Terminated as err:
        closed = "; its MLflow run is closed as KILLED" if getattr(args, "track", None) else ""
        why = "Ctrl-C" if err.signum == signal.SIGINT else "a cancel or a time limit"
        print(f"error: stopped by {err.args[0]} ({why}){closed}", file=sys.stderr)
        return stopped_status(err.signum)
    except Exception as err:
        from basis.runtime.outputs import full_disk

        if full_disk(err):
            store = "" if getattr(args, "store", None) is None else f" or the MLflow store ({_store_name(args.store)})"
            print(
                f"error: the results{store} could not be written: the file system is full; free space and rerun",
                file=sys.stderr,
            )
            return 2
        import traceback

        from basis.runtime.stores import redacted_text

        print(redacted_text(traceback.format_exc()), end="", file=sys.stderr)
        print(
            "error: the traceback above is a bug in basis, not a problem with your input; please report it",
            file=sys.stderr,
        )
        return 1
    finally:
        release_outputs()

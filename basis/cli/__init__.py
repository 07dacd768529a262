"""The command line, ``python -m basis <command>``: :func:`main` checks what every command
shares, runs the command (:mod:`basis.cli.commands`, arguments in :mod:`basis.cli.parser`)
and turns bad input into one line and exit status 2. How the process starts and ends:
:mod:`basis.cli.launcher`; the speed benchmarks: :mod:`basis.cli.bench`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from basis.cli.parser import build_parser
from basis.errors import InputError, Terminated
from basis.runtime.inputs import check_experiment_name, check_output, check_seed, check_store, release_outputs
from basis.runtime.stopping import STOPPED_STATUS, stop_on_sigterm
from basis.runtime.threads import limit_threads
from basis.runtime.timing import job_seconds, recording, report


def check_common(args: argparse.Namespace) -> None:
    """The inputs every command shares, checked before it starts: the seed, and the MLflow
    store of a command that logs to it (``--track``) or reads from it (``embed`` of a
    ``runs:/`` model)."""
    check_seed(args.seed)
    check_seed(args.data_seed, "--data-seed")
    if getattr(args, "track", None) is not None:
        check_experiment_name(args.track)
        check_store(args.store, creates=True)
    if args.command == "run" and getattr(args, "siamese", None) and not Path(args.siamese).is_file():
        raise InputError(f"--siamese {args.siamese} does not exist; name the features' Siamese checkpoint")
    if args.command == "tracking" and args.action == "url" and len(args.experiment) > 1:
        raise InputError(f"tracking url shows one experiment, got --experiment {args.experiment}")
    if args.command == "tracking" and (args.action in ("setup", "url") or Path(args.store).exists()):
        check_store(args.store, creates=args.action == "setup")  # closing runs of no store closes none
        if args.flag:
            check_output(args.flag, folder=False, name="--flag")
    if args.command == "embed" and Path(args.model).suffix != ".pt" and not Path(args.model).is_file():
        check_store(args.store, creates=False)  # an MLflow model URI (runs:/..., models:/...)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        check_common(args)
        stop_on_sigterm()
        args.threads = limit_threads(args.threads)
        with recording() as seconds:
            code = args.func(args)
            total = job_seconds()
        if args.json and seconds:  # a job's phases, for its log (benchmarks/workflow_profile.py)
            report(seconds, total)
        return code
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Terminated as err:
        closed = "; its MLflow run is closed as KILLED" if getattr(args, "track", None) else ""
        print(f"error: stopped by {err} (a cancel or a time limit){closed}", file=sys.stderr)
        return STOPPED_STATUS
    except Exception:
        import traceback

        traceback.print_exc()
        print(
            "error: the traceback above is a bug in basis, not a problem with your input; please report it",
            file=sys.stderr,
        )
        return 1
    finally:
        release_outputs()

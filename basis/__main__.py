"""``python -m basis``: the command line (:func:`basis.cli.main`) in this process
(:mod:`basis.cli.launcher`)."""

from basis.cli.launcher import exit_now, run_command

exit_now(run_command())

"""``python -m basis``: the command line (:func:`basis.cli.main`), run in a fork of a
persistent worker where one can serve it, else here (:mod:`basis.launcher`)."""

import sys

from basis.launcher import exit_now, run_command, run_in_worker

code = run_in_worker(sys.argv)
if code is None:
    code = run_command()
exit_now(code)

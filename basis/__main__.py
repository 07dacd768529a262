"""``python -m basis``: the command line (:func:`basis.cli.main`), ended by :func:`basis.cli.exit_now`."""

from basis.cli import exit_now, main

try:
    code = main()
except SystemExit as stop:  # argparse's usage errors and --help
    code = stop.code
exit_now(code)

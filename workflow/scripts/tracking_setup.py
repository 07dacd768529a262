"""Create the MLflow experiments once, before the jobs that log to them."""

import os
import sys
from pathlib import Path

smk = snakemake  # noqa: F821 (injected by Snakemake)
# The job imports the library from this checkout, whatever environment runs it.
root = str(Path(smk.scriptdir).parents[1])
sys.path.insert(0, root)

from basis.runtime.jobs import run_logged

env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
command = [sys.executable, "-m", "basis", "tracking", "setup", "--flag", str(smk.output[0]), "--json"]
for name in smk.params.experiments:
    command += ["--experiment", name]
run_logged(command, smk.log[0], smk.output, env=env)

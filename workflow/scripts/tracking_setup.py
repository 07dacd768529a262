"""Create the MLflow experiments once, before the jobs that log to them."""

import os
import subprocess
import sys
from pathlib import Path

smk = snakemake  # noqa: F821 (injected by Snakemake)
# The job imports the library from this checkout, whatever environment runs it.
root = str(Path(smk.scriptdir).parents[1])
env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
command = [sys.executable, "-m", "basis", "tracking", "setup", "--flag", str(smk.output[0]), "--json"]
for name in smk.params.experiments:
    command += ["--experiment", name]
with open(smk.log[0], "w") as log:
    subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True, env=env)

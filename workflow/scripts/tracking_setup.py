"""Create the MLflow experiments once, before the jobs that log to them."""

import subprocess
import sys

smk = snakemake  # noqa: F821 (injected by Snakemake)
command = [sys.executable, "-m", "basis", "tracking", "setup", "--flag", str(smk.output[0]), "--json"]
for name in smk.params.experiments:
    command += ["--experiment", name]
with open(smk.log[0], "w") as log:
    subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)

"""Thin wrapper: one `python -m basis ...` call built as an argument list (never a shell string).

`params.tags` become `--tag` options (MLflow tags of tracked commands; empty for the others)."""

import subprocess
import sys

smk = snakemake  # noqa: F821 (injected by Snakemake)
# --threads: the cores Snakemake gave this job, which every thread pool of the job honours.
command = [sys.executable, "-m", "basis", *map(str, smk.params.command), "--threads", str(smk.threads), "--json"]
for tag in smk.params.tags:
    command += ["--tag", tag]
with open(smk.log[0], "w") as log:
    subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)

"""Thin wrapper: one `python -m basis ...` call built as an argument list (never a shell string).

`params.tags` become `--tag` options (MLflow tags of tracked commands; empty for the others)."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

smk = snakemake  # noqa: F821 (injected by Snakemake)
# The job imports the library from this checkout, whatever environment runs it.
root = str(Path(smk.scriptdir).parents[1])
env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
# --threads: the cores Snakemake gave this job, which every thread pool of the job honours;
# inside a SLURM allocation never more than SLURM gave it (a group's jobs share theirs).
threads = smk.threads
if os.environ.get("SLURM_CPUS_PER_TASK", "").isdigit():
    threads = max(1, min(threads, int(os.environ["SLURM_CPUS_PER_TASK"])))
command = [sys.executable, "-m", "basis", *map(str, smk.params.command), "--threads", str(threads), "--json"]
for tag in smk.params.tags:
    command += ["--tag", tag]
with open(smk.log[0], "w") as log:
    # The exact command first, so that a user can copy it from the log to rerun the job.
    log.write(f"# {shlex.join(command[1:]).replace('-m basis', 'python -m basis', 1)}\n")
    log.flush()
    subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True, env=env)

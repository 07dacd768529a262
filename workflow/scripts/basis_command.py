"""Thin wrapper: one `python -m basis ...` call built as an argument list (never a shell string).

`params.tags` become `--tag` options (MLflow tags of tracked commands; empty for the others)."""

import os
import sys
from pathlib import Path

smk = snakemake  # noqa: F821 (injected by Snakemake)
# The job imports the library from this checkout, whatever environment runs it.
root = str(Path(smk.scriptdir).parents[1])
sys.path.insert(0, root)

from basis.runtime.jobs import run_logged

env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
# --threads: the cores Snakemake gave this job, which every thread pool of the job honours;
# inside a SLURM allocation never more than SLURM gave it (a group's jobs share theirs).
threads = smk.threads
if os.environ.get("SLURM_CPUS_PER_TASK", "").isdigit():
    threads = max(1, min(threads, int(os.environ["SLURM_CPUS_PER_TASK"])))
command = [sys.executable, "-m", "basis", *map(str, smk.params.command), "--threads", str(threads), "--json"]
for tag in smk.params.tags:
    command += ["--tag", tag]
run_logged(command, smk.log[0], smk.output, env=env)

"""Thin wrapper: `python -m basis run` for one (dataset, method, seed), argument list only."""
import subprocess
import sys

smk = snakemake  # noqa: F821 (injected by Snakemake)
out_dir = str(smk.output.metrics).rsplit("/", 1)[0]
command = [
    sys.executable, "-m", "basis", "run", "--method", smk.wildcards.method, "--dataset", smk.wildcards.dataset,
    "--seed", smk.wildcards.seed, "--out", out_dir, "--data-root", smk.params.data_root, "--json",
    *smk.params.features,
]
for assignment in smk.params.settings:
    command += ["--set", assignment]
with open(smk.log[0], "w") as log:
    subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)

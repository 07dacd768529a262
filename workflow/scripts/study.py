"""The job: `python -m basis study` with the rule's params.command (an argument list)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1]))  # noqa: F821 (injected by Snakemake)

from basis.runtime.jobs import run_basis_job  # noqa: E402

run_basis_job(snakemake, "study")  # noqa: F821

"""Fig. 5: summarise the kNN sweep's runs per method and k, draw the four panels, log to MLflow."""

import sys
from pathlib import Path

import pandas as pd

smk = snakemake  # noqa: F821 (injected by Snakemake)
# The library comes from this checkout, whatever environment runs the job.
sys.path.insert(0, str(Path(smk.scriptdir).parents[1]))

from basis.paper import SWEEP_MEASURES, sweep_summary
from basis.runtime.jobs import job_log, job_tags
from basis.runtime.outputs import read_metrics, write_text
from basis.studies.figures import knn_sensitivity
from basis.tracking import finish_parents, tracked_run

with job_log(smk.log[0], smk.output):
    rows = []
    for path in map(Path, smk.input.metrics):  # results/knn/{dataset}/k{k}/{method}/seed{seed}/metrics.json
        scores = read_metrics(path, required=SWEEP_MEASURES)
        rows.append({"method": path.parts[-3], "n_neighbors": int(path.parts[-4][1:]), **scores})
    summary = sweep_summary(pd.DataFrame(rows), by="n_neighbors")
    write_text(smk.output.csv, summary.to_csv(index=False))
    knn_sensitivity(summary, smk.output.png)
    # the parent each data set's sweep runs hang under ends after them
    finish_parents(smk.params.sweep_experiment, smk.params.sweep_parents)
    tags = job_tags(smk)
    with tracked_run(smk.params.experiment, "fig5_knn_sensitivity", tags) as run:
        run.set_description(Path(smk.input.caption).read_text())
        run.log_params({"n_runs": len(rows)})
        for name in ("png", "pdf", "csv"):
            run.log_artifact(smk.output[name])

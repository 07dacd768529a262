"""The alignment ablation: BASiS runs with RANSAC, least squares and no alignment, side by side."""

import sys
from pathlib import Path

import pandas as pd

smk = snakemake  # noqa: F821 (injected by Snakemake)
# The library comes from this checkout, whatever environment runs the job.
sys.path.insert(0, str(Path(smk.scriptdir).parents[1]))

from basis.paper import ABLATION_MEASURES, SWEEP_MEASURES, ablation_markdown, markdown_to_html, sweep_summary
from basis.runtime.jobs import job_log, job_tags
from basis.runtime.outputs import read_metrics, write_text
from basis.tracking import finish_parents, tracked_run

with job_log(smk.log[0], smk.output):
    rows = []
    for path in map(Path, smk.input.metrics):  # results/ablation/{dataset}/{alignment}/seed{seed}/metrics.json
        scores = read_metrics(path, required=SWEEP_MEASURES, numbers=ABLATION_MEASURES)
        rows.append({"dataset": path.parts[-4], "method": path.parts[-3], **scores})
    summary = sweep_summary(pd.DataFrame(rows), by="dataset", measures=ABLATION_MEASURES)
    summary = summary.rename(columns={"method": "alignment"})
    write_text(smk.output.csv, summary.to_csv(index=False))
    write_text(smk.output.markdown, ablation_markdown(summary))
    write_text(smk.output.html, markdown_to_html(ablation_markdown(summary)))
    # the parent each data set's sweep runs hang under ends after them
    finish_parents(smk.params.sweep_experiment, smk.params.sweep_parents)
    tags = job_tags(smk)
    with tracked_run(smk.params.experiment, "ablation", tags) as run:
        run.log_params({"n_runs": len(rows)})
        for name in ("markdown", "csv"):
            run.log_artifact(smk.output[name])

"""Assemble Table 1 from the runs' metrics, and log it to MLflow."""

import sys
from pathlib import Path

import pandas as pd

smk = snakemake  # noqa: F821 (injected by Snakemake)
# The library comes from this checkout, whatever environment runs the job.
sys.path.insert(0, str(Path(smk.scriptdir).parents[1]))

from basis.outputs import read_metrics
from basis.paper import markdown_to_html, summarize, table_latex, table_markdown
from basis.tracking import TrackedRun, client, ensure_experiments, parent_run, tracked_run

with open(smk.log[0], "w") as log:
    sys.stderr = sys.stdout = log
    rows = []
    for path in map(Path, smk.input.metrics):
        dataset, method = path.parts[-4], path.parts[-3]
        rows.append({"dataset": dataset, "method": method, "seed": path.parts[-2], **read_metrics(path)})
    summary = summarize(pd.DataFrame(rows))
    summary.to_csv(smk.output.csv)
    Path(smk.output.markdown).write_text(table_markdown(summary))
    Path(smk.output.html).write_text(markdown_to_html(table_markdown(summary)))
    Path(smk.output.tex).write_text(table_latex(summary))
    # Table 1 in the MLflow UI: each data set's mean and std on the run its seeds are grouped under
    mlflow_client = client()
    runs_experiment = ensure_experiments([smk.params.runs_experiment])[smk.params.runs_experiment]
    for (dataset, method), row in summary.iterrows():
        parent = parent_run(mlflow_client, runs_experiment, smk.params.parent.format(dataset=dataset))
        values = {f"{method}/{measure}/{stat}": value for (measure, stat), value in row.items() if value == value}
        TrackedRun(mlflow_client, parent).log_metrics(values)
    tags = dict(tag.split("=", 1) for tag in smk.params.tags)
    with tracked_run(smk.params.experiment, "table1", tags) as run:
        run.log_params({"n_runs": len(rows)})
        for name in ("markdown", "csv", "tex"):
            run.log_artifact(smk.output[name])

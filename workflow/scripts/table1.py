"""Assemble Table 1 from the runs' metrics, and log it to MLflow."""

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

smk = snakemake  # noqa: F821 (injected by Snakemake)
# The library comes from this checkout, whatever environment runs the job.
sys.path.insert(0, str(Path(smk.scriptdir).parents[1]))

from basis.paper import (
    ALL_MEASURES,
    MEASURES,
    markdown_to_html,
    not_available,
    summarize,
    table_latex,
    table_markdown,
)
from basis.references import stored_certificate
from basis.runtime.jobs import job_log, job_tags
from basis.runtime.outputs import read_metrics, write_text
from basis.studies.figures import embedding_picture
from basis.tracking import client, ensure_experiments, summarise_seeds, tracked_run
from basis.tracking.serving import register_seeds
from basis.verdicts import merge_unavailable, undetermined_truths

with job_log(smk.log[0], smk.output):
    rows, folders, metrics = [], {}, []
    for path in map(Path, smk.input.metrics):
        dataset, method, seed = path.parts[-4], path.parts[-3], path.parts[-2]
        metrics.append((dataset, read_metrics(path, required=MEASURES, numbers=ALL_MEASURES)))
        scores = {k: v for k, v in metrics[-1][1].items() if k != "not_available"}
        rows.append({"dataset": dataset, "method": method, "seed": seed, **scores})
        folders[dataset, method, seed] = path.parent
    summary = summarize(pd.DataFrame(rows))
    certificates = {Path(path).stem: stored_certificate(path) for path in smk.input.references}
    table = table_markdown(summary, merge_unavailable(not_available(metrics), undetermined_truths(certificates)))
    write_text(smk.output.csv, summary.to_csv())
    write_text(smk.output.markdown, table)
    write_text(smk.output.html, markdown_to_html(table))
    write_text(smk.output.tex, table_latex(summary))
    # Table 1 in the MLflow UI: a parent run per data set and method over its seeds, and
    # each seed's embedding as a picture
    mlflow_client = client()
    runs_experiment = ensure_experiments([smk.params.runs_experiment])[smk.params.runs_experiment]
    links = {}  # data set -> method -> the parent run that holds its row (the report links to it)
    prefix = smk.params.runs_experiment.removesuffix("-runs")
    made = int(time.time() * 1000)  # the view sorts by start time, newest first: Table 1's order
    for rank, ((dataset, method), row) in enumerate(summary.iterrows()):
        scores = {measure: (row[measure, "mean"], row[measure, "std"]) for measure, _ in row.index}
        seeds = [int(seed.removeprefix("seed")) for d, m, seed in folders if (d, m) == (dataset, method)]
        parent, seed_runs = summarise_seeds(
            mlflow_client, runs_experiment, dataset, method, seeds, scores, start_time=made - rank
        )
        links.setdefault(dataset, {})[method] = {"run_id": parent, "experiment_id": runs_experiment}
        # the Model Registry: the seeds as versions of one model, "@representative" to load
        by_seed = {int(r.data.tags["seed"]): r.info.run_id for r in seed_runs}
        d_G = {
            int(r["seed"].removeprefix("seed")): r["d_G"]
            for r in rows
            if (r["dataset"], r["method"]) == (dataset, method)
        }
        register_seeds(mlflow_client, f"{prefix}-{dataset}-{method}", runs_experiment, by_seed, d_G)
        for seed_run in seed_runs:
            folder = folders[dataset, method, f"seed{seed_run.data.tags['seed']}"]
            with np.load(folder / "embedding.npz") as embedding, tempfile.TemporaryDirectory() as pictures:
                picture = Path(pictures) / "embedding.png"
                labels = embedding["labels"] if "labels" in embedding.files else None  # unlabelled: none
                seed_scores = {m: v for m, v in read_metrics(folder / "metrics.json").items() if m in MEASURES}
                embedding_picture(embedding["test"], labels, seed_run.info.run_name, picture, seed_scores)
                mlflow_client.log_artifact(seed_run.info.run_id, str(picture))
    write_text(smk.output.runs, json.dumps(links, indent=1, sort_keys=True) + "\n")
    tags = job_tags(smk)
    with tracked_run(smk.params.experiment, "table1", tags) as run:
        run.log_params({"n_runs": len(rows)})
        for name in ("markdown", "csv", "tex"):
            run.log_artifact(smk.output[name])

"""The paper-vs-reproduced report: Table 1's numbers and one line per other claim."""

import json
import sys
from pathlib import Path

import pandas as pd

smk = snakemake  # noqa: F821 (injected by Snakemake)
# The library comes from this checkout, whatever environment runs the job.
sys.path.insert(0, str(Path(smk.scriptdir).parents[1]))

from basis.paper import (
    comparison_markdown,
    markdown_to_html,
    not_available,
    paper_claims,
)
from basis.references import stored_certificate
from basis.report import RunLink, report_html
from basis.runtime.jobs import job_log, job_tags
from basis.runtime.outputs import read_metrics, write_text
from basis.tracking import tracked_run
from basis.tracking.views import ui_address
from basis.verdicts import (
    certificates_markdown,
    claims_markdown,
    claims_tally,
    merge_unavailable,
    table1_verdicts,
    undetermined_truths,
    verdicts_markdown,
)

with job_log(smk.log[0], smk.output):
    table1 = pd.read_csv(smk.input.table1, header=[0, 1], index_col=[0, 1])
    # the metrics of every study run, in the order of params.studies (study -> its runs)
    paths = iter(smk.input.studies)
    studies = {name: {run: read_metrics(next(paths)) for run in runs} for name, runs in smk.params.studies.items()}
    rows = paper_claims(studies, knn=pd.read_csv(smk.input.knn), ablation=pd.read_csv(smk.input.ablation))
    # which Table 1 cells a data set cannot have (NMI without labels), and why
    certificates = {Path(path).stem: stored_certificate(path) for path in smk.input.references}
    unavailable = merge_unavailable(
        not_available((Path(path).parts[-4], read_metrics(path)) for path in smk.input.runs),
        undetermined_truths(certificates),
    )
    verdicts = table1_verdicts(table1, unavailable)  # Table 1's own claim: BASiS best, cell by cell
    text = "\n".join(
        [
            comparison_markdown(table1, unavailable),
            certificates_markdown(certificates),
            verdicts_markdown(verdicts),
            claims_markdown(rows),
        ]
    )
    write_text(smk.output.markdown, text)
    write_text(smk.output.html, markdown_to_html(text))
    ui = ui_address()
    links = {
        (dataset, method): RunLink(run["run_id"], run["experiment_id"], ui)
        for dataset, methods in json.loads(Path(smk.input.links).read_text()).items()
        for method, run in methods.items()
    }
    figures = {Path(path).stem: Path(path) for path in smk.input.figures}
    page = report_html(smk.params.name, table1, verdicts, unavailable, rows, figures, links, text)
    write_text(smk.output.report, page)
    tags = job_tags(smk)
    with tracked_run(smk.params.experiment, "comparison", tags) as run:
        tally = claims_tally(rows)
        run.log_metrics(
            {"claims_reproduced": tally["reproduced"], "claims_not_measured": tally["not measured here"]}
            | {"claims": len(rows)}
        )
        run.log_metrics({"references_certified": sum(c is not None and c.passed for c in certificates.values())})
        run.log_metrics(
            {f"table1_{key}": sum(r["verdict"].startswith(key) for r in verdicts) for key in ("holds", "fails")}
        )
        run.log_artifact(smk.output.markdown)
        run.log_artifact(smk.output.report)

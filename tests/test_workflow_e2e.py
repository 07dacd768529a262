"""End to end: Snakemake on the tiny config in a temporary folder, MLflow on its store.

The tests of this module run in order on one workflow folder: first run, second
invocation, lint, rerun of one job, stale-run closing, the UI server's REST API, and a
browser screenshot of the experiment page.
"""

import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import HANG_GUARD_S, assert_refused, copy_workflow, run_snakemake, snakemake_command, snakemake_env

from basis.tracking.store import read_local_store

# The tiny workflow end to end: minutes on two cores.
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
TINY = "tests/configs/tiny.yaml"
METHODS = ("basis", "diffusion_net", "specnet1", "specnet2")
FIGURES = (
    "fig1_toy_examples",
    "fig2_illustration",
    "fig3_three_moons_consistency",
    "fig4_bunny_diffusion_maps",
    "fig5_knn_sensitivity",
    "fig6_feature_change_training",
    "fig7_feature_change_tsne",
    "fig8_feature_change_subset",
    "fig9_basis_variants",
    "fig10_alignment_error",
    "fig11_scale",
)


def snakemake(folder, *args, timeout=HANG_GUARD_S):
    return run_snakemake(folder, "--configfile", TINY, *args, cores=2, timeout=timeout)


def runs(folder, stage):
    """The client and the job runs of one experiment (the parent runs that group them left out)."""
    from basis.tracking import client

    mlflow_client = client(folder / "results" / "mlflow")
    experiment = mlflow_client.get_experiment_by_name(f"tiny-{stage}")
    found = mlflow_client.search_runs([experiment.experiment_id], max_results=1000)
    grouping = ("basis.parent", "basis.summary")
    return mlflow_client, [run for run in found if not any(tag in run.data.tags for tag in grouping)]


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    folder = copy_workflow(tmp_path_factory.mktemp("workflow"))
    done = snakemake(folder)
    assert done.returncode == 0, done.stderr[-3000:]
    (folder / "first-run.log").write_text(done.stdout + done.stderr)
    return folder


def test_each_job_says_what_it_runs_and_no_line_reads_shell_command_none(workflow):
    from basis.runtime.jobs import JOB_COMMAND

    output = (workflow / "first-run.log").read_text()
    assert "Shell command: None" not in output
    jobs = re.findall(r"^(?:local)?rule (\w+):$", output, re.M)
    # two jobs' output may share a line of the console (a long line is not written in one piece):
    # each command is counted where it starts and read up to the next one or the line's end
    commands = re.findall(rf"{JOB_COMMAND}(?:(?!{JOB_COMMAND})[^\n])*", output)
    assert len(jobs) > 30 and len(commands) == len(jobs) - output.count("rule all:"), (len(jobs), len(commands))
    assert any(line.startswith(f"{JOB_COMMAND}python -m basis run ") for line in commands)
    assert f"{JOB_COMMAND}workflow/scripts/table1.py (Snakemake script; log: results/logs/paper/table1.log)" in commands


def test_table_has_every_cell_finite(workflow):
    table = pd.read_csv(workflow / "results/paper/table1.csv", header=[0, 1], index_col=[0, 1])
    assert sorted(table.index.get_level_values(1)) == sorted(METHODS)
    own_basis = table.pop("d_G_own_basis")[["mean", "std"]]  # SpecNet2's score in its own basis; NaN for the others
    assert all(math.isfinite(v) for v in table.to_numpy().ravel())
    assert (
        np.isfinite(own_basis.loc[("digits", "specnet2")]).all()
        and own_basis.drop(("digits", "specnet2")).isna().all().all()
    )
    comparison = (workflow / "results/paper/comparison.md").read_text()
    assert comparison.count("| no paper number |") == len(METHODS) * 5
    assert "\\begin{tabular}" in (workflow / "results/paper/table1.tex").read_text()


def test_the_comparison_states_table1s_claim_for_every_cell_as_the_table_has_it(workflow, tmp_path):
    """The verdict rows in comparison.md, its html and its MLflow artifact, one per data set,
    measure and variant; on the equation's d_G and d_perp the verdict and the best other
    method agree with table1.csv, whichever way they fall on this run."""
    table = pd.read_csv(workflow / "results/paper/table1.csv", header=[0, 1], index_col=[0, 1])
    markdown = (workflow / "results/paper/comparison.md").read_text()
    section = markdown.split("## Table 1's claim: BASiS gives the best value")[1].split("\n#")[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    datasets = sorted(set(table.index.get_level_values(0)))
    assert sorted({row[0].lstrip("| ") for row in rows}) == datasets
    assert len(rows) == len(datasets) * 9  # five measures, two variants each but ACC's one
    for dataset in datasets:
        for measure in ("d_G", "d_perp"):
            row = next(r for r in rows if r[0] == f"| {dataset}" and r[1:3] == [measure, "equation"])
            means = table.loc[dataset, (measure, "mean")]
            best = means.drop("basis").idxmin()
            assert row[4] == f"{means[best]:.3f} ({best})", row
            said = row[7].strip(" |*")
            assert said.startswith("fails" if means["basis"] > means[best] else "holds") or said == "within noise", row
    page = (workflow / "results/paper/comparison.html").read_text()
    assert "Table 1&#x27;s claim: BASiS gives the best value" in page and f"of {len(rows)} cells." in page
    client, found = runs(workflow, "paper")
    comparison = next(r for r in found if r.info.run_name == "comparison" and "superseded" not in r.data.tags)
    logged = Path(client.download_artifacts(comparison.info.run_id, "comparison.md", str(tmp_path)))
    assert logged.read_text() == markdown


def test_mlflow_holds_every_run_with_its_metrics(workflow):
    client, training = runs(workflow, "runs")
    assert len(training) == len(METHODS) * 2
    for run in training:
        assert run.info.status == "FINISHED"
        metrics = run.data.metrics
        assert {
            "eval/d_G",
            "eval/d_perp",
            "eval/nmi",
            "eval/cluster_acc",
            "eval/probe_accuracy_pct",
            "time/train_seconds",
            "authors/d_G",
            "authors/d_perp",
            "authors/nmi",
            "authors/probe_accuracy_pct",
        } <= set(metrics)
        # a converged probe reads what K-means finds
        assert metrics["eval/probe_accuracy_pct"] / 100 >= metrics["eval/cluster_acc"] - 0.02
        assert {"rule", "dataset", "method", "seed", "git_commit", "config_hash"} <= set(run.data.tags)
        assert run.data.params["n_iter"] == "20"
        # resolved values, not "auto" and None; MLflow's own source tags; the data set as an input
        assert run.data.params["device"] == "cpu" and run.data.params["n_components"] == "10"
        assert run.data.tags["mlflow.source.git.commit"] == run.data.tags["git_commit"]
        assert [i.dataset.name for i in run.inputs.dataset_inputs] == ["digits"]
        assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 20  # one point per step
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert artifacts >= {"metrics.json", "model.pt", "embedding.npz", "embedding.png"}
    # system metrics are sampled every second: runs that last 1.5 s have them (a
    # training run of the tiny config may end within a second on an idle box; a study's does not)
    lasting = [r for r in training + runs(workflow, "studies")[1] if r.info.end_time - r.info.start_time >= 1500]
    assert lasting and all(any(key.startswith("system/") for key in r.data.metrics) for r in lasting)
    # each method's seeds on a data set are grouped under a parent run that shows their mean
    # and std under the seeds' own metric names, so that a chart of one compares the methods
    parents = {run.data.tags["mlflow.parentRunId"] for run in training}
    assert len(parents) == len(METHODS)
    table = pd.read_csv(workflow / "results/paper/table1.csv", header=[0, 1], index_col=[0, 1])
    for parent in map(client.get_run, parents):
        method = parent.data.params["method"]
        assert parent.info.run_name == f"digits: {method}" and parent.data.params["n_seeds"] == "2"
        assert parent.data.metrics["eval/nmi"] == float(f"{table.loc[('digits', method), ('nmi', 'mean')]:.4g}")
        assert {"eval/nmi_std", "authors/probe_accuracy_pct"} <= set(parent.data.metrics)
        assert [i.dataset.name for i in parent.inputs.dataset_inputs] == ["digits"]
        seeds = [r for r in training if r.data.tags["mlflow.parentRunId"] == parent.info.run_id]
        assert parent.info.end_time >= max(r.info.end_time for r in seeds)  # finished after its seeds
    # every run name is unique in its experiment (sweep values and settings are in the name)
    for stage in ("runs", "sensitivity", "ablation", "studies", "references"):
        current = [r.info.run_name for r in runs(workflow, stage)[1] if "superseded" not in r.data.tags]
        assert len(current) == len(set(current)), (stage, current)
    # each job's log starts with the command that reruns it and shows progress
    log = (workflow / "results/logs/runs/digits/basis/seed0.log").read_text()
    assert log.startswith("# python -m basis run --method basis --dataset digits --seed 0")
    assert "step 20/20" in log and "ms/step" in log
    assert (workflow / "results/paper/table1.html").read_text().count("<table>") == 2
    assert len(runs(workflow, "features")[1]) == 1
    # table1, ten study figures, fig5, the ablation table and the comparison
    _, paper = runs(workflow, "paper")
    assert len(paper) == 14
    figures = [r for r in paper if r.data.tags.get("rule") in ("figure", "knn_sensitivity")]
    assert len(figures) == 11 and all(r.data.tags.get("mlflow.note.content") for r in figures)
    # toy x2, illustration, consistency, bunny, feature change x2, variants, alignment error, scale
    assert json.loads((workflow / "results/studies/feature_change/main/metrics.json").read_text())
    _, studies = runs(workflow, "studies")
    assert len(studies) == 10 and all(r.info.status == "FINISHED" for r in studies)
    # three alignments, on clean anchors and with anchor outliers
    assert len(runs(workflow, "sensitivity")[1]) == 4 and len(runs(workflow, "ablation")[1]) == 6
    # each sweep's parent run ends after the runs it groups
    for stage in ("sensitivity", "ablation"):
        _, sweep = runs(workflow, stage)
        (parent,) = {run.data.tags["mlflow.parentRunId"] for run in sweep}
        assert client.get_run(parent).info.end_time >= max(run.info.end_time for run in sweep), stage
    # Table 1's reference and the sweep's two: each logs its cost by stage and its neighbour search
    _, references = runs(workflow, "references")
    assert len(references) == 3 and all(r.data.tags["neighbors"] == "exact" for r in references)
    timings = {"time/knn_seconds", "time/graph_seconds", "time/eigen_seconds"}
    assert all(timings <= set(r.data.metrics) for r in references)


def test_every_figure_and_study_number_is_there(workflow):
    for figure in FIGURES:
        for suffix in ("png", "pdf"):
            path = workflow / "results/paper/figures" / f"{figure}.{suffix}"
            assert path.stat().st_size > 5_000, path
    for metrics in (workflow / "results/studies").rglob("metrics.json"):
        values = json.loads(metrics.read_text())
        assert values and all(math.isfinite(v) for v in values.values()), metrics
    knn = pd.read_csv(workflow / "results/paper/knn_sensitivity.csv")
    assert sorted(knn["n_neighbors"].unique()) == [10, 20] and np.isfinite(knn["nmi_mean"]).all()
    claims = (workflow / "results/paper/comparison.md").read_text().split("the other claims")[1]
    for claim in (
        "toy three_moons",
        "toy circles",
        "Fig. 2",
        "Fig. 3",
        "Fig. 4",
        "Fig. 5",
        "Fig. 6 (main)",
        "Fig. 6 (subset)",
        "ablation, two_moons",
        "Beyond the paper (variants, digits)",
        "Beyond the paper (alignment error, digits)",
        "Beyond the paper (scale): BASiS's fit time",
    ):
        assert claim in claims
    scale = (workflow / "results/paper/figures/fig11_scale.md").read_text()
    for curve in ("basis", "exact", "sklearn", "nystrom_100", "nystrom_300"):
        assert f"| {curve} | 600 |" in scale and f"| {curve} | 1,200 |" in scale, curve
    table = (workflow / "results/paper/figures/fig9_basis_variants.md").read_text()
    assert "| digits | combined |" in table and "| digits | paper |" in table
    ablation = (workflow / "results/paper/ablation.md").read_text()
    assert "| two_moons | none |" in ablation and "| two_moons | ransac-outliers |" in ablation
    assert "RANSAC makes the alignment robust to anchor outliers" in claims


def test_second_invocation_runs_nothing_and_logs_nothing(workflow):
    before = len(runs(workflow, "runs")[1])
    done = snakemake(workflow)
    assert done.returncode == 0
    assert "Nothing to be done" in done.stdout + done.stderr
    assert len(runs(workflow, "runs")[1]) == before


def _snapshot(folder, patterns):
    return {path: path.read_bytes() for pattern in patterns for path in sorted(folder.glob(pattern))}


def _console_lines(done):
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


def _truncated(content: bytes) -> bytes:
    return content[: len(content) // 2]


def _edited(**change) -> Callable[[bytes], bytes]:
    """A metrics.json with ``change`` made (a value None: the key removed)."""

    def edit(content: bytes) -> bytes:
        values = json.loads(content) | change
        return json.dumps({key: value for key, value in values.items() if value is not None}).encode()

    return edit


SEED1 = "results/runs/digits/basis/seed1/metrics.json"


@pytest.mark.parametrize(
    "corrupt, damage, target, kept, reason",
    [
        (  # an assembly script (script: rule), its input a seed's metrics
            SEED1, _truncated, "results/paper/table1.csv", ["results/paper/table1.*"], f"{SEED1} is missing or corrupt",
        ),
        (  # one seed without a measure: never shown as the mean of the others
            SEED1, _edited(d_G=None), "results/paper/table1.csv", ["results/paper/table1.*"],
            f"{SEED1} lacks the measure 'd_G'",
        ),
        (  # a measure that is not a number
            SEED1, _edited(d_G="garbage"), "results/paper/table1.csv", ["results/paper/table1.*"],
            f"{SEED1}: the measure 'd_G' holds 'garbage', not a number",
        ),
        (  # a python -m basis job, its input the shared reference; both seeds' outputs are the job's
            "results/references/digits.npz", _truncated, "results/runs/digits/basis/seed0/metrics.json",
            ["results/runs/digits/basis/seed*/*"], "results/references/digits.npz",
        ),
    ],
    ids=["assembly", "missing-measure", "not-a-number", "training"],
)  # fmt: skip
def test_a_failed_rerun_keeps_the_results_it_would_replace_and_says_why(
    workflow, corrupt, damage, target, kept, reason
):
    corrupt_path = workflow / corrupt
    saved = corrupt_path.with_name("saved-" + corrupt_path.name)
    shutil.copy2(corrupt_path, saved)
    before = _snapshot(workflow, kept)
    times = {path: path.stat().st_mtime_ns for path in before}
    try:
        corrupt_path.write_bytes(damage(corrupt_path.read_bytes()))  # and newer than its consumers
        done = run_snakemake(workflow, target, "--configfile", TINY, cores=2)
        assert done.returncode != 0
        # every output of the failed job is there, byte for byte, with its old time
        assert _snapshot(workflow, kept) == before
        assert {path: path.stat().st_mtime_ns for path in before} == times
        # the one line on the console and in the (not empty) log
        lines = _console_lines(done)
        assert lines and reason in lines[-1], done.stderr[-2000:]
        logs = [log for log in (workflow / "results/logs").rglob("*.log") if reason in log.read_text()]
        assert logs, "no log holds the reason"
        assert "lost sys.stderr" not in done.stderr
        # the failed job is still out of date: the next run tries it again
        assert "Nothing to be done" not in snakemake(workflow, "-n", target).stdout
    finally:
        shutil.copy2(saved, corrupt_path)  # the original file, with its original time
        saved.unlink()
    done = snakemake(workflow, "-n")
    assert "Nothing to be done" in done.stdout + done.stderr


def test_a_deleted_store_is_not_taken_for_a_complete_one(workflow):
    database = workflow / "results/mlflow/mlflow.db"
    kept = database.with_name("kept.db")
    database.rename(kept)  # renamed, not copied: this process's open connections keep their file
    try:
        done = snakemake(workflow, "-n")
        assert_refused(done, "results/mlflow/mlflow.db is missing")
        assert "delete results/mlflow/experiments.json" in done.stderr
        assert not database.exists()  # the dry run created nothing
    finally:
        kept.rename(database)
    assert "Nothing to be done" in snakemake(workflow, "-n").stdout + snakemake(workflow, "-n").stderr


def test_an_edit_to_a_method_reruns_its_runs_and_what_follows_them_only(workflow):
    module = workflow / "basis" / "estimators" / "specnet2.py"
    source = module.read_text()
    module.write_text(source + "\n# an edit\n")
    try:
        done = snakemake(workflow, "-n", "--quiet", "rules")
    finally:
        module.write_text(source)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = dict(
        line.split()
        for line in (done.stdout + done.stderr).splitlines()
        if len(line.split()) == 2 and line.split()[1].isdigit()
    )
    # SpecNet2's two runs, then the table, the comparison and the target; no other method, study or sweep
    assert counts.pop("total") == "5"
    assert counts == {"train_and_evaluate": "2", "table1": "1", "comparison": "1", "all": "1"}, counts
    assert "Nothing to be done" in snakemake(workflow, "-n").stdout + snakemake(workflow, "-n").stderr


def test_a_renamed_config_reruns_only_the_report_and_every_run_names_its_config(workflow):
    """The name tags the MLflow runs and names the report's folder; it is no part of any
    other job's identity (it was in every job's params, so a rename reran everything)."""
    import yaml

    config = yaml.safe_load((workflow / TINY).read_text())
    config["name"] = "tiny-renamed"
    (workflow / "renamed.yaml").write_text(yaml.safe_dump(config, sort_keys=False))  # the same order: the same commands
    done = run_snakemake(workflow, "--configfile", "renamed.yaml", "-n", "--quiet", "rules", cores=2)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", done.stdout + done.stderr, re.M))  # the job stats' rows
    assert {job: n for job, n in counts.items() if job not in ("total", "all")} == {"comparison": "1"}, counts
    client, training = runs(workflow, "runs")
    assert {r.data.tags.get("config_name") for r in training} == {"tiny"}


def test_a_new_training_budget_reruns_the_runs_but_not_the_features(workflow):
    import yaml

    config = yaml.safe_load((workflow / TINY).read_text())
    config["protocol"]["n_iter"] = 25
    (workflow / "budget.yaml").write_text(yaml.safe_dump(config))
    done = run_snakemake(workflow, "--configfile", "budget.yaml", "-n", "--quiet", "rules", cores=2)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = {line.split()[0] for line in (done.stdout + done.stderr).splitlines() if len(line.split()) == 2}
    assert "train_and_evaluate" in jobs
    assert not {"siamese_features", "reference_embedding", "download"} & jobs, jobs


def test_the_logged_model_is_the_model(workflow, monkeypatch):
    import mlflow

    from basis.estimators import SpectralEstimator

    features = np.load(workflow / "results/features/digits.npz")["X_test"][:50]
    client, training = runs(workflow, "runs")
    for method in METHODS:
        run = next(r for r in training if r.data.tags["method"] == method and r.data.tags["seed"] == "0")
        monkeypatch.setenv("MLFLOW_TRACKING_URI", client.tracking_uri)
        predicted = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/digits-{method}-seed0").predict(features)
        model = SpectralEstimator.load(workflow / f"results/runs/digits/{method}/seed0/model.pt", device="cpu")
        np.testing.assert_array_equal(predicted, model.transform(features))
        assert "16-d Siamese features of digits" in run.data.tags["mlflow.note.content"]
        # the Model Registry: a version per seed, and the alias a user loads
        registered = mlflow.pyfunc.load_model(f"models:/tiny-digits-{method}@representative")
        assert {v.run_id for v in client.search_model_versions(f"name = 'tiny-digits-{method}'")} >= {
            r.info.run_id for r in training if r.data.tags.get("method") == method and "superseded" not in r.data.tags
        }
        version = client.get_model_version_by_alias(f"tiny-digits-{method}", "representative")
        seed_model = SpectralEstimator.load(
            workflow / f"results/runs/digits/{method}/seed{client.get_run(version.run_id).data.tags['seed']}/model.pt",
            device="cpu",
        )
        np.testing.assert_array_equal(registered.predict(features), seed_model.transform(features))
        assert "digits_siamese.pt" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_the_report_shows_each_figure_with_the_caption_its_study_declares(workflow):
    from basis.plan import registry as plan

    done = snakemake(workflow, "--report", "report.html")
    assert done.returncode == 0, done.stderr[-3000:]
    report = (workflow / "report.html").read_text()
    for name in plan.study_names():
        for figure in plan.study_declaration(name).figures:
            assert figure.caption[:30] in report, figure.name  # ASCII: the report escapes the rest
            if figure.table:  # its numbers too (fig9's and fig11's)
                assert f"{figure.name}.table.html" in report, figure.name
    assert "report.html" in report and "The answer in one page" in report  # the config's report page


def test_the_configs_report_opens_on_the_tally_and_links_each_number_to_its_run(workflow, browser):
    """results/<name>/report.html, one file: the tally first, Table 1 in the paper's layout,
    every number of ours linked to the parent run that holds it in MLflow."""
    page = workflow / "results/tiny/report.html"
    text = page.read_text()
    assert "src='data:image/png;base64," in text and "<link" not in text and "<script" not in text
    assert "nan" not in re.sub(r"<img[^>]*>", "", text).lower()
    client, training = runs(workflow, "runs")
    summaries = client.search_runs([training[0].info.experiment_id], "tags.`basis.summary` LIKE 'digits/%'")
    parents = {r.info.run_id for r in summaries}
    assert len(parents) == len(METHODS)
    assert set(re.findall(r'data-run="([0-9a-f]+)"', text)) == parents
    dom = browser(page.as_uri(), "report/tiny")
    tally = dom.split("<h2>Table 1</h2>")[0]
    assert "20 not measured" in tally  # tiny runs none of the paper's data sets
    assert re.search(r"\d+ reproduced", tally) and re.search(r"\d+ not reproduced", tally)
    assert dom.count("paper 0.107 ± 0.038") == 1  # MNIST's BASiS d_G, under ours
    assert "Data sets the paper does not report" in dom and ">BASiS (Ours)<" in dom


def test_lint_reports_nothing(workflow):
    done = snakemake(workflow, "--lint")
    assert done.returncode == 0
    assert "Congratulations, your workflow is in a good condition!" in done.stdout + done.stderr


def test_rerunning_one_job_supersedes_its_old_run(workflow):
    target = "results/runs/digits/basis/seed0/metrics.json"
    _, before = runs(workflow, "runs")
    table_time = (workflow / "results/paper/table1.md").stat().st_mtime
    metrics_before = (workflow / target).read_bytes()
    done = snakemake(workflow, "--forcerun", target)
    assert done.returncode == 0, done.stderr[-3000:]
    # it ends by saying where the answer is and how to open the MLflow view, as the README does
    readme = (ROOT / "README.md").read_text()
    lines = done.stderr.splitlines()  # Snakemake's own log hint and runtime follow them
    closing = next(lines[i : i + 4] for i, line in enumerate(lines) if line.startswith("The report:"))
    assert closing[0].startswith("The report: results/tiny/report.html") and "mlflow ui" in closing[2], closing
    url_command = closing[3].strip().split(" --ui")[0]
    assert closing[2].strip() in readme and url_command in readme.replace("basis-runs", "tiny-runs")
    assert (workflow / target).read_bytes() == metrics_before  # scores only, no timings: a seed gives the same file
    _, after = runs(workflow, "runs")
    new = [r for r in after if r.info.run_id not in {b.info.run_id for b in before}]
    assert len(new) == 1 and new[0].data.tags["method"] == "basis" and new[0].data.tags["seed"] == "0"
    old = [r for r in after if r.data.tags.get("superseded") == "true"]
    assert len(old) == 1 and old[0].data.tags["superseded_by"] == new[0].info.run_id
    assert (workflow / "results/paper/table1.md").stat().st_mtime > table_time


def _job_runs_running(folder):
    """The ids of the job runs (not the parents that group them) RUNNING in the local store,
    read without MLflow (:func:`basis.tracking.store.read_local_store`); none while a writer
    holds the database."""
    ids = read_local_store(
        folder / "results" / "mlflow",
        "SELECT group_concat(run_uuid) FROM runs WHERE status = 'RUNNING' AND run_uuid NOT IN"
        " (SELECT run_uuid FROM tags WHERE key IN ('basis.parent', 'basis.summary'))",
    )
    return set(ids.split(",")) if ids else set()


def test_a_killed_jobs_run_is_closed_by_the_next_invocation(workflow):
    client, before = runs(workflow, "runs")
    known = {r.info.run_id for r in before} | _job_runs_running(workflow)
    job = subprocess.Popen(
        snakemake_command("--configfile", TINY, "--forcerun", "results/runs/digits/basis/seed1/metrics.json"),
        cwd=workflow,
        env=snakemake_env(ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # Wait until the job's run exists, then kill everything. The job is stopped while the
        # store is read, so that it cannot finish its run between the look and the kill (its
        # run lasts about a second). No deadline of its own: on a busy machine Snakemake and
        # the job's imports take minutes; only a hang is cut off.
        deadline = time.monotonic() + HANG_GUARD_S
        while True:
            os.killpg(job.pid, signal.SIGSTOP)
            if _job_runs_running(workflow) - known:
                break
            os.killpg(job.pid, signal.SIGCONT)
            if job.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the rerun ended or hung (exit {job.poll()}) without an MLflow run seen RUNNING")
            time.sleep(0.5)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
    running = [r for r in runs(workflow, "runs")[1] if r.info.run_id not in known and r.info.status == "RUNNING"]
    assert len(running) == 1, [(r.info.run_id, r.info.status) for r in runs(workflow, "runs")[1]]
    orphan = running[0].info.run_id
    assert client.get_run(orphan).info.status == "RUNNING"
    assert snakemake(workflow, "--unlock").returncode == 0  # what a user does after a kill
    # The table is still there, so this invocation has no job to run (Snakemake does not rerun
    # a job whose outputs were deleted under finished downstream results); being a real
    # execution, it closes the run anyway, since its process is provably gone.
    done = snakemake(workflow)
    assert done.returncode == 0, done.stderr[-3000:]
    assert client.get_run(orphan).info.status == "KILLED"


def test_the_workflow_profile_splits_each_stage_into_its_jobs_phases(workflow):
    # As the README gives it, from the folder that holds results/
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "jobs", "profile", "--results", "results"],
        capture_output=True,
        text=True,
        cwd=workflow,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr
    header, *rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| ")]
    table = {row[0].strip(): dict(zip((h.strip() for h in header), (c.strip() for c in row))) for row in rows}
    assert table["runs"]["jobs"] == str(len(METHODS) * 2)
    for phase in ("startup", "compute", "metrics", "tracking"):
        assert float(table["runs"][phase]) > 0, phase
    assert "Per-job overhead" in done.stdout


def test_the_projection_times_every_rule_of_the_dag_from_the_finished_run(workflow):
    # As BENCHMARKS.md gives it, from the folder that holds results/ and .snakemake/
    command = [sys.executable, "-m", "basis.cli.projection", "--configfile", TINY]
    done = subprocess.run(
        [*command, "--timings", ".", "--cores", "2", "--gpus", "0", "1"],
        capture_output=True,
        text=True,
        cwd=workflow,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr
    rows = {line.split("|")[1].strip(): line for line in done.stdout.splitlines() if line.startswith("| ")}
    assert rows["train_and_evaluate"].startswith(f"| train_and_evaluate | {len(METHODS) * 2} |")
    assert "not measured" not in done.stdout  # every rule of the tiny DAG ran
    cpu, gpu = re.findall(r"projected wall time on .*: (\d+) s", done.stdout)
    assert int(cpu) > 0 and int(gpu) > 0


def test_runs_in_one_job_write_what_one_job_per_run_writes_and_supersede_alike(workflow):
    """The tiny config runs its toy sets in one job and its ablation variants in another
    (runs_in_one_job); one job per run rewrites two of those runs byte for byte, and each
    new MLflow run supersedes the shared job's run of the same study run or variant."""
    targets = [
        "results/studies/toy/circles/metrics.json",
        "results/ablation/two_moons/lstsq-outliers/seed0/metrics.json",
    ]
    folders = [(workflow / target).parent for target in targets]
    before_bytes = [{p.name: p.read_bytes() for p in folder.iterdir()} for folder in folders]
    _, studies_before = runs(workflow, "studies")
    _, ablation_before = runs(workflow, "ablation")
    assert len({r.data.tags["variant"] for r in ablation_before}) == 6  # one job's six variants, each its run
    # (a flag before the targets, or --forcerun would take them all and the target be `all`)
    done = snakemake(workflow, "--config", "runs_in_one_job=False", "--forcerun", *targets, "--keep-going", *targets)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rule study_toy:" in done.stderr and "rule ablation_run:" in done.stderr
    assert [{p.name: p.read_bytes() for p in folder.iterdir()} for folder in folders] == before_bytes
    for stage, before, variant in (
        ("studies", studies_before, "toy-circles"),
        ("ablation", ablation_before, "alignment-lstsq-outliers"),
    ):
        _, after = runs(workflow, stage)
        (new,) = [r for r in after if r.info.run_id not in {b.info.run_id for b in before}]
        (old,) = [r for r in before if r.data.tags.get("variant") == variant]
        assert new.info.run_name == old.info.run_name and new.data.tags["variant"] == variant
        superseded = next(r for r in after if r.info.run_id == old.info.run_id)
        assert superseded.data.tags.get("superseded_by") == new.info.run_id


# Last of the workflow's tests: it leaves the runs' jobs in the seeds-in-one-job layout.
def test_seeds_in_one_job_write_the_same_files_and_supersede_each_seeds_run(workflow):
    targets = [workflow / f"results/runs/digits/basis/seed{seed}/metrics.json" for seed in (0, 1)]
    missing = [str(path.relative_to(workflow)) for path in targets if not path.exists()]
    if missing:  # the killed job's test leaves seed 1 without outputs: one job per seed makes them
        # (a flag before the targets, or --configfile would take them for config files)
        assert snakemake(workflow, "--keep-going", *missing).returncode == 0
    before_bytes = {path: path.read_bytes() for path in targets}
    _, before = runs(workflow, "runs")
    # BASiS's job only (mtime triggers: the other methods' changed commands do not rerun them)
    only_basis = ["--rerun-triggers", "mtime", "--forcerun", "results/runs/digits/basis/seed0/metrics.json"]
    # (seeds_together=False: the CPU's default made explicit, passed on to the job's command)
    done = snakemake(workflow, "--config", "seeds_in_one_job=True", "seeds_together=False", *only_basis)
    assert done.returncode == 0, done.stderr[-3000:]
    assert {path: path.read_bytes() for path in targets} == before_bytes  # byte for byte
    _, after = runs(workflow, "runs")
    new = [r for r in after if r.info.run_id not in {b.info.run_id for b in before}]
    # one run per seed, named as before, each superseding the seed's last run
    assert sorted(r.info.run_name for r in new) == ["digits-basis-seed0", "digits-basis-seed1"]
    assert all(r.data.tags["rule"] == "train_and_evaluate" and r.info.status == "FINISHED" for r in new)
    superseding = {r.data.tags["superseded_by"] for r in after if r.data.tags.get("superseded") == "true"}
    assert {r.info.run_id for r in new} <= superseding
    # one job, one log, with both seeds' progress and the job's phases
    log = (workflow / "results/logs/runs/digits/basis/seeds.log").read_text()
    command = log.splitlines()[0]
    assert "--seeds 0 1 --out" in command and "--seeds-together off" in command
    assert log.count("step 20/20") == 2 and "# timings " in log


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def readme_ui_command(port: int) -> list[str]:
    """The README's command that starts the MLflow UI, as written but for its port (5000 may
    be taken on a shared machine)."""
    (line,) = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith(".venv/bin/mlflow ui")]
    command = shlex.split(line.split("#")[0])
    assert command[command.index("--port") + 1] == "5000"
    command[command.index("--port") + 1] = str(port)
    return command


@pytest.fixture(scope="module")
def ui_server(workflow):
    """The UI as the README starts it, from the folder that holds results/ (its .venv: the
    environment that runs the tests)."""
    port = _free_port()
    if not (workflow / ".venv").exists():
        (workflow / ".venv").symlink_to(sys.prefix)
    output = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    server = subprocess.Popen(readme_ui_command(port), cwd=workflow, **output)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + HANG_GUARD_S  # a busy machine starts it slowly; only a hang is cut off
        while True:
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"mlflow ui ended or hung (exit {server.poll()}) without answering /health")
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_ui_server_serves_the_runs_over_rest(ui_server):
    with urllib.request.urlopen(
        f"{ui_server}/api/2.0/mlflow/experiments/get-by-name?experiment_name=tiny-runs", timeout=10
    ) as r:
        experiment_id = json.load(r)["experiment"]["experiment_id"]
    request = urllib.request.Request(
        f"{ui_server}/api/2.0/mlflow/runs/search",
        data=json.dumps({"experiment_ids": [experiment_id], "max_results": 100}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        found = json.load(r)["runs"]
    finished = [run for run in found if run["info"]["status"] == "FINISHED"]
    current = [run for run in finished if {"key": "superseded", "value": "true"} not in run["data"]["tags"]]
    # one run per method and seed that no rerun superseded, + each method's parent run
    assert len(current) == len(METHODS) * 3
    seeds = [run for run in current if not run["info"]["run_name"].startswith("digits: ")]
    metric_keys = {m["key"] for m in seeds[0]["data"]["metrics"]}
    assert {"eval/d_G", "eval/nmi", "eval/cluster_acc", "train/loss"} <= metric_keys


@pytest.fixture(scope="module")
def table1_page(ui_server, workflow):
    """The README's UI address of Table 1 (`python -m basis tracking url`)."""
    done = subprocess.run(
        [sys.executable, "-m", "basis", "tracking", "url", "--experiment", "tiny-runs", "--ui", ui_server],
        capture_output=True,
        text=True,
        cwd=workflow,
        env=snakemake_env(workflow),
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr
    page = done.stdout.strip()
    assert page.startswith(f"{ui_server}/#/experiments/") and "workflowType=machine_learning" in page
    return page


def js_number(value: float) -> str:
    """``value`` as the UI's JavaScript prints it (positional, no trailing zeros)."""
    return np.format_float_positional(value, trim="-")


def test_browser_opens_table1_with_a_row_per_method_and_its_scores(browser, table1_page, workflow):
    """The page opens in model-training mode on Table 1: a row per data set and method (its
    parent run) with the seeds' mean scores as numbers, each row unfolding into its seeds."""
    dom = browser(table1_page, "mlflow-ui/table1")
    assert "Error loading shared view" not in dom
    for method in METHODS:
        assert f">digits: {method}<" in dom, method
    # by data set, then method, whichever finished first; each score beside its spread and its log10
    assert sorted(METHODS, key=lambda method: dom.index(f">digits: {method}<")) == sorted(METHODS)
    columns = re.findall(r'col-id="metrics\.`([^`]+)`"', dom)
    assert columns.index("eval/d_G") + 1 == columns.index("eval/d_G_log10") == columns.index("eval/d_G_std") - 1
    assert 'col-id="metrics.`eval/cluster_acc`"' in dom and 'col-id="metrics.`eval/d_G`"' in dom
    # BASiS's row shows its seeds' mean ACC as Table 1 has it, rounded as MLflow shows it
    table = pd.read_csv(workflow / "results/paper/table1.csv", header=[0, 1], index_col=[0, 1])
    mean_acc = table.loc[("digits", "basis"), ("acc", "mean")]
    assert f">{js_number(float(f'{mean_acc:.4g}'))}<" in dom


def test_browser_charts_put_the_methods_side_by_side(browser, table1_page):
    """The view's chart mode opens on the scores: in each chart one bar per method (its
    parent run, the seeds' mean), BASiS beside the other methods."""
    dom = browser(f"{table1_page}&compareRunsMode=CHART", "mlflow-ui/table1-charts")
    charts = dom.split('class="trace bars"')[1:]
    assert len(charts) >= 5  # eval/d_G, eval/d_perp, eval/nmi, eval/cluster_acc, eval/probe_accuracy_pct, ...
    first = charts[0].split('class="hoverlayer"')[0]
    assert first.count('class="point"') == len(METHODS)
    legends = set(re.findall(r">(digits: [a-z0-9_]+)</span>", dom))
    assert {f"digits: {method}" for method in METHODS} <= legends


def test_browser_model_page_shows_its_description_final_loss_and_data_set(browser, ui_server, workflow):
    client, training = runs(workflow, "runs")
    (run,) = [r for r in training if r.info.run_name == "digits-basis-seed0" and "superseded" not in r.data.tags]
    (model,) = [m for m in client.search_logged_models([run.info.experiment_id]) if m.source_run_id == run.info.run_id]
    page = f"{ui_server}/#/experiments/{run.info.experiment_id}/models/{model.model_id}?workflowType=machine_learning"
    dom = browser(page, "mlflow-ui/model")
    assert model.name == "digits-basis-seed0" and f">{model.name}<" in dom
    assert run.data.tags["mlflow.note.content"] in dom and "No description" not in dom
    last = max(client.get_metric_history(run.info.run_id, "train/loss"), key=lambda m: m.step)
    assert last.step == 19 and f">{js_number(last.value)}<" in dom  # the final loss, not step 0's
    assert "Datasets used" in dom and re.search(r">digits \(#[0-9a-f]+\)<", dom)


# -- data sets of one's own (last: it adds them to the finished tiny workflow) ------------------
def _own_data_config(folder: Path) -> tuple[str, str]:
    """The tiny config with the README's `data_sources` example and an unlabelled CSV (the
    .npz and the other formats: test_data_sources.py), each in Table 1, the labelled table
    in the kNN sweep and the studies that take a data set, the image folder in the
    feature-change study and the unlabelled table in the ablation; their files written
    where the config names them. Two configs: all four methods and both seeds (planned),
    and two methods, one seed and one kNN method (run: the suite's time on two cores)."""
    import yaml
    from own_data import write_image_folder, write_tables

    readme = (ROOT / "README.md").read_text().split("## Your own data", 1)[1]
    example = yaml.safe_load(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
    tables = write_tables(folder / "data")
    tables["labelled"].rename(folder / "data" / "my_table.csv")
    write_image_folder(folder / "data" / "my_images")
    config = yaml.safe_load((folder / TINY).read_text())
    config["data_sources"] = example["data_sources"] | {"loose": {"path": "data/unlabelled.csv", "n_components": 10}}
    config["datasets"] = [*config["datasets"], *example["datasets"], "loose"]
    config["experiments"]["knn"]["dataset"] = "my_table"
    config["experiments"]["ablation"]["datasets"] = ["two_moons", "loose"]
    for study in ("variants", "alignment_error"):
        config["experiments"][study]["datasets"].append("my_table")
    feature_change = config["experiments"]["feature_change"]  # three classes of 36 test images
    feature_change["settings"] |= {"dataset": "my_images", "eval_size": 100}
    feature_change["main"] = {"n_components": 2, "ransac_sample_size": 5}
    feature_change["subset"]["classes"] = [0, 1, 2]  # the subset's figure is 2-D
    (folder / "own.yaml").write_text(yaml.safe_dump(config, sort_keys=False))  # the same --set order: no rerun
    config["methods"] = {method: config["methods"][method] for method in RUN_METHODS}
    config["seeds"] = 1
    config["experiments"]["knn"]["methods"] = ["basis"]
    (folder / "own_run.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return "own.yaml", "own_run.yaml"


OWN = ("my_images", "my_table", "loose")
RUN_METHODS = ("basis", "diffusion_net")  # the reference's consumer beside BASiS


def test_data_sets_of_ones_own_run_through_every_stage_and_an_edit_reruns_only_its_jobs(workflow):
    planned, config = _own_data_config(workflow)
    plan = run_snakemake(workflow, "--configfile", planned, "-n", cores=2)
    assert plan.returncode == 0, plan.stderr[-3000:]

    def planned_jobs(rule: str) -> set[str]:
        return set(re.findall(rf"^rule {rule}:\n(?:    .*\n)*?    wildcards: (.+)$", plan.stdout, flags=re.M))

    every_run = {f"dataset={d}, method={m}, seed={s}" for d in OWN for m in METHODS for s in (0, 1)}
    own_runs = {job for job in planned_jobs("train_and_evaluate") if job.split(",")[0][8:] in OWN}
    assert own_runs == every_run
    assert planned_jobs("siamese_features") == {"dataset=my_images"}
    done = run_snakemake(workflow, "--configfile", config, cores=2)
    assert done.returncode == 0, done.stderr[-3000:]
    table = pd.read_csv(workflow / "results/paper/table1.csv", header=[0, 1], index_col=[0, 1])
    assert {(d, m) for d in OWN for m in RUN_METHODS} <= set(table.index)
    assert table.loc[("loose", "basis"), ("nmi", "mean")] != table.loc[("loose", "basis"), ("nmi", "mean")]  # NaN
    assert (table.loc[list(OWN), ("d_G", "mean")] > 0).all()
    assert (table.loc[[d for d in OWN if d != "loose"], ("nmi", "mean")] > 0).all()
    markdown = (workflow / "results/paper/table1.md").read_text()
    assert "| loose | basis |" in markdown and "n/a: not available: the data set has no labels" in markdown
    comparison = (workflow / "results/paper/comparison.md").read_text()
    for dataset in OWN:
        assert f"| {dataset} | basis | d_perp | — |" in comparison
    assert (
        "| loose | basis | nmi | — | n/a | — | no paper number; not available: the data set has no labels" in comparison
    )
    assert "| my_table | basis | nmi | — |" in comparison and "no paper number" in comparison
    assert len(list((workflow / "results/knn/my_table").glob("k*/basis/seed0/metrics.json"))) == 2  # 2 k
    ablation = pd.read_csv(workflow / "results/paper/ablation.csv").set_index(["alignment", "dataset"])
    assert ablation.loc[("ransac", "loose"), "alignment_error_median_mean"] > 0  # no labels needed
    assert ablation.loc[("ransac", "loose"), "nmi_mean"] != ablation.loc[("ransac", "loose"), "nmi_mean"]  # NaN
    for study in ("variants", "alignment_error"):
        assert json.loads((workflow / f"results/studies/{study}/my_table/metrics.json").read_text())
    _, studies = runs(workflow, "studies")
    assert {r.data.params.get("data") for r in studies if r.data.tags.get("run") == "my_table"} == {"data/my_table.csv"}
    # every run names its data set and its files' content hash as its MLflow dataset input
    _, training = runs(workflow, "runs")
    for dataset in OWN:
        digest = json.loads((workflow / f"results/data/{dataset}.json").read_text())["content_hash"]
        own = [r for r in training if r.data.tags.get("dataset") == dataset]
        assert len(own) == len(RUN_METHODS)  # one seed
        assert {(i.dataset.name, i.dataset.digest) for r in own for i in r.inputs.dataset_inputs} == {(dataset, digest)}
    assert all("not_available.nmi" in r.data.tags for r in training if r.data.tags.get("dataset") == "loose")
    # an edited file reruns its data set's jobs and what gathers them, nothing of the others
    table_file = workflow / "data" / "my_table.csv"
    table_file.write_text(table_file.read_text().replace("\n0.0,", "\n1.0,", 1))
    plan = run_snakemake(workflow, "--configfile", config, "-n", cores=2)
    datasets = set(re.findall(r"wildcards: dataset=([a-z_0-9]+)", plan.stdout))
    rules = set(re.findall(r"^(?:local)?rule (\w+):", plan.stdout, flags=re.M))
    assert datasets == {"my_table"}, plan.stdout[-3000:]
    assert "download" in rules and "siamese_features" not in rules and "study_toy" not in rules

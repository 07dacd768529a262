"""benchmarks/paper_projection.py: a workflow's wall time from its DAG and measured job times."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import paper_projection as projection  # noqa: E402

# The shape of `snakemake -n` (9.x): a block per job.
DRY_RUN = """Building DAG of jobs...
Job stats:
job      count

[Sat Nov 28 09:51:34 2026]
rule prepare:
    output: results/data.json
    jobid: 3
    reason: Forced execution
    resources: tmpdir=/tmp

[Sat Nov 28 09:51:34 2026]
rule train:
    input: results/data.json
    output: results/runs/a/metrics.json
    jobid: 1
    threads: 2
    priority: 10
    wildcards: method=a
    resources: tmpdir=/tmp, gpu_slot=0

[Sat Nov 28 09:51:34 2026]
rule train:
    input: results/data.json
    output: results/runs/b/metrics.json
    jobid: 2
    threads: 2
    priority: 10
    wildcards: method=b
    resources: tmpdir=/tmp, gpu_slot=0

[Sat Nov 28 09:51:34 2026]
localrule all:
    input: results/runs/a/metrics.json, results/runs/b/metrics.json
    jobid: 0
    reason: Forced execution
    resources: tmpdir=/tmp
"""
DAG = """digraph snakemake_dag {
\t0[label = "all"];
\t1[label = "train\\nmethod: a"];
\t3 -> 1
\t3 -> 2
\t1 -> 0
\t2 -> 0
}"""


def _plan():
    jobs = projection.parse_dry_run(DRY_RUN)
    projection.parse_dag(DAG, jobs)
    return jobs


def test_the_dry_run_and_the_dag_give_each_jobs_rule_threads_gpu_claim_and_inputs():
    jobs = _plan()
    assert {j: job.rule for j, job in jobs.items()} == {3: "prepare", 1: "train", 2: "train", 0: "all"}
    assert jobs[1].threads == 2 and jobs[1].gpu and jobs[1].priority == 10 and jobs[1].needs == {3}
    assert not jobs[3].gpu and jobs[3].threads == 1 and jobs[0].needs == {1, 2} and not jobs[0].has_output


@pytest.mark.parametrize(
    "cores, gpus, wall",
    [
        (4, 0, 10 + 30),  # both trainings at once on the CPU
        (2, 0, 10 + 30 + 30),  # one at a time: each takes the two cores
        (4, 1, 10 + 30 + 30),  # one GPU slot: the trainings take turns
        (4, 2, 10 + 30),
    ],
)
def test_jobs_start_when_their_inputs_are_done_and_their_cores_and_gpu_are_free(cores, gpus, wall):
    assert projection.schedule(_plan(), {"prepare": 10, "train": 30, "all": 0}, cores, gpus) == wall


def _record(folder, output, rule, job_hash, start, end):
    meta = folder / ".snakemake" / "metadata"
    meta.mkdir(parents=True, exist_ok=True)
    record = {"rule": rule, "job_hash": job_hash, "starttime": start, "endtime": end, "incomplete": False}
    (meta / output).write_text(json.dumps(record))


def test_measured_times_are_per_job_and_the_report_says_what_it_lacks(tmp_path):
    _record(tmp_path, "a1", "train", 1, 100.0, 130.0)
    _record(tmp_path, "a2", "train", 1, 100.5, 131.0)  # a second output of the same job
    _record(tmp_path, "b", "train", 2, 100.0, 150.0)
    per_rule, wall = projection.measured_seconds(tmp_path)
    assert per_rule == {"train": [31.0, 50.0]} and wall == 50.0
    text = projection.report(_plan(), per_rule, cores=4, gpus=[0, 1])
    assert "| train | 2 | 40.5 | 81 | measured |" in text and "| prepare | 1 | - | - | **not measured** |" in text
    assert "not measured (counted as 0 s): prepare" in text and "| all | 3 | | 81 | |" in text
    assert "projected wall time on 4 cores, no GPU: 40 s" in text
    assert "projected wall time on 1 GPU and 4 cores: 81 s" in text


def test_a_config_the_dry_run_refuses_is_one_line_and_exit_2(tmp_path, capsys):
    _record(tmp_path, "a1", "train", 1, 100.0, 130.0)
    root = Path(__file__).resolve().parents[1]
    config = str(tmp_path / "nope.yaml")
    code = projection.main(["--configfile", config, "--timings", str(tmp_path), "--cores", "2", "--workdir", str(root)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "No such file or directory" in err

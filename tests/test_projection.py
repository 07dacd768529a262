"""basis.cli.projection: a workflow's wall time from its DAG and measured job times."""

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_GUARD_S, copy_workflow, snakemake_env

from basis.cli import dag, projection

# The shape of `snakemake -n` (9.x): a block per job, an output's flags after its path.
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
    output: results/runs/a/metrics.json (update), results/runs/a/model.pt (update)
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
    jobs = dag.parse_dry_run(DRY_RUN)
    dag.parse_dag(DAG, jobs)
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
    assert dag.schedule(_plan(), {3: 10, 1: 30, 2: 30, 0: 0}, cores, gpus) == wall


def _record(folder, output, rule, job_hash, start, end):
    """A Snakemake metadata record of ``output``, named as Snakemake names it."""
    meta = folder / ".snakemake" / "metadata"
    meta.mkdir(parents=True, exist_ok=True)
    record = {"rule": rule, "job_hash": job_hash, "starttime": start, "endtime": end, "incomplete": False}
    (meta / base64.urlsafe_b64encode(output.encode()).decode()).write_text(json.dumps(record))


def test_measured_times_are_per_job_and_the_report_says_what_it_lacks(tmp_path):
    _record(tmp_path, "a1", "train", 1, 100.0, 130.0)
    _record(tmp_path, "a2", "train", 1, 100.5, 131.0)  # a second output of the same job
    _record(tmp_path, "b", "train", 2, 100.0, 150.0)
    per_rule, wall = projection.measured_seconds(tmp_path)
    assert per_rule == {"train": [31.0, 50.0]} and wall == 50.0
    jobs = _plan()
    text = projection.report(jobs, projection.from_timings(jobs, per_rule), cores=4, gpus=[0, 1])
    assert "| train | 2 | 40.5 | 81 | measured |" in text and "| prepare | 1 | - | - | **not measured** |" in text
    assert "not measured (counted as 0 s): prepare" in text and "| all | 3 | | 81 | |" in text
    assert "projected wall time on 4 cores, no GPU: 40 s" in text
    assert "projected wall time on 1 GPU and 4 cores: 81 s" in text


@pytest.mark.parametrize(
    "record, message",
    [
        ({"rule": "train", "starttime": 1100.0, "endtime": 100.0}, "ends before it starts (1100.0 > 100.0)"),
        ({"rule": "train", "starttime": "100", "endtime": "130"}, "start and end times that are not numbers"),
        ({"rule": "train", "starttime": True, "endtime": 130.0}, "start and end times that are not numbers"),
        ("{not json", "is not a Snakemake metadata record"),
        ([1, 2], "is not a Snakemake metadata record (not an object)"),
    ],
)
def test_impossible_job_records_are_refused_naming_the_file(tmp_path, capsys, record, message):
    _record(tmp_path, "a1", "train", 1, 100.0, 130.0)
    bad = tmp_path / ".snakemake" / "metadata" / "bad"
    bad.write_text(record if isinstance(record, str) else json.dumps(record))
    root = Path(__file__).resolve().parents[1]
    config = str(root / "tests/configs/tiny.yaml")
    code = projection.main(["--configfile", config, "--timings", str(tmp_path), "--cores", "2", "--workdir", str(root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and str(bad) in err[0] and message in err[0], err


def test_a_failed_job_is_not_a_timing(tmp_path):
    """Snakemake records a failed job as finished; its log ends with the job's error line."""
    _record(tmp_path, "a1", "train", 1, 100.0, 130.0)
    _record(tmp_path, "b1", "train", 2, 100.0, 101.0)
    meta = tmp_path / ".snakemake" / "metadata" / base64.urlsafe_b64encode(b"b1").decode()
    (tmp_path / "b.log").write_text("# python -m basis run ...\nerror: results/references/x.npz is truncated\n")
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "log": ["b.log"]}))
    assert projection.measured_seconds(tmp_path)[0] == {"train": [30.0]}


def test_a_config_the_dry_run_refuses_is_one_line_and_exit_2(tmp_path, capsys):
    _record(tmp_path, "a1", "train", 1, 100.0, 130.0)
    root = Path(__file__).resolve().parents[1]
    config = str(tmp_path / "nope.yaml")
    code = projection.main(["--configfile", config, "--timings", str(tmp_path), "--cores", "2", "--workdir", str(root)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "No such file or directory" in err


# -- a sample of the DAG's jobs -------------------------------------------------------------
def _job(rule, needs=(), **wildcards):
    output = "/".join([rule, *(f"{k}{v}" for k, v in wildcards.items())]) + ".json"
    return dag.Job(rule=rule, needs=set(needs), wildcards=wildcards, outputs=[output])


def test_the_dry_run_gives_each_jobs_wildcards_and_outputs():
    jobs = _plan()
    assert jobs[1].wildcards == {"method": "a"} and jobs[1].outputs == [
        "results/runs/a/metrics.json",
        "results/runs/a/model.pt",
    ]
    assert jobs[3].wildcards == {} and jobs[0].outputs == []


def test_a_kind_is_a_rule_and_its_wildcards_less_what_a_sample_stands_for():
    kind = dag.job_kind
    assert kind(_job("run", dataset="svhn", method="basis", k="50")) == "run[dataset=image, method=basis]"
    assert kind(_job("run", dataset="mnist", method="basis", k="10")) == "run[dataset=image, method=basis]"
    assert kind(_job("study", run="circles")) == kind(_job("study", run="spirals")) == "study[run=toy]"
    assert kind(_job("study", run="digits")) == "study[run=digits]" and kind(_job("table")) == "table"
    assert kind(_job("run", dataset="mnist", seed="3"), per_dataset=True) == "run[dataset=mnist]"


def test_the_sample_takes_the_largest_of_a_kind_and_leaves_out_what_needs_several():
    jobs = {
        1: _job("download", dataset="mnist"),
        2: _job("download", dataset="svhn"),
        3: _job("reference", [1], dataset="mnist", k="10"),
        4: _job("reference", [1], dataset="mnist", k="100"),
        5: _job("run", [1, 3], dataset="mnist", k="10", method="basis"),
        6: _job("run", [1, 4], dataset="mnist", k="100", method="basis"),
        7: _job("train", [2], dataset="svhn"),
        8: _job("train", [1], dataset="mnist"),
        9: _job("table", [7, 8]),  # two jobs of one kind: only all of them make it
        10: _job("figure", [7]),
    }
    chosen = dag.choose_sample(jobs)
    assert chosen == {
        "download[dataset=image]": 2,  # SVHN, the largest image set
        "reference[dataset=image]": 4,  # the largest k: an upper bound for the sweep
        "run[dataset=image, method=basis]": 6,
        "train[dataset=image]": 7,
        "figure": 10,
    }
    assert sorted(dag.sample_targets(jobs, chosen)) == sorted(jobs[j].outputs[0] for j in chosen.values())
    assert set(dag.choose_sample(jobs, per_dataset=True)) >= {"download[dataset=mnist]", "table"}
    assert set(dag.choose_sample(jobs, rules=["figure"])) == {"figure"}


def test_each_job_is_projected_from_its_kind_in_the_sample_or_said_to_lack_a_figure():
    jobs = {1: _job("download", dataset="svhn"), 2: _job("download", dataset="mnist"), 3: _job("table", [1, 2])}
    jobs[4] = _job("figure", [3])
    per_kind, own = {"download[dataset=image]": 12.0}, {1: 12.0}
    estimate = projection.from_sample(jobs, per_kind, own, {"table": [3.0, 5.0]}, "quick_run", False)
    assert estimate.seconds == {1: 12.0, 2: 12.0, 3: 4.0, 4: 0.0}
    assert estimate.source["download[dataset=image]"] == "sampled (dataset=svhn)"
    assert estimate.source["table"] == "projected: the median of 2 in quick_run"
    text = projection.report(jobs, estimate, cores=2, gpus=[0])
    assert "| download[dataset=image] | 2 | 12.0 | 24 | sampled (dataset=svhn) |" in text
    assert "| figure | 1 | - | - | **not measured** |" in text and "not measured (counted as 0 s): figure" in text


def test_a_records_long_output_path_is_read_back_from_its_folders(tmp_path):
    """Snakemake splits a record's name over folders ('@' first) past a file name's length."""
    output = "results/" + "x" * 300 + "/metrics.json"
    name = base64.urlsafe_b64encode(output.encode()).decode()
    meta = tmp_path / ".snakemake" / "metadata"
    parts = [name[i : i + 254] for i in range(0, len(name), 254)]
    record = meta.joinpath(*["@" + p for p in parts[:-1]], parts[-1])
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"rule": "run", "job_hash": 7, "starttime": 1.0, "endtime": 4.0}))
    _record(tmp_path, "results/short.json", "run", 8, 2.0, 3.0)
    spans = sorted(projection.finished_jobs(tmp_path), key=lambda s: s.start)
    assert [(s.outputs, s.end - s.start) for s in spans] == [([output], 3.0), (["results/short.json"], 1.0)]


def test_a_sample_runs_in_a_folder_of_its_own(tmp_path):
    config = tmp_path / "a.yaml"
    config.write_text("name: a\n")
    projection.check_sample_folder(tmp_path / "new", config)  # new: fine
    (tmp_path / "results").mkdir()
    with pytest.raises(ValueError, match="neither empty nor a sample's folder"):
        projection.check_sample_folder(tmp_path, config)
    sample = tmp_path / "sample"
    sample.mkdir()
    digest = projection._config_digest(config)
    (sample / projection.SAMPLE_MARK).write_text(json.dumps({"configfile": str(config), "config_sha256": digest}))
    projection.check_sample_folder(sample, config)  # the same config: what it finished is kept
    config.write_text("name: b\n")
    with pytest.raises(ValueError, match="holds a sample of"):
        projection.check_sample_folder(sample, config)
    (sample / projection.SAMPLE_MARK).write_text("[")
    with pytest.raises(ValueError, match="is not this script's"):
        projection.check_sample_folder(sample, config)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--cores", "2"], "give --timings"),
        (["--cores", "2", "--timings", ".", "--standins"], "give --sample too"),
        (["--cores", "0", "--sample", "{sample}"], "take at least 1"),
        (["--cores", "2", "--sample", "{sample}", "--sample-cores", "0"], "take at least 1"),
        (["--cores", "2", "--timings", ".", "--gpus", "nan"], "argument --gpus: invalid int value: 'nan'"),
        (["--cores", "2", "--sample", "{sample}", "--rules", "nope"], "--rules nope: not a rule of the DAG"),
        # no job of theirs can run alone, and no target would run the whole workflow
        (["--cores", "2", "--sample", "{sample}", "--rules", "table1"], "each of their jobs needs several of one kind"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys, arguments, message):
    root = Path(__file__).resolve().parents[1]
    config = str(root / "tests/configs/tiny.yaml")
    arguments = [a.format(sample=tmp_path / "s") for a in arguments]
    try:
        code = projection.main(["--configfile", config, "--workdir", str(root), *arguments])
    except SystemExit as stopped:  # a usage error: argparse's exit
        code = stopped.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_a_sample_on_standins_times_its_jobs_in_its_own_folder(tmp_path):
    """The sample of a config whose data set is an image set: Snakemake runs one job of each
    kind asked for in the sample's folder, MNIST's from stand-ins, and each is measured."""
    repo = copy_workflow(tmp_path / "repo")
    tiny = (repo / "tests/configs/tiny.yaml").read_text()
    config = tmp_path / "tiny_mnist.yaml"
    config.write_text(tiny.replace("datasets: [digits]\n", "datasets: [mnist]\n", 1))
    sample = tmp_path / "sample"
    command = [sys.executable, "-m", "basis.cli.projection", "--configfile", str(config)]
    command += ["--sample", str(sample), "--standins", "--rules", "download", "figure_fig2_illustration"]
    done = subprocess.run(
        [*command, "--cores", "2", "--gpus", "0", "1"],
        capture_output=True,
        text=True,
        cwd=repo,
        env=snakemake_env(repo),
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    rows = {line.split("|")[1].strip(): line for line in done.stdout.splitlines() if line.startswith("| ")}
    assert rows["download[dataset=image]"].endswith("| sampled (dataset=mnist) |")
    for kind in ("download[dataset=digits]", "study_illustration", "figure_fig2_illustration", "tracking_setup"):
        assert rows[kind].endswith("| sampled |") or "sampled (" in rows[kind], kind
    assert "**not measured**" in rows["table1"]
    assert re.search(r"the sample: 5 jobs in \d+ s .* on stand-ins of mnist", done.stdout)
    assert json.loads((sample / "results/data/mnist.json").read_text())["standin"] is True
    # the checkout's results untouched: nothing ran there (its dry run only planned)
    assert not (repo / "results").exists() and not any((repo / ".snakemake" / "metadata").glob("*"))

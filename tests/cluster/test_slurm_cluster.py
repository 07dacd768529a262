"""The cluster path, run for real: the tiny config's Table 1 through `profiles/slurm` on a
single-node SLURM cluster on localhost (`slurm_cluster.sh`: munge, MariaDB, slurmdbd,
slurmctld, slurmd), against the same target run locally.

Marked ``cluster``: `make test-cluster` runs it (as root; `.ci/run` does), `make test` does not.
The tests run in order on one pair of workflow folders; the cluster (daemon_fixtures.py's
`cluster`, shared with test_tracking_server.py) is torn down at the end, whatever happens.
"""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from cluster.daemon_fixtures import started
from conftest import HANG_GUARD_S, copy_workflow, run_snakemake, snakemake_command, snakemake_env

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
TINY = "tests/configs/tiny.yaml"
TARGET = "results/paper/table1.md"
LOCAL_RULES = {"download", "tracking_setup", "table1"}
# The test node has no GPU: the profile's GPU requests are dropped, every other setting kept.
NO_GPUS = [
    "--set-resources",
    *(f"{rule}:gpu=0" for rule in ("siamese_features", "train_and_evaluate", "knn_run", "ablation_run")),
]
# Status checks start after 5 s rather than the plugin's 40: the test's jobs take seconds.
FAST_STATUS = ["--slurm-init-seconds-before-status-checks", "5"]


def _env(cluster_env: dict[str, str], folder: Path) -> dict[str, str]:
    return snakemake_env(folder, **cluster_env)


def _snakemake(
    folder: Path, env: dict[str, str], *args: str, slurm: bool = True, configfile: str = TINY, **popen
) -> subprocess.Popen:
    where = ["--profile", "profiles/slurm", *NO_GPUS, *FAST_STATUS] if slurm else ["--cores", "2"]
    # --configfile first: it takes every value after it, targets included.
    command = snakemake_command("--configfile", configfile, *where, *args, cores=None)
    return started(command, cwd=folder, env=env, text=True, **popen)


def _run(
    folder: Path, env: dict[str, str], *args: str, slurm: bool = True, configfile: str = TINY
) -> subprocess.CompletedProcess:
    job = _snakemake(
        folder, env, *args, slurm=slurm, configfile=configfile, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stdout, stderr = job.communicate(timeout=HANG_GUARD_S * 4)
    return subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr)


def _sacct(env: dict[str, str]) -> list[dict[str, str]]:
    """Every job the cluster's accounting knows, one dict per job (no steps)."""
    fields = ["JobID", "JobName", "Comment", "State", "AllocCPUS", "Elapsed"]
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-S", "now-2hours", "-o", ",".join(fields)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines() if line.strip()]


def _squeue(env: dict[str, str]) -> list[dict[str, str]]:
    """The jobs in the queue (accounting has a job's comment only once it has ended)."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i|%k|%T"], env={**os.environ, **env}, capture_output=True, text=True, check=True
    ).stdout
    return [dict(zip(("JobID", "Comment", "State"), line.split("|"))) for line in out.splitlines() if line.strip()]


def _runs(folder: Path, stage: str = "runs"):
    from basis.tracking import client

    mlflow_client = client(folder / "results" / "mlflow")
    experiment = mlflow_client.get_experiment_by_name(f"tiny-{stage}")
    return mlflow_client, mlflow_client.search_runs([experiment.experiment_id], max_results=1000)


def _job_counts(folder: Path, env: dict[str, str]) -> dict[str, int]:
    """The jobs of TARGET by rule, from a dry run of the whole target."""
    done = run_snakemake(folder, "--configfile", TINY, "-n", "--forceall", TARGET, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    table = done.stdout.split("Job stats:", 1)[1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}


@pytest.fixture(scope="module")
def folders(cluster, tmp_path_factory):
    base = tmp_path_factory.mktemp("cluster")
    local, remote = copy_workflow(base / "local"), copy_workflow(base / "slurm")
    # both at once: the SLURM run spends most of its time in the plugin's waits between
    # checks; its output to a file (a pipe nobody reads meanwhile would fill and stall it)
    with open(base / "slurm.log", "w") as log:
        slurm = _snakemake(remote, _env(cluster, remote), TARGET, stdout=log, stderr=subprocess.STDOUT)
        try:
            done = _run(local, _env(cluster, local), TARGET, slurm=False)
            slurm.wait(timeout=HANG_GUARD_S * 4)
        finally:
            slurm.kill()
    assert done.returncode == 0, done.stderr[-3000:]
    assert slurm.returncode == 0, (base / "slurm.log").read_text()[-5000:]
    return local, remote


def test_every_job_but_the_local_rules_went_through_sbatch(cluster, folders):
    local, remote = folders
    counts = _job_counts(local, _env(cluster, local))
    expected = sum(n for rule, n in counts.items() if rule not in LOCAL_RULES)
    jobs = [job for job in _sacct(cluster) if job["State"] == "COMPLETED"]
    by_rule: dict[str, int] = {}
    for job in jobs:  # the plugin puts the rule (and wildcards) in the job's comment
        rule = job["Comment"].split("_wildcards")[0].removeprefix("rule_")
        by_rule[rule] = by_rule.get(rule, 0) + 1
    assert sum(by_rule.values()) == expected, (by_rule, counts)
    assert not set(by_rule) & LOCAL_RULES, by_rule
    assert expected >= 10  # features, a reference and 4 methods x 2 seeds


def test_outputs_and_mlflow_runs_match_a_local_run(folders):
    local, remote = folders
    metrics = sorted(p.relative_to(local) for p in (local / "results/runs").rglob("metrics.json"))
    assert len(metrics) == 8
    for path in metrics:
        assert (remote / path).read_bytes() == (local / path).read_bytes(), path
    assert (remote / TARGET).read_text() == (local / TARGET).read_text()
    for stage in ("runs", "features", "references"):
        names = []
        for folder in folders:
            mlflow_client, found = _runs(folder, stage)
            by_id = {run.info.run_id: run.info.run_name for run in found}
            names.append(
                sorted((run.info.run_name, by_id.get(run.data.tags.get("mlflow.parentRunId"))) for run in found)
            )
            assert all(run.info.status == "FINISHED" for run in found), stage
        assert names[0] == names[1], stage


def test_threads_inside_a_job_follow_the_cpus_slurm_gave_it(cluster, folders):
    _, remote = folders
    logs = sorted((remote / "results/logs/runs").rglob("*.log"))
    assert logs
    threads = {int(re.search(r"--threads (\d+)", log.read_text()).group(1)) for log in logs}
    runs = [job for job in _sacct(cluster) if job["Comment"].startswith("rule_train_and_evaluate")]
    assert runs and {int(job["AllocCPUS"]) for job in runs} == threads


def _wait_for_running(cluster: dict, folder: Path, known: set[str], job: subprocess.Popen) -> tuple[str, str]:
    """The SLURM job id and MLflow run id of the forced training job, once both run."""
    for _ in range(HANG_GUARD_S * 2):
        if job.poll() is not None:
            pytest.fail(f"snakemake ended before its job ran: {job.stderr.read()[-3000:]}")
        running = [j for j in _squeue(cluster) if j["State"] == "RUNNING" and "train_and_evaluate" in j["Comment"]]
        try:
            opened = [r for r in _runs(folder)[1] if r.info.run_id not in known and r.info.status == "RUNNING"]
        except Exception:  # the store is being written; look again
            opened = []
        if running and opened:
            return running[0]["JobID"], opened[0].info.run_id
        time.sleep(0.5)
    pytest.fail("the forced job never ran under SLURM")


def test_a_cancelled_job_fails_closes_its_run_and_the_next_invocation_reruns_and_supersedes_it(cluster, folders):
    _, remote = folders
    env = _env(cluster, remote)
    target = "results/runs/digits/basis/seed1/metrics.json"
    known = {run.info.run_id for run in _runs(remote)[1]}
    job = _snakemake(
        remote,
        env,
        TARGET,  # before --forcerun, which takes every value after it
        "--forcerun",
        target,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        slurm_id, run_id = _wait_for_running(cluster, remote, known, job)
        subprocess.run(["scancel", slurm_id], env={**os.environ, **cluster}, check=True)
        _, stderr = job.communicate(timeout=HANG_GUARD_S * 2)
    finally:
        job.kill()
    assert job.returncode != 0, "a cancelled job must fail the invocation"
    assert "Error" in stderr or "error" in stderr
    state = {j["JobID"]: j["State"] for j in _sacct(cluster)}[slurm_id]
    assert state.startswith("CANCELLED"), state
    mlflow_client, _ = _runs(remote)
    assert mlflow_client.get_run(run_id).info.status == "KILLED"  # closed by the job itself
    assert not (remote / target).exists()  # Snakemake keeps no output of a failed job
    # The user runs the same command again (a plain `snakemake` would not: Snakemake does
    # not rerun a job whose outputs went missing under finished downstream results).
    done = _run(remote, env, TARGET, "--forcerun", target)
    assert done.returncode == 0, done.stderr[-3000:]
    killed = mlflow_client.get_run(run_id)
    assert killed.data.tags.get("superseded") == "true"
    newest = mlflow_client.get_run(killed.data.tags["superseded_by"])
    assert newest.info.status == "FINISHED" and newest.data.tags["seed"] == "1"


def test_a_job_over_its_time_limit_fails_and_closes_its_run(cluster, folders):
    """A features job of 100,000 steps with a one-minute limit: SLURM sends SIGTERM at the
    limit (SIGKILL KillWait = 5 s later); the invocation fails, the run is closed as KILLED."""
    _, remote = folders
    env = _env(cluster, remote)
    _, before = _runs(remote, "features")
    known = {run.info.run_id for run in before}
    features = "results/features/digits.npz"
    config = yaml.safe_load((remote / TINY).read_text())
    config["features"]["n_steps"] = 100_000  # minutes of training
    slow = "tests/configs/tiny_slow_features.yaml"
    (remote / slow).write_text(yaml.safe_dump(config))
    done = _run(
        remote,
        env,
        features,  # the target first: the options below take every value after them
        "--forcerun",
        features,
        "--set-resources",
        "siamese_features:runtime=1",
        "siamese_features:gpu=0",
        configfile=slow,
    )
    assert done.returncode != 0
    timed_out = [j for j in _sacct(cluster) if "siamese_features" in j["Comment"] and j["State"] == "TIMEOUT"]
    assert timed_out, _sacct(cluster)
    mlflow_client, after = _runs(remote, "features")
    new = [run for run in after if run.info.run_id not in known]
    log = (remote / "results/logs/features/digits.log").read_text()[-3000:]
    assert len(new) == 1 and new[0].info.status == "KILLED", log


def test_the_cluster_is_up_only_while_the_tests_run(cluster):
    """The fixture's own check: its daemons answer (torn down by the fixture afterwards)."""
    info = subprocess.run(["sinfo", "-h", "-o", "%T"], env={**os.environ, **cluster}, capture_output=True, text=True)
    assert info.stdout.strip() in {"idle", "mixed", "allocated"}
    print(json.dumps({"slurm_conf": cluster["SLURM_CONF"]}))

"""MLflow tracking: read-only commands touch nothing, only provably dead runs are closed,
any tag value is safe."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import HANG_GUARD_S, copy_workflow, run_snakemake, snakemake_env

from basis import tracking

ROOT = Path(__file__).resolve().parents[1]

LIVE_RUN = """
import sys, time
from basis.tracking import tracked_run
with tracked_run("exp", "live", {"rule": "train_and_evaluate", "seed": "0"}, store=sys.argv[1]):
    print("open", flush=True)
    time.sleep(600)
"""


def _status(store, name):
    runs = tracking.client(store).search_runs(
        [tracking.client(store).get_experiment_by_name("exp").experiment_id], filter_string=f"run_name = '{name}'"
    )
    return runs[0].info.status


def test_a_dry_run_beside_a_live_run_leaves_it_running_and_only_a_dead_one_is_closed(tmp_path):
    copy_workflow(tmp_path, ("Snakefile", "workflow", "config", "profiles"))
    store = tmp_path / "results" / "mlflow"
    env = snakemake_env(ROOT)
    live = subprocess.Popen([sys.executable, "-c", LIVE_RUN, str(store)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert live.stdout.readline().strip() == "open"
        for read_only in (["-n"], ["--lint"], ["--list-rules"]):
            done = run_snakemake(tmp_path, *read_only, env=env)
            assert done.returncode == 0, done.stderr[-2000:]
            assert _status(store, "live") == "RUNNING", read_only
        # an explicit clean-up beside the live run leaves it alone too
        assert tracking.close_stale_runs(store) == 0 and _status(store, "live") == "RUNNING"
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait(timeout=60)
    assert tracking.close_stale_runs(store) == 1
    assert _status(store, "live") == "KILLED"


def test_a_run_whose_process_cannot_be_checked_is_never_taken_for_dead():
    alive = tracking.process_tags()
    assert not tracking.process_is_gone(alive)
    assert tracking.process_is_gone({**alive, "basis.process_started": "1.000"})  # the PID was reused
    assert not tracking.process_is_gone({**alive, "basis.host": "another-host"})
    assert not tracking.process_is_gone({})  # a run logged before process tags existed
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert tracking.process_is_gone({**alive, "basis.pid": str(child.pid)})


def test_a_store_without_running_runs_is_checked_without_importing_mlflow(tmp_path):
    """Every workflow invocation closes stale runs first; where no run is RUNNING (the usual
    case) that takes one read-only query, not MLflow's import (about 2 s per invocation).
    A store with a RUNNING run still goes through MLflow (the test above)."""
    store = tmp_path / "mlflow"
    with tracking.tracked_run("exp", "done", {"rule": "r", "seed": "0"}, store=store):
        pass
    probe = (
        "import sys\nfrom basis.tracking import close_stale_runs\n"
        "print(close_stale_runs(sys.argv[1]), 'mlflow' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(
        [sys.executable, "-c", probe, str(store)], capture_output=True, text=True, env=env, timeout=HANG_GUARD_S
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0", "False"], done.stdout


def test_a_quote_in_a_tag_is_safe_and_supersedes_only_its_own_job(tmp_path):
    store = tmp_path / "mlflow"
    tags = {"rule": "r", "dataset": "it's", "seed": "0"}
    for _ in range(2):
        with tracking.tracked_run("exp", "quoted", tags, store=store) as run:
            run.log_metrics({"x": 1.0})
    with tracking.tracked_run("exp", "other", {**tags, "dataset": "its"}, store=store):
        pass
    client = tracking.client(store)
    runs = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert all(r.info.status == "FINISHED" for r in runs) and len(runs) == 3
    superseded = [r for r in runs if r.data.tags.get("superseded") == "true"]
    assert len(superseded) == 1 and superseded[0].data.tags["dataset"] == "it's"


def test_a_job_stopped_by_sigterm_closes_its_own_run_as_killed_and_a_rerun_supersedes_it(tmp_path):
    """What SLURM does to a cancelled or timed-out job (SIGTERM, SIGKILL KillWait seconds
    later): the job closes its run as KILLED itself, on whatever node it runs, exits 143,
    and the next finished run of the same job supersedes it."""
    store = tmp_path / "mlflow"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    command = [sys.executable, "-m", "basis", "run", "--dataset", "two_moons", "--method", "basis"]
    tracked = ["--track", "exp", "--store", str(store), "--tag", "rule=train_and_evaluate", "--out"]
    job = subprocess.Popen(
        [*command, "--set", "n_iter=1000000", *tracked, str(tmp_path / "long")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(HANG_GUARD_S * 2):  # until the run is open
            if (store / "mlflow.db").exists() and tracking.client(store).get_experiment_by_name("exp"):
                runs = tracking.client(store).search_runs(
                    [tracking.client(store).get_experiment_by_name("exp").experiment_id]
                )
                if runs:
                    break
            time.sleep(0.5)
        job.send_signal(signal.SIGTERM)
        _, stderr = job.communicate(timeout=HANG_GUARD_S)
    finally:
        job.kill()
    assert job.returncode == 143, stderr[-2000:]
    assert "stopped by signal 15" in stderr
    [killed] = tracking.client(store).search_runs([tracking.client(store).get_experiment_by_name("exp").experiment_id])
    assert killed.info.status == "KILLED"
    rerun = subprocess.run(
        [*command, "--set", "n_iter=3", *tracked, str(tmp_path / "short")], env=env, capture_output=True, text=True
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    killed = tracking.client(store).get_run(killed.info.run_id)
    assert killed.data.tags.get("superseded") == "true"


def test_the_logged_model_carries_its_name_description_and_the_final_steps_metrics(tmp_path):
    """What MLflow's model page shows: the model named by data set, method and seed, the
    run's description as its note, and the metrics of the last training step (the final
    loss beside the scores), not those of step 0."""
    store = tmp_path / "mlflow"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    command = [sys.executable, "-m", "basis", "run", "--dataset", "two_moons", "--method", "basis"]
    done = subprocess.run(
        [*command, "--set", "n_iter=6", "--track", "demo-runs", "--store", str(store), "--out", str(tmp_path / "o")],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    client = tracking.client(store)
    experiment = client.get_experiment_by_name("demo-runs")
    assert experiment.tags["mlflow.note.content"] == tracking.STAGE_DESCRIPTIONS["runs"]
    view = json.loads(experiment.tags[f"mlflow.sharedViewState.{tracking.TABLE1_VIEW}"])  # the UI's Table 1 view
    assert view["selectedColumns"] == [f"metrics.`{m}`" for m in tracking.TABLE1_METRICS]
    assert [k["groupByData"] for k in view["groupBy"]["groupByKeys"]] == ["dataset", "method"]
    (run,) = client.search_runs([experiment.experiment_id])
    (model,) = client.search_logged_models([experiment.experiment_id])
    assert model.name == "two_moons-basis-seed0" and model.source_run_id == run.info.run_id
    assert model.tags["mlflow.note.content"] == run.data.tags["mlflow.note.content"]
    assert "raw two_moons points" in model.tags["mlflow.note.content"]
    losses = client.get_metric_history(run.info.run_id, "loss")
    last = max(losses, key=lambda m: m.step)
    shown = {m.key: m for m in model.metrics}
    assert last.step == 5 and shown["loss"].step == 5 and shown["loss"].value == last.value
    assert shown["loss"].value != min(losses, key=lambda m: m.step).value  # not step 0's loss
    assert {"nmi", "d_G", "acc"} <= set(shown) and shown["nmi"].value == run.data.metrics["nmi"]

"""MLflow tracking: read-only commands touch nothing, only provably dead runs are closed,
any tag value is safe."""

import json
import math
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
    # each score beside its seeds' spread, and a distance on a log scale as well
    assert view["selectedColumns"] == [
        "metrics.`eval/d_G`",
        "metrics.`eval/d_G_log10`",
        "metrics.`eval/d_G_std`",
        "metrics.`eval/d_perp`",
        "metrics.`eval/d_perp_log10`",
        "metrics.`eval/d_perp_std`",
        "metrics.`eval/nmi`",
        "metrics.`eval/nmi_std`",
        "metrics.`eval/cluster_acc`",
        "metrics.`eval/cluster_acc_std`",
        "metrics.`eval/probe_accuracy_pct`",
        "metrics.`eval/probe_accuracy_pct_std`",
    ]
    assert view["searchFilter"] == "tags.rule = 'train_and_evaluate' and tags.superseded IS NULL"
    (run,) = client.search_runs([experiment.experiment_id])
    (model,) = client.search_logged_models([experiment.experiment_id])
    assert model.name == "two_moons-basis-seed0" and model.source_run_id == run.info.run_id
    assert model.tags["mlflow.note.content"] == run.data.tags["mlflow.note.content"]
    assert "raw two_moons points" in model.tags["mlflow.note.content"]
    losses = client.get_metric_history(run.info.run_id, "train/loss")
    last = max(losses, key=lambda m: m.step)
    shown = {m.key: m for m in model.metrics}
    assert last.step == 5 and shown["train/loss"].step == 5 and shown["train/loss"].value == last.value
    assert shown["train/loss"].value != min(losses, key=lambda m: m.step).value  # not step 0's loss
    assert {"eval/nmi", "eval/d_G", "eval/cluster_acc"} <= set(shown)
    assert shown["eval/nmi"].value == run.data.metrics["eval/nmi"]
    # the scores are measured on the run's data set, which the model page links
    (dataset,) = [i.dataset for i in run.inputs.dataset_inputs]
    # the UI's data set drawer: where it comes from, its features' and labels' dtype and shape
    assert json.loads(dataset.source)["uri"].startswith("two_moons (data seed 0")
    spec = json.loads(dataset.schema)["mlflow_tensorspec"]
    assert json.loads(spec["features"])[0]["tensor-spec"] == {"dtype": "float32", "shape": [-1, 2]}
    assert json.loads(dataset.profile)["features_shape"][1] == 2
    assert (shown["eval/d_G"].dataset_name, shown["eval/d_G"].dataset_digest) == (dataset.name, dataset.digest)
    # shown to four significant digits; metrics.json keeps every digit
    exact = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert shown["eval/d_G"].value == float(f"{exact['d_G']:.4g}") and run.data.metrics["eval/d_G"] != exact["d_G"]


def test_metric_names_say_what_each_score_is_and_group_the_charts():
    """acc (K-means, 0-1), accuracy (a converged probe, %) and accuracy_authors (the
    authors' probe, %) get names nobody confuses; sections: eval, authors, alignment,
    time, train."""
    named = {key: tracking.metric_name(key) for key in ("acc", "accuracy", "accuracy_authors", "d_G", "d_G_code")}
    assert named == {
        "acc": "eval/cluster_acc",
        "accuracy": "eval/probe_accuracy_pct",
        "accuracy_authors": "authors/probe_accuracy_pct",
        "d_G": "eval/d_G",
        "d_G_code": "authors/d_G",
    }
    assert tracking.metric_name("loss", per_step=True) == "train/loss"
    assert tracking.metric_name("ms_step", per_step=True) == "time/ms_step"
    assert tracking.metric_name("train_seconds") == "time/train_seconds"
    assert tracking.metric_name("combined/nmi_mean") == "combined/nmi_mean"  # a study's own section
    assert tracking.shown_value(0.123456789) == 0.1235 and tracking.shown_value(123456.7) == 123500


def _seed_run(client, experiment_id, method, seed, n_iter):
    from mlflow.entities import Dataset, DatasetInput, InputTag, Param

    run = client.create_run(experiment_id, run_name=f"digits-{method}-seed{seed}")
    for key, value in {"dataset": "digits", "method": method, "seed": str(seed), "rule": "train_and_evaluate"}.items():
        client.set_tag(run.info.run_id, key, value)
    params = {"method": method, "dataset": "digits", "seed": str(seed), "n_iter": str(n_iter)}
    client.log_batch(run.info.run_id, params=[Param(k, v) for k, v in params.items()])
    dataset = Dataset(name="digits", digest="abc", source_type="local", source="digits")
    client.log_inputs(run.info.run_id, [DatasetInput(dataset, [InputTag("mlflow.data.context", "training")])])
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


def test_each_methods_seeds_get_a_parent_that_spans_them_and_shares_their_metric_names(tmp_path):
    client = tracking.client(tmp_path)
    experiment_id = tracking.ensure_experiments(["demo-runs"], tmp_path)["demo-runs"]
    methods = ("basis", "specnet1")
    seeds = {method: [_seed_run(client, experiment_id, method, s, 20) for s in (0, 1)] for method in methods}
    scores = {"d_G": (0.123456, 0.01), "acc": (0.9, 0.02)}
    parents = {}
    for method in seeds:
        parents[method], children = tracking.summarise_seeds(client, experiment_id, "digits", method, [0, 1], scores)
        assert sorted(r.info.run_id for r in children) == sorted(seeds[method])
    for method, parent_id in parents.items():
        parent = client.get_run(parent_id)
        assert parent.info.run_name == f"digits: {method}" and parent.info.status == "FINISHED"
        assert parent.data.metrics == {
            "eval/d_G": 0.1235,
            "eval/d_G_std": 0.01,
            "eval/d_G_log10": tracking.shown_value(math.log10(0.123456)),
            "eval/cluster_acc": 0.9,
            "eval/cluster_acc_std": 0.02,
        }
        assert parent.data.params == {"method": method, "dataset": "digits", "n_iter": "20", "n_seeds": "2"}
        assert [i.dataset.name for i in parent.inputs.dataset_inputs] == ["digits"]
        seed_runs = [client.get_run(run_id) for run_id in seeds[method]]
        assert all(r.data.tags["mlflow.parentRunId"] == parent_id for r in seed_runs)
        assert parent.info.start_time == min(r.info.start_time for r in seed_runs)
        assert parent.info.end_time >= max(r.info.end_time for r in seed_runs)
    # Table 1 starts its parents in its order, which a view sorted by start time keeps
    late = 9_000_000_000_000
    ordered = {
        m: tracking.summarise_seeds(client, experiment_id, "digits", m, [0, 1], scores, start_time=late - i)[0]
        for i, m in enumerate(reversed(methods))
    }
    shown = client.search_runs(
        [experiment_id], "tags.`basis.summary` LIKE 'digits/%'", order_by=["attributes.start_time DESC"]
    )
    assert [r.info.run_id for r in shown] == list(ordered.values())
    parents = ordered
    # a rerun of one seed: its old run is superseded, the new parent replaces the old one
    client.set_tag(seeds["basis"][1], "superseded", "true")
    rerun = _seed_run(client, experiment_id, "basis", 1, 20)
    new_parent, _ = tracking.summarise_seeds(client, experiment_id, "digits", "basis", [0, 1], scores)
    assert client.get_run(parents["basis"]).info.lifecycle_stage == "deleted"
    assert client.get_run(rerun).data.tags["mlflow.parentRunId"] == new_parent
    active = client.search_runs([experiment_id], "tags.`basis.summary` = 'digits/basis'")
    assert [r.info.run_id for r in active] == [new_parent]


def test_reading_the_workflow_starts_nothing_and_only_a_real_execution_closes_stale_runs(tmp_path):
    """Snakemake's parse starts no process (no nvidia-smi, no close-stale): a run left
    RUNNING by a killed job stays so through a dry run, --lint, --report and a listing, and
    the first real execution closes it before its jobs (the workflow's onstart)."""
    folder = copy_workflow(tmp_path / "workflow")
    store = folder / "results" / "mlflow"
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    marker = tmp_path / "nvidia-smi-ran"
    (bin_folder / "nvidia-smi").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (bin_folder / "nvidia-smi").chmod(0o755)
    env = snakemake_env(folder, PATH=f"{bin_folder}{os.pathsep}{os.environ['PATH']}")
    killed = subprocess.Popen([sys.executable, "-c", LIVE_RUN, str(store)], stdout=subprocess.PIPE, text=True, env=env)
    assert killed.stdout.readline().strip() == "open"
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    config = ["--configfile", "tests/configs/tiny.yaml"]
    for read_only in (["-n"], ["--lint"], ["--report", "report.html"], ["--list-rules"]):
        run_snakemake(folder, *read_only, *config, env=env)
        assert _status(store, "live") == "RUNNING", read_only
    assert not marker.exists(), "the workflow ran nvidia-smi while it was read"
    done = run_snakemake(folder, "results/data/two_moons.json", *config, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _status(store, "live") == "KILLED"


def test_the_closing_lines_name_the_answer_and_open_the_view_of_the_store_in_use(monkeypatch):
    from basis.tracking.views import where_to_look

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    local = where_to_look("basis-runs", "quick").splitlines()
    assert local[0].startswith("The report: results/quick/report.html")
    assert "mlflow ui --backend-store-uri sqlite:///results/mlflow/mlflow.db" in local[2]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://alice:s3cret@mlflow.example:5000")
    served = where_to_look("basis-runs", "quick")
    assert "s3cret" not in served and "--ui https://mlflow.example:5000" in served and "mlflow ui" not in served


def test_each_methods_seeds_are_versions_of_one_registered_model_with_an_alias_to_load(tmp_path):
    """Registered once per data set and method: a version per seed (alias seed<k>), and
    @representative on the seed of median d_G; registering again adds no version."""
    import mlflow

    from basis.tracking.serving import REPRESENTATIVE, register_seeds

    client = tracking.client(tmp_path)
    experiment_id = tracking.ensure_experiments(["demo-runs"], tmp_path)["demo-runs"]
    seeds = {seed: _seed_run(client, experiment_id, "basis", seed, 20) for seed in (0, 1, 2)}
    for seed, run_id in seeds.items():
        mlflow.MlflowClient(client.tracking_uri).create_logged_model(
            experiment_id, name=f"digits-basis-seed{seed}", source_run_id=run_id
        )
    d_G = {0: 0.30, 1: 0.10, 2: 0.20}
    aliases = register_seeds(client, "demo-digits-basis", experiment_id, seeds, d_G)
    assert set(aliases) == {"seed0", "seed1", "seed2", REPRESENTATIVE}
    assert aliases[REPRESENTATIVE] == aliases["seed2"]  # the median d_G, not the best
    version = client.get_model_version_by_alias("demo-digits-basis", REPRESENTATIVE)
    assert version.run_id == seeds[2] and version.source.startswith("models:/")
    assert register_seeds(client, "demo-digits-basis", experiment_id, seeds, d_G) == aliases
    assert len(client.search_model_versions("name = 'demo-digits-basis'")) == 3


def _rule_status(store, experiment, rule):
    """The status of the run of ``rule`` in ``experiment`` (None before it is opened)."""
    if not (store / "mlflow.db").exists():
        return None
    found = tracking.client(store).get_experiment_by_name(experiment)
    runs = tracking.client(store).search_runs([found.experiment_id], f"tags.rule = '{rule}'") if found else []
    return runs[0].info.status if runs else None


def test_ctrl_c_on_a_workflow_closes_its_running_job_as_killed_without_a_traceback(tmp_path):
    """A terminal's Ctrl-C reaches Snakemake and every job in its process group: the job
    closes its MLflow run as KILLED and writes one line to its log; its script's wrapper waits
    for it (subprocess.run killed it at once, leaving the run RUNNING, and both wrote
    KeyboardInterrupt tracebacks)."""
    import yaml

    folder = copy_workflow(tmp_path / "workflow")
    config = yaml.safe_load((folder / "tests/configs/tiny.yaml").read_text())
    config["experiments"]["ablation"]["settings"]["n_iter"] = 10**6
    (folder / "long.yaml").write_text(yaml.safe_dump(config))
    store = folder / "results" / "mlflow"
    target = "results/ablation/two_moons/ransac/seed0/metrics.json"
    workflow = subprocess.Popen(
        [sys.executable, "-m", "snakemake", target, "--cores", "1", "--configfile", "long.yaml"],
        cwd=folder, env=snakemake_env(folder), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # a terminal's foreground group, which Ctrl-C signals as a whole
        # as at a terminal: a suite started in the background of a script (CI's) inherits SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        for _ in range(HANG_GUARD_S * 2):  # until the ablation's run is open
            if _rule_status(store, "tiny-ablation", "ablation_run") == "RUNNING":
                break
            assert workflow.poll() is None, workflow.stdout.read()[-3000:]
            time.sleep(0.5)
        time.sleep(2)  # inside its training loop
        os.killpg(workflow.pid, signal.SIGINT)
        output, _ = workflow.communicate(timeout=HANG_GUARD_S)
    finally:
        if workflow.poll() is None:
            os.killpg(workflow.pid, signal.SIGKILL)
    assert _rule_status(store, "tiny-ablation", "ablation_run") == "KILLED", output[-3000:]
    logs = list((folder / "results/logs/ablation").rglob("*.log"))
    text = "".join(log.read_text() for log in logs)
    assert logs and "Traceback" not in text and "stopped by signal 2 (Ctrl-C)" in text, text[-3000:]
    assert "KeyboardInterrupt" not in output, output[-3000:]

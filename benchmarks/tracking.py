"""The tracking store under concurrent jobs: many processes logging at once, to the default
SQLite store or to a tracking server (``MLFLOW_TRACKING_URI``)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

#: One job in a fresh process: a tracked run in the shared experiment, its params, its step
#: metrics (flushed as a job flushes them), one artifact; each logging call timed. Prints JSON.
ONE_JOB = """
import json, sys, time
from pathlib import Path
from basis.tracking import tracked_run
from basis.tracking.runs import FLUSH_EVERY_POINTS
experiment, index, steps, store = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
folder = Path(sys.argv[5])
calls = []
def call(work, *args):
    start = time.perf_counter()
    work(*args)
    calls.append(time.perf_counter() - start)
start = time.perf_counter()
with tracked_run(experiment, f"job{index}", {"rule": "load", "seed": str(index)}, store=store) as run:
    call(run.log_params, {f"param{i}": i * index for i in range(20)})
    for step in range(steps):
        run.log_step(step, {"loss": 1.0 / (step + 1), "index": float(index), "step_value": float(step)})
        if len(run._pending) >= FLUSH_EVERY_POINTS:
            call(run.flush)
    call(run.flush)
    artifact = folder / f"job{index}.json"
    artifact.write_text(json.dumps({"index": index, "steps": steps}))
    call(run.log_artifact, artifact)
print(json.dumps({"calls": calls, "seconds": time.perf_counter() - start, "run_id": run.run_id}))
"""

METRICS = ("loss", "index", "step_value")


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=int, default=32)
    parser.add_argument("--steps", type=int, default=500, help="step metrics per job (three metrics a step)")
    parser.add_argument("--store", type=Path, default=Path("results/bench/tracking-store"),
                        help="the SQLite store's folder (unless MLFLOW_TRACKING_URI is set)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the figures and the check as JSON")


def concurrent_jobs(processes: int, steps: int, store: Path, folder: Path) -> dict:
    """``processes`` jobs started at once, each a tracked run in one new experiment; their
    figures, and what the store holds afterwards (:func:`check_store`)."""
    folder.mkdir(parents=True, exist_ok=True)
    experiment = f"load-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    jobs = [
        subprocess.Popen(
            [sys.executable, "-c", ONE_JOB, experiment, str(i), str(steps), str(store), str(folder)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    outputs = [job.communicate() for job in jobs]
    wall = time.perf_counter() - started
    errors = [err.strip().splitlines()[-1:] for (out, err), job in zip(outputs, jobs) if job.returncode != 0]
    # a job whose writes the store did not take says so in one line (basis.tracking.pending)
    errors += [line for out, err in outputs for line in err.splitlines() if line.startswith("warning: results")]
    # the last line: MLflow prints links to the runs it ends on a server
    results = [json.loads(out.splitlines()[-1]) for (out, _), job in zip(outputs, jobs) if job.returncode == 0]
    calls = sorted(c for r in results for c in r["calls"])
    points = processes * steps * len(METRICS)

    def quantile(q: float) -> float:
        return 1e3 * calls[min(len(calls) - 1, int(q * len(calls)))] if calls else float("nan")

    return {
        "store": "server" if os.environ.get("MLFLOW_TRACKING_URI") else "sqlite",
        "processes": processes,
        "metric_points": points,
        "wall_seconds": round(wall, 2),
        "metrics_per_second": round(points / wall, 1),
        "call_ms_p50": round(quantile(0.5), 1),
        "call_ms_p95": round(quantile(0.95), 1),
        "job_tracking_seconds_median": round(sorted(r["seconds"] for r in results)[len(results) // 2], 2)
        if results
        else None,
        "errors": errors,
        "problems": check_store(experiment, processes, steps, store),
    }


def check_store(experiment: str, processes: int, steps: int, store: Path) -> list[str]:
    """Every way the store differs from what the jobs logged: experiments of that name, runs,
    their status, each metric's points (each step once), params, the artifact."""
    from basis.tracking import client

    mlflow_client = client(store)
    problems = []
    experiments = mlflow_client.search_experiments(filter_string=f"name = '{experiment}'")
    if len(experiments) != 1:
        return [f"{len(experiments)} experiments named {experiment}"]
    runs = mlflow_client.search_runs([experiments[0].experiment_id], max_results=1000)
    if sorted(r.info.run_name for r in runs) != sorted(f"job{i}" for i in range(processes)):
        problems.append(f"runs {sorted(r.info.run_name for r in runs)}")
    for run in runs:
        name = run.info.run_name
        if run.info.status != "FINISHED":
            problems.append(f"{name}: {run.info.status}")
        if len(run.data.params) != 20:
            problems.append(f"{name}: {len(run.data.params)} params")
        for key in METRICS:
            history = mlflow_client.get_metric_history(run.info.run_id, f"train/{key}")
            if sorted(m.step for m in history) != list(range(steps)):
                problems.append(f"{name}: train/{key} has {len(history)} points for {steps} steps")
        if [a.path for a in mlflow_client.list_artifacts(run.info.run_id)] != [f"{name}.json"]:
            problems.append(f"{name}: artifacts {[a.path for a in mlflow_client.list_artifacts(run.info.run_id)]}")
    return problems


def load(args: argparse.Namespace) -> int:
    """Concurrent jobs logging to one store at once (32 by default: a 16-core box running
    ``--cores all`` is 16 writers): every job a tracked run in one experiment that none of
    them finds existing, 20 params, ``--steps`` steps of three metrics flushed as a job
    flushes them, one artifact. Prints metric points per second (all jobs' points over the
    wall time from the first start to the last end), the p50 and p95 of one logging call,
    a job's tracking seconds (median), then checks the store: one experiment, every run
    FINISHED, every metric's every step once, every artifact. Exit 1 on any problem."""
    figures = concurrent_jobs(args.processes, args.steps, args.store, args.store.parent / "tracking-artifacts")
    if args.json:
        print(json.dumps(figures))
    else:
        print("| store | jobs | points | metric points/s | call p50 ms | call p95 ms | job tracking s |")
        print("|---|---|---|---|---|---|---|")
        print(
            f"| {figures['store']} | {figures['processes']} | {figures['metric_points']} |"
            f" {figures['metrics_per_second']} | {figures['call_ms_p50']} | {figures['call_ms_p95']} |"
            f" {figures['job_tracking_seconds_median']} |"
        )
        for line in figures["errors"] + figures["problems"]:
            print(f"problem: {line}")
    return 1 if figures["errors"] or figures["problems"] else 0


PARTS = {"load": (add_load_arguments, load)}

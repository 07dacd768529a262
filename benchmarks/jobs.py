"""What the workflow's jobs cost beyond their work: one small job's overhead against the floor
of importing torch, concurrent jobs on one host against one alone, and where a finished
workflow run's time went, per stage and per phase of its jobs, and the tracking store under
many jobs logging at once.

    python -m benchmarks jobs overhead --repeats 3
    python -m benchmarks jobs concurrent --jobs 2 --threads 1
    python -m benchmarks jobs concurrent --jobs 4 --threads 4      # on a 16-core host
    python -m benchmarks jobs profile --results results --cores 2 --wall 1234
    python -m benchmarks jobs tracking-load --processes 32     # MLFLOW_TRACKING_URI: a server
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

from basis.runtime.timing import TIMINGS_PREFIX

RUN = ["-m", "basis", "run", "--dataset", "two_moons", "--method", "basis", "--set", "n_iter=5", "--json"]


def wall(command: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, cwd=cwd, check=True)
    return time.perf_counter() - start, done.stderr


def tracked(folder: Path, name: str) -> list[str]:
    return [*RUN, "--track", "overhead", "--store", str(folder / name)]


def add_overhead_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)


def overhead(args: argparse.Namespace) -> int:
    """What one small job costs beyond its work, against the floor of importing torch.

    Times, best of ``--repeats`` each and in one go (so that a busy machine slows both alike):
    a bare ``python -c "import torch"``; a 5-iteration tracked ``basis run`` on two moons (a
    fresh store each time, and into a store that exists, as in the workflow); the same run
    untracked; and the tracked run with ``--seeds 0 1 2 3`` (start-up paid once). Then runs
    the tracked job once under ``python -X importtime`` and prints the slowest top-level
    imports, and the job's own phases (its ``# timings`` line).
    """
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        wall(tracked(folder, "existing"), folder)  # creates the store the "existing store" rows log into
        phases = ""
        best: dict[str, float] = {}
        for attempt in range(args.repeats):
            jobs = {
                "python -c 'import torch'": ["-c", "import torch"],
                "tracked 5-iteration run, 1 seed": tracked(folder, f"one{attempt}"),
                # The workflow's case: the store exists (its set-up rule made it).
                "tracked 5-iteration run, 1 seed, existing store": tracked(folder, "existing"),
                "untracked 5-iteration run, 1 seed": RUN,
                "tracked 5-iteration run, 4 seeds": [*tracked(folder, f"four{attempt}"), "--seeds", "0", "1", "2", "3"],
            }
            for name, command in jobs.items():
                seconds, stderr = wall(command, folder)
                best[name] = min(best.get(name, float("inf")), seconds)
                if name == "tracked 5-iteration run, 1 seed, existing store":
                    phases = stderr
        floor = best["python -c 'import torch'"]
        print(f"| command | best of {args.repeats}, s | x import torch |\n|---|---|---|")
        for name, seconds in best.items():
            print(f"| {name} | {seconds:.2f} | {seconds / floor:.2f} |")
        line = [entry for entry in phases.splitlines() if entry.startswith(TIMINGS_PREFIX)][-1]
        print(
            "\nphases of the last tracked 1-seed run into an existing store:", json.loads(line[len(TIMINGS_PREFIX) :])
        )
        done = subprocess.run(
            [sys.executable, "-X", "importtime", *tracked(folder, "imports")],
            capture_output=True,
            text=True,
            cwd=folder,
            check=True,
        )
    # "import time: self | cumulative | name", the name indented by depth: keep the top level.
    top_level = []
    for entry in done.stderr.splitlines():
        if entry.startswith("import time:") and "|" in entry:
            _, cumulative, name = entry.split("|")
            if not name[1:].startswith(" ") and cumulative.strip().isdigit():
                top_level.append((int(cumulative) / 1e6, name.strip()))
    print("\nslowest top-level imports of the tracked run (cumulative s, python -X importtime):")
    for seconds, name in sorted(top_level, reverse=True)[: args.top]:
        print(f"  {seconds:6.2f}  {name}")
    return 0


def launch(threads: int, batch_size: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "basis", "bench", "step", "--device", "cpu", "--json", "--m", str(batch_size)]
    if threads:
        command += ["--threads", str(threads)]
    env = dict(os.environ)
    if not threads:  # let every library use every core, as jobs did before --threads
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env.pop(name, None)
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)


def run_jobs(n_jobs: int, threads: int, batch_size: int) -> tuple[list[float], float]:
    start = time.perf_counter()
    processes = [launch(threads, batch_size) for _ in range(n_jobs)]
    outputs = [process.communicate()[0] for process in processes]
    wall = time.perf_counter() - start
    if any(process.returncode for process in processes):
        raise SystemExit("a job failed")
    return [json.loads(out)["ms_per_iteration"]["total"] for out in outputs], wall


def add_concurrent_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="per job; 0: no limit (oversubscribed)")
    parser.add_argument("--m", type=int, default=512, help="batch size")


def concurrent(args: argparse.Namespace) -> int:
    """N BASiS jobs at once on one host: each job's time per iteration against one job alone.

    Each job is ``python -m basis bench step --device cpu --threads T``: the median wall time of
    a BASiS iteration (m = 512, K = 10, k = 50) in its own process. With N x T <= cores the
    jobs should not slow each other down (goal: within 1.3x of alone); ``--threads 0`` leaves
    the thread count to the libraries (every job uses every core), the oversubscribed case.
    """
    cores = len(os.sched_getaffinity(0))
    alone, alone_wall = run_jobs(1, args.threads, args.m)
    together, together_wall = run_jobs(args.jobs, args.threads, args.m)
    ratio = statistics.median(together) / alone[0]
    print(
        json.dumps(
            {
                "cores": cores,
                "jobs": args.jobs,
                "threads_per_job": args.threads or "unlimited",
                "ms_per_iteration_alone": round(alone[0], 1),
                "ms_per_iteration_together": [round(t, 1) for t in together],
                "slowdown": round(ratio, 2),
                "wall_s_alone": round(alone_wall, 1),
                "wall_s_together": round(together_wall, 1),
                "within_1.3x": ratio <= 1.3,
            }
        )
    )
    return 0


COMPUTE = ("train", "study", "reference")
METRICS = ("transform", "kmeans", "nmi_acc", "d_perp", "d_G", "d_G_code", "probe", "authors_probe")
COLUMNS = ("startup", "load", "compute", "metrics", "tracking", "outputs", "wrapper", "other")


def job_phases(log: Path) -> dict[str, float]:
    """The phases of the job's last ``# timings`` line, or {} (a job that prints none)."""
    if not log.is_file():
        return {}
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.startswith(TIMINGS_PREFIX)]
    return json.loads(lines[-1][len(TIMINGS_PREFIX) :]) if lines else {}


def read_jobs(results: Path) -> dict[str, list[dict]]:
    """Stage -> one row per job: ``wall``, ``cpu``, ``rss`` (MB), and its ``phases``."""
    stages: dict[str, list[dict]] = defaultdict(list)
    for path in sorted((results / "benchmarks").rglob("*.tsv")):
        relative = path.relative_to(results / "benchmarks")
        with path.open() as handle:
            row = next(csv.DictReader(handle, delimiter="\t"))
        number = {k: float(row[k]) for k in ("s", "cpu_time", "max_rss") if row.get(k) not in ("", "-", None)}
        phases = job_phases(results / "logs" / relative.with_suffix(".log"))
        cpu, rss = number.get("cpu_time", 0.0), number.get("max_rss", 0.0)
        stages[relative.parts[0]].append({"wall": number["s"], "cpu": cpu, "rss": rss, "phases": phases})
    return stages


def columns(job: dict) -> dict[str, float]:
    """A job's wall time split into :data:`COLUMNS` (all ``other`` when it logged no phases)."""
    phases = job["phases"]
    if not phases:
        return {"other": job["wall"]}
    split = {
        "startup": phases.get("startup", 0.0),
        "load": phases.get("load", 0.0),
        "compute": sum(phases.get(k, 0.0) for k in COMPUTE),
        "metrics": sum(phases.get(k, 0.0) for k in METRICS),
        "tracking": phases.get("tracking", 0.0),
        "outputs": phases.get("outputs", 0.0),
        "wrapper": max(0.0, job["wall"] - phases["total"]),
    }
    split["other"] = max(0.0, job["wall"] - sum(split.values()))
    return split


def job_overhead(job: dict) -> float:
    """Everything but the compute and the metrics: what a job costs beyond its work."""
    split = columns(job)
    return job["wall"] - split.get("compute", 0.0) - split.get("metrics", 0.0)


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--cores", type=int, default=2, help="the cores the run was given")
    parser.add_argument("--wall", type=float, help="the run's measured wall seconds, to show the idle share")


def profile(args: argparse.Namespace) -> int:
    """Where a workflow run's time went, per stage and per phase of its jobs.

    Reads Snakemake's benchmark files ``results/benchmarks/**/*.tsv`` (one per job: wall and
    CPU seconds, peak RSS; the folder below ``benchmarks/`` names the stage, e.g. ``runs``,
    ``knn``, ``studies``) and each job's own phases from the ``# timings`` line of its log
    ``results/logs/<same path>.log`` (see :mod:`basis.runtime.timing`): start-up (process start to
    first work: interpreter and imports), loading, compute (training, the reference, a
    study), each metric, tracking and outputs. ``wrapper`` is the job's wall time outside
    its ``python -m basis`` process (Snakemake's script wrapper). The sum of wall seconds over
    the cores is a lower bound on the run's wall time; the gap to the measured wall time is
    idle slots and the scheduler.
    """
    stages = read_jobs(args.results)
    print("Wall seconds summed over each stage's jobs:\n")
    print(f"| stage | jobs | wall | {' | '.join(COLUMNS)} | median job | largest job | CPU | peak RSS MB |")
    print("|---|" + "---|" * (len(COLUMNS) + 6))
    totals: dict[str, float] = defaultdict(float)
    every_job = [job for jobs in stages.values() for job in jobs]
    for stage, jobs in sorted(stages.items(), key=lambda item: -sum(j["wall"] for j in item[1])):
        split: dict[str, float] = defaultdict(float)
        for job in jobs:
            for key, value in columns(job).items():
                split[key] += value
                totals[key] += value
        walls = [j["wall"] for j in jobs]
        print(
            f"| {stage} | {len(jobs)} | {sum(walls):.0f} | "
            + " | ".join(f"{split[c]:.1f}" for c in COLUMNS)
            + f" | {statistics.median(walls):.1f} | {max(walls):.1f} | {sum(j['cpu'] for j in jobs):.0f}"
            f" | {max(j['rss'] for j in jobs):.0f} |"
        )
    wall = sum(j["wall"] for j in every_job)
    print(f"| all | {len(every_job)} | {wall:.0f} | " + " | ".join(f"{totals[c]:.1f}" for c in COLUMNS) + " | | | | |")
    print("\nMetrics, seconds summed over all jobs:", end=" ")
    metric_seconds = {m: sum(j["phases"].get(m, 0.0) for j in every_job) for m in METRICS}
    print(", ".join(f"{m} {s:.1f}" for m, s in metric_seconds.items()))
    timed_jobs = [j for j in every_job if j["phases"]]
    if timed_jobs:
        print(
            f"Per-job overhead (all but compute and metrics), median over the {len(timed_jobs)} jobs that"
            f" logged phases: {statistics.median(job_overhead(j) for j in timed_jobs):.1f} s"
        )
    bound = wall / args.cores
    line = f"Lower bound on wall time with {args.cores} cores: {bound:.0f} s"
    if args.wall:
        line += f"; measured {args.wall:.0f} s, so {1 - bound / args.wall:.0%} of the core time was idle"
    print(line)
    return 0


#: One job in a fresh process: a tracked run in the shared experiment, its params, its step
#: metrics (flushed as a job flushes them), one artifact; each logging call timed. Prints JSON.
TRACKED_JOB = """
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

LOGGED_METRICS = ("loss", "index", "step_value")


def add_tracking_load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=int, default=32)
    parser.add_argument("--steps", type=int, default=500, help="step metrics per job (three metrics a step)")
    parser.add_argument("--store", type=Path, default=Path("results/bench/tracking-store"),
                        help="the SQLite store's folder (unless MLFLOW_TRACKING_URI is set)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the figures and the check as JSON")


#: The jobs forked from one process that has imported what each job imports (MLflow): the
#: same 32 processes starting at once, less 32 interpreters' start-up (about 1.4 s of CPU
#: each). Each child's stdout and stderr go to job<i>.out/.err in the folder; the launcher
#: prints the children's exit codes.
PRELOADED_JOBS = """
import json, os, sys, traceback
import mlflow.tracking
import basis.tracking
job, processes, folder, arguments = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
children = []
for index in range(processes):
    pid = os.fork()
    if pid:
        children.append(pid)
        continue
    for fd, suffix in ((1, "out"), (2, "err")):
        os.dup2(os.open(f"{folder}/job{index}.{suffix}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    sys.argv = ["-c", arguments[0], str(index), *arguments[1:]]
    code = 0
    try:
        exec(compile(job, "<job>", "exec"), {"__name__": "__main__"})
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
print(json.dumps([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]))
"""


def _run_jobs(processes: int, arguments: list[str], folder: Path, preloaded: bool) -> list[tuple[str, str, int]]:
    """Each job's stdout, stderr and exit code: ``processes`` jobs started at once."""
    if preloaded:
        launcher = [sys.executable, "-c", PRELOADED_JOBS, TRACKED_JOB, str(processes), str(folder), *arguments]
        codes = json.loads(subprocess.run(launcher, capture_output=True, text=True, check=True).stdout)
        read = [((folder / f"job{i}.out").read_text(), (folder / f"job{i}.err").read_text()) for i in range(processes)]
        return [(out, err, code) for (out, err), code in zip(read, codes)]
    jobs = [
        subprocess.Popen(
            [sys.executable, "-c", TRACKED_JOB, arguments[0], str(i), *arguments[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    return [(*job.communicate(), job.returncode) for job in jobs]


def concurrent_jobs(processes: int, steps: int, store: Path, folder: Path, preloaded: bool = False) -> dict:
    """``processes`` jobs started at once, each a tracked run in one new experiment; their
    figures, and what the store holds afterwards (:func:`check_store`). ``preloaded``: the
    jobs are forked from one process that has imported MLflow (:data:`PRELOADED_JOBS`)."""
    folder.mkdir(parents=True, exist_ok=True)
    experiment = f"load-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    outputs = _run_jobs(processes, [experiment, str(steps), str(store), str(folder)], folder, preloaded)
    wall = time.perf_counter() - started
    errors = [err.strip().splitlines()[-1:] for out, err, code in outputs if code != 0]
    # a job whose writes the store did not take says so in one line (basis.tracking.pending)
    errors += [line for out, err, _ in outputs for line in err.splitlines() if line.startswith("warning: results")]
    # the last line: MLflow prints links to the runs it ends on a server
    results = [json.loads(out.splitlines()[-1]) for out, _, code in outputs if code == 0]
    calls = sorted(c for r in results for c in r["calls"])
    points = processes * steps * len(LOGGED_METRICS)

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
        for key in LOGGED_METRICS:
            history = mlflow_client.get_metric_history(run.info.run_id, f"train/{key}")
            if sorted(m.step for m in history) != list(range(steps)):
                problems.append(f"{name}: train/{key} has {len(history)} points for {steps} steps")
        if [a.path for a in mlflow_client.list_artifacts(run.info.run_id)] != [f"{name}.json"]:
            problems.append(f"{name}: artifacts {[a.path for a in mlflow_client.list_artifacts(run.info.run_id)]}")
    return problems


def tracking_load(args: argparse.Namespace) -> int:
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


PARTS = {
    "overhead": (add_overhead_arguments, overhead),
    "concurrent": (add_concurrent_arguments, concurrent),
    "profile": (add_profile_arguments, profile),
    "tracking-load": (add_tracking_load_arguments, tracking_load),
}

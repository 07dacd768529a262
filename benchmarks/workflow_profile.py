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

    python benchmarks/workflow_profile.py --results results --cores 2 --wall 1234
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

from basis.cli.parser import OneLineParser
from basis.runtime.timing import TIMINGS_PREFIX

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


def overhead(job: dict) -> float:
    """Everything but the compute and the metrics: what a job costs beyond its work."""
    split = columns(job)
    return job["wall"] - split.get("compute", 0.0) - split.get("metrics", 0.0)


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--cores", type=int, default=2, help="the cores the run was given")
    parser.add_argument("--wall", type=float, help="the run's measured wall seconds, to show the idle share")
    args = parser.parse_args()
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
            f" logged phases: {statistics.median(overhead(j) for j in timed_jobs):.1f} s"
        )
    bound = wall / args.cores
    line = f"Lower bound on wall time with {args.cores} cores: {bound:.0f} s"
    if args.wall:
        line += f"; measured {args.wall:.0f} s, so {1 - bound / args.wall:.0%} of the core time was idle"
    print(line)


if __name__ == "__main__":
    main()

"""How long a config's workflow takes, projected from its real DAG and measured job times.

The DAG comes from a dry run of the target config (``snakemake -n --forceall`` for every
job's rule, threads and GPU claim, ``--dag`` for what waits on what). Each rule's seconds
per job are measured: the median over the jobs of that rule in a finished workflow run on
the device in question (Snakemake's records in ``<folder>/.snakemake/metadata``), so the
timing run must use the target's protocol (its ``n_iter``, data sizes, ``seeds_in_one_job``).
The jobs are then scheduled as Snakemake would run them: each starts once its inputs are
done and its threads (and, on a GPU box, a GPU slot: one job per GPU by default, as the
job times were measured; ``--slots-per-gpu``) are free. A rule without a measured job is
listed as not measured and counts as zero seconds, so the projection says what it lacks.

    python benchmarks/paper_projection.py --configfile config/quick.yaml --timings . --cores 2
    python benchmarks/paper_projection.py --configfile config/config.yaml --timings gpu_run --cores 16 --gpus 1 4

When the timing run is a run of the target config itself, its measured wall time (first
job's start to last job's end) is printed beside the projection: the check of the model.
"""

from __future__ import annotations

import argparse
import heapq
import json
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Job:
    rule: str
    threads: int = 1
    gpu: bool = False  # claims a GPU slot on a GPU box
    has_output: bool = True  # a target rule (``all``) has none and takes no time
    priority: int = 0
    needs: set[int] = field(default_factory=set)


def parse_dry_run(text: str) -> dict[int, Job]:
    """Every job of a dry run's listing (``snakemake -n``): its rule, threads, GPU claim and
    priority, by job id."""
    jobs = {}
    for block in re.split(r"\n(?=(?:local)?rule \S+:\n)", text):
        head = re.match(r"(?:local)?rule (\S+):\n", block)
        jobid = re.search(r"^\s+jobid: (\d+)$", block, re.M)
        if not head or not jobid:
            continue
        threads = re.search(r"^\s+threads: (\d+)$", block, re.M)
        priority = re.search(r"^\s+priority: (-?\d+)$", block, re.M)
        resources = re.search(r"^\s+resources: (.*)$", block, re.M)
        jobs[int(jobid.group(1))] = Job(
            rule=head.group(1),
            threads=int(threads.group(1)) if threads else 1,
            gpu=bool(resources and "gpu_slot=" in resources.group(1)),
            priority=int(priority.group(1)) if priority else 0,
            has_output=bool(re.search(r"^\s+output: ", block, re.M)),
        )
    return jobs


def parse_dag(dot: str, jobs: dict[int, Job]) -> None:
    """Add the dependencies of ``snakemake --dag`` (node ids are job ids) to ``jobs``."""
    for before, after in re.findall(r"^\s*(\d+) -> (\d+)", dot, re.M):
        if int(after) in jobs and int(before) in jobs:
            jobs[int(after)].needs.add(int(before))


def measured_seconds(folder: Path) -> tuple[dict[str, list[float]], float | None]:
    """Each rule's job durations in a finished run in ``folder`` (Snakemake's metadata, one
    record per output, grouped by job), and the run's wall time (first start to last end)."""
    spans: dict[int | str, tuple[str, float, float]] = {}
    for record in (folder / ".snakemake" / "metadata").glob("*"):
        meta = json.loads(record.read_text())
        if meta.get("incomplete") or meta.get("starttime") is None or meta.get("endtime") is None:
            continue
        key = meta.get("job_hash", record.name)
        rule, start, end = spans.get(key, (meta["rule"], meta["starttime"], meta["endtime"]))
        spans[key] = (rule, min(start, meta["starttime"]), max(end, meta["endtime"]))
    per_rule: dict[str, list[float]] = {}
    for rule, start, end in spans.values():
        per_rule.setdefault(rule, []).append(end - start)
    per_rule = {rule: sorted(times) for rule, times in per_rule.items()}
    wall = max(e for _, _, e in spans.values()) - min(s for _, s, _ in spans.values()) if spans else None
    return per_rule, wall


def schedule(jobs: dict[int, Job], seconds: dict[str, float], cores: int, gpus: int) -> float:
    """The wall time of ``jobs`` on ``cores`` cores and ``gpus`` GPU slots (0: GPU jobs run
    on the CPU), each job starting once its inputs are done and its threads and a slot are
    free, the highest priority first (Snakemake's order)."""
    waiting = {j: set(job.needs) for j, job in jobs.items()}
    ready = [(-job.priority, j) for j, job in jobs.items() if not job.needs]
    heapq.heapify(ready)
    running: list[tuple[float, int]] = []
    now, free_cores, free_gpus = 0.0, cores, gpus
    while ready or running:
        held = []
        while ready:
            priority, j = heapq.heappop(ready)
            job = jobs[j]
            threads = min(job.threads, cores)
            needs_gpu = job.gpu and gpus > 0
            if threads <= free_cores and (not needs_gpu or free_gpus > 0):
                free_cores -= threads
                free_gpus -= needs_gpu
                heapq.heappush(running, (now + seconds.get(job.rule, 0.0), j))
            else:
                held.append((priority, j))
        for item in held:
            heapq.heappush(ready, item)
        if not running:
            break
        now, done = heapq.heappop(running)
        job = jobs[done]
        free_cores += min(job.threads, cores)
        free_gpus += job.gpu and gpus > 0
        for j, needs in waiting.items():
            if done in needs:
                needs.discard(done)
                if not needs:
                    heapq.heappush(ready, (-jobs[j].priority, j))
    return now


def snakemake_plan(configfile: str, workdir: Path, cores: int) -> dict[int, Job]:
    """The jobs of ``configfile``'s whole workflow (every job forced) as Snakemake plans them
    with ``cores`` cores (threads are capped there), with their dependencies."""
    base = [sys.executable, "-m", "snakemake", "--configfile", configfile, "--forceall", "--cores", str(cores)]
    listing = subprocess.run([*base, "-n"], cwd=workdir, capture_output=True, text=True, check=True).stdout
    dot = subprocess.run([*base, "--dag"], cwd=workdir, capture_output=True, text=True, check=True).stdout
    jobs = parse_dry_run(listing)
    parse_dag(dot, jobs)
    return jobs


def report(
    jobs: dict[int, Job], per_rule: dict[str, list[float]], cores: int, gpus: list[int], slots_per_gpu: int = 1
) -> str:
    seconds = {rule: statistics.median(times) for rule, times in per_rule.items()}
    seconds |= {job.rule: 0.0 for job in jobs.values() if not job.has_output}
    counts: dict[str, int] = {}
    for job in jobs.values():
        if job.has_output:  # a target rule (all) is not a job that takes time
            counts[job.rule] = counts.get(job.rule, 0) + 1
    lines = ["| rule | jobs | s per job | total s | |", "|---|---:|---:|---:|---|"]
    for rule in sorted(counts, key=lambda r: -counts[r] * seconds.get(r, 0.0)):
        if rule in seconds:
            each = seconds[rule]
            lines.append(f"| {rule} | {counts[rule]} | {each:.1f} | {counts[rule] * each:.0f} | measured |")
        else:
            lines.append(f"| {rule} | {counts[rule]} | - | - | **not measured** |")
    lines.append(f"| all | {sum(counts.values())} | | {sum(counts[r] * seconds.get(r, 0.0) for r in counts):.0f} | |")
    lines.append("")
    for n in gpus:
        where = f"{n} GPU{'s' if n != 1 else ''} and {cores} cores" if n else f"{cores} cores, no GPU"
        wall = schedule(jobs, seconds, cores, n * slots_per_gpu)
        lines.append(f"projected wall time on {where}: {wall:.0f} s ({wall / 3600:.2f} h)")
    missing = sorted(set(counts) - set(seconds))
    if missing:
        lines.append(f"not measured (counted as 0 s): {', '.join(missing)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configfile", required=True, help="the config whose workflow is projected")
    parser.add_argument("--timings", default=".", help="a folder where a run at that config's protocol finished")
    parser.add_argument("--cores", type=int, required=True, help="the cores Snakemake is given")
    parser.add_argument("--gpus", type=int, nargs="+", default=[0], help="GPU counts to project for (0: CPU only)")
    parser.add_argument(
        "--slots-per-gpu",
        type=int,
        default=1,
        help="GPU jobs at once on one GPU (1: as the timings were measured, one job alone)",
    )
    parser.add_argument("--workdir", default=".", help="the checkout the dry run plans in")
    args = parser.parse_args(argv)
    per_rule, wall = measured_seconds(Path(args.timings))
    if not per_rule:
        print(f"--timings {args.timings}: no finished job in .snakemake/metadata", file=sys.stderr)
        return 2
    try:
        jobs = snakemake_plan(args.configfile, Path(args.workdir), args.cores)
    except subprocess.CalledProcessError as err:  # a config the dry run refuses: its own last line
        lines = f"{err.stderr}\n{err.stdout}".strip().splitlines()  # Snakemake prints its error to stdout
        print(f"--configfile {args.configfile}: {lines[-1] if lines else 'the dry run failed'}", file=sys.stderr)
        return 2
    print(report(jobs, per_rule, args.cores, args.gpus, args.slots_per_gpu))
    if wall is not None:
        print(f"measured wall time of the timing run: {wall:.0f} s (first start to last end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

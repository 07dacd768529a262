"""A workflow's plan as Snakemake makes it: its jobs from a dry run, what waits on what, how
the jobs are scheduled on cores and GPU slots, and which jobs a sample of the workflow runs
(:mod:`basis.cli.projection` times them)."""

from __future__ import annotations

import heapq
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from basis.catalog import IMAGE_SETS, IMAGE_SHAPES, TOY_SETS

#: Wildcards a sampled job stands for: its seeds (one job's) and the kNN sweep's k.
SAMPLE_STANDS_FOR = ("seed", "k")


@dataclass
class Job:
    rule: str
    threads: int = 1
    gpu: bool = False  # claims a GPU slot on a GPU box
    gpu_here: bool = False  # claims one on the box that planned it (a GPU is visible there)
    has_output: bool = True  # a target rule (``all``) has none and takes no time
    priority: int = 0
    needs: set[int] = field(default_factory=set)
    wildcards: dict[str, str] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)


def _unflagged(output: str) -> str:
    """An output path as the listing gives it, less the flags Snakemake prints after it
    (``results/x.csv (update)``): the path is what a target names."""
    return re.sub(r"(?: \([a-z_]+\))+$", "", output)


def parse_dry_run(text: str) -> dict[int, Job]:
    """Every job of a dry run's listing (``snakemake -n``): its rule, threads, GPU claim,
    priority, wildcards and outputs, by job id."""
    jobs = {}
    for block in re.split(r"\n(?=(?:local)?rule \S+:\n)", text):
        head = re.match(r"(?:local)?rule (\S+):\n", block)
        jobid = re.search(r"^\s+jobid: (\d+)$", block, re.M)
        if not head or not jobid:
            continue
        threads = re.search(r"^\s+threads: (\d+)$", block, re.M)
        priority = re.search(r"^\s+priority: (-?\d+)$", block, re.M)
        resources = re.search(r"^\s+resources: (.*)$", block, re.M)
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        outputs = re.search(r"^\s+output: (.*)$", block, re.M)
        jobs[int(jobid.group(1))] = Job(
            rule=head.group(1),
            threads=int(threads.group(1)) if threads else 1,
            gpu=bool(resources and "gpu_slot=" in resources.group(1)),
            gpu_here=bool(resources and re.search(r"gpu_slot=[1-9]", resources.group(1))),
            priority=int(priority.group(1)) if priority else 0,
            has_output=outputs is not None,
            wildcards=dict(item.split("=", 1) for item in wildcards.group(1).split(", ")) if wildcards else {},
            outputs=[_unflagged(o) for o in outputs.group(1).split(", ")] if outputs else [],
        )
    return jobs


def parse_dag(dot: str, jobs: dict[int, Job]) -> None:
    """Add the dependencies of ``snakemake --dag`` (node ids are job ids) to ``jobs``."""
    for before, after in re.findall(r"^\s*(\d+) -> (\d+)", dot, re.M):
        if int(after) in jobs and int(before) in jobs:
            jobs[int(after)].needs.add(int(before))


def schedule(jobs: dict[int, Job], seconds: dict[int, float], cores: int, gpus: int) -> float:
    """The wall time of ``jobs`` (``seconds`` each, by job id) on ``cores`` cores and
    ``gpus`` GPU slots (0: GPU jobs run on the CPU), each job starting once its inputs are
    done and its threads and a slot are free, the highest priority first (Snakemake's order)."""
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
                heapq.heappush(running, (now + seconds.get(j, 0.0), j))
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


# -- the sample ----------------------------------------------------------------------------
def _family(value: str) -> str:
    """What a data set's name stands for in a sample: the toy sets one size, the image sets
    one kind of input (a sample takes the largest)."""
    return "toy" if value in TOY_SETS else "image" if value in IMAGE_SETS else value


def job_kind(job: Job, per_dataset: bool = False) -> str:
    """A job's kind: its rule and wildcards, less those a sample stands for."""
    kept = {
        name: value if per_dataset else _family(value)
        for name, value in sorted(job.wildcards.items())
        if name not in SAMPLE_STANDS_FOR
    }
    return job.rule + (f"[{', '.join(f'{n}={v}' for n, v in kept.items())}]" if kept else "")


def _size(job: Job) -> tuple[int, int]:
    """How much work a job's wildcards ask for, of what a sample stands for: the points of
    the largest image set they name, then the kNN graph's k (0 for none)."""
    points = max((sum(IMAGE_SHAPES[v][:2]) for v in job.wildcards.values() if v in IMAGE_SHAPES), default=0)
    return points, int(job.wildcards.get("k", 0))


def ancestors(jobs: dict[int, Job], j: int) -> set[int]:
    """Every job that ``j`` waits for, directly or not."""
    found, stack = set(), list(jobs[j].needs)
    while stack:
        i = stack.pop()
        if i not in found:
            found.add(i)
            stack.extend(jobs[i].needs)
    return found


def choose_sample(jobs: dict[int, Job], per_dataset: bool = False, rules: list[str] | None = None) -> dict[str, int]:
    """One job of every kind that can be run alone (its inputs hold at most one job of any
    kind), by kind: the largest (data set, then k) first, so that the projection is an upper
    bound, then the one that adds the fewest jobs to those already chosen (their inputs
    included). ``rules``: only kinds of these rules."""
    kinds: dict[str, list[int]] = {}
    for j, job in sorted(jobs.items()):
        if job.has_output and (rules is None or job.rule in rules):
            kinds.setdefault(job_kind(job, per_dataset), []).append(j)
    closure = {j: ancestors(jobs, j) | {j} for j in jobs}

    def alone(j: int) -> bool:
        found = [job_kind(jobs[i], per_dataset) for i in closure[j] if jobs[i].has_output]
        return len(found) == len(set(found))

    chosen: dict[str, int] = {}
    running: set[int] = set()
    for kind in sorted(kinds, key=lambda k: (min(len(closure[j]) for j in kinds[k]), k)):  # inputs first
        candidates = [j for j in kinds[kind] if alone(j)]
        if candidates:
            best = min(candidates, key=lambda j: (*(-n for n in _size(jobs[j])), len(closure[j] - running), j))
            chosen[kind] = best
            running |= closure[best]
    return chosen


def sample_targets(jobs: dict[int, Job], chosen: dict[str, int]) -> list[str]:
    """One output of each chosen job: the targets that make Snakemake run the sample."""
    return [jobs[j].outputs[0] for j in chosen.values()]


def snakemake_plan(configfile: str, workdir: Path, cores: int) -> dict[int, Job]:
    """The jobs of ``configfile``'s whole workflow (every job forced) as Snakemake plans them
    with ``cores`` cores (threads are capped there), with their dependencies."""
    base = [sys.executable, "-m", "snakemake", "--configfile", configfile, "--forceall", "--cores", str(cores)]
    listing = subprocess.run([*base, "-n"], cwd=workdir, capture_output=True, text=True, check=True).stdout
    dot = subprocess.run([*base, "--dag"], cwd=workdir, capture_output=True, text=True, check=True).stdout
    jobs = parse_dry_run(listing)
    parse_dag(dot, jobs)
    return jobs

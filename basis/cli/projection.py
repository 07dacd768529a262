"""How long a config's workflow takes, projected from its real DAG and measured job times.

The DAG comes from a dry run of the target config (``snakemake -n --forceall`` for every
job's rule, wildcards, outputs, threads and GPU claim, ``--dag`` for what waits on what).
Each job's seconds are measured on the device in question, in one of two ways:

- ``--timings FOLDER``: a finished workflow run at the target's protocol (its ``n_iter``,
  data sizes, ``seeds_in_one_job``); each rule's jobs take the median of that rule's jobs
  there (Snakemake's records in ``FOLDER/.snakemake/metadata``).
- ``--sample FOLDER``: a sample of the target's own jobs is run there (a working folder of
  its own: the checkout's results are not touched), one job of every kind, and each job
  takes its kind's measured time. A job's kind is its rule and wildcards, except those a
  sample stands for: the seeds (a job's), k (the kNN sweep's graph; the largest is
  sampled) and which toy set or which image set (the toy sets are generated at one size;
  among the image sets the largest, SVHN where the DAG has it, is sampled), so that the
  projection is an upper bound; ``--per-dataset`` samples every data set. A job whose inputs hold more than one
  job of a kind (a table, a figure of several runs) cannot be sampled without them all:
  it takes its rule's median from ``--timings`` if given, else it is not measured.
  ``--standins`` runs the sample on synthetic image sets of the real shapes and formats
  (:mod:`basis.data.standins`), for a box without the image sets.

The jobs are then scheduled as Snakemake would run them: each starts once its inputs are
done and its threads (and, on a GPU box, a GPU slot: one job per GPU by default, as the
job times were measured; ``--slots-per-gpu``) are free. A job that nothing measured counts
as zero seconds and the report says so.

    python -m basis.cli.projection --configfile config/quick.yaml --timings . --cores 2
    python -m basis.cli.projection --configfile config/config.yaml --sample sample --standins \\
        --timings quick_run --cores 16 --gpus 1 4

The report says which figures are measured and which projected. When the timing run is a
run of the target config itself, its measured wall time (first job's start to last job's
end) is printed beside the projection: the check of the model; a sample's own wall time
is printed beside its projection too.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from basis.catalog import IMAGE_SETS
from basis.cli.dag import (
    Job,
    ancestors,
    choose_sample,
    job_kind,
    sample_targets,
    schedule,
    snakemake_plan,
)
from basis.cli.parser import OneLineParser

CHECKOUT = Path(__file__).resolve().parents[2]
#: The file that marks a folder as a sample of one config.
SAMPLE_MARK = "projection-sample.json"


@dataclass
class Span:
    """One finished job of a run: its rule, start, end and outputs."""

    rule: str
    start: float
    end: float
    outputs: list[str]


def _record_output(record: Path, metadata: Path) -> str:
    """The output path a Snakemake metadata record is named after: URL-safe base64,
    split over folders whose names start with '@' when longer than a file name may be."""
    parts = record.relative_to(metadata).parts
    return base64.urlsafe_b64decode("".join(part.removeprefix("@") for part in parts)).decode()


def finished_jobs(folder: Path) -> list[Span]:
    """Each finished job of the run in ``folder`` (Snakemake's metadata, one record per
    output, grouped into jobs by their hash)."""
    metadata = folder / ".snakemake" / "metadata"
    spans: dict[int | str, Span] = {}
    for record in (path for path in metadata.rglob("*") if path.is_file()):
        try:
            meta = json.loads(record.read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"--timings {folder}: {record} is not a Snakemake metadata record ({err})") from None
        if not isinstance(meta, dict):
            raise ValueError(f"--timings {folder}: {record} is not a Snakemake metadata record (not an object)")
        if meta.get("incomplete") or meta.get("starttime") is None or meta.get("endtime") is None:
            continue
        times = meta["starttime"], meta["endtime"]
        if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) for t in times):
            raise ValueError(f"--timings {folder}: {record} has start and end times that are not numbers: {times}")
        if times[1] < times[0]:
            raise ValueError(f"--timings {folder}: {record} ends before it starts ({times[0]} > {times[1]})")
        if _failed(folder, meta.get("log") or []):
            continue  # Snakemake records a failed job as finished too: not a timing
        key = meta.get("job_hash", record.name)
        span = spans.setdefault(key, Span(meta["rule"], meta["starttime"], meta["endtime"], []))
        span.start, span.end = min(span.start, meta["starttime"]), max(span.end, meta["endtime"])
        span.outputs.append(_record_output(record, metadata))
    return list(spans.values())


def _failed(folder: Path, logs: list[str]) -> bool:
    """Whether a job failed: the workflow's scripts end a failed job's log with its
    ``error:`` line (basis.runtime.jobs)."""
    for log in logs:
        try:
            lines = (folder / log).read_text(errors="replace").strip().splitlines()
        except OSError:
            continue
        if lines and lines[-1].startswith("error:"):
            return True
    return False


def wall_time(spans: list[Span]) -> float | None:
    """A run's wall time, its first job's start to its last job's end (None: no job)."""
    return max(s.end for s in spans) - min(s.start for s in spans) if spans else None


def measured_seconds(folder: Path) -> tuple[dict[str, list[float]], float | None]:
    """Each rule's job durations in a finished run in ``folder``, and the run's wall time
    (first start to last end)."""
    spans = finished_jobs(folder)
    per_rule: dict[str, list[float]] = {}
    for span in spans:
        per_rule.setdefault(span.rule, []).append(span.end - span.start)
    per_rule = {rule: sorted(times) for rule, times in per_rule.items()}
    return per_rule, wall_time(spans)


def _config_digest(configfile: Path) -> str:
    return hashlib.sha256(configfile.read_bytes()).hexdigest()


def check_sample_folder(folder: Path, configfile: Path) -> None:
    """A sample runs in a folder of its own: new, empty, or one this script made for the same
    config (then what it finished is kept). Anything else would be written into: refused."""
    mark = folder / SAMPLE_MARK
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--sample {folder} is a file, not a folder")
    if mark.is_file():
        try:
            made_for = json.loads(mark.read_text())
        except ValueError:
            made_for = None
        if not isinstance(made_for, dict):
            raise ValueError(f"--sample {folder}: its {SAMPLE_MARK} is not this script's; give a new folder")
        if made_for.get("config_sha256") != _config_digest(configfile):
            raise ValueError(
                f"--sample {folder} holds a sample of {made_for.get('configfile')} as it was then;"
                " give another folder, or delete this one"
            )
    elif folder.is_dir() and any(folder.iterdir()):
        raise ValueError(f"--sample {folder} is neither empty nor a sample's folder; give a new one")


def run_sample(folder: Path, configfile: Path, targets: list[str], cores: int, standins: list[str] | None) -> None:
    """Run ``targets`` and what they need with the target's config in ``folder`` (image sets
    from stand-ins written there when ``standins`` lists them)."""
    folder.mkdir(parents=True, exist_ok=True)
    mark = {"configfile": str(configfile), "config_sha256": _config_digest(configfile)}
    (folder / SAMPLE_MARK).write_text(json.dumps(mark, indent=2))
    command = [sys.executable, "-m", "snakemake", *targets, "--snakefile", str(CHECKOUT / "Snakefile")]
    command += ["--directory", str(folder), "--configfile", str(configfile), "--cores", str(cores)]
    # GPU jobs one at a time, as the projection takes each job's time for a job alone on its GPU
    command += ["--resources", "gpu_slot=1"]
    if standins:
        from basis.data.standins import write_standins

        root = folder / "standins"
        write_standins(root, standins)
        command += ["--config", f"data_root={root}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))}
    with open(folder / "sample.log", "w") as log:  # Snakemake's progress, to follow while it runs
        done = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"the sample run failed (exit {done.returncode}); its log: {folder / 'sample.log'}")


def sampled_seconds(
    jobs: dict[int, Job], spans: list[Span], per_dataset: bool
) -> tuple[dict[str, float], dict[int, float]]:
    """Each kind's mean seconds over the sample's finished jobs ``spans``, and each of those
    jobs' own seconds (by the target DAG's job id, matched by output)."""
    by_output = {output: j for j, job in jobs.items() for output in job.outputs}
    own: dict[int, float] = {}
    for span in spans:
        matched = {by_output[o] for o in span.outputs if o in by_output}
        if len(matched) == 1:
            own[matched.pop()] = span.end - span.start
    per_kind: dict[str, list[float]] = {}
    for j, seconds in own.items():
        per_kind.setdefault(job_kind(jobs[j], per_dataset), []).append(seconds)
    return {kind: statistics.mean(times) for kind, times in per_kind.items()}, own


# -- the report ----------------------------------------------------------------------------
@dataclass
class Estimate:
    """Each job's projected seconds and where each group of jobs' figure comes from."""

    seconds: dict[int, float]
    source: dict[str, str]  # group -> "measured ...", "projected ...", "not measured"
    group: dict[int, str]  # job id -> its group (rule, or kind in a sample)


def _medians(per_rule: dict[str, list[float]]) -> dict[str, float]:
    return {rule: statistics.median(times) for rule, times in per_rule.items()}


def from_timings(jobs: dict[int, Job], per_rule: dict[str, list[float]]) -> Estimate:
    """Each job at its rule's median in a finished run at the target's protocol."""
    median = _medians(per_rule)
    seconds = {j: median.get(job.rule, 0.0) for j, job in jobs.items() if job.has_output}
    source = {job.rule: ("measured" if job.rule in median else "**not measured**") for job in jobs.values()}
    return Estimate(seconds, source, {j: job.rule for j, job in jobs.items()})


def from_sample(
    jobs: dict[int, Job],
    per_kind: dict[str, float],
    own: dict[int, float],
    per_rule: dict[str, list[float]],
    timings: str | None,
    per_dataset: bool,
) -> Estimate:
    """Each job at its kind's time in the sample; a kind the sample lacks at its rule's
    median in ``per_rule`` (the run in ``timings``), else not measured."""
    median = _medians(per_rule)
    group = {j: job_kind(job, per_dataset) for j, job in jobs.items()}
    sampled: dict[str, set[str]] = {}  # kind -> the wildcards of its jobs in the sample
    for j in own:
        sampled.setdefault(group[j], set()).add(", ".join(f"{k}={v}" for k, v in jobs[j].wildcards.items()))
    seconds, source = {}, {}
    for j, job in jobs.items():
        kind = group[j]
        if not job.has_output:
            continue
        if kind in per_kind:
            seconds[j] = per_kind[kind]
            named = "; ".join(w for w in sorted(sampled[kind]) if w)
            source[kind] = f"sampled ({named})" if named else "sampled"
        elif job.rule in median:
            seconds[j] = median[job.rule]
            source[kind] = f"projected: the median of {len(per_rule[job.rule])} in {timings}"
        else:
            seconds[j] = 0.0
            source[kind] = "**not measured**"
    return Estimate(seconds, source, group)


def report(jobs: dict[int, Job], estimate: Estimate, cores: int, gpus: list[int], slots_per_gpu: int = 1) -> str:
    counts: dict[str, int] = {}
    totals: dict[str, float] = {}
    for j, job in jobs.items():
        if job.has_output:  # a target rule (all) is not a job that takes time
            name = estimate.group[j]
            counts[name] = counts.get(name, 0) + 1
            totals[name] = totals.get(name, 0.0) + estimate.seconds[j]
    lines = ["| jobs of | jobs | s per job | total s | |", "|---|---:|---:|---:|---|"]
    for name in sorted(counts, key=lambda n: (-totals[n], n)):
        if "not measured" in estimate.source[name]:
            lines.append(f"| {name} | {counts[name]} | - | - | {estimate.source[name]} |")
        else:
            each = totals[name] / counts[name]
            lines.append(f"| {name} | {counts[name]} | {each:.1f} | {totals[name]:.0f} | {estimate.source[name]} |")
    lines.append(f"| all | {sum(counts.values())} | | {sum(totals.values()):.0f} | |")
    lines.append("")
    for n in gpus:
        where = f"{n} GPU{'s' if n != 1 else ''} and {cores} cores" if n else f"{cores} cores, no GPU"
        wall = schedule(jobs, estimate.seconds, cores, n * slots_per_gpu)
        lines.append(f"projected wall time on {where}: {wall:.0f} s ({wall / 3600:.2f} h)")
    missing = sorted(name for name in counts if "not measured" in estimate.source[name])
    if missing:
        lines.append(f"not measured (counted as 0 s): {', '.join(missing)}")
    return "\n".join(lines)


def build_parser() -> OneLineParser:
    """The projection's options."""
    parser = OneLineParser(prog="python -m basis.cli.projection", description=__doc__.split("\n\n")[0])
    parser.add_argument("--configfile", required=True, help="the config whose workflow is projected")
    parser.add_argument("--timings", help="a folder where a run at that config's protocol finished")
    parser.add_argument("--sample", help="a folder of its own to run one job of every kind of the DAG in")
    parser.add_argument("--standins", action="store_true", help="the sample's image sets: synthetic stand-ins")
    parser.add_argument("--per-dataset", action="store_true", help="sample every data set, not one of a family")
    parser.add_argument("--rules", nargs="+", help="sample only the jobs of these rules (and what they need)")
    parser.add_argument("--cores", type=int, required=True, help="the cores Snakemake is given")
    parser.add_argument("--sample-cores", type=int, help="the cores the sample runs on (default: this box's)")
    parser.add_argument("--gpus", type=int, nargs="+", default=[0], help="GPU counts to project for (0: CPU only)")
    parser.add_argument(
        "--slots-per-gpu",
        type=int,
        default=1,
        help="GPU jobs at once on one GPU (1: as the timings were measured, one job alone)",
    )
    parser.add_argument("--workdir", default=".", help="the checkout the dry run plans in")
    return parser


def checked_plan(args: argparse.Namespace) -> tuple[dict[int, Job], dict[str, list[float]], float | None]:
    """The arguments checked and the target's plan made: its jobs, the timing run's seconds
    per rule and its wall time. Raises ``ValueError`` (or the dry run's error) on bad input."""
    if args.timings is None and args.sample is None:
        raise ValueError("give --timings (a finished run), --sample (a folder to run a sample in) or both")
    if (args.standins or args.per_dataset or args.rules) and args.sample is None:
        raise ValueError("--standins, --per-dataset and --rules choose a sample: give --sample too")
    sample_cores = 1 if args.sample_cores is None else args.sample_cores
    if args.cores < 1 or args.slots_per_gpu < 1 or min(args.gpus) < 0 or sample_cores < 1:
        raise ValueError("--cores, --sample-cores and --slots-per-gpu take at least 1, --gpus at least 0")
    if args.sample_cores is not None and args.sample is None:
        raise ValueError("--sample-cores is the sample's: give --sample too")
    per_rule, wall = measured_seconds(Path(args.timings)) if args.timings else ({}, None)
    if args.timings and not per_rule:
        raise ValueError(f"--timings {args.timings}: no finished job in .snakemake/metadata")
    if args.sample:
        check_sample_folder(Path(args.sample), Path(args.configfile).resolve())
    jobs = snakemake_plan(args.configfile, Path(args.workdir), args.cores)
    unknown = sorted(set(args.rules or []) - {job.rule for job in jobs.values()})
    if unknown:
        raise ValueError(f"--rules {' '.join(unknown)}: not a rule of the DAG")
    return jobs, per_rule, wall


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        jobs, per_rule, wall = checked_plan(args)
    except subprocess.CalledProcessError as err:  # a config the dry run refuses: its own last line
        lines = f"{err.stderr}\n{err.stdout}".strip().splitlines()  # Snakemake prints its error to stdout
        print(f"--configfile {args.configfile}: {lines[-1] if lines else 'the dry run failed'}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as err:
        print(err, file=sys.stderr)
        return 2
    if args.sample is None:
        print(report(jobs, from_timings(jobs, per_rule), args.cores, args.gpus, args.slots_per_gpu))
        if wall is not None:
            print(f"measured wall time of the timing run: {wall:.0f} s (first start to last end)")
        return 0
    folder = Path(args.sample).resolve()
    chosen = choose_sample(jobs, args.per_dataset, args.rules)
    if not chosen:  # no targets would make Snakemake run the whole workflow
        rules = " ".join(args.rules)
        print(
            f"--rules {rules}: each of their jobs needs several of one kind; time them with --timings", file=sys.stderr
        )
        return 2
    closure = set().union(*(ancestors(jobs, j) | {j} for j in chosen.values()))
    image_sets = sorted({v for j in closure for v in jobs[j].wildcards.values() if v in IMAGE_SETS})
    sample_cores = args.sample_cores or len(os.sched_getaffinity(0))
    targets = sample_targets(jobs, chosen)
    standins = image_sets if args.standins else None
    try:
        run_sample(folder, Path(args.configfile).resolve(), targets, sample_cores, standins)
    except RuntimeError as err:  # a job of the sample failed: not the arguments' fault
        print(err, file=sys.stderr)
        return 1
    spans = finished_jobs(folder)
    sample_wall = wall_time(spans) or 0.0
    per_kind, own = sampled_seconds(jobs, spans, args.per_dataset)
    estimate = from_sample(jobs, per_kind, own, per_rule, args.timings, args.per_dataset)
    print(report(jobs, estimate, args.cores, args.gpus, args.slots_per_gpu))
    # the model's check: the sample's own jobs scheduled as it ran them (one GPU job at a time)
    sampled = {j: replace(jobs[j], needs=jobs[j].needs & set(own)) for j in own}
    model = schedule(sampled, own, sample_cores, int(any(job.gpu_here for job in sampled.values())))
    print(
        f"the sample: {len(own)} jobs in {sample_wall:.0f} s (first start to last end), {model:.0f} s as this"
        f" model schedules them{' on stand-ins of ' + ', '.join(image_sets) if args.standins else ''}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a workflow run's time went, per rule, from Snakemake's benchmark files.

Reads ``results/benchmarks/**/*.tsv`` (one per job; the folder below ``benchmarks/`` names
the stage, e.g. ``runs``, ``knn``, ``studies``) and prints, per stage: jobs, summed wall
seconds, median and largest job, summed CPU seconds and peak RSS. The sum of wall seconds
over the cores the run had is a lower bound on its wall time; the gap to the measured wall
time is idle slots and the scheduler.

    python benchmarks/workflow_profile.py --results results --cores 2 --wall 1234
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path


def read_benchmarks(results: Path) -> dict[str, list[dict[str, float]]]:
    """Stage -> one row per job (wall ``s``, ``cpu_time``, ``max_rss`` in MB)."""
    stages: dict[str, list[dict[str, float]]] = defaultdict(list)
    for path in sorted((results / "benchmarks").rglob("*.tsv")):
        stage = path.relative_to(results / "benchmarks").parts[0]
        with path.open() as handle:
            for row in csv.DictReader(handle, delimiter="\t"):
                stages[stage].append(
                    {k: float(row[k]) for k in ("s", "cpu_time", "max_rss") if row.get(k) not in ("", "-", None)}
                )
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--cores", type=int, default=2, help="the cores the run was given")
    parser.add_argument("--wall", type=float, help="the run's measured wall seconds, to show the idle share")
    args = parser.parse_args()
    stages = read_benchmarks(args.results)
    print("| stage | jobs | wall s, sum | median job s | largest job s | CPU s, sum | peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    total = 0.0
    for stage, rows in sorted(stages.items(), key=lambda item: -sum(r["s"] for r in item[1])):
        walls = [r["s"] for r in rows]
        total += sum(walls)
        print(
            f"| {stage} | {len(rows)} | {sum(walls):.0f} | {statistics.median(walls):.1f} | {max(walls):.1f}"
            f" | {sum(r.get('cpu_time', 0.0) for r in rows):.0f} | {max(r.get('max_rss', 0.0) for r in rows):.0f} |"
        )
    print(f"| all | {sum(len(r) for r in stages.values())} | {total:.0f} | | | | |")
    bound = total / args.cores
    line = f"lower bound on wall time with {args.cores} cores: {bound:.0f} s"
    if args.wall:
        line += f"; measured {args.wall:.0f} s, so {1 - bound / args.wall:.0%} of the core time was idle or overhead"
    print(line)


if __name__ == "__main__":
    main()

"""What one small job costs beyond its work, against the floor of importing torch.

Times, best of ``--repeats`` each and in one go (so that a busy machine slows both alike):
a bare ``python -c "import torch"``; a 5-iteration tracked ``basis run`` on two moons (a
fresh store each time, and into a store that exists, as in the workflow); the same run
untracked; and the tracked run with ``--seeds 0 1 2 3`` (start-up paid once). Then runs
the tracked job once under ``python -X importtime`` and prints the slowest top-level
imports, and the job's own phases (its ``# timings`` line).

    python benchmarks/job_overhead.py --repeats 3
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from basis.cli.parser import OneLineParser
from basis.runtime.timing import TIMINGS_PREFIX

RUN = ["-m", "basis", "run", "--dataset", "two_moons", "--method", "basis", "--set", "n_iter=5", "--json"]


def wall(command: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, cwd=cwd, check=True)
    return time.perf_counter() - start, done.stderr


def tracked(folder: Path, name: str) -> list[str]:
    return [*RUN, "--track", "overhead", "--store", str(folder / name)]


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()

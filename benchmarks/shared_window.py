"""Summarise `benchmarks/gpu_shared.sh`: processes sharing one device, each against one alone.

Every `bench step --start-at T` process times its steps from T on and reports each step's
end on the clock. Processes that share a device are compared over the window they all ran
in (from the latest start to the earliest end): a process's ms per step there is the
window's length over the steps it finished in it. One alone is timed over its whole run.
Usage: python benchmarks/shared_window.py OUT_FOLDER
"""

from __future__ import annotations

import json
import pathlib
import sys


def load(path: pathlib.Path) -> dict | None:
    try:
        return json.loads(path.read_text().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None


def alone_ms(window: dict) -> float:
    return (window["end"] - window["start"]) * 1e3 / len(window["step_ends"])


def shared_ms(windows: list[dict]) -> tuple[list[float], float]:
    """Each process's ms per step over the common window, and that window's share of the
    longest process's run."""
    first, last = max(w["start"] for w in windows), min(w["end"] for w in windows)
    per_process = []
    for window in windows:
        steps = sum(first < end <= last for end in window["step_ends"])
        per_process.append((last - first) * 1e3 / steps if steps else float("nan"))
    longest = max(w["end"] - w["start"] for w in windows)
    return per_process, max(0.0, last - first) / longest


def main(out: pathlib.Path) -> int:
    for solo_path in sorted(out.glob("*_solo.json")):
        group = solo_path.name[: -len("_solo.json")]
        solo = load(solo_path)
        shared = [load(path) for path in sorted(out.glob(f"{group}_shared_*.json"))]
        if solo is None or "window" not in solo or not shared or any(s is None or "window" not in s for s in shared):
            print(f"{group}: incomplete (see {group}_*.err)")
            continue
        alone = alone_ms(solo["window"])
        together, overlap = shared_ms([s["window"] for s in shared])
        ratios = ", ".join(f"{ms:.2f} ms ({ms / alone:.2f}x)" for ms in together)
        print(
            f"{group}: alone {alone:.2f} ms/step; {len(shared)} at once: {ratios}; "
            f"worst {max(together) / alone:.2f}x; common window {overlap:.0%} of the longest run"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1])))

"""The benchmark harness: one entry point per area, every part documented in BENCHMARKS.md,
and nothing in benchmarks/ but its modules."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from benchmarks.common import AREAS, area_parser

ROOT = Path(__file__).resolve().parents[1]
#: The benchmarks of the package itself: ``python -m basis bench step|reference`` and the projection.
PACKAGE_ENTRIES = ("python -m basis bench step", "python -m basis bench reference", "python -m basis.cli.projection")


def _parts() -> list[tuple[str, str]]:
    return [(area, part) for area in AREAS for part in importlib.import_module(f"benchmarks.{area}").PARTS]


def test_there_are_about_ten_entry_points_and_benchmarks_holds_only_their_modules():
    assert len(AREAS) + len(PACKAGE_ENTRIES) <= 10
    files = {path.name for path in (ROOT / "benchmarks").iterdir() if path.name != "__pycache__"}
    assert files == {"__init__.py", "__main__.py", "common.py", "gate.py", *(f"{area}.py" for area in AREAS)}


@pytest.mark.parametrize(("area", "part"), _parts())
def test_every_part_has_its_help_and_is_in_benchmarks_md(area, part, capsys):
    with pytest.raises(SystemExit) as stopped:
        area_parser(area, importlib.import_module(f"benchmarks.{area}")).parse_args([part, "--help"])
    assert stopped.value.code == 0 and f"python -m benchmarks {area} {part}" in capsys.readouterr().out
    assert f"python -m benchmarks {area} {part}" in (ROOT / "BENCHMARKS.md").read_text()


def test_the_package_benchmarks_are_in_benchmarks_md():
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert [entry for entry in PACKAGE_ENTRIES if entry not in text] == []


def test_an_unknown_area_or_part_is_one_line_and_exit_2(capsys):
    assert main(["nope"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: no benchmark area 'nope'; the areas: {', '.join(AREAS)}"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "alignment", "nope"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "nope" in done.stderr


def test_listing_the_areas():
    done = subprocess.run([sys.executable, "-m", "benchmarks"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and all(area in done.stdout for area in AREAS)


def test_the_scale_device_check_runs_on_the_cpu_and_prints_each_methods_throughput(tmp_path):
    """``python -m benchmarks device scale`` as a device call runs it, with DEVICE=cpu: one
    line per method and n, from the study's own arrays."""
    env = {"DEVICE": "cpu", "N_POINTS": "600 1200", "METHODS": "basis exact", "N_ITER": "5", "OUT": str(tmp_path)}
    command = [sys.executable, "-m", "benchmarks", "device", "scale"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in (tmp_path / "summary.txt").read_text().splitlines() if "points/s" in line]
    assert [line.split(":")[0].split() for line in lines] == [
        ["basis", "n", "=", "600"],
        ["basis", "n", "=", "1,200"],
        ["exact", "n", "=", "600"],
        ["exact", "n", "=", "1,200"],
    ]

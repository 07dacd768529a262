"""The device gate (python -m benchmarks device gate): its CPU run on the CUDA side passes, and a
failed check or a bad setting is never read as a pass."""

import os
import subprocess
import sys

import torch
from conftest import HANG_GUARD_S
from test_together import ROOT

from basis.estimators.parameters import PAPER_METHODS
from benchmarks.gate import Gate

GATE = [sys.executable, "-m", "benchmarks", "device", "gate"]
CHECKS = ["device", *(f"together_{method}" for method in PAPER_METHODS)]
CHECKS += ["float32_solve", "cuda_graphs", "reference", "studies", "step", "two_gpus", "baseline_step"]


def _readme_lines() -> list[str]:
    return [line for line in (ROOT / "README.md").read_text().splitlines() if "-m benchmarks device gate" in line
            and line.lstrip().startswith((".venv", "DEVICE="))]  # fmt: skip


def _run(line: str, **settings) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", line], capture_output=True, text=True, cwd=ROOT, env={**os.environ, **settings},
        timeout=HANG_GUARD_S,
    )  # fmt: skip


def test_the_readmes_gate_passes_every_check_on_the_cuda_side_on_the_cpu():
    on_gpu, on_cpu = _readme_lines()
    done = _run(on_cpu)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.split(" ", 1)[0] in ("PASS", "FAIL", "SKIP")]
    assert [line.split()[1].rstrip(":") for line in lines] == CHECKS
    verdicts = {line.split()[1].rstrip(":"): line.split()[0] for line in lines}
    assert {verdicts["two_gpus"], verdicts["baseline_step"]} == {"SKIP"}
    assert {verdicts[name] for name in CHECKS[:-2]} == {"PASS"}
    assert "CUDA side emulated" in lines[0] and done.stdout.rstrip().endswith(
        f"{len(CHECKS)} of {len(CHECKS)} checks passed or skipped"
    )
    if not torch.cuda.is_available():  # the GPU box's command on a box without one fails, and says why
        done = _run(on_gpu)
        assert done.returncode == 1 and "FAIL device: no CUDA device visible to torch" in done.stdout, done.stdout


def test_the_baseline_is_an_older_codes_step(tmp_path):
    (tmp_path / "basis").symlink_to(ROOT / "basis")  # this code as its own baseline
    verdict, figure = Gate("cpu", 2, 600, str(tmp_path)).baseline()
    assert verdict == "PASS" and "ms per iteration" in figure


def test_a_failed_check_fails_the_gate(capsys):
    one = Gate("cpu", 2, 600, "")
    one.check("broken", lambda: 1 / 0)
    one.check("fine", lambda: ("PASS", "ok"))
    out = capsys.readouterr().out
    assert out.startswith("FAIL broken: ZeroDivisionError: division by zero") and "PASS fine: ok" in out
    assert [verdict for _, verdict in one.verdicts] == ["FAIL", "PASS"]


def test_bad_settings_end_the_gate_in_one_line_before_any_check(tmp_path):
    for settings, message in (
        ({"DEVICE": "tpu"}, "error: DEVICE must be cuda or cpu, got 'tpu'"),
        ({"STEPS": "nan"}, "error: STEPS must be an integer of at least 2, got 'nan'"),
        ({"N": "10"}, "error: N must be an integer of at least 600, got '10'"),
        ({"OLD": str(tmp_path)}, f"error: OLD={str(tmp_path)!r} holds no basis/ package"),
    ):
        environment = {**os.environ, "DEVICE": "cpu", **settings}
        done = subprocess.run(GATE, capture_output=True, text=True, cwd=ROOT, env=environment, timeout=HANG_GUARD_S)
        assert done.returncode == 2 and done.stderr.strip() == message and not done.stdout, (done.stdout, done.stderr)

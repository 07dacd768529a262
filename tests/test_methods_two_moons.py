"""Each method through `python -m basis run` on two moons (issue floor: NMI >= 0.95)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_GUARD_S

# Full training budgets (1,000-4,000 iterations): minutes on two cores.
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "method",
    [
        "basis",
        "diffusion_net",
        "specnet1",
        pytest.param(
            "specnet2",
            marks=pytest.mark.xfail(
                strict=True,
                reason="known gap: SpecNet2 reaches NMI ~0.2-0.3 on two moons in the shared 1,000 iterations"
                " (float32 and float64); its loss barely separates the Fiedler vector (pencil eigenvalues 1 and"
                " 0.9997). See test_specnet2_clusters_two_moons_with_deflation_and_a_longer_budget",
            ),
        ),
    ],
)
def test_method_clusters_two_moons(method):
    result = _run(method)
    assert result["nmi"] >= 0.95, result


def test_specnet2_clusters_two_moons_with_deflation_and_a_longer_budget():
    """SpecNet2 with its trivial-eigenvector deflation and 3x the budget: NMI 1.0 on the
    2-core box (0.94 at 2,000 iterations), where 4,000 iterations without deflation reached
    0.32 on an H200 (BENCHMARKS.md)."""
    result = _run("specnet2", "drop_trivial=true", "n_iter=3000")
    assert result["nmi"] >= 0.95, result


def _run(method, *settings):
    sets = [item for setting in ("eval.authors_probe_epochs=1", *settings) for item in ("--set", setting)]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "basis",
            "run",
            "--method",
            method,
            "--dataset",
            "two_moons",
            "--json",
            "--device",
            "cpu",
            *sets,
        ],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)

"""Each method through `python -m basis run` on two moons (issue floor: NMI >= 0.95)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "method",
    [
        "basis",
        "diffusion_net",
        "specnet1",
        pytest.param("specnet2", marks=pytest.mark.xfail(
            strict=True,
            reason="known gap: SpecNet2 reaches NMI ~0.2-0.3 on two moons in 1,000 iterations (float32 and float64);"
                   " its loss barely separates the Fiedler vector (pencil eigenvalues 1 and 0.9997)")),
    ],
)
def test_method_clusters_two_moons(method):
    done = subprocess.run(
        [sys.executable, "-m", "basis", "run", "--method", method, "--dataset", "two_moons", "--json", "--device", "cpu",
         "--set", "eval.probe_epochs=1"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["train_seconds"] < 120
    assert result["nmi"] >= 0.95, result

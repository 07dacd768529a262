"""tests/test_capture.py's GPU test without pytest (the device machines have none): the
step replayed from CUDA graphs against the eager one. Run from the repository root:
``python benchmarks/capture_check.py``."""

import pathlib
import sys
import types

try:
    import pytest  # noqa: F401
except ImportError:  # a stand-in for the two names the test module uses
    sys.modules["pytest"] = types.SimpleNamespace(
        mark=types.SimpleNamespace(skipif=lambda *a, **k: lambda f: f), raises=None
    )
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
import test_capture  # noqa: E402

test_capture.test_on_a_gpu_the_replayed_step_equals_the_eager_one()
print("capture test passed: the replayed step equals the eager one")

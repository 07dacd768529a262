"""Every job uses only the threads it was given (``--threads``, Snakemake's ``threads:``)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from basis import BASiS
from basis.data.clusters import clustered_data
from basis.runtime.threads import limit_threads, one_torch_thread


def _python(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_limit_threads_caps_every_pool_including_libraries_loaded_later():
    report = _python(
        "import json; from basis.runtime.threads import limit_threads, thread_report\n"
        "limit_threads(1)\n"
        "import sklearn.cluster, scipy.linalg  # OpenMP and BLAS loaded after the call\n"
        "sklearn.cluster.KMeans(2, n_init=1).fit([[0.0], [1.0], [2.0]])\n"
        "print(json.dumps(thread_report()))"
    )
    assert report["torch"] == 1
    assert set(report) >= {"torch", "blas", "openmp"}
    assert all(n == 1 for n in report.values()), report


def test_the_cli_honours_threads():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "basis",
            "bench",
            "step",
            "--m",
            "128",
            "--k",
            "10",
            "--k-eig",
            "3",
            "--threads",
            "1",
            "--device",
            "cpu",
            "--json",
            "--compare",
            "--profile",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    report = json.loads(out)
    assert all(n == 1 for n in report["threads"].values())
    # --compare times both eigensolvers in this process; --profile is for CUDA only
    assert {solver: report["compare"][solver]["eigensolver"] for solver in ("exact", "subspace")} == {
        "exact": "exact",
        "subspace": "subspace",
    }
    assert "top_kernels" not in report and report["host_syncs_per_iteration"]["total"] <= 1.1


def test_threads_must_be_positive():
    with pytest.raises(ValueError, match="threads must be a positive integer, got 0"):
        limit_threads(0)


def test_a_one_thread_budget_runs_the_pipeline_in_turn_with_the_same_numbers():
    X, y = clustered_data(2000, 16, 4)
    previous = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):  # one thread: batches prepared in turn; two: by the worker thread
            torch.set_num_threads(threads)
            model = BASiS(
                4, graph={"n_neighbors": 15}, batch_size=150, n_iter=15, anchors_per_class=10, device="cpu", seed=0
            ).fit(X, y)
            assert torch.get_num_threads() == threads  # the budget is restored after fit
            runs.append((model.loss_curve_, model.transform(X[:50])))
    finally:
        torch.set_num_threads(previous)
    assert runs[0][0] == runs[1][0]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


def test_device_auto_takes_the_gpu_with_the_most_free_memory(monkeypatch):
    """Where NVML's view (nvidia-smi) cannot be asked, each device's free memory comes from
    its CUDA context; the device chosen or named becomes the current one."""
    from basis.runtime import device as devices
    from basis.runtime.device import resolve_device

    bound = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "set_device", bound.append)
    monkeypatch.setattr(devices, "_free_memory_from_smi", lambda count: None)
    free = {0: 2e9, 1: 70e9, 2: 30e9}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: (free[index], 80e9))
    assert resolve_device("auto") == torch.device("cuda", 1)
    assert resolve_device("cuda:2") == torch.device("cuda", 2)
    assert bound == [1, 2]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")


def test_one_torch_thread_restores_the_budget_even_after_an_error():
    budget = torch.get_num_threads()
    with pytest.raises(RuntimeError), one_torch_thread():
        assert torch.get_num_threads() == 1
        raise RuntimeError("a failed count")
    assert torch.get_num_threads() == budget

"""`bench step`'s timed window, for processes that share one device (python -m benchmarks device shared)."""

import time
from pathlib import Path

import numpy as np
import pytest

from basis.cli import main
from basis.cli.bench import bench_step
from benchmarks import device

ROOT = Path(__file__).resolve().parents[1]


def test_a_timed_window_starts_at_the_given_time_and_places_every_step_on_the_clock():
    start_at = time.time() + 1.0
    result = bench_step(
        batch_size=128, n_components=3, dim=4, n_neighbors=8, n_iter=14, device="cpu", start_at=start_at
    )
    window = result["window"]
    ends = window["step_ends"]
    assert len(ends) == 14 - 10
    assert window["start"] >= start_at
    assert all(a < b for a, b in zip(ends, ends[1:])) and window["start"] < ends[0]
    assert abs(ends[-1] - window["end"]) < 1e-6
    assert result["cuda_sync_warnings_per_iteration"] is None


def test_processes_are_compared_over_the_window_they_all_ran_in():
    # One process steps every 10 ms from t=0 to 1 s; the other every 20 ms from 0.5 s to 1.5 s.
    fast = {"start": 0.0, "end": 1.0, "step_ends": [0.01 * i for i in range(1, 101)]}
    slow = {"start": 0.5, "end": 1.5, "step_ends": [0.5 + 0.02 * i for i in range(1, 51)]}
    (fast_ms, slow_ms), overlap = device.shared_ms([fast, slow])
    assert abs(fast_ms - 10.0) < 1e-6 and abs(slow_ms - 20.0) < 1e-6  # over 0.5 s to 1 s only
    assert abs(overlap - 0.5) < 1e-9
    assert abs(device.alone_ms(fast) - 10.0) < 1e-9


def test_too_few_iterations_are_refused_before_any_work(capsys):
    assert main(["bench", "step", "--iterations", "10"]) == 2
    assert "--iterations 10" in capsys.readouterr().err


def test_steps_are_timed_on_each_kind_of_data_with_ransacs_hypotheses():
    """The stand-in, Siamese-like touching clusters and raw digits (issue: real-data steps
    beside the stand-in): each reports its data, its steps and RANSAC's draws per batch."""
    from basis.data.clusters import step_data

    X, y = step_data("digits", 128, 16, 10, 0)
    assert X.shape == (1797, 64) and set(y) == set(range(10))
    near, _ = step_data("touching", 128, 16, 10, 0)
    apart, _ = step_data("clusters", 128, 16, 10, 0)
    assert near.shape == apart.shape and np.ptp(near, axis=0).mean() < np.ptp(apart, axis=0).mean()
    result = bench_step(batch_size=512, n_components=10, n_neighbors=8, n_iter=12, device="cpu", data="digits")
    assert result["settings"]["data"] == "digits"
    assert result["ransac_hypotheses"]["max"] >= result["ransac_hypotheses"]["median"] >= 1
    assert result["ms_per_iteration"]["total"] > 0


def test_unknown_step_data_is_refused(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["bench", "step", "--data", "imagenet"])
    assert stopped.value.code == 2 and "--data" in capsys.readouterr().err

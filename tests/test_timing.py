"""Job phase timings and progress lines (basis.runtime.timing): what they record, never how fast."""

import json

import pytest

from basis.cli import main
from basis.runtime import timing


@pytest.fixture
def clock(monkeypatch):
    """A fake perf_counter that moves only when told."""
    now = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])
    return now


def test_nested_phases_are_exclusive_and_summed_by_name(clock):
    with timing.recording() as seconds:
        with timing.timed("train"):
            clock[0] += 2.0
            with timing.timed("tracking"):  # a flush inside training counts as tracking
                clock[0] += 0.5
            clock[0] += 1.0
        with timing.timed("tracking"):
            clock[0] += 0.25
    assert seconds == {"train": 3.0, "tracking": 0.75}


def test_timed_outside_a_recording_records_nothing(clock):
    with timing.timed("train"):
        clock[0] += 1.0
    with timing.recording() as seconds:
        pass
    assert seconds == {}


def test_decorated_calls_are_timed(clock):
    @timing.timed_calls("tracking")
    def log(value):
        clock[0] += value
        return value

    with timing.recording() as seconds:
        assert log(0.5) == 0.5 and log(0.25) == 0.25
    assert seconds == {"tracking": 0.75}


def test_startup_is_the_process_age_once():
    with timing.recording() as seconds:
        timing.mark_startup()
        first = seconds["startup"]
        timing.mark_startup()
    assert seconds["startup"] == first and 0 < first <= timing.process_age()


def test_the_job_total_counts_startup_once_on_the_phases_clock(clock, monkeypatch):
    # /proc's process age ticks in 10 ms: read twice, it can come out below the phases it spans.
    monkeypatch.setattr(timing, "process_age", lambda: 4.567)
    clock[0] = 100.0
    with timing.recording() as seconds:
        timing.mark_startup()
        with timing.timed("train"):
            clock[0] += 2.0
        clock[0] += 0.5  # untimed work still counts in the total
        total = timing.job_seconds()
    assert seconds == {"startup": 4.567, "train": 2.0}
    assert total == pytest.approx(7.067)


def test_the_printed_phases_never_add_up_to_more_than_the_printed_total(capsys):
    # Rounded to the nearest at four decimals these would print 3 x 0.3334 > 1.0001.
    timing.report({"a": 0.33336, "b": 0.33336, "c": 0.33336}, total=1.00008)
    line = json.loads(capsys.readouterr().err.removeprefix(timing.TIMINGS_PREFIX))
    assert sum(v for k, v in line.items() if k != "total") <= line["total"]


def test_progress_prints_at_most_one_line_per_interval_and_always_the_last(clock, capsys):
    progress = timing.Progress(10, "step", interval=5.0)
    for done in range(1, 11):
        clock[0] += 1.0
        progress.update(done, f"loss {done}")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[1] for line in lines] == ["5/10", "10/10"]
    assert lines[-1].startswith("step 10/10  loss 10  1000.0 ms/step  ETA 0 s")


def test_a_json_job_logs_its_phases_on_stderr_and_only_its_result_on_stdout(tmp_path, capsys):
    code = main(
        ["run", "--dataset", "two_moons", "--method", "basis", "--set", "n_iter=3", "--set", "evaluation=authors"]
        + ["--set", "anchors_per_class=10", "--out", str(tmp_path), "--json"]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert "accuracy_authors" in json.loads(captured.out)
    [line] = [line for line in captured.err.splitlines() if line.startswith(timing.TIMINGS_PREFIX)]
    phases = json.loads(line[len(timing.TIMINGS_PREFIX) :])
    for phase in ("startup", "load", "train", "transform", "kmeans", "d_G", "d_G_code", "probe", "authors_probe"):
        assert phases[phase] >= 0, phase
    assert sum(v for k, v in phases.items() if k != "total") <= phases["total"]
    assert "step 3/3" in captured.err

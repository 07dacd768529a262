"""The device checks, each one call on a GPU box, settings as environment variables so that
a device call is one line; each ends with status 1 when any of its parts failed, 2 (and one
line) on a bad setting.

- ``gate``: every CUDA code path checked, one line per check (:mod:`benchmarks.gate`).
  ``DEVICE`` cuda (default) or cpu (the CUDA side of every device decision on CPU tensors,
  ``BASIS_EMULATE_CUDA``), ``STEPS`` (300) iterations per training run, ``N`` (6000)
  training points, ``OLD`` a folder holding an older ``basis/`` for the baseline step.
- ``paper-scale``: Table 1's protocol at the paper's size, timed end to end.
- ``shared``: four ``bench step`` processes on one GPU against one alone.
- ``scale``: the scale study's grid on this device, fit and embedding throughput per n.

    python -m benchmarks device gate                              # on the GPU; ~3 minutes on an H200
    DEVICE=cpu STEPS=8 N=900 python -m benchmarks device gate     # its CUDA side on the CPU (CI)
    OUT=results/paper_scale [PARTS="step table1 projection"] python -m benchmarks device paper-scale
    OUT=results/shared python -m benchmarks device shared
    OUT=results/scale_device [N_POINTS="10000 100000"] python -m benchmarks device scale
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from basis.estimators.parameters import PAPER_METHODS
from benchmarks.common import ROOT, no_arguments


def gate(args: argparse.Namespace) -> int:
    """The device gate: every CUDA code path checked on one GPU, one line per check.

    Each check prints PASS, FAIL or SKIP, its name and its figure; the gate exits 1 when any
    check fails, so a gate that ran is never read as passed when it did not. Settings:
    DEVICE (cuda or cpu), STEPS, N, OLD (see ``python -m benchmarks device --help``).
    """
    device = os.environ.get("DEVICE", "cuda")
    if device not in ("cuda", "cpu"):
        print(f"error: DEVICE must be cuda or cpu, got {device!r}", file=sys.stderr)
        return 2
    values = {}
    for name, default, least in (("STEPS", "300", 2), ("N", "6000", 600)):
        value = os.environ.get(name, default)
        if not value.isdigit() or int(value) < least:
            print(f"error: {name} must be an integer of at least {least}, got {value!r}", file=sys.stderr)
            return 2
        values[name] = int(value)
    old = os.environ.get("OLD", "")
    if old and not (Path(old) / "basis" / "__init__.py").is_file():
        print(f"error: OLD={old!r} holds no basis/ package", file=sys.stderr)
        return 2
    if device == "cpu":
        # read when basis.runtime.device is first imported, which no check has done yet
        assert "basis.runtime.device" not in sys.modules, "the device policy was imported before its side was chosen"
        os.environ["BASIS_EMULATE_CUDA"] = "1"
    from benchmarks.gate import Gate

    checks = Gate(device, values["STEPS"], values["N"], old)
    checks.run()
    failed = [name for name, verdict in checks.verdicts if verdict == "FAIL"]
    print(
        f"device gate: {len(checks.verdicts) - len(failed)} of {len(checks.verdicts)} checks passed or skipped", end=""
    )
    print(f"; FAILED: {', '.join(failed)}" if failed else "")
    return 1 if failed else 0


class Summary:
    """The lines a device check prints, also written to ``OUT/summary.txt``, and its failed parts."""

    def __init__(self, out: Path):
        self.out, self.failed = out, []
        out.mkdir(parents=True, exist_ok=True)
        self.file = (out / "summary.txt").open("w")

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()

    def run(self, name: str, command: list[str], to: str | None = None, **options) -> bool:
        """``command`` run with its output in ``OUT/<to>.json`` and ``.err``; a failure is noted."""
        to = to or name
        with open(self.out / f"{to}.json", "w") as stdout, open(self.out / f"{to}.err", "w") as stderr:
            try:
                code = subprocess.run(command, stdout=stdout, stderr=stderr, **options).returncode
            except OSError as err:  # the interpreter cannot be started
                stderr.write(f"{err}\n")
                code = 127
        if code != 0:
            lines = (self.out / f"{to}.err").read_text().strip().splitlines()
            self.fail(f"{name}: {lines[-1] if lines else f'exit {code}'}")
        return code == 0

    def fail(self, what: str) -> None:
        self.say(f"FAILED {what}")
        self.failed.append(what)

    def close(self) -> int:
        if self.failed:
            line = f"{len(self.failed)} part(s) FAILED: the figures above are not measurements"
            self.file.write(line + "\n")
            print(line, file=sys.stderr)
        self.file.close()
        return 1 if self.failed else 0


def _python() -> list[str]:
    """The interpreter the parts' commands run (``PYTHON``, default this one), absolute: the
    older code's step runs from its own folder."""
    found = shutil.which(os.environ.get("PYTHON", sys.executable))
    return [str(Path(found).absolute())] if found else [os.environ["PYTHON"]]


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None


#: paper-scale's parts.
SCALE_PARTS = ("step", "table1", "projection")


def paper_scale(args: argparse.Namespace) -> int:
    """Table 1's protocol at the paper's size on this device, timed end to end; OUT/summary.txt.

    (1) ``step``: ``bench step`` (with CUDA graphs on a GPU) on the clustered stand-in three
    times (floor: 5 ms in each), Siamese-like touching clusters and raw digits (floor: within
    2x of the stand-in); given OLD (a folder holding an older basis/), that code's stand-in
    step first, the baseline. (2) ``table1``: Table 1's runs of one data set on an MNIST-sized
    stand-in for its Siamese features (N_TRAIN + N_TEST 16-d touching clusters): the test
    split's reference once, then each method's SEEDS in one process (on CUDA trained together),
    timed; the paper's 160 runs are 4 such sets; then BASiS's seeds together against in turn
    and one seed alone, and each seed's scores compared. (3) ``projection``: with
    PROJECTION=<config>, that config's wall time projected from a sample of its jobs here
    (TIMINGS: a folder where `make quick` finished, for the tables' jobs). Settings: OUT,
    DEVICE (cuda), OLD, N_ITER (1000), SEEDS ("0 ... 9"), N_TRAIN (60000), N_TEST (10000),
    METHODS (all four), TOGETHER (auto), STEP_ITERATIONS (100), PARTS (all three).
    """
    parts = os.environ.get("PARTS", " ".join(SCALE_PARTS)).split()
    if not parts:
        print("PARTS is empty: name at least one of step, table1, projection", file=sys.stderr)
        return 2
    unknown = [part for part in parts if part not in SCALE_PARTS]
    if unknown:
        print(f"PARTS: unknown part '{unknown[0]}' (step, table1, projection)", file=sys.stderr)
        return 2
    summary = Summary(Path(os.environ.get("OUT", "results/paper_scale")).absolute())
    device = os.environ.get("DEVICE", "cuda")
    if device != "cpu":
        summary.say(_smi("name,memory.total"))
    if "step" in parts:
        _scale_steps(summary, device)
    if "table1" in parts:
        _scale_table1(summary, device)
    if "projection" in parts and os.environ.get("PROJECTION"):
        _scale_projection(summary)
    return summary.close()


def _smi(fields: str) -> str:
    command = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"]
    try:
        return subprocess.run(command, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "nvidia-smi: not found"


def _bench_step(device: str, *options: str) -> list[str]:
    """The command of one ``python -m basis bench step --json`` on ``device`` with ``options``."""
    return [*_python(), "-m", "basis", "bench", "step", "--device", device, "--json", *options]


def _scale_steps(summary: Summary, device: str) -> None:
    graphs = ["--cuda-graphs"] if device != "cpu" else []
    iterations = os.environ.get("STEP_ITERATIONS", "100")
    runs = [("clusters_1", "clusters"), ("clusters_2", "clusters"), ("clusters_3", "clusters")]
    runs += [("touching", "touching"), ("digits", "digits")]
    if os.environ.get("OLD"):  # the baseline first
        runs.insert(0, ("old_clusters", "clusters"))
    for name, data in runs:
        folder = os.environ["OLD"] if name.startswith("old") else ROOT
        command = _bench_step(device, "--iterations", iterations, "--data", data, *graphs)
        summary.run(f"step {name}", command, f"step_{name}", cwd=folder, env={**os.environ, "PYTHONPATH": "."})
    steps = {name: r for name, _ in runs if (r := _json(summary.out / f"step_{name}.json"))}
    for name, r in steps.items():
        hypotheses = r["ransac_hypotheses"]
        summary.say(
            f"bench step {name:>12}: {r['ms_per_iteration']['total']:7.2f} ms/step,"
            f" RANSAC hypotheses median {hypotheses['median']:.0f} (max {hypotheses['max']:.0f})"
        )
    stand_in = [r["ms_per_iteration"]["total"] for name, r in steps.items() if name.startswith("clusters_")]
    if stand_in:
        summary.say(f"stand-in: worst of {len(stand_in)} {max(stand_in):.2f} ms (floor 5, goal 2)")
        for name in ("touching", "digits"):
            if name in steps:
                ratio = steps[name]["ms_per_iteration"]["total"] / statistics.median(stand_in)
                summary.say(f"{name}: {ratio:.2f}x the stand-in's median (floor 2x)")


def write_standin_features(path: Path, n_train: int, n_test: int, dataset: str = "mnist", seed: int = 0) -> None:
    """An MNIST-sized stand-in for a Siamese features file: 16-d touching clusters (spread
    1.5: one connected graph with ten small eigenvalues, as trained features give), ten
    classes, labelled as ``dataset`` with data seed 0."""
    import numpy as np

    from basis.data.clusters import clustered_data

    X, y = clustered_data(n_train + n_test, 16, 10, seed, spread=1.5)
    np.savez(path, X_train=X[:n_train], y_train=y[:n_train], X_test=X[n_train:], y_test=y[n_train:],
             dataset=np.array(dataset), data_seed=np.array(0))  # fmt: skip


def _scale_table1(summary: Summary, device: str) -> None:
    out, seeds = summary.out, os.environ.get("SEEDS", "0 1 2 3 4 5 6 7 8 9").split()
    methods = os.environ.get("METHODS", " ".join(PAPER_METHODS)).split()
    together, n_iter = os.environ.get("TOGETHER", "auto"), os.environ.get("N_ITER", "1000")
    try:
        write_standin_features(
            out / "mnist.npz", int(os.environ.get("N_TRAIN", 60000)), int(os.environ.get("N_TEST", 10000))
        )
    except Exception as err:  # noqa: BLE001 (a part that fails is reported, the others still run)
        summary.fail(f"stand-in features: {err}")
    data = ["--dataset", "mnist", "--features", str(out / "mnist.npz"), "--device", device, "--json"]
    start = time.perf_counter()
    summary.run("reference", [*_python(), "-m", "basis", "reference", *data, "--out", str(out / "reference.npz")])
    total = time.perf_counter() - start
    summary.say(f"reference of the test split: {total:.0f} s")

    def run(name: str, method: str, seeds_together: str, chosen: list[str]) -> float:
        command = [
            *_python(),
            "-m",
            "basis",
            "run",
            "--method",
            method,
            *data,
            "--reference",
            str(out / "reference.npz"),
        ]
        command += ["--set", f"n_iter={n_iter}", "--seeds", *chosen, "--seeds-together", seeds_together]
        begun = time.perf_counter()
        summary.run(name, [*command, "--out", str(out / "runs" / name / "seed{seed}")])
        return time.perf_counter() - begun

    for method in methods:
        took = run(method, method, together, seeds)
        total += took
        summary.say(f"{method}: {len(seeds)} seeds x {n_iter} iterations in one process: {took:.0f} s")
    summary.say(f"one data set's Table 1 runs ({len(seeds)} seeds x {len(methods)} methods): {total:.0f} s;")
    summary.say(f"the paper's 4 data sets: {4 * total:.0f} s measured as 4 x one set (floor 900 s, goal 300 s)")
    if "basis" in methods:  # goal: the seeds together in at most 2x one seed's time, scores within 1e-6
        summary.say(f"basis: 1 seed: {run('basis_one', 'basis', 'off', seeds[:1]):.0f} s")
        in_turn = run("basis_in_turn", "basis", "off", seeds)
        summary.say(f"basis: {len(seeds)} seeds in turn: {in_turn:.0f} s (together: the basis line above)")
        try:
            worst = _largest_differences(out / "runs/basis", out / "runs/basis_in_turn", seeds)
        except (OSError, ValueError, KeyError) as err:  # a run above failed: its scores are missing
            summary.fail(f"seeds compared: {type(err).__name__}: {err}")
        else:
            summary.say("seeds together against in turn, largest relative difference per score:")
            summary.say("  " + ", ".join(f"{key} {value:.1e}" for key, value in sorted(worst.items())))


def _largest_differences(together: Path, in_turn: Path, seeds: list[str]) -> dict[str, float]:
    """Per score, the largest relative difference between a seed trained together and in turn."""
    worst: dict[str, float] = {}
    for seed in seeds:
        joint = json.loads((together / f"seed{seed}/metrics.json").read_text())
        alone = json.loads((in_turn / f"seed{seed}/metrics.json").read_text())
        for key, value in alone.items():
            worst[key] = max(worst.get(key, 0.0), abs(joint[key] - value) / max(abs(value), 1e-12))
    return worst


def _scale_projection(summary: Summary) -> None:
    command = [*_python(), "-m", "basis.cli.projection", "--configfile", os.environ["PROJECTION"], "--standins"]
    command += [
        "--sample",
        str(summary.out / "sample"),
        "--cores",
        str(len(os.sched_getaffinity(0))),
        "--gpus",
        "0",
        "1",
    ]
    if os.environ.get("TIMINGS"):
        command += ["--timings", os.environ["TIMINGS"]]
    if summary.run("projection", command, cwd=ROOT):
        text = (summary.out / "projection.json").read_text().splitlines()
        for line in text:
            if line.startswith(("projected wall time", "the sample", "not measured")):
                summary.say(line)


def alone_ms(window: dict) -> float:
    """A process's ms per step over its own timed window."""
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


def compare_windows(out: Path, group: str) -> str:
    """One line: ``group``'s processes at once against its one alone, over the common window."""
    solo = _json(out / f"{group}_solo.json")
    shared = [_json(path) for path in sorted(out.glob(f"{group}_shared_*.json"))]
    if solo is None or "window" not in solo or not shared or any(s is None or "window" not in s for s in shared):
        return f"{group}: incomplete (see {group}_*.err)"
    alone = alone_ms(solo["window"])
    together, overlap = shared_ms([s["window"] for s in shared])
    ratios = ", ".join(f"{ms:.2f} ms ({ms / alone:.2f}x)" for ms in together)
    return (
        f"{group}: alone {alone:.2f} ms/step; {len(shared)} at once: {ratios}; "
        f"worst {max(together) / alone:.2f}x; common window {overlap:.0%} of the longest run"
    )


def _steps_at_once(out: Path, device: str, mode: str, name: str, count: int, wait: float) -> None:
    """``count`` ``bench step`` processes that start timing ``wait`` s from now (1,500 steps
    with CUDA graphs, 500 eager: about 6 s alone on an H200), into ``OUT/<name><i>.json``."""
    flags = ["--cuda-graphs"] if mode == "graphs" and device != "cpu" else []
    steps = "1500" if mode == "graphs" else "500"
    command = _bench_step(device, "--iterations", steps, "--start-at", str(time.time() + wait), *flags)
    processes = []
    for i in range(1, count + 1):
        with open(out / f"{name}{i}.json", "w") as stdout, open(out / f"{name}{i}.err", "w") as stderr:
            processes.append(subprocess.Popen(command, stdout=stdout, stderr=stderr, cwd=ROOT))
    for process in processes:
        process.wait()


def _capture_check() -> str:
    """tests/test_capture.py's GPU test, run without pytest (the device machines have none)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import test_capture

    test_capture.test_on_a_gpu_the_replayed_step_equals_the_eager_one()
    return "capture test passed: the replayed step equals the eager one"


def shared(args: argparse.Namespace) -> int:
    """Four ``bench step`` processes on one GPU, each within 1.5x of one alone (the floor).

    The processes start timing together (``--start-at``) and are compared over the window
    they all ran in, by plain time slicing and under NVIDIA MPS (a private control daemon,
    started and stopped here; the GPU's settings are left as they are). First the capture
    test and the device's busy time per step. Settings: OUT, DEVICE (cuda; cpu: the same on
    the CPU, no MPS), SHARING ("plain mps"), MODES ("graphs eager"), PROCESSES (4).
    """
    out = Path(os.environ.get("OUT", "results/shared")).absolute()
    summary, device = Summary(out), os.environ.get("DEVICE", "cuda")
    processes = int(os.environ.get("PROCESSES", "4"))
    if device != "cpu":
        summary.say(_smi("name,memory.total,driver_version,compute_mode"))
        try:
            summary.say(_capture_check())
        except Exception as err:  # noqa: BLE001
            summary.fail(f"capture test: {type(err).__name__}: {err}")
        profile = _bench_step(device, "--cuda-graphs", "--profile")
        if summary.run("profile", profile, cwd=ROOT) and (result := _json(out / "profile.json")):
            summary.say(f"alone, cuda graphs: {result['ms_per_iteration']}; device busy ms per step:"
                        f" {result.get('device_busy_ms_per_iteration')}")  # fmt: skip
            for kernel in result.get("top_kernels", [])[:8]:
                summary.say(f"  kernel {json.dumps(kernel)}")
    for sharing in os.environ.get("SHARING", "plain mps").split():
        if sharing == "mps" and (device == "cpu" or not shutil.which("nvidia-cuda-mps-control")):
            summary.say("mps: not available here")
            continue
        with _sharing(sharing) as started:
            if not started:
                summary.say("mps: the control daemon did not start")
                continue
            for mode in os.environ.get("MODES", "graphs eager").split():
                group = f"{sharing}_{mode}"
                _steps_at_once(out, device, mode, f"{group}_solo", 1, 15)
                (out / f"{group}_solo1.json").replace(out / f"{group}_solo.json")
                _steps_at_once(out, device, mode, f"{group}_shared_", processes, 30)
                summary.say(compare_windows(out, group))
    return summary.close()


class _sharing:
    """Plain time slicing, or a private NVIDIA MPS control daemon for the block's processes."""

    def __init__(self, sharing: str):
        self.mps, self.saved = sharing == "mps", {}

    def __enter__(self) -> bool:
        if not self.mps:
            return True
        for name in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
            self.saved[name] = os.environ.get(name)
            os.environ[name] = tempfile.mkdtemp()
        return subprocess.run(["nvidia-cuda-mps-control", "-d"]).returncode == 0

    def __exit__(self, *exc) -> None:
        if self.mps:
            subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True)
            for name, value in self.saved.items():
                if value is None:
                    del os.environ[name]
                else:
                    os.environ[name] = value


def scale(args: argparse.Namespace) -> int:
    """The scale study (``python -m basis study scale``) on this device, its grid of n from
    N_POINTS (the paper config's: 10k-1M), METHODS (the four networks and the exact
    embedding), N_ITER (1000) and TIME_LIMIT (600 s a point); then per method and n the fit's
    and the held-out embedding's points per second, the device's peak memory and d_G, in
    OUT/summary.txt (OUT default results/scale_device, DEVICE default cuda)."""
    import numpy as np

    summary = Summary(Path(os.environ.get("OUT", "results/scale_device")).absolute())
    device = os.environ.get("DEVICE", "cuda")
    settings = {
        "n_points": os.environ.get("N_POINTS", "10000 30000 100000 300000 1000000").split(),
        "methods": os.environ.get("METHODS", " ".join([*PAPER_METHODS, "exact"])).split(),
    }
    if device != "cpu":
        summary.say(_smi("name,memory.total"))
    command = [*_python(), "-m", "basis", "study", "scale", "--out", str(summary.out / "study"), "--device", device]
    command += [f"--set={key}=[{', '.join(values)}]" for key, values in settings.items()]
    command += [f"--set=n_iter={os.environ.get('N_ITER', '1000')}"]
    command += [f"--set=time_limit_s={os.environ.get('TIME_LIMIT', '600')}"]
    if summary.run("scale study", command, "study_log"):
        arrays = np.load(summary.out / "study" / "arrays.npz")
        for method in (str(m) for m in arrays["curves"]):
            for i, n in enumerate(arrays["n_points"]):
                fit_s, transform_s, peak_mb, d_g, held_out = (
                    arrays[f"{method}/{measure}"][i]
                    for measure in ("fit_s", "transform_s", "device_peak_mb", "d_G", "points_per_s")
                )
                summary.say(
                    f"{method:>13} n = {int(n):>9,}: fit {fit_s:8.2f} s ({n / fit_s:9.0f} points/s),"
                    f" held-out {held_out:10.0f} points/s ({transform_s:.3f} s),"
                    f" device peak {peak_mb:8.1f} MB, d_G {d_g:.3f}"
                )
    return summary.close()


PARTS = {
    "gate": (no_arguments, gate),
    "paper-scale": (no_arguments, paper_scale),
    "shared": (no_arguments, shared),
    "scale": (no_arguments, scale),
}

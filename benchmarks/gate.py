"""The device gate's checks (``python -m benchmarks device gate``): every CUDA code path on one
GPU, one line per check with ``PASS``, ``FAIL`` or ``SKIP`` and its figure.

Every method solo and with its seeds trained together at Table 1's protocol, compared
against the yardstick of one unit in the last place in the initial weights; every study of
the tiny test config; the whole-set reference on the device against the host's ARPACK; the
batch eigenproblem in float32 on the device against float64; BASiS with CUDA graphs
against without; ``bench step`` with its host reads per iteration; a job bound to the
second GPU where two are visible; and, given an older copy of ``basis/``, its step as the
baseline. Nothing here imports ``basis`` at its top: the gate chooses the device's side first.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from basis.estimators.parameters import PAPER_METHODS

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (0, 1)


class Gate:
    """The checks on ``device`` (cuda, or cpu: the CUDA side emulated), ``steps`` iterations per
    training run on ``n`` points, ``old`` a folder holding an older basis/ (or "")."""

    def __init__(self, device: str, steps: int, n: int, old: str):
        self.device, self.steps, self.n, self.old = device, steps, n, old
        self.verdicts: list[tuple[str, str]] = []

    def report(self, name: str, verdict: str, figure: str) -> None:
        self.verdicts.append((name, verdict))
        print(f"{verdict} {name}: {figure}", flush=True)

    def check(self, name: str, function) -> None:
        start = time.perf_counter()
        try:
            verdict, figure = function()
        except Exception as err:  # a check that crashes is a failed check, with its cause
            where = traceback.extract_tb(err.__traceback__)[-1]
            verdict, figure = "FAIL", f"{type(err).__name__}: {str(err).splitlines()[0][:200]} ({where.name})"
        self.report(name, verdict, f"{figure} [{time.perf_counter() - start:.1f} s]")

    def run(self) -> None:
        import torch

        from basis.runtime import device as devices

        if self.device == "cuda" and not torch.cuda.is_available():
            self.report("device", "FAIL", "no CUDA device visible to torch")
            return
        target = devices.resolve_device(self.device)
        mode = "CUDA side emulated on CPU tensors" if devices.emulated() else devices.device_name(target)
        self.report("device", "PASS", f"{mode}, torch {torch.__version__}")
        for method in PAPER_METHODS:
            self.check(f"together_{method}", lambda method=method: self.together(method))
        self.check("float32_solve", self.float32_solve)
        self.check("cuda_graphs", self.cuda_graphs)
        self.check("reference", self.reference)
        self.check("studies", self.studies)
        self.check("step", self.step)
        self.check("two_gpus", self.two_gpus)
        self.check("baseline_step", self.baseline)

    # -- the checks --------------------------------------------------------------------
    def data(self):
        """Ten clustered classes in 16 dimensions, the shape of Siamese features."""
        from basis.data.clusters import clustered_data

        return clustered_data(self.n, 16, 10, seed=0)

    def estimator(self, method: str, seed: int, **extra):
        from basis.estimators import METHODS

        protocol = dict(n_components=10, batch_size=512, n_iter=self.steps, lr=1e-3, device=self.device, seed=seed)
        protocol["graph"] = {"n_neighbors": 50, "scale": "local", "scale_neighbor": 7}
        if method == "basis":
            protocol["anchors_per_class"] = 25
        if method == "diffusion_net":
            protocol.update(operator="normalized", drop_trivial=False)
        if method == "specnet2":
            protocol["operator"] = "normalized"
        return METHODS[method](**{**protocol, **extra})

    def together(self, method: str):
        import numpy as np

        from basis.estimators.together import fit_together, nudged_fit

        X, y = self.data()
        solo = [self.estimator(method, seed).fit(X, y) for seed in SEEDS]
        joint = fit_together([self.estimator(method, seed) for seed in SEEDS], [(X, y)] * len(SEEDS))
        nudged = nudged_fit(self.estimator(method, SEEDS[0]), X, y)

        def difference(a, b) -> float:
            expected = a.transform(X)
            return float(np.abs(b.transform(X) - expected).max() / np.abs(expected).max())

        yardstick = difference(solo[0], nudged)
        worst = max(difference(a, b) for a, b in zip(solo, joint))
        verdict = (
            "PASS" if worst <= max(1e-4, 4 * yardstick) and all(map(math.isfinite, joint[0].loss_curve_)) else "FAIL"
        )
        return verdict, f"together vs solo {worst:.2e} of the embedding's scale (one ulp moves it {yardstick:.2e})"

    def float32_solve(self):
        """BASiS's batch solve in the device's float32 (the subspace iteration) against
        float64's exact subspace, on 512-node batches of the gate's data."""
        import numpy as np
        import torch

        from basis.graph.affinity import dense_affinity
        from basis.graph.config import GraphConfig
        from basis.runtime import device as devices
        from basis.spectral import SubspaceEigensolver, embed_graph
        from basis.spectral.dense import normalized_laplacian

        X, _ = self.data()
        target, graph = devices.resolve_device(self.device), GraphConfig(n_neighbors=50, scale_neighbor=7)
        solver, rng, angles, converged = SubspaceEigensolver(10), np.random.default_rng(0), [], 0
        for _ in range(9):  # the first solve is exact and sets the filter's cut
            W = dense_affinity(torch.as_tensor(X[rng.choice(len(X), 512, replace=False)], device=target), graph)
            phi, _, ok = embed_graph(W, 10, solver=solver)
            exact = torch.linalg.eigh(normalized_laplacian(W).double()).eigenvectors[:, :10]
            cosines = torch.linalg.svdvals(torch.linalg.qr(phi.double()).Q.T @ exact)
            angles.append(float(torch.arccos(cosines.clamp(max=1.0)).max()))
            converged += bool(ok)
        ok = phi.dtype == torch.float32 and max(angles) <= 1e-4 and converged >= 7
        return "PASS" if ok else "FAIL", (
            f"{phi.dtype}; largest angle to float64's subspace {max(angles):.1e} rad; {converged} of 9 converged"
        )

    def cuda_graphs(self):
        import numpy as np

        X, y = self.data()
        replayed = self.estimator("basis", 0, cuda_graphs=True, eigensolver="subspace").fit(X, y)
        eager = self.estimator("basis", 0, eigensolver="subspace").fit(X, y)
        segments = replayed.captured_segments()
        failures = {name: s.failure for name, s in segments.items() if s.failure}
        replays = min((s.replays for s in segments.values()), default=0)
        loss = float(np.max(np.abs(np.subtract(replayed.loss_curve_, eager.loss_curve_)) / np.abs(eager.loss_curve_)))
        embedding = float(np.abs(replayed.transform(X) - eager.transform(X)).max() / np.abs(eager.transform(X)).max())
        ok = not failures and replays >= self.steps - 3 and loss <= 1e-5 and embedding <= 1e-4
        detail = f", not captured: {failures}" if failures else ""
        return "PASS" if ok else "FAIL", (
            f"{len(segments)} parts, {replays} replays each at least; loss {loss:.1e}, embedding {embedding:.1e}"
            f" from the eager run{detail}"
        )

    def reference(self):
        from basis.metrics import grassmann_distance
        from basis.references import analytic_embedding

        X, _ = self.data()
        settings = {
            "graph": {"n_neighbors": 50, "scale": "local", "scale_neighbor": 7},
            "operator": "normalized",
            "drop_trivial": False,
        }
        report: dict = {}
        on_device = analytic_embedding(X, settings, 10, device=self.device, report=report)
        on_host = analytic_embedding(X, settings, 10, device="cpu", eigensolver="arpack")
        distance = grassmann_distance(on_device, on_host)
        verdict = "PASS" if distance <= 1e-3 else "FAIL"
        return verdict, f"{report['eigensolver']} on the device vs ARPACK on the host: d_G {distance:.1e}"

    def studies(self):
        import numpy as np
        import yaml

        from basis.plan.registry import study_names, study_parameters, study_runs
        from basis.studies import study_function

        config = yaml.safe_load((ROOT / "tests/configs/tiny.yaml").read_text())
        X, y = self.data()
        ran, bad = [], []
        with tempfile.TemporaryDirectory() as features:
            cut = len(X) * 4 // 5
            np.savez(f"{features}/digits.npz", X_train=X[:cut], y_train=y[:cut], X_test=X[cut:], y_test=y[cut:],
                     dataset="digits", data_seed=0)  # fmt: skip
            for name in study_names():
                for run, settings in study_runs(name, config["experiments"][name]).items():
                    settings = {**settings, **({"features_dir": features} if "features_dir" in settings else {})}
                    if "device" in study_parameters(name, include_common=True):
                        settings["device"] = self.device
                    metrics, _ = study_function(name)(**settings)
                    ran.append(f"{name}/{run}" if run else name)
                    bad += [f"{name}/{key}" for key, value in metrics.items() if math.isinf(value)]
        return "FAIL" if bad else "PASS", f"{len(ran)} runs of {len(study_names())} studies" + (
            f"; infinite: {bad}" if bad else ""
        )

    def step(self):
        from basis.cli.bench import bench_step

        result = bench_step(n_iter=min(self.steps, 110), warmup=min(10, self.steps // 2), device=self.device)
        reads = result["host_syncs_per_iteration"]["total"]
        ms = result["ms_per_iteration"]["total"]
        return "PASS" if reads <= 1.1 else "FAIL", f"{ms:.2f} ms per iteration, {reads:.3f} host reads per iteration"

    def two_gpus(self):
        import torch

        if self.device != "cuda" or torch.cuda.device_count() < 2:
            return "SKIP", f"{torch.cuda.device_count()} GPU(s) visible"
        probe = (
            "import json, torch; from basis.estimators import BASiS; from basis.data.clusters import clustered_data;"
            " X, y = clustered_data(3000, 16, 10, seed=0);"
            " BASiS(device='cuda:1', n_iter=20, batch_size=256, anchors_per_class=10).fit(X, y);"
            " print(json.dumps([torch.cuda.max_memory_allocated(0), torch.cuda.max_memory_allocated(1)]))"
        )
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
        first, second = json.loads(done.stdout.strip().splitlines()[-1])
        verdict = "PASS" if first == 0 and second > 0 else "FAIL"
        return verdict, f"a job on cuda:1 allocated {first} bytes on cuda:0, {second / 2**20:.1f} MiB on cuda:1"

    def baseline(self):
        if not self.old:
            return "SKIP", "no OLD folder given"
        command = [sys.executable, "-m", "basis", "bench", "step", "--device", self.device, "--json"]
        environment = {k: v for k, v in os.environ.items() if k != "BASIS_EMULATE_CUDA"}
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.old, env=environment, check=True)
        ms = json.loads(done.stdout.strip().splitlines()[-1])["ms_per_iteration"]["total"]
        return "PASS", f"the older code's step {ms:.2f} ms per iteration (on the device's own side)"

"""A new method is one package of its own: its declaration (torch-free, named in the
``basis.methods`` entry-point group) and its estimator. Installed, it is a method like the
package's: the catalog lists it with its label, a config naming it passes the schema and
the parse checks (its parameters' types and ranges included), a dry run plans its runs,
and it trains on the CUDA side of the device policy."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import yaml
from conftest import ROOT, copy_workflow, run_snakemake, snakemake_env

DECLARATION = """
from typing import Any, ClassVar

from basis.estimators.parameters import Interval, SpectralParameters, declare


@declare("mean_target", label="Mean target", estimator="toy_method.estimator:MeanTarget")
class MeanTargetParameters(SpectralParameters):
    _parameter_constraints: ClassVar = {"shrink": Interval(0, 1)}

    def __init__(self, n_components: int = 10, *, shrink: float = 0.5, **common: Any):
        super().__init__(n_components, **common)
        self.shrink = shrink
"""

ESTIMATOR = '''
from basis.estimators.base import SpectralEstimator
from toy_method.declaration import MeanTargetParameters


class MeanTarget(MeanTargetParameters, SpectralEstimator):
    """Learns the first coordinates of its input, shrunk: the smallest method there is."""

    def _next_batch(self, features_of, n_train, timer):
        return features_of(self._sample(n_train, self.batch_size))

    def _batch_loss(self, X_batch, timer):
        target = self.shrink * X_batch[:, : self.n_components].double()
        return ((self.model_(X_batch) - target) ** 2).mean(), {}
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The package ``toy_method`` with its entry point, on an import path of its own."""
    site = tmp_path_factory.mktemp("site")
    (site / "toy_method").mkdir()
    (site / "toy_method" / "__init__.py").write_text("")
    (site / "toy_method" / "declaration.py").write_text(DECLARATION)
    (site / "toy_method" / "estimator.py").write_text(ESTIMATOR)
    info = site / "toy_method-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-method\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[basis.methods]\nmean_target = toy_method.declaration\n")
    return site


def _python(code: str, site) -> str:
    env = snakemake_env(ROOT)
    env["PYTHONPATH"] = f"{site}:{ROOT}"
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_catalog_knows_it_with_its_label_parameters_and_ranges_without_torch(installed):
    out = _python(
        """
        import sys
        from basis.catalog import METHOD_LABELS, method_defaults, method_names
        from basis.catalog.settings import resolve_settings
        from basis.errors import InputError
        print(METHOD_LABELS["mean_target"], method_defaults("mean_target")["shrink"], "mean_target" in method_names())
        print(resolve_settings("mean_target", assignments=["shrink=0.25"])["shrink"])
        try:
            resolve_settings("mean_target", assignments=["shrink=2"])
        except InputError as err:
            print(err)
        print("torch" in sys.modules)
        """,
        installed,
    )
    assert out.splitlines() == [
        "Mean target 0.5 True",
        "0.25",
        "shrink=2 is out of range: expected in [0, 1)",
        "False",
    ]


def test_a_config_naming_it_passes_the_checks_and_a_dry_run_plans_its_runs(installed, tmp_path):
    workdir = copy_workflow(tmp_path, ("Snakefile", "workflow", "config"))
    config = yaml.safe_load((ROOT / "tests" / "configs" / "tiny.yaml").read_text())
    config["methods"] = {"basis": config["methods"]["basis"], "mean_target": {"shrink": 0.25}}
    config["experiments"]["knn"]["methods"] = ["mean_target"]
    (workdir / "own.yaml").write_text(yaml.safe_dump(config))
    env = snakemake_env(ROOT)
    env["PYTHONPATH"] = f"{installed}:{ROOT}"
    done = run_snakemake(workdir, "-n", "--quiet", "rules", "--configfile", "own.yaml", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = dict(
        line.split() for line in done.stdout.splitlines() if len(line.split()) == 2 and line.split()[1].isdigit()
    )
    assert counts["train_and_evaluate"] == "4" and counts["knn_run"] == "2"  # 2 methods x 2 seeds; its kNN sweep
    config["methods"]["mean_target"] = {"shrink": 1.5}
    (workdir / "own.yaml").write_text(yaml.safe_dump(config))
    done = run_snakemake(workdir, "-n", "--configfile", "own.yaml", env=env)
    assert done.returncode != 0 and "shrink=1.5 is out of range: expected in [0, 1)" in done.stderr
    assert "Traceback" not in done.stderr


def test_it_trains_on_the_cuda_side_and_its_checkpoint_loads(installed, tmp_path):
    out = _python(
        f"""
        import numpy as np
        from basis.estimators import SpectralEstimator, make_estimator
        from basis.runtime.device import emulating_cuda

        X = np.random.default_rng(0).normal(size=(200, 6)).astype(np.float32)
        with emulating_cuda():
            model = make_estimator(
                "mean_target", n_components=2, batch_size=32, n_iter=5, hidden=(8,), device="cpu",
                graph={{"n_neighbors": 5, "scale_neighbor": 3}}, shrink=0.25,
            ).fit(X)
        model.save("{tmp_path}/model.pt")
        loaded = SpectralEstimator.load("{tmp_path}/model.pt", device="cpu")
        print(type(loaded).__name__, loaded.shrink, len(model.loss_curve_))
        print(np.abs(loaded.transform(X) - model.transform(X)).max())
        """,
        installed,
    )
    first, second = out.splitlines()
    assert first == "MeanTarget 0.25 5"
    assert float(second) == pytest.approx(0.0, abs=1e-6)
    assert np.isfinite(float(second))

"""The logged MLflow model is the model: its prediction equals the estimator's transform."""

import json
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pytest
from conftest import HANG_GUARD_S

from basis import tracking
from basis.data.toy_sets import two_moons
from basis.estimators import make_estimator

ROOT = Path(__file__).resolve().parents[1]
SMALL = {
    "batch_size": 100,
    "n_iter": 3,
    "hidden": (16, 16),
    "graph": {"n_neighbors": 10, "scale_neighbor": 5},
    "device": "cpu",
}
OPTIONS = {
    "basis": {"anchors_per_class": 10, "ransac_sample_size": 5},
    "diffusion_net": {},
    "specnet1": {},
    "specnet2": {},
}


def _logged(tmp_path, method):
    """A small fitted estimator, its checkpoint, and its model logged to a fresh store."""
    X, y = two_moons(400, seed=0)
    X = X.astype(np.float32)
    estimator = make_estimator(method, n_components=2, **SMALL, **OPTIONS[method]).fit(X, y)
    checkpoint = tmp_path / "model.pt"
    estimator.save(checkpoint)
    store = tmp_path / "mlflow"
    with tracking.tracked_run("exp", method, {"method": method}, store=store) as run:
        run.log_embedding_model(checkpoint, X[:5], description="raw two_moons points (2 features)")
        run_id = run.run_id
    return X, estimator, checkpoint, store, run_id


@pytest.mark.parametrize("method", sorted(OPTIONS))
def test_pyfunc_prediction_equals_transform(tmp_path, monkeypatch, method):
    X, estimator, _, store, run_id = _logged(tmp_path, method)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.tracking_uri(store))
    model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    np.testing.assert_array_equal(model.predict(X), estimator.transform(X))
    assert model.metadata.signature.inputs.to_dict()[0]["tensor-spec"]["shape"] == (-1, 2)
    assert model.metadata.metadata["description"].startswith("raw two_moons points")


def test_the_embed_command_reads_a_checkpoint_and_a_logged_model(tmp_path):
    X, estimator, checkpoint, store, run_id = _logged(tmp_path, "basis")
    # the embed command gives the same embedding from the checkpoint and from the logged model
    np.save(tmp_path / "X.npy", X)
    for source in (str(checkpoint), f"runs:/{run_id}/model"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "basis",
                "embed",
                "--model",
                source,
                "--input",
                str(tmp_path / "X.npy"),
                "--out",
                str(tmp_path / "Y.npy"),
                "--json",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=HANG_GUARD_S,
            env={"MLFLOW_TRACKING_URI": tracking.tracking_uri(store), "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["n_components"] == 2
        np.testing.assert_array_equal(np.load(tmp_path / "Y.npy"), estimator.transform(X))


def test_logging_a_model_leaves_the_tracking_uri_of_the_process_alone(tmp_path):
    import os

    _logged(tmp_path / "a", "basis")
    assert "MLFLOW_TRACKING_URI" not in os.environ


def test_logging_a_model_reads_its_pins_without_mapping_every_installed_distribution(tmp_path, monkeypatch):
    """MLflow maps every installed distribution to its modules to check a model's pins (1.2 s
    on each model log here, in every tracked job). The pins are read from the distributions'
    metadata instead: the map is never built, and the model's environment files are those
    written with it."""
    from contextlib import nullcontext

    from mlflow.utils import requirements_utils

    from basis.tracking import serving

    built = []
    mapping = requirements_utils.importlib_metadata.packages_distributions
    monkeypatch.setattr(
        requirements_utils, "_MODULES_TO_PACKAGES", None
    )  # the global the shortcut uses (pinned MLflow)
    monkeypatch.setattr(
        requirements_utils.importlib_metadata, "packages_distributions", lambda: built.append(1) or mapping()
    )
    environments = []
    for name, shortcut in (("fast", serving._pins_checked_by_version), ("mapped", nullcontext)):
        monkeypatch.setattr(serving, "_pins_checked_by_version", shortcut)
        _, _, _, store, run_id = _logged(tmp_path / name, "basis")
        with tracking.scoped_tracking_uri(tracking.tracking_uri(store)):
            model = mlflow.models.get_model_info(f"runs:/{run_id}/model").model_uri
            files = Path(mlflow.artifacts.download_artifacts(artifact_uri=model, dst_path=str(tmp_path / name)))
        environments.append({f: (files / f).read_text() for f in ("requirements.txt", "python_env.yaml", "conda.yaml")})
        assert len(built) == (0 if name == "fast" else 1), name
        assert requirements_utils._MODULES_TO_PACKAGES is None or name == "mapped"
    assert environments[0] == environments[1]


def _fitted_checkpoint(tmp_path):
    X, y = two_moons(200, seed=0)
    X = X.astype(np.float32)
    checkpoint = tmp_path / "model.pt"
    make_estimator("diffusion_net", n_components=2, **SMALL).fit(X, y).save(checkpoint)
    return X, checkpoint


def test_logging_a_model_leaves_its_run_running_for_the_job_to_close(tmp_path):
    """The run's status is the job's: logging the model (the last step of training) must
    not close it, or a job killed after it would leave a FINISHED run that no close-stale
    can see."""
    X, checkpoint = _fitted_checkpoint(tmp_path)
    with tracking.tracked_run("exp", "run", {"method": "diffusion_net"}, store=tmp_path / "mlflow") as run:
        run.log_embedding_model(checkpoint, X[:5], description="raw points")
        info = run.client.get_run(run.run_id).info
        assert (info.status, info.end_time) == ("RUNNING", None)
    assert run.client.get_run(run.run_id).info.status == "FINISHED"


def test_a_stop_while_the_model_is_logged_closes_the_run_as_killed(tmp_path, monkeypatch):
    """A cancel that lands while the model is logged: the stop's watcher closes the run as
    KILLED while the main thread is still in MLflow's call (basis.runtime.stopping), and the
    main thread's unwinding must not turn it into FAILED (the SLURM cancel test saw it)."""
    import mlflow.models

    from basis.errors import Terminated
    from basis.runtime import stopping

    X, checkpoint = _fitted_checkpoint(tmp_path)

    def stopped_in_mlflow(*args, **kwargs):
        stopping._clean_up()  # what the watcher does GRACE_S after the signal
        raise Terminated("signal 15")

    monkeypatch.setattr(mlflow.models, "infer_signature", stopped_in_mlflow)
    with pytest.raises(Terminated):
        with tracking.tracked_run("exp", "run", {"method": "diffusion_net"}, store=tmp_path / "mlflow") as run:
            run.log_embedding_model(checkpoint, X[:5], description="raw points")
    assert run.client.get_run(run.run_id).info.status == "KILLED"

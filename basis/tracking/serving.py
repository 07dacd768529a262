"""A fitted estimator as an MLflow model whose prediction is its ``transform``.

The model ships the checkpoint written by :meth:`SpectralEstimator.save` and the
``basis`` package itself (``code_paths``), so ``mlflow.pyfunc.load_model(uri).predict(X)``
needs no install of this project; its input is what the estimator was fitted on (raw
points, or the 16-d Siamese features of an image set; the model's description says which).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import mlflow.pyfunc
import numpy as np

from basis.errors import InputError

PACKAGE = Path(__file__).resolve().parent.parent

# MLflow warns, when the class is defined, that predict has no type hints; they are left
# out on purpose (MLflow would read them as a schema), so the warning says nothing here.
# (Recorded and dropped: MLflow resets the filters inside, so a filter would not hold.)
with warnings.catch_warnings(record=True):

    class EmbeddingModel(mlflow.pyfunc.PythonModel):
        """``predict(X)`` = the estimator's ``transform(X)``, on the CPU."""

        def load_context(self, context) -> None:
            from basis.estimators import SpectralEstimator

            self.estimator = SpectralEstimator.load(context.artifacts["estimator"], device="cpu")

        def predict(self, context, model_input, params=None):  # untyped: MLflow reads hints as a schema
            return self.estimator.transform(np.asarray(model_input, dtype=np.float32))


def pip_requirements() -> list[str]:
    """Exact versions of what loading the model imports (all on PyPI)."""
    from importlib.metadata import version

    return [f"{name}=={version(name)}" for name in ("torch", "numpy", "scipy", "scikit-learn", "threadpoolctl")]


@contextmanager
def _pins_checked_by_version() -> Iterator[None]:
    """MLflow checks a logged model's pins against the installed versions, and first maps
    every installed distribution to the modules it provides, to read a pin's version from
    its module (``importlib_metadata.packages_distributions``: 1.2 s on every model log
    here, the largest part of logging one). The pins of :func:`pip_requirements` are read
    from the distributions' metadata, so the map is left empty while the model is logged:
    MLflow then reads each pin's version from that same metadata, and the check, and the
    model it writes, are the same. The map is MLflow's own module global
    (``mlflow.utils.requirements_utils._MODULES_TO_PACKAGES``, pinned MLflow; a test holds
    that it exists); one that is already built is left as it is."""
    from mlflow.utils import requirements_utils

    if requirements_utils._MODULES_TO_PACKAGES is not None:
        yield
        return
    requirements_utils._MODULES_TO_PACKAGES = {}
    try:
        yield
    finally:
        requirements_utils._MODULES_TO_PACKAGES = None


def log_embedding_model(
    run_id: str,
    checkpoint: str | Path,
    input_example: np.ndarray,
    description: str,
    *,
    name: str = "model",
    step: int = 0,
) -> str:
    """Log the estimator saved at ``checkpoint`` as run ``run_id``'s model ``name``, with a
    signature and an input example taken from ``input_example`` (a few rows). The model
    takes the run's metrics of ``step`` (MLflow's model page shows those: the final step's
    loss and scores) and ``description`` as its note (the page's Description). Returns the
    model's id. The run is named, not made active: leaving ``mlflow.start_run()`` ends the
    run (FAILED on any exception, a stop included; FINISHED otherwise, while the job still
    runs), and the run's status belongs to :func:`basis.tracking.tracked_run` alone."""
    from mlflow.models import Model, infer_signature

    from basis.estimators import SpectralEstimator

    example = np.asarray(input_example, dtype=np.float32)
    output = SpectralEstimator.load(checkpoint, device="cpu").transform(example)
    run = mlflow.MlflowClient().get_run(run_id)
    # The model is made in the run's experiment, with the run's parameters, as Model.log
    # (what mlflow.pyfunc.log_model calls) makes it for an active run; both passed on.
    model = mlflow.initialize_logged_model(
        name=name,
        source_run_id=run_id,
        tags={"mlflow.note.content": description},
        params=run.data.params,
        experiment_id=run.info.experiment_id,
    )
    with _pins_checked_by_version():
        logged = Model.log(
            artifact_path=None,
            flavor=mlflow.pyfunc,
            run_id=run_id,
            model_id=model.model_id,
            name=name,
            step=step,
            python_model=EmbeddingModel(),
            artifacts={"estimator": str(checkpoint)},
            code_paths=[str(PACKAGE)],
            signature=infer_signature(example, output),
            input_example=example,
            pip_requirements=pip_requirements(),
            metadata={"description": description},
        )
    return logged.model_id


def load_embedding(model: str | Path, store: str | Path | None = None, device: str = "cpu"):
    """A callable X -> embedding from a checkpoint file (``model.pt``, on ``device``) or an
    MLflow model URI (``runs:/<id>/model``, ..., on the CPU), looked up in the store of
    :func:`basis.tracking.tracking_uri` (``MLFLOW_TRACKING_URI``, else the SQLite store in
    ``store``, never one made in the current folder)."""
    if Path(model).suffix == ".pt" or Path(model).is_file():
        from basis.estimators import SpectralEstimator

        return SpectralEstimator.load(model, device=device).transform
    from mlflow.exceptions import MlflowException

    from basis.tracking.store import DEFAULT_STORE, scoped_tracking_uri, tracking_uri

    try:
        with scoped_tracking_uri(tracking_uri(store or DEFAULT_STORE)):
            loaded = mlflow.pyfunc.load_model(str(model))
    except (MlflowException, OSError) as err:
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise InputError(f"--model {model}: no MLflow model there ({first_line})") from None
    return loaded.predict


#: The alias of the version a user should load: the seed whose d_G is the seeds' median (a
#: representative run, not the one that happened to score best on the test set).
REPRESENTATIVE = "representative"


def register_seeds(mlflow_client, name: str, experiment_id: str, seeds: dict[int, str], d_G: dict[int, float]) -> dict:
    """Register the models logged by one method's seed runs on one data set (``seeds``: seed ->
    run id) as versions of registered model ``name``, each with the alias ``seed<k>``, and
    :data:`REPRESENTATIVE` on the seed of median ``d_G``; ``models:/<name>@<alias>`` loads
    it. A version registered before for the same run is kept, so a rerun adds none. Returns
    alias -> version."""
    from mlflow.exceptions import MlflowException

    models = {m.source_run_id: m for m in mlflow_client.search_logged_models([experiment_id])}
    models = {seed: models[run_id] for seed, run_id in seeds.items() if run_id in models}
    if not models:
        return {}
    try:
        mlflow_client.create_registered_model(name, description=f"{name}: one version per seed; load @{REPRESENTATIVE}")
    except MlflowException as err:
        if err.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    from basis.tracking.store import scoped_tracking_uri

    known = {v.run_id: v.version for v in mlflow_client.search_model_versions(f"name = '{name}'")}
    aliases = {}
    for seed, model in sorted(models.items()):
        version = known.get(model.source_run_id)
        if version is None:
            with scoped_tracking_uri(mlflow_client.tracking_uri):  # where the registry looks the model up
                version = mlflow_client.create_model_version(
                    name, source=f"models:/{model.model_id}", run_id=model.source_run_id, model_id=model.model_id
                ).version
        aliases[f"seed{seed}"] = str(version)
    scored = sorted((value, seed) for seed, value in d_G.items() if seed in models and np.isfinite(value))
    if scored:
        aliases[REPRESENTATIVE] = aliases[f"seed{scored[(len(scored) - 1) // 2][1]}"]
    for alias, version in aliases.items():
        mlflow_client.set_registered_model_alias(name, alias, version)
    return aliases

import subprocess
import sys
from pathlib import Path

from snakemake.utils import validate

from basis.data import FEATURE_SETS
from basis.experiment import resolve_settings
from basis.tracking import config_hash


validate(config, schema="../schemas/config.schema.yaml")

EXPERIMENTS = {stage: f"{config['tracking']['experiment_prefix']}-{stage}" for stage in ("features", "runs", "paper")}
TRACKING_FLAG = "results/mlflow/experiments.json"


def close_stale_runs():
    """Runs left RUNNING by a killed job are marked KILLED when an invocation starts.

    Done on every real invocation, in the main process only (cluster jobs re-parse this
    file): after a kill the next invocation may have nothing to do, so an onstart hook,
    which runs only when there are jobs, could leave them RUNNING. It assumes no other
    invocation is logging to the same store at that moment."""
    subprocess.run([sys.executable, "-m", "basis", "tracking", "close-stale", "--json"], check=False)


if workflow.is_main_process and not workflow.dryrun:
    close_stale_runs()


def feature_input(wildcards):
    """Image sets are embedded through Siamese features; others are used raw."""
    if wildcards.dataset in FEATURE_SETS:
        return f"results/features/{wildcards.dataset}.npz"
    return []


def protocol_settings():
    """--set arguments of the shared protocol (all methods and the reference embedding)."""
    shared = dict(config["protocol"])
    graph = shared.pop("graph")
    return [f"{k}={v}" for k, v in shared.items()] + [f"graph.{k}={v}" for k, v in graph.items()]


def settings_for(method):
    """--set arguments for one method: shared protocol, then per-method overrides."""
    return protocol_settings() + [f"{k}={v}" for k, v in config["methods"][method].items()]


def method_settings(wildcards):
    return settings_for(wildcards.method)


def check_config():
    """Checks the schema cannot express, before any job: every method's settings resolve,
    and the graph fits in a batch."""
    protocol = config["protocol"]
    if protocol["graph"]["n_neighbors"] >= protocol["batch_size"]:
        raise ValueError(
            f"config: protocol.graph.n_neighbors ({protocol['graph']['n_neighbors']}) must be smaller than"
            f" protocol.batch_size ({protocol['batch_size']})"
        )
    for method in config["methods"]:
        try:
            resolve_settings(method, assignments=settings_for(method))
        except ValueError as err:
            raise ValueError(f"config: methods.{method} or protocol: {err}") from None


check_config()


def run_tags(wildcards, rule):
    """MLflow tags naming the job: its rule, every wildcard, the config and a hash of its section."""
    section = {"protocol": config["protocol"], "method": config["methods"].get(wildcards.get("method"), {}),
               "features": config["features"]}
    tags = {"rule": rule, "config_name": config["name"], "config_hash": config_hash(section)}
    tags.update({key: value for key, value in wildcards.items()})
    return [f"{key}={value}" for key, value in tags.items()]

from snakemake.utils import validate

from basis.data import FEATURE_SETS


validate(config, schema="../schemas/config.schema.yaml")


def feature_input(wildcards):
    """Image sets are embedded through Siamese features; others are used raw."""
    if wildcards.dataset in FEATURE_SETS:
        return f"results/features/{wildcards.dataset}.npz"
    return []


def method_settings(wildcards):
    """--set arguments for one method: shared protocol, then per-method overrides."""
    shared = dict(config["protocol"])
    graph = shared.pop("graph")
    assignments = [f"{k}={v}" for k, v in shared.items()]
    assignments += [f"graph.{k}={v}" for k, v in graph.items()]
    assignments += [f"{k}={v}" for k, v in config["methods"].get(wildcards.method, {}).items()]
    return assignments

from snakemake.utils import validate


validate(config, schema="../schemas/config.schema.yaml")

IMAGE_SETS = {"mnist", "fashion_mnist", "svhn", "cifar10", "digits"}


def feature_input(wildcards):
    """Image sets are embedded through Siamese features; others are used raw."""
    if wildcards.dataset in IMAGE_SETS:
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

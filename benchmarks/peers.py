"""This project's SpectralNet (the paper's SpecNet1) beside the maintained PyPI package
``spectralnet`` (1.1.0) on the same data.

    pip install spectralnet==1.1.0
    python -m benchmarks peers spectralnet
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from basis import metrics
from basis.data.toy_sets import blobs, two_moons
from basis.estimators import SpectralNet
from basis.references import analytic_embedding

PEER_GRAPH = {"n_neighbors": 9, "scale": "global", "scale_neighbor": 1, "kernel": "code"}
# A connected graph for the analytic side where the peer's sharp graph splits apart.
ANALYTIC_GRAPHS = {"peer graph": PEER_GRAPH, "k=15 global": {"n_neighbors": 15, "scale": "global", "scale_neighbor": 7}}


def grassmann_to_analytic(X: np.ndarray, Y: np.ndarray, n_clusters: int) -> dict[str, float]:
    result = {}
    for name, graph in ANALYTIC_GRAPHS.items():
        try:
            U = analytic_embedding(X, {"graph": graph, "operator": "unnormalized", "drop_trivial": False}, n_clusters)
            result[name] = metrics.grassmann_distance(Y, U)
        except Exception:  # disconnected beyond K, or Lanczos did not converge: no reference
            result[name] = float("nan")
    return result


def score(X, y, Y, n_clusters, seconds):
    labels = metrics.kmeans_labels(Y, n_clusters)
    return {
        "nmi": metrics.nmi(y, labels),
        "acc": metrics.clustering_accuracy(y, labels),
        "d_G": grassmann_to_analytic(X, Y, n_clusters),
        "fit_seconds": seconds,
    }


def run_peer(X, y, n_clusters, seed):
    from spectralnet import SpectralNet

    torch.manual_seed(seed)
    model = SpectralNet(
        n_clusters=n_clusters,
        spectral_batch_size=712,
        spectral_epochs=40,
        spectral_is_local_scale=False,
        spectral_n_nbg=8,
        spectral_scale_k=2,
        spectral_lr=1e-2,
        spectral_hiddens=[128, 128, n_clusters],
    )
    start = time.perf_counter()
    model.fit(torch.from_numpy(X))
    seconds = time.perf_counter() - start
    model.predict(torch.from_numpy(X))
    return score(X, y, np.asarray(model.embeddings_), n_clusters, seconds)


def run_ours(X, y, n_clusters, seed):
    model = SpectralNet(
        n_clusters,
        graph=PEER_GRAPH,
        operator="unnormalized",
        hidden=(128, 128),
        lr=1e-2,
        batch_size=712,
        n_iter=160,
        device="cpu",
        seed=seed,
    )
    start = time.perf_counter()
    model.fit(X)
    seconds = time.perf_counter() - start
    return score(X, y, model.transform(X), n_clusters, seconds)


def add_spectralnet_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0)


def spectralnet(args: argparse.Namespace) -> int:
    """Both SpectralNets with the package's own two-moons example settings, one JSON line each.

    Both run with 8 neighbours, a global scale from the nearest neighbour, exp(-d^2/sigma^2),
    widths 128-128-K with tanh, lr 1e-2, batches of 712, about 160 steps, on two moons and
    on blobs. Prints NMI, ACC, d_G to the analytic embedding and fit time for each; a fit
    that fails (the package not installed) is printed as its error.
    """
    sets = {"two_moons": two_moons(n=3000, seed=0), "blobs": blobs(n=3000, centers=4, seed=0)}
    for name, (X, y) in sets.items():
        n_clusters = len(np.unique(y))
        for who, runner in (("spectralnet 1.1.0", run_peer), ("basis SpectralNet", run_ours)):
            try:
                result = runner(X, y, n_clusters, seed=args.seed)
            except Exception as err:  # report a failed fit as such, keep going
                result = {"error": f"{type(err).__name__}: {err}"}
            print(json.dumps({"dataset": name, "implementation": who, **result}))
    return 0


PARTS = {"spectralnet": (add_spectralnet_arguments, spectralnet)}

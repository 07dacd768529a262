"""A method's seeds trained together against the same seeds in turn and one seed alone.

Training only (no start-up, no evaluation): one seed's ``fit``, then ``--seeds`` seeds
fitted in turn, then the same seeds through :func:`basis.estimators.together.fit_together`,
on Siamese-like clustered features of MNIST's shape (``--n`` points, 16-d). Prints each
time, the together/one ratio (issue #35's goal: 10 seeds in at most 2x one seed's time) and
the largest difference between a seed's embedding trained together and in turn, beside
the largest that one unit in the last place of a seed's initial weights makes in its solo
run (the training's own amplification of rounding, the yardstick for the first).

    python benchmarks/seeds_together.py --device cuda --seeds 10 --n-iter 200 [--method diffusion_net]
"""

from __future__ import annotations

import json
import time

import numpy as np
import torch

from basis.cli.parser import OneLineParser
from basis.estimators import METHODS, SpectralEstimator
from basis.estimators.together import fit_together, nudged_fit


def clustered_features(n: int, classes: int = 10, dim: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, 4)) @ rng.normal(size=(4, dim))
    y = np.arange(n) % classes
    return (centres[y] + 0.1 * rng.normal(size=(n, dim))).astype(np.float32), y


def timed(work, device: str) -> tuple[float, object]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = work()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, result


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--method", default="basis", choices=sorted(METHODS))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--n-iter", type=int, default=200)
    parser.add_argument("--n", type=int, default=60000)
    parser.add_argument("--batch-size", type=int, default=512)
    args = parser.parse_args()
    X, y = clustered_features(args.n)
    settings = dict(n_components=10, batch_size=args.batch_size, n_iter=args.n_iter, device=args.device)

    def make(seed: int) -> SpectralEstimator:
        return METHODS[args.method](seed=seed, **settings)

    seeds = list(range(args.seeds))
    make(0).fit(X, y)  # warm-up: kernels, allocator, lazy imports
    one, _ = timed(lambda: make(0).fit(X, y), args.device)
    in_turn, alone = timed(lambda: [make(seed).fit(X, y) for seed in seeds], args.device)
    together, joint = timed(lambda: fit_together([make(seed) for seed in seeds], [(X, y)] * len(seeds)), args.device)
    sample = X[:2000]

    def difference(a: SpectralEstimator, b: SpectralEstimator) -> float:
        expected = a.transform(sample)
        return float(np.abs(b.transform(sample) - expected).max() / np.abs(expected).max())

    worst = max(difference(a, b) for a, b in zip(alone, joint))
    one_ulp = max(difference(solo, nudged_fit(make(seed), X, y)) for seed, solo in zip(seeds, alone))
    report = {
        "method": args.method,
        "device": args.device,
        "seeds": args.seeds,
        "n_iter": args.n_iter,
        "one_seed_s": round(one, 2),
        "in_turn_s": round(in_turn, 2),
        "together_s": round(together, 2),
        "together_over_one": round(together / one, 2),
        "together_over_in_turn": round(together / in_turn, 2),
        "largest_relative_embedding_difference": worst,
        "one_ulp_in_the_initial_weights_relative_embedding_difference": one_ulp,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()

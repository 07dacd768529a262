"""The d_G a network reaches when trained on exact targets: a floor for every BASiS variant.

BASiS regresses its network on aligned batch embeddings, which carry sampling and
alignment noise. Training the same network with the same loop, budget and batch size on
the exact eigenvectors of the whole training graph removes that noise; what d_G remains
on the test split is what the function class, the budget and the difference between the
training graph and the test graph leave, which no alignment variant can remove. Prints
one JSON line per budget: the exact-target network's test d_G and the paper's BASiS's.

    python benchmarks/exact_target_floor.py --features results/features/digits.npz --n-iter 300 1000
"""

from __future__ import annotations

import json

import numpy as np
import torch

from basis import metrics
from basis.catalog.settings import resolve_settings
from basis.cli.parser import OneLineParser
from basis.data import load_npz
from basis.estimators import BASiS, SpectralEstimator
from basis.references import analytic_embedding


class ExactTargets(SpectralEstimator):
    """The shared training loop on random batches whose targets are the rows of the whole
    training graph's analytic embedding, scaled like a batch embedding (unit-norm columns
    over batch_size nodes)."""

    def _prepare(self, X: torch.Tensor, y: np.ndarray | None) -> None:
        settings = {"graph": self.graph, "operator": self.operator, "drop_trivial": self.drop_trivial}
        exact = analytic_embedding(X.cpu().numpy(), settings, self.n_components)
        self.targets_ = torch.as_tensor(exact * np.sqrt(len(exact) / self.batch_size), dtype=torch.float32)

    def _next_batch(self, features_of, n_train, timer):
        batch = self._sample(n_train, self.batch_size)
        return features_of(batch), self.targets_[batch].to(self.device_)

    def _batch_loss(self, batch, timer):
        X_batch, target = batch
        return ((self.model_(X_batch) - target) ** 2).sum(dim=1).mean(), {}


def main() -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", required=True, help="a features .npz from `python -m basis features`")
    parser.add_argument("--n-iter", type=int, nargs="+", default=[300, 1000])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a BASiS setting")
    args = parser.parse_args()
    data = load_npz(args.features, ("X_train", "y_train", "X_test", "y_test", "dataset"), "features file")
    settings = resolve_settings("basis", assignments=args.set, dataset=str(data["dataset"]))
    n_components = len(np.unique(data["y_train"]))
    reference = analytic_embedding(data["X_test"], settings, n_components)
    options = {k: v for k, v in settings.items() if k not in ("eval", "n_components")}
    shared = {k: options[k] for k in ("graph", "operator", "drop_trivial", "batch_size", "lr")}
    for n_iter in args.n_iter:
        scores = {"exact_targets": [], "basis": []}
        for seed in range(args.seeds):
            models = {
                "exact_targets": ExactTargets(n_components, **{**shared, "n_iter": n_iter}, seed=seed, device="cpu"),
                "basis": BASiS(n_components, **{**options, "n_iter": n_iter}, seed=seed, device="cpu"),
            }
            for name, model in models.items():
                embedding = model.fit(data["X_train"], data["y_train"]).transform(data["X_test"])
                scores[name].append(metrics.grassmann_distance(embedding, reference))
        print(
            json.dumps(
                {
                    "n_iter": n_iter,
                    **{f"{k}_d_G_mean": float(np.mean(v)) for k, v in scores.items()},
                    "seeds": args.seeds,
                }
            )
        )


if __name__ == "__main__":
    main()

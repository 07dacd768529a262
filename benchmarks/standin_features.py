"""An MNIST-sized stand-in for a Siamese features file (``python -m basis features``'s
``.npz``): 60,000 training and 10,000 test points of 16-d touching clusters, ten classes,
labelled as ``--dataset`` with data seed 0, so that ``python -m basis run --features``
trains Table 1's protocol at its real shapes where the image sets cannot be fetched.

    python benchmarks/standin_features.py --out standin.npz [--dataset mnist] [--n-train 60000 --n-test 10000]
"""

from __future__ import annotations

import numpy as np

from basis.cli.parser import OneLineParser
from basis.data.clusters import clustered_data


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--n-train", type=int, default=60_000)
    parser.add_argument("--n-test", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    # touching clusters (spread 1.5): one connected graph with ten small eigenvalues, as trained features give
    X, y = clustered_data(args.n_train + args.n_test, 16, 10, args.seed, spread=1.5)
    np.savez(
        args.out,
        X_train=X[: args.n_train],
        y_train=y[: args.n_train],
        X_test=X[args.n_train :],
        y_test=y[args.n_train :],
        dataset=np.array(args.dataset),
        data_seed=np.array(0),
    )


if __name__ == "__main__":
    main()

"""Peak memory of BASiS training against the number of training points (features only).

BASiS sees one batch at a time, so its memory should not grow with n beyond the features
themselves (n x 16 floats). Each n runs in a fresh process; prints one JSON line per n.

    python benchmarks/training_memory.py --n 70000 1000000 --n-iter 50
"""

from __future__ import annotations

import subprocess
import sys

from basis.cli.parser import OneLineParser

ONE_RUN = """
import json, resource, sys
from basis.data.clusters import clustered_data
from basis.estimators import BASiS
n, n_iter = int(sys.argv[1]), int(sys.argv[2])
X, y = clustered_data(n, 16, 10)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
BASiS(10, graph={"n_neighbors": 50}, batch_size=512, n_iter=n_iter, device=sys.argv[3], seed=0).fit(X, y)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"n": n, "features_mb": X.nbytes / 2**20, "peak_rss_mb_before_fit": before, "peak_rss_mb": peak}))
"""


def main() -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[70_000, 1_000_000])
    parser.add_argument("--n-iter", type=int, default=50)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    for n in args.n:
        done = subprocess.run(
            [sys.executable, "-c", ONE_RUN, str(n), str(args.n_iter), args.device],
            capture_output=True,
            text=True,
            check=True,
        )
        print(done.stdout.strip())


if __name__ == "__main__":
    main()

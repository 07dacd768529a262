"""Per-call cost of ``torch.linalg.svd`` (with its host check) on RANSAC's shapes, and of
the QR-then-SVD route for tall designs.

    python benchmarks/svd_shapes.py [--device cuda]
"""

from __future__ import annotations

import json
import time

import torch

from basis.cli.parser import OneLineParser


def per_call_ms(function, *args, repeat: int = 50, **kwargs) -> float:
    function(*args, **kwargs)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        function(*args, **kwargs)
    torch.cuda.synchronize()
    return round(1e3 * (time.perf_counter() - start) / repeat, 3)


def _qr_then_svd(A: torch.Tensor):
    return torch.linalg.svd(torch.linalg.qr(A)[1], full_matrices=False)


def main() -> None:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    device = torch.device(parser.parse_args().device)
    g = torch.Generator().manual_seed(0)
    report = {}
    for shape in [(1, 250, 10), (250, 10), (100, 20, 10), (1, 10, 10), (101, 10, 10), (2, 250, 10)]:
        A = torch.randn(shape, generator=g, dtype=torch.float64).to(device)
        row = {"svd": per_call_ms(torch.linalg.svd, A, full_matrices=False)}
        for driver in ("gesvd", "gesvdj", "gesvda"):
            try:
                row[driver] = per_call_ms(torch.linalg.svd, A, full_matrices=False, driver=driver)
            except RuntimeError as err:
                row[driver] = str(err).splitlines()[0][:60]
        if shape[-2] > shape[-1]:
            row["qr"] = per_call_ms(torch.linalg.qr, A)
            row["qr_then_svd"] = per_call_ms(_qr_then_svd, A)
        report[str(shape)] = row
    print(json.dumps(report))


if __name__ == "__main__":
    main()

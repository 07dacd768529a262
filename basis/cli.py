"""Command line: ``python -m basis {run,features,bench} ...``."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

from basis.data import DATASETS, DatasetUnavailableError
from basis.methods import METHODS


def _print(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>16}: {value}")


def cmd_run(args: argparse.Namespace) -> int:
    from basis.experiment import load_inputs, resolve_settings, run_method

    settings = resolve_settings(args.method, assignments=args.set)
    data = load_inputs(args.dataset, args.features, seed=args.seed, root=args.data_root)
    result = run_method(args.method, data, seed=args.seed, device=args.device, settings=settings)
    output = {k: result.metrics[k] for k in ("d_G", "d_perp", "nmi", "acc", "accuracy", "train_seconds")}
    output["device"] = str(result.estimator.device_)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        result.estimator.save(out / "model.pt")
        np.savez(out / "embedding.npz", test=result.test_embedding, reference=result.reference_embedding, labels=data.y_test)
        (out / "metrics.json").write_text(json.dumps(output, indent=2))
    _print(output, args.json)
    return 0


def cmd_features(args: argparse.Namespace) -> int:
    from basis.data import load_dataset
    from basis.experiment import parse_assignment
    from basis.features import train_features

    options = {}
    for text in args.set:
        path, value = parse_assignment(text)
        options[".".join(path)] = value
    valid = {"out_dim", "margin", "n_steps", "pairs_per_step", "lr"}
    unknown = sorted(set(options) - valid)
    if unknown:
        raise ValueError(f"unknown feature option(s) {unknown}; valid: {sorted(valid)}")
    data = load_dataset(args.dataset, seed=args.seed, root=args.data_root)
    if not data.is_image:
        raise ValueError(f"data set {args.dataset!r} has no images; Siamese features need one of the image sets or digits")
    result = train_features(data.X_train, data.y_train, data.X_test, data.y_test, seed=args.seed, device=args.device,
                            progress=not args.json, **options)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, X_train=result["train"], y_train=data.y_train, X_test=result["test"], y_test=data.y_test)
    if args.checkpoint:
        result["model"].save(args.checkpoint)
    _print({"dim": int(result["train"].shape[1]), "train_seconds": result["train_seconds"],
            "knn_accuracy": result["knn_accuracy"], "device": str(result["model"].device_)}, args.json)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from basis import bench

    if args.what == "step":
        result = bench.bench_step(batch_size=args.m, n_components=args.k_eig, dim=args.d, n_neighbors=args.k, device=args.device)
    else:
        result = bench.bench_reference(n=args.n, dim=args.d, n_neighbors=args.k, n_components=args.k_eig, device=args.device)
    _print(result, args.json)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m basis", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train one method on one data set and evaluate it")
    run.add_argument("--method", required=True, choices=sorted(METHODS))
    run.add_argument("--dataset", required=True, choices=DATASETS)
    run.add_argument("--features", help="a .npz from 'basis features' to use as input instead of the raw data")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting (graph.n_neighbors=20, n_iter=500, ...)")
    run.add_argument("--out", help="folder for the model, embeddings and metrics")
    run.set_defaults(func=cmd_run)

    features = sub.add_parser("features", help="train the Siamese feature network and write train/test features")
    features.add_argument("--dataset", required=True, choices=DATASETS)
    features.add_argument("--out", required=True, help="output .npz")
    features.add_argument("--checkpoint", help="where to save the network's weights")
    features.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    features.set_defaults(func=cmd_features)

    bench = sub.add_parser("bench", help="speed benchmarks (print figures)")
    bench.add_argument("what", choices=["step", "reference"])
    bench.add_argument("--m", type=int, default=512, help="batch size (step)")
    bench.add_argument("--n", type=int, default=70_000, help="number of nodes (reference)")
    bench.add_argument("--d", type=int, default=16, help="feature dimension")
    bench.add_argument("--k", type=int, default=50, help="neighbours")
    bench.add_argument("--k-eig", type=int, default=10, help="eigenvectors K")
    bench.set_defaults(func=cmd_bench)

    for command in (run, features, bench):
        command.add_argument("--seed", type=int, default=0)
        command.add_argument("--device", default="auto")
        command.add_argument("--json", action="store_true", help="print one JSON object")
        command.add_argument("--data-root", default="resources/data")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (ValueError, DatasetUnavailableError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

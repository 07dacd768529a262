"""``python -m basis``'s arguments: one subcommand per job kind, each with its options and
help, and usage errors as one line with exit status 2.
"""

from __future__ import annotations

import argparse

from basis.catalog import DATASETS, SPARSE_SOLVERS, STEP_DATA, method_names
from basis.cli.commands import (
    WARMUP_STEPS,
    cmd_bench,
    cmd_download,
    cmd_embed,
    cmd_features,
    cmd_figure,
    cmd_reference,
    cmd_study,
    cmd_tracking,
)
from basis.cli.run import cmd_run
from basis.graph.config import NEIGHBOR_BACKENDS


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors in one line (what was wrong, and where the help is),
    exit status 2, like every other refused input."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m basis", description="BASiS and its baselines, and the jobs of the paper's workflow."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train one method on one data set and evaluate it")
    run.add_argument("--method", required=True, choices=method_names())
    run.add_argument("--dataset", required=True, choices=DATASETS)
    run.add_argument("--features", help="a .npz from 'basis features' to use as input instead of the raw data")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting (graph.n_neighbors=20, n_iter=500, ...)",
    )
    run.add_argument("--out", help="folder for the model, embeddings and metrics ({seed} becomes the seed)")
    run.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="several seeds in this one process, in turn, sharing the data and the reference (instead of"
        " --seed); each gets its own MLflow run and --out folder, with the numbers of one process per seed",
    )
    run.add_argument(
        "--seeds-together",
        default="auto",
        choices=["auto", "on", "off"],
        help="train the --seeds as one batched network (each seed's numbers its solo run's to float rounding);"
        " auto: on CUDA, where the method can (all but specnet2 with gradient=neighbor); the CPU keeps each"
        " seed's solo path, bit for bit",
    )
    run.add_argument(
        "--variants",
        nargs="+",
        choices=[f"{a}{o}" for o in ("", "-outliers") for a in ("ransac", "lstsq", "none")],
        help="the alignment ablation: train each of these alignments in turn ({variant} in --out becomes its"
        " name), each its own MLflow run; -outliers: with --outlier-fraction of the anchors from another class",
    )
    run.add_argument(
        "--outlier-fraction", type=float, help="the share of anchor slots that -outliers variants fill wrongly"
    )
    run.add_argument("--reference", help="stored analytic embedding of the test split (from 'basis reference')")
    run.add_argument("--siamese", help="the Siamese network behind --features, logged with the model (with --track)")
    run.set_defaults(func=cmd_run)

    embed = sub.add_parser("embed", help="embed new data with a saved model.pt or a logged MLflow model")
    embed.add_argument(
        "--model",
        required=True,
        help="a model.pt checkpoint or an MLflow model URI (runs:/<run id>/<run name>, models:/<model id>)",
    )
    embed.add_argument("--input", required=True, help=".npy of points (or of images, with --siamese)")
    embed.add_argument("--out", required=True, help=".npy to write the embedding to")
    embed.add_argument("--siamese", help="a Siamese network checkpoint that turns images into the model's input")
    embed.set_defaults(func=cmd_embed)

    download = sub.add_parser("download", help="fetch a data set (or check it is in place) and summarise it")
    download.add_argument("--dataset", required=True, choices=DATASETS)
    download.add_argument("--out", help="JSON summary to write once the data is in place")
    download.set_defaults(func=cmd_download)

    reference = sub.add_parser("reference", help="analytic embedding of a data set's test split, stored for the runs")
    reference.add_argument("--dataset", required=True, choices=DATASETS)
    reference.add_argument("--features", help="a .npz from 'basis features' to use as input instead of the raw data")
    reference.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="protocol settings (graph.*, operator, drop_trivial, n_components)",
    )
    reference.add_argument(
        "--eigensolver",
        default="auto",
        choices=["auto", *SPARSE_SOLVERS],
        help="arpack: graph and Lanczos on the host; chebyshev: graph and a Chebyshev-filtered block iteration"
        " on the device (auto: chebyshev on a GPU, arpack on the CPU)",
    )
    reference.add_argument("--out", required=True, help="output .npz")
    reference.set_defaults(func=cmd_reference)

    features = sub.add_parser("features", help="train the Siamese feature network and write train/test features")
    features.add_argument("--dataset", required=True, choices=DATASETS)
    features.add_argument("--out", required=True, help="output .npz")
    features.add_argument("--checkpoint", help="where to save the network's weights")
    features.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    features.set_defaults(func=cmd_features)

    study = sub.add_parser(
        "study", help="one of the paper's other experiments (toy examples, bunny, feature change, ...)"
    )
    study.add_argument("name", help="a module of basis/studies/ (toy, illustration, consistency, ...)")
    study.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a setting of the study")
    study.add_argument(
        "--out", required=True, help="folder for metrics.json and arrays.npz ({dataset}: see --datasets)"
    )
    study.add_argument(
        "--datasets",
        nargs="+",
        choices=DATASETS,
        help="run a per-data-set study on each of these in turn, each its own folder and MLflow run",
    )
    study.set_defaults(func=cmd_study)

    figure = sub.add_parser("figure", help="draw one of the paper's figures (PNG and PDF) from study folders")
    figure.add_argument("name", help="a figure a study declares (fig1_toy_examples, fig4_bunny_diffusion_maps, ...)")
    figure.add_argument("--input", action="append", required=True, help="a study folder (repeat for several)")
    figure.add_argument("--out", required=True, help="the PNG to write; the PDF and the caption (.rst) go next to it")
    figure.set_defaults(func=cmd_figure)

    bench = sub.add_parser("bench", help="speed benchmarks (print figures)")
    bench.add_argument("what", choices=["step", "reference"])
    bench.add_argument("--m", type=int, default=512, help="batch size (step)")
    bench.add_argument("--n", type=int, default=70_000, help="number of nodes (reference)")
    bench.add_argument("--d", type=int, default=16, help="feature dimension")
    bench.add_argument("--k", type=int, default=50, help="neighbours")
    bench.add_argument("--k-eig", type=int, default=10, help="eigenvectors K")
    bench.add_argument(
        "--neighbors", default="exact", choices=NEIGHBOR_BACKENDS, help="neighbour search of the graph (reference)"
    )
    bench.add_argument(
        "--eigensolver", default="auto", choices=["auto", "exact", "subspace"], help="BASiS's eigensolver (step)"
    )
    bench.add_argument(
        "--reference-eigensolver",
        default="auto",
        choices=["auto", *SPARSE_SOLVERS],
        help="the whole set's eigensolver (reference; auto: chebyshev on a GPU, arpack on the CPU)",
    )
    bench.add_argument(
        "--topk-block", type=int, help="select the exact kNN in two stages over blocks of this many columns (reference)"
    )
    bench.add_argument(
        "--spread",
        type=float,
        default=3.0,
        help="scale of the clusters' centres (reference; 3: each cluster its own component, 1.5: connected)",
    )
    bench.add_argument("--save-embedding", help="write the reference embedding to this .npy (reference)")
    bench.add_argument(
        "--cuda-graphs", action="store_true", help="replay the step's fixed-shape parts from CUDA graphs (step)"
    )
    bench.add_argument(
        "--compare",
        action="store_true",
        help="time the exact and the subspace eigensolver, and on CUDA the subspace one with CUDA graphs (step)",
    )
    bench.add_argument("--profile", action="store_true", help="the top device kernels, on CUDA (step)")
    bench.add_argument(
        "--data",
        default="clusters",
        choices=STEP_DATA,
        help="what the steps train on (step): the clustered stand-in, Siamese-like touching clusters, raw digits",
    )
    bench.add_argument(
        "--iterations", type=int, default=110, help=f"iterations, the first {WARMUP_STEPS} of them warm-up (step)"
    )
    bench.add_argument(
        "--start-at",
        type=float,
        help="unix time at which to start timing, after the warm-up: processes started together (step)",
    )
    bench.set_defaults(func=cmd_bench)

    tracking = sub.add_parser(
        "tracking",
        help="MLflow store upkeep: create experiments, close runs of killed jobs, print the UI's Table 1 view",
    )
    tracking.add_argument("action", choices=["setup", "close-stale", "url"])
    tracking.add_argument(
        "--experiment", action="append", default=[], help="experiment to create (setup), or to show (url: basis-runs)"
    )
    tracking.add_argument("--ui", default="http://127.0.0.1:5000", help="address of the MLflow UI (url)")
    tracking.add_argument("--flag", help="file to write once the experiments exist (setup)")
    tracking.set_defaults(func=cmd_tracking)

    for command in (run, features, study, figure, reference):
        command.add_argument("--track", metavar="EXPERIMENT", help="log this job as one MLflow run in EXPERIMENT")
        command.add_argument(
            "--tag", action="append", default=[], metavar="KEY=VALUE", help="extra run tag (with --track)"
        )
        command.add_argument("--parent", help="name of the run this one is grouped under, e.g. a sweep (with --track)")
    for command in (run, features, study, figure, reference, tracking, embed):
        command.add_argument(
            "--store", default="results/mlflow", help="folder of the SQLite store (unless MLFLOW_TRACKING_URI is set)"
        )
    for command in (run, features, study, figure, bench, tracking, download, reference, embed):
        command.add_argument("--seed", type=int, default=0)
        command.add_argument("--device", default="auto")
        command.add_argument("--json", action="store_true", help="print one JSON object")
        command.add_argument("--data-root", default="resources/data")
        command.add_argument(
            "--data-seed",
            type=int,
            default=0,
            help="seed of generated data sets and of splits (one data set, many training seeds)",
        )
        command.add_argument(
            "--threads",
            type=int,
            default=None,
            help="CPU threads this job may use, all pools together (default: the cores it may run on)",
        )
    return parser

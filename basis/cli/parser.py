"""``python -m basis``'s arguments: one subcommand per job kind, each with its options and
help, and usage errors as one line with exit status 2.
"""

from __future__ import annotations

import argparse

from basis.catalog import DATASETS, SPARSE_SOLVERS, STEP_DATA, TEST_FRACTION, method_names
from basis.cli.commands import (
    WARMUP_STEPS,
    cmd_bench,
    cmd_config,
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
from basis.plan.workflow_config import ablation_variants


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors in one line (what was wrong, and where the help is),
    exit status 2, like every other refused input."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    """``--dataset``: a catalog name, or with ``--data`` the name of a data set of one's own
    (:mod:`basis.catalog.data_sources`), with the options that declare it."""
    parser.add_argument(
        "--dataset",
        metavar="NAME",
        help=f"one of {', '.join(DATASETS)}; or, with --data, the name of yours (default: the path's stem)",
    )
    own = parser.add_argument_group("a data set of one's own (instead of a catalog name)")
    own.add_argument(
        "--data",
        metavar="FOLDER_OR_TABLE",
        help="an image folder (one sub-folder per class) or a .npy/.npz/.csv/.parquet table",
    )
    own.add_argument("--label-column", help="the labels' column of a CSV or Parquet table (none: unlabelled)")
    own.add_argument("--test-data", metavar="FOLDER_OR_TABLE", help="the test split, in the layout of --data")
    own.add_argument(
        "--test-fraction", type=float, help=f"the share of --data held out for testing (default {TEST_FRACTION})"
    )
    own.add_argument("--test-seed", type=int, help="the seed of that split (default: --data-seed)")
    own.add_argument("--image-size", type=int, nargs=2, metavar=("HEIGHT", "WIDTH"), help="resize every image to this")
    own.add_argument("--n-components", type=int, help="the embedding's dimension (needed without labels)")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``run``."""
    parser.add_argument("--method", required=True, choices=method_names())
    add_dataset_arguments(parser)
    parser.add_argument("--features", help="a .npz from 'basis features' to use as input instead of the raw data")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting (graph.n_neighbors=20, n_iter=500, ...)",
    )
    parser.add_argument("--out", help="folder for the model, embeddings and metrics ({seed} becomes the seed)")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="several seeds in this one process, in turn, sharing the data and the reference (instead of"
        " --seed); each gets its own MLflow run and --out folder, with the numbers of one process per seed",
    )
    parser.add_argument(
        "--seeds-together",
        default="auto",
        choices=["auto", "on", "off"],
        help="train the --seeds as one batched network (each seed's numbers its solo run's to float rounding);"
        " auto: on CUDA, where the method can (all but specnet2 with gradient=neighbor); the CPU keeps each"
        " seed's solo path, bit for bit",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=ablation_variants(outliers=True),
        help="the alignment ablation: train each of these alignments in turn ({variant} in --out becomes its"
        " name), each its own MLflow run; -outliers: with --outlier-fraction of the anchors from another class",
    )
    parser.add_argument(
        "--outlier-fraction", type=float, help="the share of anchor slots that -outliers variants fill wrongly"
    )
    parser.add_argument("--reference", help="stored analytic embedding of the test split (from 'basis reference')")
    parser.add_argument("--siamese", help="the Siamese network behind --features, logged with the model (with --track)")


def add_embed_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``embed``."""
    parser.add_argument(
        "--model",
        required=True,
        help="a model.pt checkpoint or an MLflow model URI (runs:/<run id>/<run name>, models:/<model id>)",
    )
    points = parser.add_mutually_exclusive_group(required=True)
    points.add_argument("--input", help=".npy of points (or of images, with --siamese)")
    points.add_argument(
        "--data", metavar="FOLDER_OR_TABLE", help="the points of a feature table or an image folder (with --siamese)"
    )
    parser.add_argument("--label-column", help="the labels' column of a --data table, left out of the points")
    parser.add_argument("--image-size", type=int, nargs=2, metavar=("HEIGHT", "WIDTH"), help="resize --data's images")
    parser.add_argument("--out", required=True, help=".npy to write the embedding to")
    parser.add_argument("--siamese", help="a Siamese network checkpoint that turns images into the model's input")


def add_download_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``download``."""
    add_dataset_arguments(parser)
    parser.add_argument("--out", help="JSON summary to write once the data is in place")


def add_reference_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``reference``."""
    add_dataset_arguments(parser)
    parser.add_argument("--features", help="a .npz from 'basis features' to use as input instead of the raw data")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="protocol settings (graph.*, operator, drop_trivial, n_components)",
    )
    parser.add_argument(
        "--eigensolver",
        default="auto",
        choices=["auto", *SPARSE_SOLVERS],
        help="arpack: graph and Lanczos on the host; chebyshev: graph and a Chebyshev-filtered block iteration"
        " on the device (auto: chebyshev on a GPU, arpack on the CPU)",
    )
    parser.add_argument("--out", required=True, help="output .npz")


def add_features_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``features``."""
    add_dataset_arguments(parser)
    parser.add_argument("--out", required=True, help="output .npz")
    parser.add_argument("--checkpoint", help="where to save the network's weights")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")


class _DeclaredFirst(argparse.Action):
    """``study --data``: a study reads a data set of one's own from its declaration."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(
            "a study takes a data set of one's own by its declaration, not --data: first `python -m basis"
            " download --data FILE --out SUMMARY.json`, then --datasets NAME --declaration SUMMARY.json"
        )


def add_study_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``study``."""
    parser.add_argument("--data", action=_DeclaredFirst, help=argparse.SUPPRESS)
    parser.add_argument("name", help="a module of basis/studies/ (toy, illustration, consistency, ...)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a setting of the study")
    parser.add_argument(
        "--out", required=True, help="folder for metrics.json and arrays.npz ({dataset}: see --datasets)"
    )
    parser.add_argument(
        "--datasets",
        nargs="+",
        metavar="DATASET",
        help="run a per-data-set study on each of these in turn, each its own folder and MLflow run",
    )
    parser.add_argument(
        "--declaration",
        action="append",
        default=[],
        metavar="SUMMARY",
        help="a data set of one's own, as 'download --data ... --out SUMMARY' declared it (repeat for several)",
    )


def add_figure_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``figure``."""
    parser.add_argument("name", help="a figure a study declares (fig1_toy_examples, fig4_bunny_diffusion_maps, ...)")
    parser.add_argument("--input", action="append", required=True, help="a study folder (repeat for several)")
    parser.add_argument("--out", required=True, help="the PNG to write; the PDF and the caption (.rst) go next to it")


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bench``."""
    parser.add_argument("what", choices=["step", "reference"])
    parser.add_argument("--m", type=int, default=512, help="batch size (step)")
    parser.add_argument("--n", type=int, default=70_000, help="number of nodes (reference)")
    parser.add_argument("--d", type=int, default=16, help="feature dimension")
    parser.add_argument("--k", type=int, default=50, help="neighbours")
    parser.add_argument("--k-eig", type=int, default=10, help="eigenvectors K")
    parser.add_argument(
        "--neighbors", default="exact", choices=NEIGHBOR_BACKENDS, help="neighbour search of the graph (reference)"
    )
    parser.add_argument(
        "--eigensolver", default="auto", choices=["auto", "exact", "subspace"], help="BASiS's eigensolver (step)"
    )
    parser.add_argument(
        "--reference-eigensolver",
        default="auto",
        choices=["auto", *SPARSE_SOLVERS],
        help="the whole set's eigensolver (reference; auto: chebyshev on a GPU, arpack on the CPU)",
    )
    parser.add_argument(
        "--topk-block", type=int, help="select the exact kNN in two stages over blocks of this many columns (reference)"
    )
    parser.add_argument(
        "--spread",
        type=float,
        default=3.0,
        help="scale of the clusters' centres (reference; 3: each cluster its own component, 1.5: connected)",
    )
    parser.add_argument("--save-embedding", help="write the reference embedding to this .npy (reference)")
    parser.add_argument(
        "--cuda-graphs", action="store_true", help="replay the step's fixed-shape parts from CUDA graphs (step)"
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="time the exact and the subspace eigensolver, and on CUDA the subspace one with CUDA graphs (step)",
    )
    parser.add_argument("--profile", action="store_true", help="the top device kernels, on CUDA (step)")
    parser.add_argument(
        "--data",
        default="clusters",
        choices=STEP_DATA,
        help="what the steps train on (step): the clustered stand-in, Siamese-like touching clusters, raw digits",
    )
    parser.add_argument(
        "--iterations", type=int, default=110, help=f"iterations, the first {WARMUP_STEPS} of them warm-up (step)"
    )
    parser.add_argument(
        "--start-at",
        type=float,
        help="unix time at which to start timing, after the warm-up: processes started together (step)",
    )


def add_tracking_action_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``tracking``."""
    parser.add_argument("action", choices=["setup", "close-stale", "url", "replay"])
    parser.add_argument(
        "--experiment", action="append", default=[], help="experiment to create (setup), or to show (url: basis-runs)"
    )
    parser.add_argument("--ui", default="http://127.0.0.1:5000", help="address of the MLflow UI (url)")
    parser.add_argument("--flag", help="file to write once the experiments exist (setup)")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``config``."""
    parser.add_argument("files", nargs="+", metavar="FILE", help="workflow config file(s), as --configfile takes them")


#: Each command: its one-line help, what adds its own options, the function that runs it.
COMMANDS = {
    "run": ("train one method on one data set and evaluate it", add_run_arguments, cmd_run),
    "embed": ("embed new data with a saved model.pt or a logged MLflow model", add_embed_arguments, cmd_embed),
    "download": (
        "fetch a data set (or check it is in place) and summarise it",
        add_download_arguments,
        cmd_download,
    ),
    "reference": (
        "analytic embedding of a data set's test split, stored for the runs",
        add_reference_arguments,
        cmd_reference,
    ),
    "features": (
        "train the Siamese feature network and write train/test features",
        add_features_arguments,
        cmd_features,
    ),
    "study": (
        "one of the paper's other experiments (toy examples, bunny, feature change, ...)",
        add_study_arguments,
        cmd_study,
    ),
    "figure": (
        "draw one of the paper's figures (PNG and PDF) from study folders",
        add_figure_arguments,
        cmd_figure,
    ),
    "bench": ("speed benchmarks (print figures)", add_bench_arguments, cmd_bench),
    "config": (
        "check a workflow config file (its YAML, with the line, and its schema) before Snakemake reads it",
        add_config_arguments,
        cmd_config,
    ),
    "tracking": (
        "MLflow store upkeep: create experiments, close runs of killed jobs, print the UI's Table 1 view,"
        " log the runs a server could not take",
        add_tracking_action_arguments,
        cmd_tracking,
    ),
}
#: The commands that log an MLflow run, those that read or write the local store.
TRACKED = ("run", "features", "study", "figure", "reference")
STORED = (*TRACKED, "tracking", "embed")


def add_tracking_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a command that logs an MLflow run."""
    parser.add_argument("--track", metavar="EXPERIMENT", help="log this job as one MLflow run in EXPERIMENT")
    parser.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="extra run tag (with --track)")
    parser.add_argument("--parent", help="name of the run this one is grouped under, e.g. a sweep (with --track)")


def add_store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", default="results/mlflow", help="folder of the SQLite store (unless MLFLOW_TRACKING_URI is set)"
    )


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every command takes."""
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--data-root", default="resources/data")
    parser.add_argument(
        "--data-seed",
        type=int,
        default=0,
        help="seed of generated data sets and of splits (one data set, many training seeds)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads this job may use, all pools together (default: the cores it may run on)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m basis", description="BASiS and its baselines, and the jobs of the paper's workflow."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (summary, add_arguments, func) in COMMANDS.items():
        command = sub.add_parser(name, help=summary)
        add_arguments(command)
        if name in TRACKED:
            add_tracking_arguments(command)
        if name in STORED:
            add_store_argument(command)
        add_common_arguments(command)
        command.set_defaults(func=func)
    return parser

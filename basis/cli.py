"""Command line: ``python -m basis {run,features,bench} ...``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from basis.catalog import DATASETS, method_names
from basis.errors import InputError, Terminated
from basis.inputs import check_experiment_name, check_output, check_seed, check_store, release_outputs
from basis.outputs import atomic_path, write_json
from basis.settings import NEIGHBOR_BACKENDS, SPARSE_SOLVERS, STEP_DATA
from basis.stopping import STOPPED_STATUS, stop_on_sigterm
from basis.threads import limit_threads
from basis.timing import Progress, job_seconds, mark_startup, recording, report, timed


def _print(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>16}: {value}")


@contextmanager
def _maybe_tracked(args: argparse.Namespace, run_name: str, tags: dict[str, str]):
    """An MLflow run when ``--track EXPERIMENT`` is given, else nothing."""
    if not args.track:
        yield None
        return
    from basis.settings import parse_assignment
    from basis.tracking import tracked_run

    for text in args.tag:
        path, value = parse_assignment(text)
        tags[".".join(path)] = str(value)
    if "variant" in tags:  # e.g. a k of the sweep or an ablation setting: names stay unique
        run_name = f"{run_name} ({tags['variant']})"
    with tracked_run(args.track, run_name, tags, store=args.store, parent=args.parent) as run:
        yield run


def _progress(total: int):
    """A step callback that prints step, loss, ms per step and the time left to stderr
    (see :class:`basis.timing.Progress`), so that a job's log shows progress."""
    progress = Progress(total, "step")

    def report(step: int, info: dict[str, float]) -> None:
        progress.update(step + 1, f"loss {info['loss']:.4g}")

    return report


def _callbacks(*callbacks):
    """One step callback that calls each of ``callbacks`` that is not None."""
    chosen = [c for c in callbacks if c is not None]

    def each(step: int, info: dict[str, float]) -> None:
        for callback in chosen:
            callback(step, info)

    return each


def run_folders(out: str | None, seeds: list[int]) -> list[str | None]:
    """Each seed's --out folder: ``{seed}`` in ``out`` becomes the seed; several seeds
    need it, so that no seed overwrites another's results."""
    if len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds lists a seed twice: {seeds}")
    if out is None:
        return [None] * len(seeds)
    if len(seeds) > 1 and "{seed}" not in out:
        raise InputError(f"--out {out}: with several --seeds it needs {{seed}}, e.g. results/runs/seed{{seed}}")
    return [out.replace("{seed}", str(seed)) for seed in seeds]


def cmd_run(args: argparse.Namespace) -> int:
    from basis.settings import resolve_settings

    # What needs neither torch nor scikit-learn is checked before they are imported: a
    # command with a bad setting or output folder is refused in a fraction of a second.
    seeds = args.seeds or [args.seed]
    for seed in seeds:
        check_seed(seed, "--seeds")
    folders = run_folders(args.out, seeds)
    settings = resolve_settings(args.method, assignments=args.set, dataset=args.dataset)
    for folder in filter(None, folders):
        check_output(folder, folder=True)
    from basis.data import load_inputs
    from basis.device import resolve_device
    from basis.experiment import check_method
    from basis.references import load_reference

    mark_startup()
    device = str(resolve_device(args.device))  # resolved once: logged as used
    # Loaded once for every seed: the data, its features and the reference.
    with timed("load"):
        data = load_inputs(args.dataset, args.features, seed=args.data_seed, root=args.data_root)
        n_components = settings["n_components"] or data.n_classes
        stored = None if args.reference is None else load_reference(args.reference, settings, n_components, data.X_test)
        check_method(args.method, data, settings)  # what depends on the data, before a run opens
    outputs = {
        seed: _run_seed(args, seed, folder, settings, device, data, stored) for seed, folder in zip(seeds, folders)
    }
    _print(outputs[seeds[0]] if args.seeds is None else {"seeds": outputs}, args.json)
    return 0


def _run_seed(args, seed: int, out: str | None, settings: dict, device: str, data, stored) -> dict:
    """One seed of ``run``: train, evaluate, write ``out``, and log it as its own MLflow run."""
    from basis.experiment import run_method

    tags = {"dataset": args.dataset, "method": args.method, "seed": str(seed)}
    run_name = f"{args.dataset}-{args.method}-seed{seed}"  # also its logged model's name
    with _maybe_tracked(args, run_name, tags) as run:
        if run:
            run.log_params(
                {
                    "method": args.method,
                    "dataset": args.dataset,
                    "seed": seed,
                    "data_seed": args.data_seed,
                    "device": device,
                    "threads": args.threads,
                    "features": args.features or "raw",
                    **settings,
                    "n_components": settings["n_components"] or data.n_classes,
                }
            )
            from basis.references import fingerprint

            source = args.features or f"{args.dataset} (data seed {args.data_seed}, {args.data_root})"
            digest = fingerprint(data.X_train)
            run.log_dataset(args.dataset, digest, source, data.X_train, data.y_train)
        n_iter = settings.get("n_iter", 1)
        result = run_method(
            args.method,
            data,
            seed=seed,
            device=device,
            settings=settings,
            callback=_callbacks(run.log_step if run else None, _progress(n_iter)),
            reference=stored,
        )
        scores = {k: v for k, v in result.metrics.items() if k != "train_seconds"}
        output = {**scores, "train_seconds": result.metrics["train_seconds"], "device": str(result.estimator.device_)}
        if out:
            folder = Path(out)
            folder.mkdir(parents=True, exist_ok=True)
            with timed("outputs"):
                result.estimator.save(folder / "model.pt")
                with atomic_path(folder / "embedding.npz") as partial:
                    np.savez(
                        partial, test=result.test_embedding, reference=result.reference_embedding, labels=data.y_test
                    )
                # Scores only: the same seed gives the same file (timings go to MLflow and stdout).
                write_json(folder / "metrics.json", scores)
        if run:
            final_step = n_iter - 1  # the model takes the curves' values of the last step
            if out:
                for name in ("metrics.json", "embedding.npz", "model.pt"):
                    run.log_artifact(Path(out) / name)
            checkpoint = Path(out) / "model.pt" if out else None
            if checkpoint is None:  # the model is logged from a checkpoint file
                checkpoint = Path(tempfile.mkdtemp()) / "model.pt"
                result.estimator.save(checkpoint)
            inputs = (
                f"{data.X_test.shape[1]}-d Siamese features of {args.dataset} images (python -m basis features);"
                " embed images end to end with the run's siamese.pt: python -m basis embed --siamese"
                if args.features
                else f"raw {args.dataset} points ({data.X_test.shape[1]} features)"
            )
            description = f"{args.method} embedding into R^{result.test_embedding.shape[1]}; input: {inputs}"
            run.set_description(description)
            if args.siamese:
                run.log_artifact(args.siamese)
            model_id = run.log_embedding_model(checkpoint, data.X_test[:5], description, name=run_name, step=final_step)
            # The scores after the model, so that they are its metrics too, measured on the data
            # set it links; at step 0, where MLflow charts them as bars that compare runs.
            final = {k: v for k, v in output.items() if k != "device"}
            run.log_metrics(final, model_id=model_id, dataset=(args.dataset, digest))
    return output


def cmd_embed(args: argparse.Namespace) -> int:
    from basis.inputs import load_points
    from basis.serving import load_embedding

    check_output(args.out, folder=False, suffix=".npy")
    inputs = load_points(args.input, images=bool(args.siamese))
    features = None
    if args.siamese:  # images -> the Siamese features the model was trained on
        from basis.features import SiameseFeatures

        features = SiameseFeatures.load(args.siamese, device=args.device)
        features.check_images(inputs, name=f"--input {args.input}")
    # MLflow's download progress bars would fill stderr, which holds errors only
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    embed = load_embedding(args.model, store=args.store)
    if features is not None:
        inputs = features.transform(inputs)
    embedding = np.asarray(embed(inputs))
    with atomic_path(args.out) as partial:
        np.save(partial, embedding)
    _print({"n": int(embedding.shape[0]), "n_components": int(embedding.shape[1]), "out": str(args.out)}, args.json)
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    from basis.data import load_dataset

    if args.out:
        check_output(args.out, folder=False, suffix=".json")
    data = load_dataset(args.dataset, seed=args.data_seed, root=args.data_root, download=True)
    summary = {
        "dataset": args.dataset,
        "n_train": len(data.X_train),
        "n_test": len(data.X_test),
        "shape": list(data.X_train.shape[1:]),
        "n_classes": data.n_classes,
    }
    if args.out:
        write_json(args.out, summary)
    _print(summary, args.json)
    return 0


def cmd_reference(args: argparse.Namespace) -> int:
    from basis.settings import resolve_settings

    settings = resolve_settings("basis", assignments=args.set, dataset=args.dataset)
    check_output(args.out, folder=False, suffix=".npz")
    from basis.data import load_inputs
    from basis.device import resolve_device
    from basis.references import save_reference

    mark_startup()
    device = str(resolve_device(args.device))
    with timed("load"):
        data = load_inputs(args.dataset, args.features, seed=args.data_seed, root=args.data_root)
    tags = {"dataset": args.dataset, "neighbors": settings["graph"].get("neighbors", "exact")}
    with _maybe_tracked(args, f"{args.dataset}-reference", tags) as run:
        if run:
            graph = {f"graph.{key}": value for key, value in settings["graph"].items()}
            run.log_params({"dataset": args.dataset, "device": device, "threads": args.threads, **graph})
        with timed("reference"):
            summary = save_reference(args.out, data, settings, device=device, eigensolver=args.eigensolver)
        if run:  # the cost by stage and, for approximate neighbours, their recall@k
            run.log_metrics({k: v for k, v in summary.items() if k.endswith("seconds") or k == "neighbor_recall"})
            run.log_params({"eigensolver": summary["eigensolver"]})
    _print(summary, args.json)
    return 0


def cmd_tracking(args: argparse.Namespace) -> int:
    from basis import tracking

    if args.action == "setup":
        ids = tracking.ensure_experiments(args.experiment, store=args.store)
        if args.flag:
            # The store's identity, so that a later invocation notices a deleted or replaced store.
            identity = tracking.store_identity(args.store)
            write_json(
                args.flag, {"tracking_uri": tracking.tracking_uri(args.store), "experiments": ids, "store": identity}
            )
        _print(ids, args.json)
    elif args.action == "url":
        (experiment,) = args.experiment or ["basis-runs"]
        found = tracking.client(args.store).get_experiment_by_name(experiment)
        if found is None:
            raise InputError(f"--experiment {experiment} is not in the store {args.store}; run the workflow first")
        tracking.ensure_experiments([experiment], store=args.store)  # a store made before the view existed
        print(tracking.table1_url(args.ui, found.experiment_id))
    else:
        _print({"closed": tracking.close_stale_runs(store=args.store)}, args.json)
    return 0


def cmd_features(args: argparse.Namespace) -> int:
    from basis.data import load_dataset
    from basis.features import SiameseFeatures, train_features

    options = _options(args.set, ["out_dim", "margin", "n_steps", "pairs_per_step", "lr"], "features")
    SiameseFeatures(**options).check_params()
    check_output(args.out, folder=False, suffix=".npz")
    if args.checkpoint:
        check_output(args.checkpoint, folder=False, name="--checkpoint", suffix=".pt")
    mark_startup()
    with timed("load"):
        data = load_dataset(args.dataset, seed=args.data_seed, root=args.data_root)
    if not data.is_image:
        raise InputError(
            f"data set {args.dataset!r} has no images; Siamese features need one of the image sets or digits"
        )
    with _maybe_tracked(
        args, f"{args.dataset}-features-seed{args.seed}", {"dataset": args.dataset, "seed": str(args.seed)}
    ) as run:
        if run:
            run.log_params({"dataset": args.dataset, "seed": args.seed, "device": args.device, **options})
        with timed("train"):
            result = train_features(
                data.X_train,
                data.y_train,
                data.X_test,
                data.y_test,
                seed=args.seed,
                device=args.device,
                **options,
            )
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(out) as partial:
            np.savez(
                partial,
                X_train=result["train"],
                y_train=data.y_train,
                X_test=result["test"],
                y_test=data.y_test,
                dataset=args.dataset,  # checked by every run that reads these features
                data_seed=args.data_seed,
            )
        if args.checkpoint:
            result["model"].save(args.checkpoint)
        output = {
            "dim": int(result["train"].shape[1]),
            "train_seconds": result["train_seconds"],
            "knn_accuracy": result["knn_accuracy"],
            "device": str(result["model"].device_),
        }
        if run:
            for step, loss in enumerate(result["model"].loss_curve_):
                run.log_step(step, {"contrastive_loss": loss})
            run.log_metrics({k: v for k, v in output.items() if k != "device"})
            if args.checkpoint:
                run.log_artifact(args.checkpoint)
    _print(output, args.json)
    return 0


def cmd_study(args: argparse.Namespace) -> int:
    from basis.catalog import check_study_settings, study_parameters

    options = _options(args.set, study_parameters(args.name), f"study {args.name!r}")
    check_study_settings(args.name, options)
    check_output(args.out, folder=True)
    from basis.device import resolve_device  # imports torch: after the checks that need none

    resolve_device(args.device)
    from basis.studies import save_study, study_function

    study = study_function(args.name)
    accepted = study_parameters(args.name, include_common=True)
    common = {"seed": args.seed, "data_seed": args.data_seed, "device": args.device, "data_root": args.data_root}
    options.update({k: v for k, v in common.items() if k in accepted})
    tags = {"study": args.name, "seed": str(args.seed)}
    with _maybe_tracked(args, f"{args.name}-seed{args.seed}", tags) as run:
        if run:
            run.log_params({"study": args.name, **options})
            if "callback" in accepted:
                options["callback"] = run.log_step
        mark_startup()
        start = time.perf_counter()
        with timed("study"):
            result, arrays = study(**options)
        seconds = time.perf_counter() - start
        with timed("outputs"):
            save_study(args.out, result, arrays)  # results only: the same seed writes the same files
        if run:
            run.log_metrics({**result, "seconds": seconds})
            for name in ("metrics.json", "arrays.npz"):
                run.log_artifact(Path(args.out) / name)
    _print({**result, "seconds": seconds}, args.json)
    return 0


def cmd_figure(args: argparse.Namespace) -> int:
    from basis.catalog import study_declaration, study_names

    figures = {f.name: (name, f) for name in study_names() for f in study_declaration(name).figures}
    if args.name not in figures:
        raise InputError(f"unknown figure {args.name!r}; valid: {sorted(figures)}")
    study, figure = figures[args.name]
    expected = len(figure.runs) if figure.runs else 1 if study_declaration(study).runs is None else None
    if expected is not None and len(args.input) != expected:
        raise InputError(f"figure {args.name!r} is drawn from {expected} study folder(s), got {len(args.input)}")
    missing = [folder for folder in args.input if not (Path(folder) / "arrays.npz").is_file()]
    if missing:
        raise InputError(f"no arrays.npz in {missing}; run the study {study!r} first")
    check_output(args.out, folder=False, suffix=".png")
    from basis.figures import check_study

    for folder in args.input:  # read whole once before a run opens (the drawing reads them again)
        check_study(folder)
    from basis.studies import study_function

    out = Path(args.out)
    written = {"png": out, "pdf": out.with_suffix(".pdf"), "caption": out.with_suffix(".rst")}
    with _maybe_tracked(args, args.name, {"figure": args.name, "study": study}) as run:
        table = study_function(study, figure=args.name)([Path(folder) for folder in args.input], out)
        written["caption"].write_text(figure.caption + "\n")
        if figure.table:
            written["table"] = out.with_suffix(".md")
            with atomic_path(written["table"]) as partial:
                partial.write_text(table)
        if run:
            run.set_description(figure.caption)
            for path in written.values():
                run.log_artifact(path)
    _print({kind: str(path) for kind, path in written.items()}, args.json)
    return 0


def _options(assignments: list[str], valid: list[str], what: str) -> dict:
    """``key=value`` assignments as a dict, refusing keys outside ``valid``."""
    from basis.settings import parse_assignment

    options = {}
    for text in assignments:
        path, value = parse_assignment(text)
        options[".".join(path)] = value
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise InputError(f"unknown option(s) {unknown} for {what}; valid: {sorted(valid)}")
    return options


#: ``bench step``'s untimed first iterations.
WARMUP_STEPS = 10


def cmd_bench(args: argparse.Namespace) -> int:
    if args.what == "step" and args.iterations <= WARMUP_STEPS:
        raise InputError(f"--iterations {args.iterations}: needs more than the {WARMUP_STEPS} warm-up steps")
    for flag in ("n", "d", "k", "k_eig"):
        if getattr(args, flag) < 1:
            raise InputError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: expected a positive count")
    from basis import bench
    from basis.threads import thread_report

    if args.what == "step":
        result = bench.bench_step(
            batch_size=args.m,
            n_components=args.k_eig,
            dim=args.d,
            n_neighbors=args.k,
            device=args.device,
            eigensolver=args.eigensolver,
            cuda_graphs=args.cuda_graphs,
            compare=args.compare,
            profile=args.profile,
            n_iter=args.iterations,
            warmup=WARMUP_STEPS,
            start_at=args.start_at,
            data=args.data,
        )
    else:
        result = bench.bench_reference(
            n=args.n,
            dim=args.d,
            n_neighbors=args.k,
            n_components=args.k_eig,
            device=args.device,
            neighbors=args.neighbors,
            eigensolver=args.reference_eigensolver,
            topk_block=args.topk_block,
            spread=args.spread,
            save_embedding=args.save_embedding,
        )
    result["threads"] = thread_report()
    _print(result, args.json)
    return 0


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors in one line (what was wrong, and where the help is),
    exit status 2, like every other refused input."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m basis", description=__doc__)
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
    study.add_argument("--out", required=True, help="folder for metrics.json and arrays.npz")
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


def check_common(args: argparse.Namespace) -> None:
    """The inputs every command shares, checked before it starts: the seed, and the MLflow
    store of a command that logs to it (``--track``) or reads from it (``embed`` of a
    ``runs:/`` model)."""
    check_seed(args.seed)
    check_seed(args.data_seed, "--data-seed")
    if getattr(args, "track", None) is not None:
        check_experiment_name(args.track)
        check_store(args.store, creates=True)
    if args.command == "run" and getattr(args, "siamese", None) and not Path(args.siamese).is_file():
        raise InputError(f"--siamese {args.siamese} does not exist; name the features' Siamese checkpoint")
    if args.command == "tracking" and args.action == "url" and len(args.experiment) > 1:
        raise InputError(f"tracking url shows one experiment, got --experiment {args.experiment}")
    if args.command == "tracking" and (args.action in ("setup", "url") or Path(args.store).exists()):
        check_store(args.store, creates=args.action == "setup")  # closing runs of no store closes none
        if args.flag:
            check_output(args.flag, folder=False, name="--flag")
    if args.command == "embed" and Path(args.model).suffix != ".pt" and not Path(args.model).is_file():
        check_store(args.store, creates=False)  # an MLflow model URI (runs:/..., models:/...)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        check_common(args)
        stop_on_sigterm()
        args.threads = limit_threads(args.threads)
        with recording() as seconds:
            code = args.func(args)
            total = job_seconds()
        if args.json and seconds:  # a job's phases, for its log (benchmarks/workflow_profile.py)
            report(seconds, total)
        return code
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Terminated as err:
        closed = "; its MLflow run is closed as KILLED" if getattr(args, "track", None) else ""
        print(f"error: stopped by {err} (a cancel or a time limit){closed}", file=sys.stderr)
        return STOPPED_STATUS
    except Exception:
        import traceback

        traceback.print_exc()
        print(
            "error: the traceback above is a bug in basis, not a problem with your input; please report it",
            file=sys.stderr,
        )
        return 1
    finally:
        release_outputs()

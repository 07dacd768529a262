"""The bodies of ``python -m basis``'s commands: ``cmd_<command>(args) -> exit status`` (``run``'s in
:mod:`basis.cli.run`)."""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from basis.errors import InputError
from basis.runtime.inputs import check_output
from basis.runtime.outputs import atomic_path, write_json
from basis.runtime.timing import mark_startup, timed


def print_result(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>16}: {value}")


@contextmanager
def maybe_tracked(args: argparse.Namespace, run_name: str, tags: dict[str, str]):
    """An MLflow run when ``--track EXPERIMENT`` is given, else nothing."""
    if not args.track:
        yield None
        return
    from basis.catalog.settings import parse_assignment
    from basis.tracking import tracked_run

    for text in args.tag:
        path, value = parse_assignment(text)
        tags[".".join(path)] = str(value)
    if "variant" in tags:  # e.g. a k of the sweep or an ablation setting: names stay unique
        run_name = f"{run_name} ({tags['variant']})"
    with tracked_run(args.track, run_name, tags, store=args.store, parent=args.parent) as run:
        yield run


def cmd_embed(args: argparse.Namespace) -> int:
    from basis.runtime.inputs import load_points
    from basis.tracking.serving import load_embedding

    check_output(args.out, folder=False, suffix=".npy")
    if args.data is None:
        inputs = load_points(args.input, images=bool(args.siamese))
    else:  # one's own table or image folder
        from basis.data.own_sets import load_points_of

        if Path(args.data).is_dir() != bool(args.siamese):
            what = "an image folder: embed its images with --siamese" if args.siamese is None else "a table of points"
            raise InputError(f"--data {args.data} is {what}" + ("" if args.siamese is None else ", not of images"))
        inputs = load_points_of(args.data, args.label_column, args.image_size)
    from basis.runtime.device import resolve_device

    device = str(resolve_device(args.device))
    features = None
    if args.siamese:  # images -> the Siamese features the model was trained on
        from basis.features import SiameseFeatures

        features = SiameseFeatures.load(args.siamese, device=device)
        features.check_images(inputs, name=f"--input {args.input}")
    # MLflow's download progress bars would fill stderr, which holds errors only
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    embed = load_embedding(args.model, store=args.store, device=device)
    if features is not None:
        inputs = features.transform(inputs)
    embedding = np.asarray(embed(inputs))
    with atomic_path(args.out) as partial:
        np.save(partial, embedding)
    print_result(
        {"n": int(embedding.shape[0]), "n_components": int(embedding.shape[1]), "out": str(args.out)}, args.json
    )
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    from basis.data import load_dataset

    if args.out:
        check_output(args.out, folder=False, suffix=".json")
    data = load_dataset(args.dataset, seed=args.data_seed, root=args.data_root, download=True, source=args.source)
    summary = {
        "dataset": args.dataset,
        "n_train": len(data.X_train),
        "n_test": len(data.X_test),
        "shape": list(data.X_train.shape[1:]),
        "n_classes": data.n_classes,
    } | ({"standin": True} if data.standin else {})
    if args.source is not None:  # what it was read from, and a hash of its contents
        from basis.data.own_sets import content_hash

        summary |= {
            "kind": "images" if args.source.is_images else "table",
            "source": args.source.declaration(),  # what `study --declaration` reads back
            "content_hash": content_hash(args.source),
            "classes": data.classes,
        }
    if args.out:
        write_json(args.out, summary)
    print_result(summary, args.json)
    return 0


def cmd_reference(args: argparse.Namespace) -> int:
    from basis.catalog.settings import resolve_settings

    settings = resolve_settings("basis", assignments=args.set, dataset=args.dataset)
    check_output(args.out, folder=False, suffix=".npz")
    from basis.data import load_inputs
    from basis.references import check_graph_size, save_reference
    from basis.runtime.device import resolve_device

    mark_startup()
    device = str(resolve_device(args.device))
    with timed("load"):
        data = load_inputs(args.dataset, args.features, seed=args.data_seed, root=args.data_root, source=args.source)
    check_graph_size(data, settings)
    tags = {"dataset": args.dataset, "neighbors": settings["graph"].get("neighbors", "exact")}
    with maybe_tracked(args, f"{args.dataset}-reference", tags) as run:
        if run:
            graph = {f"graph.{key}": value for key, value in settings["graph"].items()}
            run.log_params({"dataset": args.dataset, "device": device, "threads": args.threads, **graph})
        with timed("reference"):
            summary = save_reference(args.out, data, settings, device=device, eigensolver=args.eigensolver)
        if run:  # the cost by stage, for approximate neighbours their recall@k, and the certificate
            run.log_metrics({k: v for k, v in summary.items() if k.endswith("seconds") or k == "neighbor_recall"})
            run.log_metrics(
                {
                    k: float(v)
                    for k, v in summary.items()
                    if k.startswith("certificate_") and k != "certificate_solver" and math.isfinite(float(v))
                }
            )
            run.log_params({"eigensolver": summary["eigensolver"], "certified_by": summary["certificate_solver"]})
    print_result(summary, args.json)
    return 0


def cmd_tracking(args: argparse.Namespace) -> int:
    from basis import tracking
    from basis.runtime.stores import redacted_uri

    if args.action == "setup":
        ids = tracking.ensure_experiments(args.experiment, store=args.store)
        if args.flag:
            # The store's identity, so that a later invocation notices a deleted or replaced store.
            identity = tracking.store_identity(args.store)
            uri = redacted_uri(tracking.tracking_uri(args.store))  # a file keeps no credentials
            write_json(args.flag, {"tracking_uri": uri, "experiments": ids, "store": identity})
        print_result(ids, args.json)
    elif args.action == "url":
        (experiment,) = args.experiment or ["basis-runs"]
        found = tracking.client(args.store).get_experiment_by_name(experiment)
        if found is None:
            raise InputError(f"--experiment {experiment} is not in the store {args.store}; run the workflow first")
        print(tracking.table1_url(args.ui, found.experiment_id))
    elif args.action == "replay":
        print_result({"replayed": _replay(args.store)}, args.json)
    else:
        print_result({"closed": tracking.close_stale_runs(store=args.store)}, args.json)
    return 0


def _replay(store: str) -> dict[str, int]:
    """The kept writes of the runs a server could not take, sent (basis.tracking.pending)."""
    from basis.runtime.stores import redacted_uri
    from basis.tracking import tracking_uri
    from basis.tracking.pending import reason, replay, server_unreachable
    from basis.tracking.runs import WRITES

    try:
        return replay(WRITES, store)
    except Exception as err:
        if not server_unreachable(err):
            raise
        raise InputError(
            f"the tracking server {redacted_uri(tracking_uri(store))} still cannot be reached ({reason(err)});"
            " replay again once it is back (what was sent stays sent)"
        ) from None


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
        data = load_dataset(args.dataset, seed=args.data_seed, root=args.data_root, source=args.source)
    if not data.is_image:
        raise InputError(
            f"data set {args.dataset!r} has no images; Siamese features need an image set, digits or an image folder"
        )
    tags = {"dataset": args.dataset, "seed": str(args.seed)} | ({"data": "standin"} if data.standin else {})
    with maybe_tracked(args, f"{args.dataset}-features-seed{args.seed}", tags) as run:
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
    print_result(output, args.json)
    return 0


def cmd_study(args: argparse.Namespace) -> int:
    from basis.plan.registry import check_study_settings, study_parameters

    options = _options(args.set, study_parameters(args.name), f"study {args.name!r}")
    runs = _study_runs(args, options)
    declared = _declared_sources(args.declaration)
    for run_options, folder in runs.values():
        check_study_settings(args.name, {k: v for k, v in run_options.items() if k != "data_source"})
        check_output(folder, folder=True)
        _take_source(args.name, run_options, declared)
    from basis.runtime.device import resolve_device  # imports torch: after the checks that need none

    resolve_device(args.device)
    outputs = {dataset: _study_run(args, run_options, folder) for dataset, (run_options, folder) in runs.items()}
    print_result(outputs[None] if args.datasets is None else {"datasets": outputs}, args.json)
    return 0


def _declared_sources(paths: list[str]) -> dict:
    """The data sets of one's own that ``--declaration`` files (``download``'s summaries) declare."""
    from basis.catalog.data_sources import data_source
    from basis.runtime.outputs import read_metrics

    sources = {}
    for path in paths:
        summary = read_metrics(path)
        if not isinstance(summary.get("source"), dict) or not isinstance(summary.get("dataset"), str):
            raise InputError(
                f"--declaration {path} declares no data set of one's own (python -m basis download --data)"
            )
        sources[summary["dataset"]] = data_source(summary["dataset"], summary["source"], where=f"--declaration {path}")
    return sources


def _take_source(study: str, options: dict, declared: dict) -> None:
    """A run's data set of one's own into its options (``data_source``), or a refusal."""
    from basis.catalog import DATASETS
    from basis.plan.registry import study_parameters

    dataset = options.get("dataset")
    if dataset is None or dataset in DATASETS:
        return
    if dataset not in declared:
        raise InputError(f"data set {dataset!r} is not in the catalog; declare it with --declaration (its summary)")
    if "data_source" not in study_parameters(study, include_common=True):
        raise InputError(f"study {study!r} reads the catalog's data sets only, not {dataset!r}")
    if not declared[dataset].has_labels():
        raise InputError(f"data set {dataset} has no labels; study {study!r} draws its anchors and scores per class")
    options["data_source"] = declared[dataset]


def _study_runs(args: argparse.Namespace, options: dict) -> dict[str | None, tuple[dict, str]]:
    """Each run of ``study``: its settings and folder; with ``--datasets``, one run per data
    set (``{dataset}`` in ``--out`` becomes its name), else the one run ``--set`` describes."""
    if args.datasets is None:
        return {None: (options, args.out)}
    from basis.plan.registry import study_declaration

    if study_declaration(args.name).runs != "datasets":
        raise InputError(f"--datasets: study {args.name!r} does not run per data set; give its settings with --set")
    if "dataset" in options:
        raise InputError("--datasets and --set dataset=... name the data set twice; give one of them")
    if len(set(args.datasets)) != len(args.datasets):
        raise InputError(f"--datasets lists a data set twice: {args.datasets}")
    if len(args.datasets) > 1 and "{dataset}" not in args.out:
        raise InputError(f"--out {args.out}: with several --datasets it needs {{dataset}}, e.g. results/{{dataset}}")
    return {d: ({**options, "dataset": d}, args.out.replace("{dataset}", d)) for d in args.datasets}


def _study_run(args: argparse.Namespace, options: dict, out: str) -> dict:
    """One run of ``study``: compute, write ``out`` and, if tracked, log it as its own MLflow
    run; returns what ``study`` prints for it."""
    from basis.plan.registry import study_parameters
    from basis.studies import save_study, study_function

    study = study_function(args.name)
    accepted = study_parameters(args.name, include_common=True)
    source = options.pop("data_source", None)
    common = {"seed": args.seed, "data_seed": args.data_seed, "device": args.device, "data_root": args.data_root}
    options = {**options, **{k: v for k, v in common.items() if k in accepted}}
    tags = {"study": args.name, "seed": str(args.seed)}
    if args.datasets is not None:  # the tags a job of this one run gets from the workflow
        tags.update(run=options["dataset"], variant=f"{args.name}-{options['dataset']}")
    with maybe_tracked(args, f"{args.name}-seed{args.seed}", tags) as run:
        if run:
            run.log_params({"study": args.name, **options, **({"data": source.path} if source else {})})
            if "callback" in accepted:
                options["callback"] = run.log_step
        if source is not None:
            options["data_source"] = source
        mark_startup()
        start = time.perf_counter()
        with timed("study"):
            result, arrays = study(**options)
        seconds = time.perf_counter() - start
        with timed("outputs"):
            save_study(out, result, arrays)  # results only: the same seed writes the same files
        if run:
            run.log_metrics({**result, "seconds": seconds})
            for name in ("metrics.json", "arrays.npz"):
                run.log_artifact(Path(out) / name)
    return {**result, "seconds": seconds}


def cmd_figure(args: argparse.Namespace) -> int:
    from basis.plan.registry import study_declaration, study_names

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
    from basis.studies.figures import check_study

    for folder in args.input:  # read whole once before a run opens (the drawing reads them again)
        check_study(folder)
    from basis.studies import study_function

    out = Path(args.out)
    written = {"png": out, "pdf": out.with_suffix(".pdf"), "caption": out.with_suffix(".rst")}
    with maybe_tracked(args, args.name, {"figure": args.name, "study": study}) as run:
        table = study_function(study, figure=args.name)([Path(folder) for folder in args.input], out)
        written["caption"].write_text(figure.caption + "\n")
        if figure.table:  # its numbers as text, and as a page of the Snakemake report
            from basis.paper import markdown_to_html

            written["table"], written["table_html"] = out.with_suffix(".md"), out.with_suffix(".table.html")
            for path, text in ((written["table"], table), (written["table_html"], markdown_to_html(table))):
                with atomic_path(path) as partial:
                    partial.write_text(text)
        if run:
            run.set_description(figure.caption)
            for path in written.values():
                run.log_artifact(path)
    print_result({kind: str(path) for kind, path in written.items()}, args.json)
    return 0


def _options(assignments: list[str], valid: list[str], what: str) -> dict:
    """``key=value`` assignments as a dict, refusing keys outside ``valid``."""
    from basis.catalog.settings import parse_assignment

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
    from basis.cli import bench
    from basis.runtime.threads import thread_report

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
    print_result(result, args.json)
    return 0


#: The workflow's config schema, beside the library in a checkout.
CONFIG_SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


def cmd_config(args: argparse.Namespace) -> int:
    """Check workflow config files before Snakemake reads them (its message for malformed
    YAML names no line): each file's YAML (line and column), a key given twice, and the
    config against the workflow's schema, each problem in one line."""
    import yaml

    from basis.catalog.settings import check_config_schema, check_yaml_file

    config: dict = {}
    for path in args.files:
        if not Path(path).is_file():
            raise InputError(f"{path}: no such config file")
        check_yaml_file(path)
        with open(path) as handle:
            loaded = yaml.safe_load(handle) or {}
        if not isinstance(loaded, dict):
            raise InputError(f"{path}: a config is a mapping of keys, got a {type(loaded).__name__}")
        config.update(loaded)
    if CONFIG_SCHEMA.is_file():  # a checkout; the dry run checks the rest (data sets, studies)
        check_config_schema(config, CONFIG_SCHEMA, args.files)
    print_result({"config": args.files, "checked": "YAML and schema"}, args.json)
    return 0

"""The bodies of ``python -m basis``'s commands: ``cmd_<command>(args) -> exit status``."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from basis.errors import InputError
from basis.runtime.inputs import check_output, check_seed
from basis.runtime.outputs import atomic_path, write_json
from basis.runtime.timing import Progress, mark_startup, timed


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
    from basis.catalog.settings import parse_assignment
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
    (see :class:`basis.runtime.timing.Progress`), so that a job's log shows progress."""
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
    from basis.catalog.settings import resolve_settings

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
    from basis.experiment import check_method
    from basis.references import load_reference
    from basis.runtime.device import resolve_device

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
    from basis.runtime.inputs import load_points
    from basis.tracking.serving import load_embedding

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
    from basis.catalog.settings import resolve_settings

    settings = resolve_settings("basis", assignments=args.set, dataset=args.dataset)
    check_output(args.out, folder=False, suffix=".npz")
    from basis.data import load_inputs
    from basis.references import save_reference
    from basis.runtime.device import resolve_device

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
    from basis.runtime.device import resolve_device  # imports torch: after the checks that need none

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
    from basis.studies.figures import check_study

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
    _print(result, args.json)
    return 0

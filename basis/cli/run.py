"""``python -m basis run``: train one method on one data set, each seed in turn or together,
and write, score and log every seed on its own."""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from basis.catalog.data_sources import UNLABELLED_UNAVAILABLE
from basis.cli.commands import maybe_tracked, print_result
from basis.errors import InputError
from basis.runtime.inputs import check_output, check_seed
from basis.runtime.outputs import atomic_path, write_json
from basis.runtime.timing import Progress, mark_startup, timed


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


def ablation_variants(args: argparse.Namespace) -> dict[str | None, tuple[list[str], dict[str, str]]]:
    """Each variant ``run`` trains: its ``--set`` assignments and its extra MLflow tags. One
    without ``--variants``; with it, each alignment of the ablation (``ransac``, ``lstsq``,
    ``none``; ``-outliers``: with ``--outlier-fraction`` of every batch's anchor slots
    holding another class's node), its assignments after ``--set``'s, so that they win."""
    with_outliers = [v for v in args.variants or [] if v.endswith("-outliers")]
    if args.outlier_fraction is not None and not with_outliers:
        raise InputError("--outlier-fraction belongs to --variants with -outliers (e.g. ransac-outliers); give those")
    if args.variants is None:
        return {None: (args.set, {})}
    if len(set(args.variants)) != len(args.variants):
        raise InputError(f"--variants lists a variant twice: {args.variants}")
    if args.out is not None and len(args.variants) > 1 and "{variant}" not in args.out:
        raise InputError(f"--out {args.out}: with several --variants it needs {{variant}}, e.g. results/{{variant}}")
    if with_outliers and args.outlier_fraction is None:
        raise InputError(f"--variants {with_outliers} need --outlier-fraction")
    variants = {}
    for variant in args.variants:
        alignment, _, outliers = variant.partition("-")
        assignments = [f'alignment="{alignment}"', *([f"anchor_outliers={args.outlier_fraction}"] if outliers else [])]
        # the tags a job of this one variant gets from the workflow
        variants[variant] = ([*args.set, *assignments], {"alignment": variant, "variant": f"alignment-{variant}"})
    return variants


def cmd_run(args: argparse.Namespace) -> int:
    from basis.catalog.settings import resolve_settings

    # What needs neither torch nor scikit-learn is checked before they are imported: a
    # command with a bad setting or output folder is refused in a fraction of a second.
    seeds = args.seeds or [args.seed]
    for seed in seeds:
        check_seed(seed, "--seeds")
    variants = {}
    for variant, (assignments, tags) in ablation_variants(args).items():
        out = args.out if args.out is None or variant is None else args.out.replace("{variant}", variant)
        settings = resolve_settings(args.method, assignments=assignments, dataset=args.dataset)
        variants[variant] = (settings, run_folders(out, seeds), tags)
    for _, folders, _ in variants.values():
        for folder in filter(None, folders):
            check_output(folder, folder=True)
    from basis.data import load_inputs
    from basis.experiment import check_method, unlabelled_settings
    from basis.references import load_reference
    from basis.runtime.device import resolve_device

    mark_startup()
    device = str(resolve_device(args.device))  # resolved once: logged as used
    # Loaded once for every seed and variant: the data, its features and the reference.
    with timed("load"):
        data = load_inputs(args.dataset, args.features, seed=args.data_seed, root=args.data_root, source=args.source)
        for variant, (settings, *rest) in variants.items():
            settings, why = unlabelled_settings(data, settings)
            variants[variant] = (settings, *rest)
        if why:
            print(f"note: {why}", file=sys.stderr)
        first = next(iter(variants.values()))[0]
        n_components = first["n_components"] or data.n_components
        stored = None if args.reference is None else load_reference(args.reference, first, n_components, data.X_test)
        # what depends on the data, before a run opens
        checked = {variant: check_method(args.method, data, settings) for variant, (settings, *_) in variants.items()}
    outputs = {}
    for variant, (settings, folders, tags) in variants.items():
        together = _trains_together(args, seeds, device, checked[variant])
        ran = _run_seeds(args, seeds, folders, settings, device, data, stored, together, tags)
        outputs[variant] = ran[seeds[0]] if args.seeds is None else {"seeds": ran}
    print_result(outputs[None] if args.variants is None else {"variants": outputs}, args.json)
    return 0


def _run_seeds(
    args,
    seeds: list[int],
    folders: list[str | None],
    settings: dict,
    device: str,
    data,
    stored,
    together: bool,
    tags: dict[str, str],
) -> dict:
    """Each seed of ``run``, trained in turn, or ``together`` as one batched network
    (``--seeds-together``); each seed is evaluated, written and logged on its own."""
    if not together:
        return {
            seed: _run_seed(args, seed, out, settings, device, data, stored, tags) for seed, out in zip(seeds, folders)
        }
    from basis.experiment import run_seeds_together

    with ExitStack() as stack:
        opened = {}
        for seed in seeds:
            run_name, identity = _run_identity(args, seed, tags)
            run = stack.enter_context(maybe_tracked(args, run_name, identity))
            opened[seed] = (run_name, run, _log_inputs(run, args, seed, settings, device, data))
        progress = _progress(settings.get("n_iter", 1))  # one progress line: the seeds step together
        callbacks = {
            seed: _callbacks(run.log_step if run else None, progress if seed == seeds[0] else None)
            for seed, (_, run, _) in opened.items()
        }
        results = run_seeds_together(
            args.method, data, seeds, device=device, settings=settings, callbacks=callbacks, reference=stored
        )
        return {
            seed: _seed_outputs(args, out, settings, data, results[seed], *opened[seed])
            for seed, out in zip(seeds, folders)
        }


def _trains_together(args, seeds: list[int], device: str, estimator) -> bool:
    """``--seeds-together``: ``auto`` trains several seeds together on CUDA where
    ``estimator`` (the method with its settings) can (the CPU keeps each seed's solo path,
    bit for bit); ``on`` wherever it can, and refuses where it cannot; ``off`` never."""
    from basis.runtime.device import seeds_together_by_default

    reason = estimator._why_not_together()
    if args.seeds_together == "on" and reason is not None:
        raise InputError(f"--seeds-together on: {args.method} cannot train its seeds together: {reason}")
    if args.seeds_together == "auto":
        return reason is None and len(seeds) > 1 and seeds_together_by_default(device)
    return args.seeds_together == "on"


def _run_identity(args, seed: int, tags: dict[str, str]) -> tuple[str, dict[str, str]]:
    """A seed's MLflow run name (also its logged model's name) and tags (``tags`` besides
    the data set, the method and the seed)."""
    identity = {"dataset": args.dataset, "method": args.method, "seed": str(seed), **tags}
    return f"{args.dataset}-{args.method}-seed{seed}", identity


def _run_seed(
    args, seed: int, out: str | None, settings: dict, device: str, data, stored, tags: dict[str, str]
) -> dict:
    """One seed of ``run``: train, evaluate, write ``out``, and log it as its own MLflow run."""
    from basis.experiment import run_method

    run_name, identity = _run_identity(args, seed, tags)
    with maybe_tracked(args, run_name, identity) as run:
        digest = _log_inputs(run, args, seed, settings, device, data)
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
        return _seed_outputs(args, out, settings, data, result, run_name, run, digest)


def _log_inputs(run, args, seed: int, settings: dict, device: str, data) -> str | None:
    """A seed's run parameters and training set, logged to its MLflow run (if tracked);
    returns the training set's fingerprint."""
    if not run:
        return None
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
            "n_components": settings["n_components"] or data.n_components,
        }
    )
    from basis.references import fingerprint

    source = args.features or f"{args.dataset} (data seed {args.data_seed}, {args.data_root})"
    digest = fingerprint(data.X_train)
    if args.source is not None:  # one's own data: named by its files, identified by their contents
        from basis.data.own_sets import content_hash

        source, digest = (
            args.source.path + (f" (through {args.features})" if args.features else ""),
            content_hash(args.source),
        )
    run.log_dataset(args.dataset, digest, source, data.X_train, data.y_train)
    return digest


def _seed_outputs(args, out: str | None, settings: dict, data, result, run_name: str, run, digest) -> dict:
    """A trained seed's outputs: its files in ``out`` and, if tracked, its artifacts,
    logged model and scores; returns what ``run`` prints for it."""
    n_iter = settings.get("n_iter", 1)
    scores = {k: v for k, v in result.metrics.items() if k != "train_seconds"}
    output = {**scores, "train_seconds": result.metrics["train_seconds"], "device": str(result.estimator.device_)}
    # the measures that need labels, and why they are missing
    unavailable = {} if data.labelled else {"not_available": UNLABELLED_UNAVAILABLE}
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        with timed("outputs"):
            result.estimator.save(folder / "model.pt")
            with atomic_path(folder / "embedding.npz") as partial:
                labels = {} if data.y_test is None else {"labels": data.y_test}
                np.savez(partial, test=result.test_embedding, reference=result.reference_embedding, **labels)
            # Scores only: the same seed gives the same file (timings go to MLflow and stdout).
            write_json(folder / "metrics.json", scores | unavailable)
    if run:
        if unavailable:
            run.set_tags({f"not_available.{measure}": why for measure, why in unavailable["not_available"].items()})
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

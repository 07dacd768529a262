import json
import subprocess
import sys
from pathlib import Path

from snakemake.io import IOFile
from snakemake.utils import validate

# Import-light modules only: a dry run must not import torch (see basis/catalog/).
from basis.catalog import (
    DATASETS,
    FEATURE_SETS,
    TOY_SETS,
    check_value,
    code_version,
    method_names,
    study_declaration,
    study_folder,
    study_names,
    study_runs,
)
from basis.errors import InputError
from basis.runtime.jobs import age_restored_outputs
from basis.catalog.settings import check_config_schema, check_yaml_file, resolve_settings, why_seeds_apart
from basis.tracking import STAGE_DESCRIPTIONS, config_hash, store_identity


def refuse(message):
    """Bad config or store: one line and exit status 2, before any job runs or any file is
    written (an exception would reach the user in Snakemake's four-line framing, status 1)."""
    print(message, file=sys.stderr)
    sys.exit(2)


try:
    for configfile_path in workflow.configfiles:  # a key given twice would silently keep the last
        check_yaml_file(configfile_path)
    # The first violation in one line; Snakemake's validate would print the whole schema with it.
    check_config_schema(
        config,
        Path(workflow.current_basedir) / "../schemas/config.schema.yaml",
        workflow.configfiles,
        workflow.config_settings.config,
    )
except InputError as err:
    refuse(str(err))
validate(config, schema="../schemas/config.schema.yaml")

STAGES = tuple(STAGE_DESCRIPTIONS)  # one MLflow experiment per stage
EXPERIMENTS = {stage: f"{config['tracking']['experiment_prefix']}-{stage}" for stage in STAGES}
STUDIES_CONFIG = config["experiments"]


wildcard_constraints:
    dataset="|".join(DATASETS),
    method="|".join(method_names()),
    seed=r"\d+",
    k=r"\d+",


TRACKING_FLAG = "results/mlflow/experiments.json"

# Each job's `code` param is the version of the library code it runs, so that an edit
# reruns the jobs it affects (and what is downstream): a method's own module only its
# runs, a study module's computing code only that study's runs, the shared library every
# computing job, and figures.py, paper.py and the studies' figure and claims functions the
# tables and figures. CODE[None] is the shared library alone.
CODE = {method: code_version([method]) for method in method_names()} | {None: code_version()}
CODE_STUDY = {name: code_version(study=name) for name in study_names()}
CODE_PRESENTATION = code_version(presentation=True)


def visible_gpus():
    """GPUs on this machine, counted without importing torch (nvidia-smi -L)."""
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in listing.splitlines())


# GPU jobs claim one `gpu_slot` where a GPU is visible (none on a CPU-only box, so that
# there jobs run side by side); the profile sets how many slots the GPUs offer, i.e. how
# many jobs share them. Each job takes the GPU with the most free memory (device auto).
GPU_SLOT = 1 if visible_gpus() else 0

# Threads per job; each job's `python -m basis ... --threads N` holds every thread pool
# to them. One thread for the many runs (they fill the cores side by side) and for the
# references (a test split's graph takes seconds, and a job that needs all of a small
# box's cores waits until every other job there has ended), more for the Siamese
# features, which train a CNN on the whole training split. Change with
# --set-threads RULE=N.
RUN_THREADS = 1
HEAVY_THREADS = 4

# What the scheduler starts first when several jobs are ready: the chain that every run
# waits for (Siamese features, then references), then the longest jobs (the variants
# study, the ablation), so that the short ones fill the cores at the end instead of a
# long job running alone while the other cores idle (measured: BENCHMARKS.md, 2026-11-27).
# Snakemake starts the ready jobs with the largest sum of priorities that fits the free
# cores, so the features, which need HEAVY_THREADS cores, outweigh as many one-core jobs.
# The runs that the tables wait for come next, ahead of the studies' figures.
CRITICAL_PATH_PRIORITY = 20
FEATURES_PRIORITY = HEAVY_THREADS * CRITICAL_PATH_PRIORITY + 1
LONG_JOB_PRIORITY = 10
TABLE_RUN_PRIORITY = 5


def check_store():
    """Refuse to take finished results for complete when the MLflow store behind them was
    deleted or replaced: its runs are gone. Only reads the store (any command may run this)."""
    flag = Path(TRACKING_FLAG)
    if not flag.exists():
        return
    recorded = json.loads(flag.read_text()).get("store")
    found = store_identity()
    if found != recorded:
        database = Path("results/mlflow/mlflow.db")
        if found is not None:
            state = "is not the one the results were logged to"
        elif database.is_file():
            state = "is not a readable MLflow database (corrupt, or another kind of file)"
        else:
            state = "is missing"
        refuse(
            f"the MLflow store results/mlflow/mlflow.db {state}, so the runs behind results/ are not in it."
            f" Restore it, or delete {TRACKING_FLAG} to log every tracked job again into a new store"
            " (all of them rerun)."
        )


check_store()


# Every output is declared update(): Snakemake keeps a job's earlier outputs until it
# succeeds and restores them if it fails. The restored copies are new files, and Snakemake
# records the failed job as finished; their old times back and that record dropped (as
# --cleanup-metadata does), the failed job stays out of date and the next run tries it again.
def keep_failed_jobs_out_of_date():
    for path in age_restored_outputs():
        workflow.persistence.cleanup_metadata(IOFile(path))


onstart:
    keep_failed_jobs_out_of_date()  # notes a killed workflow left


onerror:
    keep_failed_jobs_out_of_date()


# Jobs that only download, set up or tabulate run on the submitting host of a cluster
# (compute nodes are often offline).
localrules:
    download,
    tracking_setup,
    table1,
    knn_sensitivity,
    ablation_table,
    comparison,


# Flags of Snakemake commands that only read: they never touch the MLflow store.
READ_ONLY_FLAGS = {
    "-n",
    "--dry-run",
    "--dryrun",
    "--lint",
    "--report",
    "--list-rules",
    "-l",
    "--list",
    "--summary",
    "-S",
    "--detailed-summary",
    "-D",
    "--dag",
    "--rulegraph",
    "--filegraph",
    "--list-changes",
    "--lc",
    "--list-target-rules",
    "--lt",
    "--unlock",
    "--containerize",
    "--archive",
    "--touch",
    "-t",
}


def real_execution():
    """Whether this invocation may run jobs (not a dry run, --lint, --report, a listing)."""
    flags = {argument.split("=", 1)[0] for argument in sys.argv[1:]}
    return workflow.is_main_process and not workflow.output_settings.dryrun and not flags & READ_ONLY_FLAGS


if real_execution():
    # Runs left RUNNING by killed jobs are closed here, by every real execution (also one
    # with nothing to run, which a kill can leave: Snakemake does not rerun a job whose
    # outputs were deleted under finished downstream results), and only where their
    # process is provably gone (basis.tracking.close_stale_runs).
    # A store it cannot use (its one line printed) stops the workflow before any job.
    if subprocess.run([sys.executable, "-m", "basis", "tracking", "close-stale", "--json"]).returncode == 2:
        sys.exit(2)


def feature_input(wildcards):
    """Image sets are embedded through Siamese features; others are used raw."""
    if wildcards.dataset in FEATURE_SETS:
        return f"results/features/{wildcards.dataset}.npz"
    return []


# Settings reach a job by one route: `key=value` assignments with JSON values (which the
# command line reads as YAML), checked by basis.catalog.settings.
def assignments(settings):
    return [f"{key}={json.dumps(value)}" for key, value in settings.items()]


def protocol_settings(keys=None):
    """Assignments of the shared protocol, or of its ``keys`` only (a reference embedding
    depends on the graph and the operator, not on the training budget)."""
    return assignments({k: v for k, v in config["protocol"].items() if keys is None or k in keys})


REFERENCE_KEYS = ("graph", "operator", "drop_trivial")


def settings_for(method):
    """Assignments for one method: the shared protocol, then the method's own settings."""
    return protocol_settings() + assignments(config["methods"][method])


def set_options(assignments):
    """--set arguments for ``key=value`` assignments."""
    return [item for assignment in assignments for item in ("--set", assignment)]


def siamese_option(input):
    """--siamese: the network behind the features, logged with the run's model."""
    features = getattr(input, "features", None)
    return ["--siamese", features.replace(".npz", "_siamese.pt")] if features else []


def features_option(input):
    """--features for a job whose data set is embedded through Siamese features."""
    features = getattr(input, "features", None)
    return ["--features", features] if features else []


def reference_command(wildcards, input, output, settings):
    """`python -m basis reference`: the analytic embedding of a data set's test split,
    logged as a run of the references experiment (its cost by stage, the neighbour
    search and its recall)."""
    return [
        "reference",
        "--dataset",
        wildcards.dataset,
        "--out",
        output[0],
        "--track",
        EXPERIMENTS["references"],
        "--data-root",
        config["data_root"],
        "--data-seed",
        config["data_seed"],
        *features_option(input),
        *set_options(settings),
    ]


# The MLflow run each sweep's runs are grouped under. Table 1's seeds get theirs from table1,
# once they have finished: one per data set and method, with their mean and std.
PARENTS = {"sensitivity": "{dataset}: kNN sweep", "ablation": "{dataset}: ablation"}


# A run rule's job trains one seed ({seed} in its paths), or with seeds_in_one_job every
# seed of its stage in one process (`basis run --seeds`: in turn, or together as one
# batched network, see seeds_together), each seed still writing its own folder and MLflow run.
SEEDS_IN_ONE_JOB = config.get("seeds_in_one_job", False)


def seed_patterns(folder, name, n_seeds):
    """A run rule's output ``name`` under ``folder``/seed<seed>: the job's seed, or all
    ``n_seeds`` seeds when they share the job."""
    pattern = f"{folder}/seed{{seed}}/{name}"
    return expand(pattern, seed=range(n_seeds), allow_missing=True) if SEEDS_IN_ONE_JOB else pattern


def seed_files(folder, name, n_seeds):
    """:func:`seed_patterns` as outputs, kept until the job succeeds (update: Snakemake
    restores them if it fails)."""
    return update(seed_patterns(folder, name, n_seeds))


def seed_job(path):
    """A run rule's log or benchmark path for ``path`` without its seed part."""
    return f"{path}/seeds" if SEEDS_IN_ONE_JOB else f"{path}/seed{{seed}}"


def seed_arguments(wildcards, folder, n_seeds):
    """--seed and --out of one seed's job, or --seeds and an --out with {seed}; the seeds'
    folders lie in ``folder``."""
    if SEEDS_IN_ONE_JOB:
        return ["--seeds", *map(str, range(n_seeds)), "--out", f"{folder}/seed{{seed}}"]
    return ["--seed", wildcards.seed, "--out", f"{folder}/seed{wildcards.seed}"]


def together_arguments():
    """--seeds-together of a job of several seeds (config seeds_together); none with the
    default, auto, which leaves it to the command (together on CUDA where the method can)."""
    choice = config["seeds_together"]
    if not SEEDS_IN_ONE_JOB or choice == "auto":
        return []
    return ["--seeds-together", "on" if choice else "off"]


def run_command(method, wildcards, input, folder, experiment, settings, n_seeds):
    """`python -m basis run` for one method and data set, and one seed or all ``n_seeds``
    (:data:`SEEDS_IN_ONE_JOB`), each writing ``folder``/seed<seed>; against a stored
    reference when the job has one as input (else the run computes it)."""
    reference = getattr(input, "reference", None)
    stage = experiment.rsplit("-", 1)[-1]
    return [
        "run",
        "--method",
        method,
        "--dataset",
        wildcards.dataset,
        *seed_arguments(wildcards, folder, n_seeds),
        *together_arguments(),
        "--data-root",
        config["data_root"],
        "--data-seed",
        config["data_seed"],
        "--track",
        experiment,
        *(["--parent", PARENTS[stage].format(dataset=wildcards.dataset)] if stage in PARENTS else []),
        *(["--reference", reference] if reference else []),
        *features_option(input),
        *siamese_option(input),
        *set_options(settings),
    ]


def set_arguments(settings):
    """--set arguments for a dict of settings."""
    return set_options(assignments(settings))


def check_config():
    """Checks the schema cannot express, before any job: every method's settings resolve,
    the graph fits in a batch, and every study setting is one the study takes."""
    protocol = config["protocol"]
    if protocol["graph"]["n_neighbors"] >= protocol["batch_size"]:
        refuse(
            f"config: protocol.graph.n_neighbors ({protocol['graph']['n_neighbors']}) must be smaller than"
            f" protocol.batch_size ({protocol['batch_size']})"
        )
    resolved = {}
    for method in config["methods"]:
        try:
            resolved[method] = resolve_settings(method, assignments=settings_for(method))
        except ValueError as err:
            refuse(f"config: methods.{method} or protocol: {err}")
    if config["seeds_together"] is True:
        if not SEEDS_IN_ONE_JOB:
            refuse(
                "config: seeds_together: true needs seeds_in_one_job: true (a job of one seed trains nothing together)"
            )
        for method, settings in resolved.items():
            reason = why_seeds_apart(method, settings)
            if reason:
                refuse(f"config: seeds_together: true, but {method} cannot train its seeds together: {reason}")
    too_large = [k for k in STUDIES_CONFIG["knn"]["n_neighbors"] if k >= protocol["batch_size"]]
    if too_large:
        refuse(f"config: experiments.knn.n_neighbors {too_large} must be smaller than protocol.batch_size")
    unknown_methods = sorted(set(STUDIES_CONFIG["knn"]["methods"]) - set(config["methods"]))
    if unknown_methods:
        refuse(f"config: experiments.knn.methods {unknown_methods} are not in methods {sorted(config['methods'])}")
    # the ablation's BASiS runs: its settings on top of each data set's protocol
    # (in the job's order: the protocol's --set first, the ablation's after, winning)
    for dataset in ABLATION["datasets"]:
        protocol = [] if dataset in TOY_SETS else settings_for("basis")
        ablation = assignments({**ABLATION.get("settings", {}), "alignment": "ransac"})
        try:
            resolve_settings("basis", assignments=[*protocol, *ablation], dataset=dataset)
        except ValueError as err:
            refuse(f"config: experiments.ablation.settings: {err}")
    # the variants study's BASiS protocol on image and feature sets
    variants = STUDIES_CONFIG.get("variants", {}).get("settings", {})
    if variants.get("protocol") is not None:
        if not isinstance(variants["protocol"], dict):
            refuse("config: experiments.variants.settings.protocol must be a mapping of protocol keys")
        try:
            resolve_settings("basis", overrides=variants["protocol"])
        except ValueError as err:
            refuse(f"config: experiments.variants.settings.protocol: {err}")


def reference_tags(wildcards, rule, variant=None):
    """MLflow tags of a reference job: a reference depends on the graph settings and the features."""
    section = {"protocol": {k: config["protocol"][k] for k in REFERENCE_KEYS}, "features": config["features"]}
    return run_tags(wildcards, rule, variant, section=section)


def run_tags(wildcards, rule, variant=None, section=None):
    """MLflow tags naming the job: its rule, every wildcard, a variant (what sets this job
    apart from others of its rule), the config and a hash of its config section."""
    if section is None:  # a run of a method: what its result depends on
        section = {
            "protocol": config["protocol"],
            "method": config["methods"].get(wildcards.get("method"), {}),
            "features": config["features"],
        }
    tags = {"rule": rule, "config_name": config["name"], "config_hash": config_hash(section)}
    tags.update({key: value for key, value in wildcards.items()})
    if variant:
        tags["variant"] = variant
    return [f"{key}={value}" for key, value in tags.items()]


# -- the experiments beyond Table 1 (studies.smk, sensitivity.smk, ablation.smk, paper.smk) --
# Each module of basis/studies/ declares its study: how its config section splits into
# runs, its figures (with captions) and claims. The rules below are built from those
# declarations, so a new study is one module plus one config section.
missing_sections = sorted(set(study_names()) - set(STUDIES_CONFIG))
if missing_sections:
    refuse(
        f"config: experiments has no section for the studies {missing_sections} (basis/studies/<name>.py);"
        " add one (an empty mapping runs a study with its defaults)"
    )
try:
    STUDY_RUNS = {name: study_runs(name, STUDIES_CONFIG[name] or {}) for name in study_names()}
except ValueError as err:
    refuse(f"config: {err}")
unknown_datasets = sorted(
    {
        s["dataset"]
        for runs in STUDY_RUNS.values()
        for s in runs.values()
        if s.get("dataset", DATASETS[0]) not in DATASETS
    }
)
if unknown_datasets:
    refuse(f"config: experiments: unknown data sets {unknown_datasets}; valid: {list(DATASETS)}")
STUDIES = {name: study_declaration(name) for name in study_names()}
STUDY_OUTPUTS = ["results/{folder}/metrics.json", "results/{folder}/arrays.npz"]

# With runs_in_one_job, a study that runs per data set runs all of them in one job, one
# after another (`python -m basis study NAME --datasets ...`), and the ablation all its
# variants of one data set: start-up paid once, each run still its own folder and MLflow run.
RUNS_IN_ONE_JOB = config.get("runs_in_one_job", False)


def runs_per_dataset(name):
    """Whether study ``name``'s runs differ in their data set only: its command then names
    them (``--datasets``), one or all, and tags each run itself."""
    return STUDIES[name].runs == "datasets"


def runs_share_job(name):
    """Whether study ``name``'s runs share one job (its rule then has no {run} wildcard)."""
    return RUNS_IN_ONE_JOB and runs_per_dataset(name)


def study_job_runs(name, wildcards):
    """The runs of study ``name`` that one of its jobs computes."""
    return list(STUDY_RUNS[name]) if runs_share_job(name) else [wildcards.get("run", "")]


def study_job_name(name):
    """The {run} part of a study rule's log and benchmark paths: a run, or all of them."""
    if STUDIES[name].runs is None:
        return ""
    return "datasets" if runs_share_job(name) else "{run}"


def study_outputs(name):
    """Output patterns of study ``name``'s rule: one folder, one per run ({run}), or every
    run's when they share the job."""
    if runs_share_job(name):
        folders = [study_folder(name, run) for run in STUDY_RUNS[name]]
    else:
        folders = study_folder(name, "{run}" if STUDIES[name].runs is not None else "")
    return update(expand(STUDY_OUTPUTS, folder=folders, allow_missing=True))


def study_inputs(name):
    """A study run waits for the tracking set-up, for the image set it embeds and, given a
    ``features_dir``, for that set's Siamese features."""

    def inputs(wildcards):
        data, features = [], []
        for run in study_job_runs(name, wildcards):
            settings = STUDY_RUNS[name][run]
            dataset = settings.get("dataset")
            data += [f"results/data/{dataset}.json"] if dataset in FEATURE_SETS else []
            # a run given a features folder embeds the data set's Siamese features from there
            if dataset in FEATURE_SETS and settings.get("features_dir"):
                features.append(f"{settings['features_dir']}/{dataset}.npz")
        return {"flag": TRACKING_FLAG, "data": data, "features": features}

    return inputs


def study_command(name):
    def command(wildcards):
        runs = study_job_runs(name, wildcards)
        if runs_per_dataset(name):
            # the runs differ in their data set only: the shared settings, then each data set
            # (the command names and tags each data set's run, in a job of one run or of all)
            settings = {k: v for k, v in STUDY_RUNS[name][runs[0]].items() if k != "dataset"}
            folder = ["--out", f"results/{study_folder(name, '{dataset}')}", "--datasets", *runs]
        else:
            settings = STUDY_RUNS[name][runs[0]]
            folder = ["--out", f"results/{study_folder(name, runs[0])}"]
        return [
            "study",
            name,
            *folder,
            "--track",
            EXPERIMENTS["studies"],
            "--data-root",
            config["data_root"],
            "--data-seed",
            config["data_seed"],
            *set_arguments(settings),
        ]

    return command


def study_variant(name, wildcards):
    """The variant tag of a study job, unless its command names its runs (--datasets)."""
    if runs_per_dataset(name):
        return None
    return "-".join(filter(None, [name, wildcards.get("run")]))


KNN = STUDIES_CONFIG["knn"]


ABLATION = STUDIES_CONFIG["ablation"]
# Each alignment on clean anchors and, when experiments.ablation.outlier_fraction is set,
# with that fraction of every batch's anchor slots holding another class's node.
ABLATION_VARIANTS = [
    f"{alignment}{suffix}"
    for suffix in ["", *(["-outliers"] if ABLATION.get("outlier_fraction", 0) else [])]
    for alignment in ("ransac", "lstsq", "none")
]
ABLATION_FOLDER = "results/ablation/{dataset}/{alignment}"


def ablation_files(name):
    """Output ``name`` of an ablation job: each seed's of its variant, or of every variant
    when they share the job (runs_in_one_job)."""
    files = seed_patterns(ABLATION_FOLDER, name, ABLATION["seeds"])
    return update(expand(files, alignment=ABLATION_VARIANTS, allow_missing=True) if RUNS_IN_ONE_JOB else files)


def ablation_job(path):
    """An ablation job's log or benchmark path for ``path``: of its variant, or of all."""
    return seed_job(path.replace("{alignment}", "variants") if RUNS_IN_ONE_JOB else path)


def ablation_inputs(wildcards):
    if wildcards.dataset in TOY_SETS:
        return {"flag": TRACKING_FLAG}
    return {
        "flag": TRACKING_FLAG,
        "features": feature_input(wildcards),
        "reference": f"results/references/{wildcards.dataset}.npz",
    }


def ablation_command(wildcards, input, output):
    """A job of one ablation variant or of all (runs_in_one_job): `python -m basis run
    --variants ...`, which sets each variant's alignment and outliers after the --set
    options, and names and tags its runs."""
    protocol = [] if wildcards.dataset in TOY_SETS else settings_for("basis")
    variants = ABLATION_VARIANTS if RUNS_IN_ONE_JOB else [wildcards.alignment]
    fraction = (
        ["--outlier-fraction", ABLATION["outlier_fraction"]] if any(v.endswith("-outliers") for v in variants) else []
    )
    folder = ABLATION_FOLDER.format(dataset=wildcards.dataset, alignment="{variant}")
    # the ablation's own settings (its budget) last, so they win
    command = run_command("basis", wildcards, input, folder, EXPERIMENTS["ablation"], protocol, ABLATION["seeds"])
    return command + ["--variants", *variants, *fraction] + set_arguments(ABLATION.get("settings", {}))


FIGURES_DIR = "results/paper/figures"
# figure name -> (study, the study folders it is drawn from, whether it also writes its
# numbers as a table, <figure>.md)
STUDY_FIGURES = {
    figure.name: (name, [study_folder(name, run) for run in (figure.runs or STUDY_RUNS[name])], figure.table)
    for name, study in STUDIES.items()
    for figure in study.figures
}


check_config()

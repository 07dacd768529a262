# The `python -m basis` commands the jobs run, built as argument lists (never a shell
# string): a rule's params.command, run by the script its rule names (workflow/scripts/).
# Settings reach a job by one route: `--set key=value` with JSON values, checked by
# basis.catalog.settings; basis.plan.workflow_config builds them from the config.
from basis.plan.workflow_config import ablation_protocol, assignments, method_assignments, protocol_assignments
from basis.catalog.settings import REFERENCE_KEYS
from basis.tracking import config_hash

# The MLflow run each sweep's runs are grouped under. Table 1's seeds get theirs from table1,
# once they have finished: one per data set and method, with their mean and std.
PARENTS = {"sensitivity": "{dataset}: kNN sweep", "ablation": "{dataset}: ablation"}


def set_options(assignments):
    """--set arguments for ``key=value`` assignments."""
    return [item for assignment in assignments for item in ("--set", assignment)]


def data_options(dataset):
    """Where the data sets lie and the seed of their splits, and a data set of one's own
    declared (:func:`source_options`)."""
    return ["--data-root", config["data_root"], "--data-seed", config["data_seed"], *source_options(dataset)]


def source_options(dataset):
    """The declaration of a data set of one's own (--data and the rest); none for the catalog's."""
    return DATA_SOURCES[dataset].arguments() if dataset in DATA_SOURCES else []


def features_option(input):
    """--features for a job whose data set is embedded through Siamese features."""
    features = getattr(input, "features", None)
    return ["--features", features] if features else []


def siamese_option(input):
    """--siamese: the network behind the features, logged with the run's model."""
    features = getattr(input, "features", None)
    return ["--siamese", features.replace(".npz", "_siamese.pt")] if features else []


def reference_command(wildcards, input, output, overrides=()):
    """`python -m basis reference`: the analytic embedding of a data set's test split on the
    protocol's graph (with ``overrides``, e.g. the kNN sweep's k), logged as a run of the
    references experiment (its cost by stage, the neighbour search and its recall)."""
    settings = [*protocol_assignments(config, REFERENCE_KEYS), *overrides]
    return [
        "reference",
        "--dataset",
        wildcards.dataset,
        "--out",
        output[0],
        "--track",
        EXPERIMENTS["references"],
        *data_options(wildcards.dataset),
        *features_option(input),
        *set_options(settings),
    ]


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
        *data_options(wildcards.dataset),
        "--track",
        experiment,
        *(["--parent", PARENTS[stage].format(dataset=wildcards.dataset)] if stage in PARENTS else []),
        *(["--reference", reference] if reference else []),
        *features_option(input),
        *siamese_option(input),
        *set_options(settings),
    ]


def reference_tags(wildcards, rule, variant=None):
    """MLflow tags of a reference job: a reference depends on the graph settings and the features."""
    protocol = {k: v for k, v in config["protocol"].items() if k in REFERENCE_KEYS}
    return run_tags(wildcards, rule, variant, section={"protocol": protocol, "features": config["features"]})


def run_tags(wildcards, rule, variant=None, section=None):
    """MLflow tags naming the job: its rule, every wildcard, a variant (what sets this job
    apart from others of its rule) and a hash of its config section. The config's name is
    added by the job (basis.runtime.jobs.job_tags): params are part of a job's identity,
    and a renamed config reruns nothing."""
    if section is None:  # a run of a method: what its result depends on
        section = {
            "protocol": config["protocol"],
            "method": config["methods"].get(wildcards.get("method"), {}),
            "features": config["features"],
        }
    tags = {"rule": rule, "config_hash": config_hash(section)}
    tags.update({key: value for key, value in wildcards.items()})
    if variant:
        tags["variant"] = variant
    return [f"{key}={value}" for key, value in tags.items()]


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
            *set_options(assignments(settings)),
            *declaration_options(STUDY_RUNS[name][run].get("dataset") for run in runs),
        ]

    return command


def declaration_options(datasets):
    """--declaration for each data set of one's own among ``datasets``: its download summary."""
    own = [dataset for dataset in datasets if dataset in DATA_SOURCES]
    return [item for dataset in own for item in ("--declaration", f"results/data/{dataset}.json")]


def ablation_command(wildcards, input, output):
    """A job of one ablation variant or of all (runs_in_one_job): `python -m basis run
    --variants ...`, which sets each variant's alignment and outliers after the --set
    options, and names and tags its runs."""
    protocol = ablation_protocol(config, wildcards.dataset)
    variants = ABLATION_VARIANTS if RUNS_IN_ONE_JOB else [wildcards.alignment]
    fraction = (
        ["--outlier-fraction", ABLATION["outlier_fraction"]] if any(v.endswith("-outliers") for v in variants) else []
    )
    folder = ABLATION_FOLDER.format(dataset=wildcards.dataset, alignment="{variant}")
    # the ablation's own settings (its budget) last, so they win
    command = run_command("basis", wildcards, input, folder, EXPERIMENTS["ablation"], protocol, ABLATION["seeds"])
    return command + ["--variants", *variants, *fraction] + set_options(assignments(ABLATION.get("settings", {})))


def study_variant(name, wildcards):
    """The variant tag of a study job, unless its command names its runs (--datasets)."""
    if runs_per_dataset(name):
        return None
    return "-".join(filter(None, [name, wildcards.get("run")]))

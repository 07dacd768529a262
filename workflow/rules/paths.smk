# Where each job's files lie: the seed folders of the run rules, the studies' run folders
# (each module of basis/studies/ declares how its config section splits into runs, and the
# rules of studies.smk, sensitivity.smk, ablation.smk and paper.smk are built from those
# declarations) and the ablation's variants.
from basis.catalog import TOY_SETS
from basis.plan.registry import study_declaration, study_folder
from basis.plan.workflow_config import ablation_variants


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


# The studies (studies.smk, sensitivity.smk, ablation.smk, paper.smk): each module of
# basis/studies/ declares its study (how its config section splits into runs, its figures
# and claims), and their rules are built from those declarations.
STUDIES = {name: study_declaration(name) for name in study_names()}
KNN = STUDIES_CONFIG["knn"]
ABLATION = STUDIES_CONFIG["ablation"]
ABLATION_VARIANTS = ablation_variants(bool(ABLATION.get("outlier_fraction", 0)))
STUDY_OUTPUTS = ["results/{folder}/metrics.json", "results/{folder}/arrays.npz"]


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
    """A study run waits for the tracking set-up, for the image set (or data set of one's
    own) it reads and, given a ``features_dir``, for that image set's Siamese features."""

    def inputs(wildcards):
        data, features = [], []
        for run in study_job_runs(name, wildcards):
            settings = STUDY_RUNS[name][run]
            dataset = settings.get("dataset")
            own = DATA_SOURCES.get(dataset)
            data += [f"results/data/{dataset}.json"] if dataset in FEATURE_SETS or own is not None else []
            # a run given a features folder embeds the data set's Siamese features from there
            if through_siamese_features(dataset, own) and settings.get("features_dir"):
                features.append(f"{settings['features_dir']}/{dataset}.npz")
        return {"flag": TRACKING_FLAG, "data": data, "features": features}

    return inputs


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

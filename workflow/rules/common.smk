# What the whole workflow shares: the config, checked once, and the constants of scheduling.
# Reading it starts nothing (no process, no torch): stale runs are closed in `onstart`, which
# Snakemake runs only where it executes jobs. Where each job's files lie: paths.smk; the
# commands the jobs run: commands.smk.
import subprocess
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.io import IOFile
from snakemake.utils import validate

# Import-light modules only: a dry run must not import torch (see basis/catalog/).
from basis.catalog import DATASETS, FEATURE_SETS, method_names
from basis.plan.registry import study_names
from basis.plan.versions import code_version
from basis.catalog.data_sources import data_sources, through_siamese_features
from basis.plan.workflow_config import check_workflow_config
from basis.catalog.settings import check_config_schema, check_yaml_file
from basis.errors import InputError
from basis.runtime.gpus import visible_gpu_count
from basis.runtime.jobs import age_restored_outputs
from basis.tracking import STAGE_DESCRIPTIONS, TRACKING_FLAG, check_results_store
from basis.tracking.views import report_path, where_to_look

SCHEMA = "../schemas/config.schema.yaml"


def refuse(message):
    """Bad config or store: one line and exit status 2, before any job runs or any file is
    written (an exception would reach the user in Snakemake's four-line framing, status 1)."""
    print(message, file=sys.stderr)
    sys.exit(2)


try:
    for configfile_path in workflow.configfiles:  # a key given twice would silently keep the last
        check_yaml_file(configfile_path)
    try:
        validate(config, schema=SCHEMA)  # also sets the schema's defaults
    except WorkflowError:
        # Snakemake's message prints the whole schema: the first violation in one line instead.
        check_config_schema(
            config, f"{workflow.current_basedir}/{SCHEMA}", workflow.configfiles, workflow.config_settings.config
        )
        raise
    STUDY_RUNS = check_workflow_config(config)  # each study's runs, as checked
    DATA_SOURCES = data_sources(config)  # the data sets of one's own (checked above), by name
    check_results_store()
except InputError as err:
    refuse(str(err))

STAGES = tuple(STAGE_DESCRIPTIONS)  # one MLflow experiment per stage
EXPERIMENTS = {stage: f"{config['tracking']['experiment_prefix']}-{stage}" for stage in STAGES}
STUDIES_CONFIG = config["experiments"]
TRACKING_FLAG = str(TRACKING_FLAG)


wildcard_constraints:
    dataset="|".join([*DATASETS, *DATA_SOURCES]),
    method="|".join(method_names()),
    seed=r"\d+",
    k=r"\d+",


# Each job's `code` param is the version of the library code it runs, so that an edit
# reruns the jobs it affects (and what is downstream): a method's own module only its
# runs, a study module's computing code only that study's runs, the shared library every
# computing job, and figures.py, paper.py and the studies' figure and claims functions the
# tables and figures. CODE[None] is the shared library alone.
CODE = {method: code_version([method]) for method in method_names()} | {None: code_version()}
CODE_STUDY = {name: code_version(study=name) for name in study_names()}
CODE_PRESENTATION = code_version(presentation=True)

# GPU jobs claim one `gpu_slot` where a GPU is visible (none on a CPU-only box, so that
# there jobs run side by side); the profile sets how many slots the GPUs offer, i.e. how
# many jobs share them. Each job takes the GPU with the most free memory (device auto).
GPU_SLOT = 1 if visible_gpu_count() else 0

# Threads per job (`--threads N` holds every thread pool of the job to them): one for the
# many runs and the references, which fill the cores side by side, more for the Siamese
# features, a CNN trained on a whole training split. Change with --set-threads RULE=N.
RUN_THREADS = 1
HEAVY_THREADS = 4

# What starts first among ready jobs: the chain every run waits for (Siamese features,
# which outweigh as many one-core jobs as their cores, then references), the longest jobs
# (the variants study, the ablation), then the runs the tables wait for; the short ones
# fill the cores at the end (measured: BENCHMARKS.md, 2026-11-27).
CRITICAL_PATH_PRIORITY = 20
FEATURES_PRIORITY = HEAVY_THREADS * CRITICAL_PATH_PRIORITY + 1
LONG_JOB_PRIORITY = 10
TABLE_RUN_PRIORITY = 5


# Every output is declared update(): Snakemake keeps a job's earlier outputs until it
# succeeds and restores them if it fails. The restored copies are new files, and Snakemake
# records the failed job as finished; their old times back and that record dropped (as
# --cleanup-metadata does), the failed job stays out of date and the next run tries it again.
def keep_failed_jobs_out_of_date():
    for path in age_restored_outputs():
        workflow.persistence.cleanup_metadata(IOFile(path))


onstart:
    keep_failed_jobs_out_of_date()  # notes a killed workflow left
    # Runs left RUNNING by killed jobs are closed before any job starts, and only where
    # their process is provably gone (basis.tracking.close_stale_runs); Snakemake runs
    # this only when it executes jobs (never on a dry run, --lint, --report or a listing).
    # A store it cannot use (its one line printed) stops the workflow before any job.
    if subprocess.run([sys.executable, "-m", "basis", "tracking", "close-stale", "--json"]).returncode == 2:
        sys.exit(2)


onerror:
    keep_failed_jobs_out_of_date()


onsuccess:
    # the last lines a user reads: where the answer is and how to open the MLflow view
    if Path(report_path(config["name"])).exists():
        print(where_to_look(EXPERIMENTS["runs"], config["name"]), file=sys.stderr)


# Jobs that only download, set up or tabulate run on the submitting host of a cluster
# (compute nodes are often offline).
localrules:
    download,
    tracking_setup,
    table1,
    knn_sensitivity,
    ablation_table,
    comparison,


def feature_input(wildcards):
    """Image sets (and image folders of one's own) are embedded through Siamese features;
    others are used raw."""
    if through_siamese_features(wildcards.dataset, DATA_SOURCES.get(wildcards.dataset)):
        return f"results/features/{wildcards.dataset}.npz"
    return []


def source_files(wildcards):
    """The files a data set of one's own is read from (none for the catalog's): an edit
    of one reruns what depends on that data set, and nothing else."""
    own = DATA_SOURCES.get(wildcards.dataset)
    return [] if own is None else own.files()


# A run rule's job trains one seed ({seed} in its paths), or with seeds_in_one_job every
# seed of its stage in one process (`basis run --seeds`: in turn, or together as one
# batched network, see seeds_together), each seed still writing its own folder and MLflow run.
SEEDS_IN_ONE_JOB = config.get("seeds_in_one_job", False)
# With runs_in_one_job, a study that runs per data set runs all of them in one job, one
# after another (`python -m basis study NAME --datasets ...`), and the ablation all its
# variants of one data set: start-up paid once, each run still its own folder and MLflow run.
RUNS_IN_ONE_JOB = config.get("runs_in_one_job", False)

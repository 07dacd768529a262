# BASiS reproduction: regenerate the paper's results with `snakemake --cores all`.
from snakemake.utils import min_version

min_version("9.0")


report: "workflow/report/workflow.rst"


# A config file given on the command line (--configfile) replaces this default instead of
# being merged into it, so it runs exactly what it states; --config KEY=VALUE still
# overrides single keys of whichever config is in use.
if not workflow.config_settings.configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/paths.smk"
include: "workflow/rules/commands.smk"
include: "workflow/rules/tracking.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/references.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/studies.smk"
include: "workflow/rules/sensitivity.smk"
include: "workflow/rules/ablation.smk"
include: "workflow/rules/paper.smk"


rule all:
    input:
        report_path(config["name"]),  # the answer
        "results/paper/table1.md",
        "results/paper/comparison.md",
        "results/paper/ablation.md",
        "results/paper/knn_sensitivity.csv",
        expand(
            "results/paper/figures/{figure}.{suffix}",
            figure=[*STUDY_FIGURES, "fig5_knn_sensitivity"],
            suffix=["png", "pdf"],
        ),

FIGURES_DIR = "results/paper/figures"
# figure name -> (study, the study folders it is drawn from, whether it also writes its
# numbers as a table, <figure>.md)
STUDY_FIGURES = {
    figure.name: (name, [study_folder(name, run) for run in (figure.runs or STUDY_RUNS[name])], figure.table)
    for name, study in STUDIES.items()
    for figure in study.figures
}


# Assembly: Table 1, every figure (PNG + PDF, with a caption in the report and in MLflow),
# the kNN and ablation summaries, and the paper-vs-reproduced comparison.
rule table1:
    input:
        flag=TRACKING_FLAG,
        metrics=expand(
            "results/runs/{dataset}/{method}/seed{seed}/metrics.json",
            dataset=config["datasets"],
            method=config["methods"],
            seed=range(config["seeds"]),
        ),
        references=expand("results/references/{dataset}.npz", dataset=config["datasets"]),
    output:
        markdown=update("results/paper/table1.md"),
        html=update(report("results/paper/table1.html", caption="../report/table1.rst", category="Table 1")),
        csv=update("results/paper/table1.csv"),
        tex=update("results/paper/table1.tex"),
        runs=update("results/paper/table1_runs.json"),
    log:
        "results/logs/paper/table1.log",
    conda:
        "../envs/basis.yaml"
    threads: 1
    params:
        runs_experiment=EXPERIMENTS["runs"],
        code=CODE_PRESENTATION,
        experiment=EXPERIMENTS["paper"],
        tags=lambda wildcards: run_tags(wildcards, "table1"),
    script:
        "../scripts/table1.py"


for figure, (study, folders, has_table) in STUDY_FIGURES.items():

    rule:
        name:
            f"figure_{figure}"
        input:
            flag=TRACKING_FLAG,
            studies=[f"results/{folder}/arrays.npz" for folder in folders],
        output:
            # the caption comes from the study's declaration; the report reads it from here
            png=update(
                report(f"{FIGURES_DIR}/{figure}.png", caption=f"../../{FIGURES_DIR}/{figure}.rst", category="Figures")
            ),
            pdf=update(f"{FIGURES_DIR}/{figure}.pdf"),
            caption=update(f"{FIGURES_DIR}/{figure}.rst"),
            table=update([f"{FIGURES_DIR}/{figure}.md"] if has_table else []),
            # the figure's numbers as a page of the Snakemake report
            table_html=update(
                [
                    report(
                        f"{FIGURES_DIR}/{figure}.table.html",
                        caption=f"../../{FIGURES_DIR}/{figure}.rst",
                        category="Figure tables",
                    )
                ]
                if has_table
                else []
            ),
        log:
            f"results/logs/paper/{figure}.log",
        localrule: True
        conda:
            "../envs/basis.yaml"
        threads: 1
        params:
            code=CODE_PRESENTATION,
            command=[
                "figure",
                figure,
                *[item for folder in folders for item in ("--input", f"results/{folder}")],
                "--out",
                f"{FIGURES_DIR}/{figure}.png",
                "--track",
                EXPERIMENTS["paper"],
            ],
            tags=run_tags({}, "figure", figure, STUDIES_CONFIG[study]),
        script:
            "../scripts/figure.py"


rule knn_sensitivity:
    input:
        flag=TRACKING_FLAG,
        metrics=expand(
            "results/knn/{dataset}/k{k}/{method}/seed{seed}/metrics.json",
            dataset=KNN["dataset"],
            k=KNN["n_neighbors"],
            method=KNN["methods"],
            seed=range(KNN["seeds"]),
        ),
        caption="workflow/report/fig5_knn_sensitivity.rst",
    output:
        png=update(
            report(
                f"{FIGURES_DIR}/fig5_knn_sensitivity.png",
                caption="../report/fig5_knn_sensitivity.rst",
                category="Figures",
            )
        ),
        pdf=update(f"{FIGURES_DIR}/fig5_knn_sensitivity.pdf"),
        csv=update("results/paper/knn_sensitivity.csv"),
    log:
        "results/logs/paper/knn_sensitivity.log",
    conda:
        "../envs/basis.yaml"
    threads: 1
    params:
        code=CODE_PRESENTATION,
        experiment=EXPERIMENTS["paper"],
        sweep_experiment=EXPERIMENTS["sensitivity"],
        sweep_parents=[PARENTS["sensitivity"].format(dataset=dataset) for dataset in [KNN["dataset"]]],
        tags=lambda wildcards: run_tags(wildcards, "knn_sensitivity", "fig5", KNN),
    script:
        "../scripts/knn_sensitivity.py"


rule ablation_table:
    input:
        flag=TRACKING_FLAG,
        metrics=expand(
            "results/ablation/{dataset}/{alignment}/seed{seed}/metrics.json",
            dataset=ABLATION["datasets"],
            alignment=ABLATION_VARIANTS,
            seed=range(ABLATION["seeds"]),
        ),
    output:
        markdown=update("results/paper/ablation.md"),
        html=update(report("results/paper/ablation.html", caption="../report/ablation.rst", category="Ablation")),
        csv=update("results/paper/ablation.csv"),
    log:
        "results/logs/paper/ablation.log",
    conda:
        "../envs/basis.yaml"
    threads: 1
    params:
        code=CODE_PRESENTATION,
        experiment=EXPERIMENTS["paper"],
        sweep_experiment=EXPERIMENTS["ablation"],
        sweep_parents=[PARENTS["ablation"].format(dataset=dataset) for dataset in ABLATION["datasets"]],
        tags=lambda wildcards: run_tags(wildcards, "ablation_table", "ablation", ABLATION),
    script:
        "../scripts/ablation_table.py"


rule comparison:
    input:
        flag=TRACKING_FLAG,
        table1="results/paper/table1.csv",
        runs=rules.table1.input.metrics,
        knn="results/paper/knn_sensitivity.csv",
        ablation="results/paper/ablation.csv",
        references=expand("results/references/{dataset}.npz", dataset=config["datasets"]),
        studies=[f"results/{study_folder(name, run)}/metrics.json" for name, runs in STUDY_RUNS.items() for run in runs],
        links=rules.table1.output.runs,
        # the report shows each claim beside its figure
        figures=[f"{FIGURES_DIR}/{figure}.png" for figure in STUDY_FIGURES] + [rules.knn_sensitivity.output.png],
    output:
        markdown=update("results/paper/comparison.md"),
        html=update(report("results/paper/comparison.html", caption="../report/comparison.rst", category="Comparison")),
        report=update(report(report_path(config["name"]), caption="../report/report.rst", category="Report")),
    log:
        "results/logs/paper/comparison.log",
    conda:
        "../envs/basis.yaml"
    threads: 1
    params:
        code=CODE_PRESENTATION,
        experiment=EXPERIMENTS["paper"],
        # the whole config but its name, which names the report's folder only
        tags=lambda wildcards: run_tags(
            wildcards, "comparison", "comparison", {k: v for k, v in config.items() if k != "name"}
        ),
        name=config["name"],
        studies={name: list(runs) for name, runs in STUDY_RUNS.items()},
    script:
        "../scripts/comparison.py"

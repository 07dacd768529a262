rule table1:
    input:
        flag=TRACKING_FLAG,
        metrics=expand(
            "results/runs/{dataset}/{method}/seed{seed}/metrics.json",
            dataset=config["datasets"],
            method=config["methods"],
            seed=range(config["seeds"]),
        ),
    output:
        markdown=report("results/paper/table1.md", caption="../report/table1.rst", category="Table 1"),
        csv="results/paper/table1.csv",
        tex="results/paper/table1.tex",
        comparison=report("results/paper/comparison.md", caption="../report/comparison.rst", category="Table 1"),
    log:
        "results/logs/paper/table1.log",
    params:
        experiment=EXPERIMENTS["paper"],
        tags=lambda wildcards: run_tags(wildcards, "table1"),
    conda:
        "../envs/basis.yaml"
    script:
        "../scripts/table1.py"

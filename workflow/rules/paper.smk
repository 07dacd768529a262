rule table1:
    input:
        expand(
            "results/runs/{dataset}/{method}/seed{seed}/metrics.json",
            dataset=config["datasets"],
            method=config["methods"],
            seed=range(config["seeds"]),
        ),
    output:
        markdown="results/paper/table1.md",
        csv="results/paper/table1.csv",
    log:
        "results/logs/paper/table1.log",
    script:
        "../scripts/table1.py"

rule train_and_evaluate:
    input:
        flag=TRACKING_FLAG,
        features=feature_input,
        reference="results/references/{dataset}.npz",
    output:
        metrics=seed_files("results/runs/{dataset}/{method}", "metrics.json", config["seeds"]),
        model=seed_files("results/runs/{dataset}/{method}", "model.pt", config["seeds"]),
        embedding=seed_files("results/runs/{dataset}/{method}", "embedding.npz", config["seeds"]),
    log:
        seed_job("results/logs/runs/{dataset}/{method}") + ".log",
    benchmark:
        seed_job("results/benchmarks/runs/{dataset}/{method}") + ".tsv"
    priority: TABLE_RUN_PRIORITY
    conda:
        "../envs/basis.yaml"
    threads: RUN_THREADS
    resources:
        gpu_slot=GPU_SLOT,
    params:
        code=lambda wildcards: CODE[wildcards.method],
        command=lambda wildcards, input, output: run_command(
            wildcards.method,
            wildcards,
            input,
            f"results/runs/{wildcards.dataset}/{wildcards.method}",
            EXPERIMENTS["runs"],
            method_assignments(config, wildcards.method),
            config["seeds"],
        ),
        tags=lambda wildcards: run_tags(wildcards, "train_and_evaluate"),
    script:
        "../scripts/run.py"

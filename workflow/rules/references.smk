rule reference_embedding:
    input:
        flag=TRACKING_FLAG,
        data="results/data/{dataset}.json",
        features=feature_input,
    output:
        update("results/references/{dataset}.npz"),
    log:
        "results/logs/references/{dataset}.log",
    benchmark:
        "results/benchmarks/references/{dataset}.tsv"
    priority: CRITICAL_PATH_PRIORITY
    conda:
        "../envs/basis.yaml"
    threads: RUN_THREADS
    resources:
        gpu_slot=GPU_SLOT,
    params:
        code=CODE[None],
        command=reference_command,
        tags=lambda wildcards: reference_tags(wildcards, "reference_embedding"),
    script:
        "../scripts/reference.py"

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
        command=lambda wildcards, input, output: reference_command(
            wildcards, input, output, protocol_settings(REFERENCE_KEYS)
        ),
        tags=lambda wildcards: reference_tags(wildcards, "reference_embedding"),
    script:
        "../scripts/basis_command.py"

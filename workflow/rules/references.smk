rule reference_embedding:
    input:
        data="results/data/{dataset}.json",
        features=feature_input,
    output:
        "results/references/{dataset}.npz",
    log:
        "results/logs/references/{dataset}.log",
    benchmark:
        "results/benchmarks/references/{dataset}.tsv"
    params:
        command=lambda wildcards, input, output: reference_command(
            wildcards, input, output, protocol_settings()
        ),
        tags=[],
    resources:
        gpu=1,
    threads: HEAVY_THREADS
    conda:
        "../envs/basis.yaml"
    script:
        "../scripts/basis_command.py"

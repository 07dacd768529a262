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
    conda:
        "../envs/basis.yaml"
    threads: HEAVY_THREADS
    resources:
        gpu=1,
    params:
        code=CODE[None],
        command=lambda wildcards, input, output: reference_command(wildcards, input, output, protocol_settings()),
        tags=[],
    script:
        "../scripts/basis_command.py"

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
        command=lambda wildcards, input, output: [
            "reference", "--dataset", wildcards.dataset, "--out", output[0], "--data-root", config["data_root"],
            "--data-seed", config["data_seed"],
            *(["--features", input.features] if input.features else []),
            *[item for assignment in protocol_settings() for item in ("--set", assignment)],
        ],
        tags=[],
    resources:
        gpu=1,
    conda:
        "../envs/basis.yaml"
    script:
        "../scripts/basis_command.py"

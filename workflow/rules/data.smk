rule download:
    input:
        source_files,
    output:
        update("results/data/{dataset}.json"),
    log:
        "results/logs/data/{dataset}.log",
    conda:
        "../envs/basis.yaml"
    threads: 1
    params:
        code=CODE[None],
        command=lambda wildcards, output: [
            "download",
            "--dataset",
            wildcards.dataset,
            "--data-root",
            config["data_root"],
            "--out",
            output[0],
            "--data-seed",
            config["data_seed"],
            *source_options(wildcards.dataset),
        ],
        tags=[],
    script:
        "../scripts/download.py"

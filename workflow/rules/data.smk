rule download:
    output:
        "results/data/{dataset}.json",
    log:
        "results/logs/data/{dataset}.log",
    params:
        command=lambda wildcards, output: [
            "download", "--dataset", wildcards.dataset, "--data-root", config["data_root"], "--out", output[0],
            "--data-seed", config["data_seed"],
        ],
        tags=[],
    threads: 1
    conda:
        "../envs/basis.yaml"
    script:
        "../scripts/basis_command.py"

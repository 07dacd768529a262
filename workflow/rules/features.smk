rule siamese_features:
    input:
        flag=TRACKING_FLAG,
        data="results/data/{dataset}.json",
    output:
        features=update("results/features/{dataset}.npz"),
        checkpoint=update("results/features/{dataset}_siamese.pt"),
    log:
        "results/logs/features/{dataset}.log",
    benchmark:
        "results/benchmarks/features/{dataset}.tsv"
    priority: FEATURES_PRIORITY
    conda:
        "../envs/basis.yaml"
    threads: HEAVY_THREADS
    resources:
        gpu_slot=GPU_SLOT,
    params:
        code=CODE[None],
        command=lambda wildcards, output: [
            "features",
            "--dataset",
            wildcards.dataset,
            "--out",
            output.features,
            "--checkpoint",
            output.checkpoint,
            "--set",
            f"n_steps={config['features']['n_steps']}",
            "--data-root",
            config["data_root"],
            "--track",
            EXPERIMENTS["features"],
            "--data-seed",
            config["data_seed"],
            *source_options(wildcards.dataset),
        ],
        tags=lambda wildcards: run_tags(
            wildcards, "siamese_features", section={"features": config["features"], "data_seed": config["data_seed"]}
        ),
    script:
        "../scripts/features.py"

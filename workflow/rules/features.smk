rule siamese_features:
    output:
        features="results/features/{dataset}.npz",
        checkpoint="results/features/{dataset}_siamese.pt",
    log:
        "results/logs/features/{dataset}.log",
    benchmark:
        "results/benchmarks/features/{dataset}.tsv"
    params:
        n_steps=config["features"]["n_steps"],
        data_root=config["data_root"],
    resources:
        gpu=1,
    shell:
        "python -m basis features --dataset {wildcards.dataset} --out {output.features}"
        " --checkpoint {output.checkpoint} --set n_steps={params.n_steps}"
        " --data-root {params.data_root} --json > {log} 2>&1"

rule train_and_evaluate:
    input:
        features=feature_input,
    output:
        metrics="results/runs/{dataset}/{method}/seed{seed}/metrics.json",
        model="results/runs/{dataset}/{method}/seed{seed}/model.pt",
        embedding="results/runs/{dataset}/{method}/seed{seed}/embedding.npz",
    log:
        "results/logs/runs/{dataset}/{method}/seed{seed}.log",
    benchmark:
        "results/benchmarks/runs/{dataset}/{method}/seed{seed}.tsv"
    params:
        settings=method_settings,
        features=lambda wildcards, input: ["--features", input.features] if input.features else [],
        data_root=config["data_root"],
    resources:
        gpu=1,
    script:
        "../scripts/run_method.py"

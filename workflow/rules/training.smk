rule train_and_evaluate:
    input:
        flag=TRACKING_FLAG,
        features=feature_input,
        reference="results/references/{dataset}.npz",
    output:
        metrics="results/runs/{dataset}/{method}/seed{seed}/metrics.json",
        model="results/runs/{dataset}/{method}/seed{seed}/model.pt",
        embedding="results/runs/{dataset}/{method}/seed{seed}/embedding.npz",
    log:
        "results/logs/runs/{dataset}/{method}/seed{seed}.log",
    benchmark:
        "results/benchmarks/runs/{dataset}/{method}/seed{seed}.tsv"
    conda:
        "../envs/basis.yaml"
    threads: RUN_THREADS
    resources:
        gpu_slot=GPU_SLOT,
    params:
        code=lambda wildcards: CODE[wildcards.method],
        command=lambda wildcards, input, output: run_command(
            wildcards.method, wildcards, input, output, EXPERIMENTS["runs"], settings_for(wildcards.method)
        ),
        tags=lambda wildcards: run_tags(wildcards, "train_and_evaluate"),
    script:
        "../scripts/basis_command.py"

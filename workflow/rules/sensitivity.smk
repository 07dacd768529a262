# Fig. 5: every method of experiments.knn.methods over a grid of neighbour counts k,
# experiments.knn.seeds runs per point, against a reference embedding of the same graph.
rule knn_reference:
    input:
        flag=TRACKING_FLAG,
        data="results/data/{dataset}.json",
        features=feature_input,
    output:
        update("results/references/knn/{dataset}_k{k}.npz"),
    log:
        "results/logs/references/knn/{dataset}_k{k}.log",
    priority: CRITICAL_PATH_PRIORITY
    conda:
        "../envs/basis.yaml"
    threads: RUN_THREADS
    resources:
        gpu_slot=GPU_SLOT,
    params:
        code=CODE[None],
        command=lambda wildcards, input, output: reference_command(
            wildcards, input, output, [f"graph.n_neighbors={wildcards.k}"]
        ),
        tags=lambda wildcards: reference_tags(wildcards, "knn_reference", f"k{wildcards.k}"),
    script:
        "../scripts/reference.py"


rule knn_run:
    input:
        flag=TRACKING_FLAG,
        features=feature_input,
        reference="results/references/knn/{dataset}_k{k}.npz",
    output:
        metrics=seed_files("results/knn/{dataset}/k{k}/{method}", "metrics.json", KNN["seeds"]),
        model=seed_files("results/knn/{dataset}/k{k}/{method}", "model.pt", KNN["seeds"]),
        embedding=seed_files("results/knn/{dataset}/k{k}/{method}", "embedding.npz", KNN["seeds"]),
    log:
        seed_job("results/logs/knn/{dataset}/k{k}/{method}") + ".log",
    benchmark:
        seed_job("results/benchmarks/knn/{dataset}/k{k}/{method}") + ".tsv"
    priority: TABLE_RUN_PRIORITY
    conda:
        "../envs/basis.yaml"
    threads: RUN_THREADS
    resources:
        gpu_slot=GPU_SLOT,
    params:
        code=lambda wildcards: CODE[wildcards.method],
        command=lambda wildcards, input, output: run_command(
            wildcards.method,
            wildcards,
            input,
            f"results/knn/{wildcards.dataset}/k{wildcards.k}/{wildcards.method}",
            EXPERIMENTS["sensitivity"],
            method_assignments(config, wildcards.method) + [f"graph.n_neighbors={wildcards.k}"],
            KNN["seeds"],
        ),
        tags=lambda wildcards: run_tags(wildcards, "knn_run", f"k{wildcards.k}"),
    script:
        "../scripts/run.py"

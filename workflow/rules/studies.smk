# The paper's experiments beyond Table 1 that are not runs of one method on one data set
# (Figs. 1-4 and 6-8): each job is one `python -m basis study NAME`.
rule toy_example:
    input:
        flag=TRACKING_FLAG,
    output:
        expand(STUDY_OUTPUTS, folder="toy/{dataset}", allow_missing=True),
    log:
        "results/logs/studies/toy/{dataset}.log",
    benchmark:
        "results/benchmarks/studies/toy/{dataset}.tsv"
    conda:
        "../envs/basis.yaml"
    threads: RUN_THREADS
    resources:
        gpu_slot=GPU_SLOT,
    params:
        code=CODE["basis"],
        command=lambda wildcards: study_command("toy", f"toy/{wildcards.dataset}", {"dataset": wildcards.dataset}),
        tags=lambda wildcards: run_tags(wildcards, "toy_example", f"toy-{wildcards.dataset}", STUDIES_CONFIG["toy"]),
    script:
        "../scripts/basis_command.py"


rule illustration:
    input:
        flag=TRACKING_FLAG,
    output:
        expand(STUDY_OUTPUTS, folder="illustration"),
    log:
        "results/logs/studies/illustration.log",
    conda:
        "../envs/basis.yaml"
    threads: RUN_THREADS
    params:
        code=CODE["basis"],
        command=study_command("illustration", "illustration"),
        tags=run_tags({}, "illustration", "illustration", STUDIES_CONFIG["illustration"]),
    script:
        "../scripts/basis_command.py"


rule anchor_consistency:
    input:
        flag=TRACKING_FLAG,
    output:
        expand(STUDY_OUTPUTS, folder="consistency"),
    log:
        "results/logs/studies/consistency.log",
    conda:
        "../envs/basis.yaml"
    threads: RUN_THREADS
    params:
        code=CODE["basis"],
        command=study_command("consistency", "consistency"),
        tags=run_tags({}, "anchor_consistency", "consistency", STUDIES_CONFIG["consistency"]),
    script:
        "../scripts/basis_command.py"


rule bunny_diffusion_maps:
    input:
        flag=TRACKING_FLAG,
    output:
        expand(STUDY_OUTPUTS, folder="bunny"),
    log:
        "results/logs/studies/bunny.log",
    benchmark:
        "results/benchmarks/studies/bunny.tsv"
    conda:
        "../envs/basis.yaml"
    threads: RUN_THREADS
    resources:
        gpu_slot=GPU_SLOT,
    params:
        code=CODE["basis"],
        command=study_command("bunny", "bunny"),
        tags=run_tags({}, "bunny_diffusion_maps", "bunny", STUDIES_CONFIG["bunny"]),
    script:
        "../scripts/basis_command.py"


rule feature_change:
    input:
        flag=TRACKING_FLAG,
        data=f"results/data/{STUDIES_CONFIG['feature_change']['dataset']}.json",
    output:
        expand(STUDY_OUTPUTS, folder="feature_change/{part}", allow_missing=True),
    log:
        "results/logs/studies/feature_change/{part}.log",
    benchmark:
        "results/benchmarks/studies/feature_change/{part}.tsv"
    wildcard_constraints:
        part="main|subset",
    conda:
        "../envs/basis.yaml"
    threads: RUN_THREADS
    resources:
        gpu_slot=GPU_SLOT,
    params:
        code=CODE["basis"],
        command=lambda wildcards: study_command(
            "feature_change",
            f"feature_change/{wildcards.part}",
            {
                "dataset": STUDIES_CONFIG["feature_change"]["dataset"],
                **STUDIES_CONFIG["feature_change"][wildcards.part],
            },
        ),
        tags=lambda wildcards: run_tags(
            wildcards, "feature_change", f"feature_change-{wildcards.part}", STUDIES_CONFIG["feature_change"]
        ),
    script:
        "../scripts/basis_command.py"

# The alignment ablation: BASiS with RANSAC, plain least squares and no alignment, same
# budget, on clean anchors and with gross anchor outliers (`-outliers`). Toy sets use the toy defaults (`python -m basis run` on a toy set) and compute
# their small reference in the job; image sets use the protocol and the shared reference.
from basis.choices import ALIGNMENTS


rule ablation_run:
    input:
        unpack(ablation_inputs),
    output:
        metrics=ablation_files("metrics.json"),
        model=ablation_files("model.pt"),
        embedding=ablation_files("embedding.npz"),
    log:
        ablation_job("results/logs/ablation/{dataset}/{alignment}") + ".log",
    benchmark:
        ablation_job("results/benchmarks/ablation/{dataset}/{alignment}") + ".tsv"
    wildcard_constraints:
        alignment=f"({'|'.join(ALIGNMENTS)})(-outliers)?",
    priority: LONG_JOB_PRIORITY
    conda:
        "../envs/basis.yaml"
    threads: RUN_THREADS
    resources:
        gpu_slot=GPU_SLOT,
    params:
        code=CODE["basis"],
        command=ablation_command,
        # the command tags each variant's runs (alignment, variant)
        tags=lambda wildcards: run_tags(wildcards, "ablation_run"),
    script:
        "../scripts/run.py"

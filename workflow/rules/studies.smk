# The paper's experiments beyond Table 1 that are not runs of one method on one data set
# (Figs. 1-4 and 6-8): one rule per study of basis/studies/, named study_<name>, with a
# job per run of its config section; each job is one `python -m basis study NAME`.

# The studies that train many models in one job (scheduled early: see common.smk).
LONG_STUDIES = {"variants", "scale"}
# The studies that measure what a method costs: they get the cores a user would give one
# job (HEAVY_THREADS, or the --cores given, whichever is fewer), not one of many.
COST_STUDIES = {"scale"}

for name, study in STUDIES.items():

    rule:
        name:
            f"study_{name}"
        input:
            unpack(study_inputs(name)),
        output:
            study_outputs(name),
        log:
            f"results/logs/{study_folder(name, study_job_name(name))}.log",
        benchmark:
            f"results/benchmarks/{study_folder(name, study_job_name(name))}.tsv"
        wildcard_constraints:
            run="|".join(STUDY_RUNS[name]),
        priority: LONG_JOB_PRIORITY if name in LONG_STUDIES else 0
        conda:
            "../envs/basis.yaml"
        threads: HEAVY_THREADS if name in COST_STUDIES else RUN_THREADS
        resources:
            gpu_slot=GPU_SLOT if study.gpu else 0,
        params:
            code=CODE_STUDY[name],
            command=study_command(name),
            tags=lambda wildcards, name=name: run_tags(
                wildcards, f"study_{name}", study_variant(name, wildcards), STUDIES_CONFIG[name]
            ),
        script:
            "../scripts/study.py"

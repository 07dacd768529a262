rule tracking_setup:
    output:
        TRACKING_FLAG,
    log:
        "results/logs/tracking_setup.log",
    params:
        experiments=list(EXPERIMENTS.values()),
    threads: 1
    conda:
        "../envs/basis.yaml"
    script:
        "../scripts/tracking_setup.py"

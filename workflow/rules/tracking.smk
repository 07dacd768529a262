rule tracking_setup:
    output:
        update(TRACKING_FLAG),
    log:
        "results/logs/tracking_setup.log",
    conda:
        "../envs/basis.yaml"
    threads: 1
    params:
        code=CODE[None],
        experiments=list(EXPERIMENTS.values()),
    script:
        "../scripts/tracking_setup.py"

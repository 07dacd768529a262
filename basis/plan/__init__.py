"""What the workflow plans from a config, without importing torch: the studies and their
runs (:mod:`~basis.plan.registry`, read from the studies' own declarations), the config's
checks at parse time (:mod:`~basis.plan.workflow_config`, with the size checks of a data set of one's
own in :mod:`~basis.plan.sizes`) and the code versions that decide reruns
(:mod:`~basis.plan.versions`).
"""

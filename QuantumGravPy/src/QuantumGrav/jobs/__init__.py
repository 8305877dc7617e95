"""Running a training job: ``run_job`` and the one entry function of every process of a job (``entry``), and
starting the job on one process, many, or as one torchrun worker (``launcher``: ``QG.launch``)."""

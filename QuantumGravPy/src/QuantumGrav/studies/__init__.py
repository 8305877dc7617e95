"""Hyperparameter studies with Optuna: the ``tune:`` section and its search space (``config``,
``search_space``), the study's storage, heartbeats and stale trials (``storage``), the workers that run
trials on one process or under torchrun (``tuner``, ``tune_ddp``) and the study's report (``report``)."""

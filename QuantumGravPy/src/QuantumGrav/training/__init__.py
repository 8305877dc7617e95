"""The training loop: the ``trainer`` (and ``ddp``'s ``TrainerDDP``), the run's parts built from their sections
(``components``), its data on every rank (``loaders``), the model (``model_builder``), and what the loop drives
each epoch: the optimizer and its schedule (``optimization``, ``schedules``), continuing a run (``restore``),
batch norm's statistics and denormal floats (``batch_norm``, ``denormals``), memory checks (``preflight``,
``memory``), the test split at the run's end (``testing``) and the progress lines (``progress``, ``advice``)."""

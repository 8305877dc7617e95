"""The training loop: the ``trainer`` (and ``ddp``'s ``TrainerDDP``), its data on every rank (``loaders``), the
model built from its section (``model_builder``), and what the loop drives each epoch: optimizers and
learning-rate schedules (``optimization``, ``schedules``), continuing a run (``restore``), batch norm's statistics
and the CPU's denormal floats (``batch_norm``, ``denormals``), the memory checks before and during a run
(``preflight``, ``memory``) and the progress lines with their advice (``progress``, ``advice``)."""

"""The training loop: the ``trainer`` and what it drives each epoch, namely optimizers and learning-rate
schedules (``optimization``, ``schedules``), checkpointing and restoring (``checkpointing``), early stopping
(``early_stopping``), the memory checks before and during a run (``preflight``, ``memory``) and the progress
lines with their advice (``progress``, ``advice``)."""

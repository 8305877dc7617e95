"""Callbacks: what a run does besides the loop. The protocol (``base``), the state each hook receives
(``state``), and the built-in callbacks: early stopping, checkpoints, the run's records, figures, baselines, W&B.
The analyses (``QuantumGrav.analyses``) are callbacks too, above the training path."""

"""What a run leaves on disk and how it goes on: the run folder, its provenance and metrics CSV (``artifacts``),
the checkpoint files and the run lock (``checkpoint_files``), finding a run to continue (``resume``), the run's
config.yaml and the CLI's summary (``records``), and its Weights & Biases mirror (``wandb_logger``, read back by
``wandb_files``)."""

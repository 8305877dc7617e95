"""What a run leaves on disk and how it goes on: the run folder and its atomic writes (``artifacts``), the
checkpoint files and the run lock (``checkpoint_files``), finding a run to continue (``resume``), the run's
records and metrics (``records``) and its Weights & Biases mirror (``wandb_logger``)."""

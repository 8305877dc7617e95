"""The config's typed sections, one module per part of a run they configure (``data``, ``model``, ``task``,
``early_stopping``, ``loaders``, ``optimizer``, ``training``, ``parallel``, ``wandb``), declared on ``base``."""

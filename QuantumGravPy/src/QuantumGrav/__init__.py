"""QuantumGrav: graph neural networks on causal sets, on one process or many.

``import QuantumGrav as QG`` gives the whole user-facing API.
"""

from .callbacks import Callback, Decision, Stop
from .config import apply_overrides, dump_config, get_loader, load_config, validate_config
from .data import CausalSetDataset, split_indices
from .distributed import cleanup_ddp, find_free_port, get_rank, get_world_size, initialize_ddp, is_main_process
from .errors import ConfigError, UserError
from .launcher import TrainingFailed, launch, run_job
from .logging_utils import get_logger, setup_logging
from .models import GNNClassifier, build_model, count_parameters
from .sparse_attention import SparseTransformerConv
from .roles import dataset_factory, loss_function
from .train_ddp import TrainerDDP
from .training import Trainer


def tune(config, trials=None, nproc=None, overrides=None):
    """Run, continue or join the hyperparameter study of ``config`` (a training config with a ``tune:``
    section; see ``QuantumGrav.tuner.tune``) and return its summary. Needs Optuna:
    ``pip install 'QuantumGrav[tune]'``."""
    from .study_config import require_optuna

    require_optuna()
    from .tuner import tune as run_study

    return run_study(config, trials=trials, nproc=nproc, overrides=overrides)


__version__ = "0.1.0"

__all__ = [
    "Callback", "Decision", "Stop",
    "apply_overrides", "dump_config", "get_loader", "load_config", "validate_config",
    "CausalSetDataset", "split_indices",
    "cleanup_ddp", "find_free_port", "get_rank", "get_world_size", "initialize_ddp", "is_main_process",
    "ConfigError", "UserError", "TrainingFailed", "launch", "run_job",
    "get_logger", "setup_logging", "GNNClassifier", "SparseTransformerConv", "build_model", "count_parameters",
    "TrainerDDP", "Trainer", "dataset_factory", "loss_function", "tune",
]

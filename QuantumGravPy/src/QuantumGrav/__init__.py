"""QuantumGrav: graph neural networks on causal sets, on one process or many.

``import QuantumGrav as QG`` gives the whole user-facing API.

The import freezes the objects that exist once it is done (``gc.freeze``: the cyclic garbage collector skips
them from then on; torch's, PyG's and this package's modules are most of them), which saves each fresh
process about a third of its start-up and exit (``benchmarks/startup/bench_startup.py``). Objects made afterwards
are collected as usual; call ``gc.unfreeze()`` after the import to undo it.
"""

import gc as _gc

# Importing torch and PyG makes about half a million objects that live as long as the process; the cyclic
# collector would traverse them in every full collection and at exit, about a third of a fresh process's
# start-up and exit (benchmarks/startup/bench_startup.py), paid by every worker, CLI command and kernel. So the
# collector pauses during the import and gc.freeze moves what exists to a generation that collections skip.
_gc_was_enabled = _gc.isenabled()
_gc.disable()
try:
    from .callbacks.base import Callback, Decision, Stop
    from .config.yaml_io import apply_overrides, dump_config, get_loader
    from .config.schema import load_config, validate_config
    from .data.dataset import CausalSetDataset, split_indices
    from .common.processes import get_world_size
    from .distributed.environment import find_free_port, get_rank, is_main_process
    from .distributed.process_group import cleanup_ddp, initialize_ddp
    from .common.errors import ConfigError, UserError
    from .jobs.applied_run import load_run
    from .jobs.entry import run_job
    from .jobs.launcher import TrainingFailed, launch
    from .common.logging_utils import get_logger, setup_logging
    from .models.gnn import GNNClassifier, count_parameters
    from .notebook_helpers import print_run_header, shrink_for_smoke_test
    from .models.sparse_attention import SparseTransformerConv
    from .config.roles import dataset_factory, loss_function
    from .train_ddp import TrainerDDP
    from .training.model_builder import build_model
    from .training.trainer import Trainer
finally:
    if _gc_was_enabled:
        _gc.enable()
_gc.freeze()
del _gc_was_enabled


def tune(config, trials=None, nproc=None, overrides=None):
    """Run, continue or join the hyperparameter study of ``config`` and return its summary.

    Each trial trains the config with the values Optuna picks from the ``tune:`` section's space, on
    ``nproc`` processes; a study that exists in its storage is continued, and several workers may run one
    study together (docs/hyperparameter_search.md). Needs Optuna: ``pip install 'QuantumGrav[tune]'``.

    Args:
        config: a training config with a ``tune:`` section, as a path, a dict or a list of them merged in
            order (e.g. ``"configs/tune.yaml"``).
        trials: the finished trials (COMPLETE or PRUNED) the study ends with; None: ``tune.trials``.
        nproc: processes per trial; None: ``parallel.world_size`` (under torchrun, the job's).
        overrides: ``"section.key=value"`` strings or a mapping, ``tune.*`` included.

    Returns:
        The study's summary on rank 0 (its name, metric and direction, the counts of trials by state, the
        best trial and the files written, as the printed summary shows them); None on the other ranks of a
        torchrun job.

    Raises:
        UserError: Optuna is not installed, ``nproc`` below 1, or something the workers could not import.
        ConfigError: an invalid config or ``tune:`` section (all problems at once).

    Example:
        >>> import QuantumGrav as QG
        >>> summary = QG.tune("configs/tune.yaml", trials=4, nproc=2)  # doctest: +SKIP
    """
    from .studies.config import require_optuna

    require_optuna()
    from .studies.tuner import tune as run_study

    return run_study(config, trials=trials, nproc=nproc, overrides=overrides)


from .common.version import __version__ as __version__  # noqa: E402  (QG.__version__)

__all__ = [
    "Callback", "Decision", "Stop",
    "apply_overrides", "dump_config", "get_loader", "load_config", "validate_config",
    "CausalSetDataset", "split_indices",
    "cleanup_ddp", "find_free_port", "get_rank", "get_world_size", "initialize_ddp", "is_main_process",
    "ConfigError", "UserError", "TrainingFailed", "launch", "load_run", "run_job",
    "get_logger", "setup_logging", "GNNClassifier", "SparseTransformerConv", "build_model", "count_parameters",
    "TrainerDDP", "Trainer", "dataset_factory", "loss_function", "tune",
    "print_run_header", "shrink_for_smoke_test",
]

"""What a script that runs one rank of a DDP job by hand imports:
``from QuantumGrav.train_ddp import TrainerDDP, initialize_ddp, cleanup_ddp``."""

from .distributed.process_group import cleanup_ddp, initialize_ddp
from .training.ddp import TrainerDDP

__all__ = ["TrainerDDP", "initialize_ddp", "cleanup_ddp"]

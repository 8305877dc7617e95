"""What a script that runs one rank of a DDP job by hand imports, in one line::

    from QuantumGrav.train_ddp import TrainerDDP, initialize_ddp, cleanup_ddp

``TrainerDDP`` lives in ``training/ddp.py``, the process group's set-up and teardown in
``distributed/process_group.py``.
"""

from .distributed.process_group import cleanup_ddp, initialize_ddp
from .training.ddp import TrainerDDP

__all__ = ["TrainerDDP", "initialize_ddp", "cleanup_ddp"]

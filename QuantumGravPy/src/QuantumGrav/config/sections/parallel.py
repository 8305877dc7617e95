"""``parallel:``: the processes of a job, where they meet and how long they wait."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..checks import boolean, choice, integer, number, port, string
from .base import Section, setting


@dataclass(frozen=True)
class ParallelSection(Section):
    """``parallel:``: distributed data-parallel training: processes, rendezvous and timeouts."""

    yaml: ClassVar[str] = "parallel"

    world_size: int = setting(1, integer(1), "processes for QG.launch / --nproc (torchrun sets its own)")
    master_addr: str = setting("localhost", string, "address of node 0")
    master_port: int | None = setting(None, port, "null: a free port is picked", nullable=True)
    backend: str | None = setting(None, choice("nccl", "gloo"), "null: nccl on CUDA, else gloo", nullable=True)
    timeout_s: float = setting(300.0, number(0.0, exclusive_min=True),
                               "collective timeout: a dead rank fails the job after this")
    data_timeout_s: float = setting(3600.0, number(0.0, exclusive_min=True),
                                    "how long ranks wait for each other to generate the data")
    output_device: int | None = setting(None, integer(0), "null: this process's GPU (LOCAL_RANK)", nullable=True)
    find_unused_parameters: bool = setting(False, boolean, "true only if some parameters get no gradient (slower)")

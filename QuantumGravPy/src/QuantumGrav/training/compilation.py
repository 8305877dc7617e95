"""``training.compile``: the training step's model compiled with ``torch.compile`` (dynamic shapes: every batch of
causal sets has another number of elements and links, as PyG documents for its layers).

Only the training step runs compiled: ``torch.compile`` wraps the plain model (the inner module, before DDP wraps
it), whose parameters it shares, while checkpoints, evaluation, the batch norm pass and the preflight keep using
the plain model, so state dicts carry no ``_orig_mod.`` prefix and a checkpoint loads compiled or not. The
attention layer's sparse products (CSR tensors, which torch.compile's graphs cannot hold) run eagerly between the
compiled graphs (``models.sparse_attention``). Compiling happens in the first steps of the first epoch, and its
time is counted in that epoch's time and graphs/s; the run's log says how long it took.
"""

from __future__ import annotations

import torch

from ..common.errors import ConfigError
from ..common.logging_utils import get_logger

logger = get_logger("training")


def check_compile_backend(device: torch.device) -> None:
    """Refuse ``training.compile`` where its backend (inductor) cannot build kernels: a C++ compiler for the CPU,
    Triton for CUDA. One line naming what is missing and both ways out; nothing is compiled here."""
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            raise ConfigError("training.compile: torch.compile's backend (inductor) needs Triton on CUDA, and it "
                              "is not installed; pip install triton (it comes with PyTorch's CUDA wheels), or set "
                              "training.compile: false")
        return
    from torch._inductor import config, exc
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        searched = [c for c in (config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,))
                    if c]
        raise ConfigError(f"training.compile: torch.compile's backend (inductor) needs a C++ compiler for the CPU, "
                          f"and none was found (looked for {', '.join(searched)}; the CXX environment variable "
                          f"names another); install one (apt-get install g++, or conda install gxx), or set "
                          f"training.compile: false") from None


def compiled_for_training(model: torch.nn.Module, compile_model: bool) -> torch.nn.Module:
    """The module the training step calls: ``model`` itself, or ``torch.compile(model, dynamic=True)``."""
    if not compile_model:
        return model
    # Dropout draws from torch's own generator, as in eager mode: the same masks for the same seed (a resumed
    # run replays them, and compiled and eager runs give the same losses). Inductor's faster generator would not.
    torch._inductor.config.fallback_random = True
    return torch.compile(model, dynamic=True)


class CompileTime:
    """Says once, after the first epoch of a compiled run, how many of its seconds went to compiling (each rank
    compiles its own copy, and says so in its own log)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def report(self, epoch_s: float) -> None:
        if self.enabled:
            self.enabled = False
            logger.info(f"training.compile: compiling the model took {compile_seconds():.1f} s of the first epoch's "
                        f"{epoch_s:.1f} s (counted in its time and graphs/s); later epochs run compiled")


def compile_seconds() -> float:
    """Seconds torch.compile spent so far in this process, forward and backward graphs (dynamo's own record)."""
    from torch._dynamo.utils import compilation_time_metrics

    return float(sum(compilation_time_metrics.get("_compile.compile_inner", [])))

"""Rank-aware logging: one ``setup_logging`` call for the library, scripts and notebooks.

Every message goes through the package logger "QuantumGrav" (never the root logger, so a
user's own logging set-up is left alone). Rank 0 talks on the console; the other ranks
only report warnings there, yet each rank writes a complete log file of its own.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from pathlib import Path
from typing import Callable, TypeVar

import torch.distributed as dist

PACKAGE_LOGGER = "QuantumGrav"
DATE_FORMAT = "%H:%M:%S"
LOG_DIR = "logs"

_OWN_HANDLER = "_quantumgrav_handler"  # marks the handlers setup_logging installed
_warned_messages: set[str] = set()  # per process: what warn_once/rank_zero_warn already said
_chosen_level: dict[str, str | int] = {}  # rank 0's console level as last given explicitly

T = TypeVar("T")


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted.

    Jupyter kernels and pytest replace ``sys.stderr``; binding the stream once (as
    ``StreamHandler(sys.stderr)`` does) would keep writing to a stale object.
    """

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr


def _rank() -> int:
    """The process group's rank; before one exists, the launcher's RANK (0 when not distributed)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def _format(rank: int) -> logging.Formatter:
    return logging.Formatter(f"[RANK {rank}] %(asctime)s %(levelname)s %(name)s: %(message)s", DATE_FORMAT)


def _level(name: str | int) -> int:
    level = logging.getLevelName(name.upper()) if isinstance(name, str) else name
    if not isinstance(level, int):
        raise ValueError(f"unknown log level {name!r}; use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return level


def _remove_own_handlers(logger: logging.Logger, kind: type[logging.Handler] = logging.Handler) -> None:
    for handler in [h for h in logger.handlers if getattr(h, _OWN_HANDLER, False) and isinstance(h, kind)]:
        logger.removeHandler(handler)
        handler.close()


def close_run_log() -> None:
    """Close this process's run log file (the console stays): once a run has ended, later lines
    (the next run's launch in the same notebook kernel) must not land in its ``logs/``."""
    _remove_own_handlers(logging.getLogger(PACKAGE_LOGGER), logging.FileHandler)


def _add_own_handler(logger: logging.Logger, handler: logging.Handler, level: int, rank: int) -> None:
    setattr(handler, _OWN_HANDLER, True)
    handler.setLevel(level)
    handler.setFormatter(_format(rank))
    logger.addHandler(handler)


def setup_logging(rank: int | None = None, run_dir: str | Path | None = None, level: str | None = None,
                  other_ranks_level: str = "WARNING") -> logging.Logger:
    """Configure the "QuantumGrav" logger for this process and return it.

    Calling it again replaces the handlers of the previous call (the latest call describes the whole
    set-up). The trainers call it themselves.

    Args:
        rank: this process's rank; None: the process group's (0 when not distributed).
        run_dir: with a run directory, every rank also writes ``run_dir/logs/rank_{rank}.log`` at INFO.
        level: the console (stderr) level on rank 0; None: INFO, or the level an earlier call gave.
        other_ranks_level: the console level on the other ranks, so N processes do not print every line
            N times.

    Returns:
        The "QuantumGrav" logger.
    """
    rank = _rank() if rank is None else rank
    if level is None:  # keep what the user chose in an earlier call (the trainer calls this again)
        level = _chosen_level.get("rank0", "INFO")
    else:
        _chosen_level["rank0"] = _level(level)
    console_level = _level(level) if rank == 0 else _level(other_ranks_level)
    logger = logging.getLogger(PACKAGE_LOGGER)
    logger.propagate = False  # the root logger's handlers would print every line a second time
    _remove_own_handlers(logger)
    _add_own_handler(logger, _CurrentStderrHandler(), console_level, rank)
    levels = [console_level]
    if run_dir is not None:
        log_file = Path(run_dir) / LOG_DIR / f"rank_{rank}.log"
        try:
            # Rank 0 creates what is missing; every rank may race here (exist_ok).
            log_file.parent.mkdir(parents=rank == 0, exist_ok=True)
            # Append: a resumed run continues the log of the interrupted one.
            _add_own_handler(logger, logging.FileHandler(log_file, mode="a", encoding="utf-8"), logging.INFO, rank)
            levels.append(logging.INFO)
        except FileNotFoundError:
            # Another rank never recreates a run directory: it is gone only because rank 0 removed a run
            # that failed on bad input, and the launcher is stopping this rank.
            if rank == 0:
                raise
    logger.setLevel(min(levels))
    return logger


def chosen_console_level() -> str | int | None:
    """The console level last passed to ``setup_logging`` in this process (None: never given);
    ``QG.launch`` hands it to its workers so a notebook's choice applies to the whole job."""
    return _chosen_level.get("rank0")


def get_logger(name: str) -> logging.Logger:
    """The logger of one part of the library or of your code, under "QuantumGrav".

    Args:
        name: the part's name; "QuantumGrav.<name>" is returned, and a name already under "QuantumGrav" is
            used as it is.

    Returns:
        The ``logging.Logger``, whose records go where ``setup_logging`` sends them.

    Example:
        >>> import QuantumGrav as QG
        >>> QG.get_logger("my_study").name
        'QuantumGrav.my_study'
    """
    if name == PACKAGE_LOGGER or name.startswith(PACKAGE_LOGGER + "."):
        return logging.getLogger(name)
    return logging.getLogger(f"{PACKAGE_LOGGER}.{name}")


def rank_zero_only(fn: Callable[..., T]) -> Callable[..., T | None]:
    """Run ``fn`` on rank 0 only; elsewhere return None. The rank is read at call time,
    so a function decorated at import still behaves once the process group exists."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) if _rank() == 0 else None

    return wrapper


def warn_once(logger: logging.Logger, message: str) -> None:
    """Log ``message`` as a warning the first time this process asks for it, never again."""
    if message in _warned_messages:
        return
    _warned_messages.add(message)
    logger.warning(message)


def rank_zero_warn(logger: logging.Logger, message: str) -> None:
    """A warning every rank would emit (same config, same cause): said once, by rank 0."""
    if _rank() == 0:
        warn_once(logger, message)

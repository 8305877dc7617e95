"""Shared fixtures: a tiny config (seconds per run on 2 CPU cores) and one data cache per session."""

import logging
import os
from pathlib import Path

import pytest

import QuantumGrav as QG

os.environ.setdefault("WANDB_MODE", "offline")  # no test may ever reach the network
os.environ.setdefault("WANDB_SILENT", "true")
REPO = Path(__file__).resolve().parents[2]

TINY = {
    "training": {"seed": 7, "device": "cpu", "num_epochs": 3, "batch_size": 8, "progress_bar": False,
                 "optimizer_kwargs": {"lr": 5.0e-3}},
    "model": {"hidden_channels": [16, 16], "head_hidden": [16], "dropout": 0.0, "norm": "batch"},
    "validation": {"batch_size": 16},
    "testing": {"batch_size": 16},
    "early_stopping": {"patience": 10},
    "data": {"num_samples": 90, "n_min": 16, "n_max": 24, "split": [0.6, 0.2, 0.2], "seed": 3},
    "parallel": {"timeout_s": 30},
}


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture
def tiny_config(tmp_path, data_root):
    """Returns a function: tiny_config(overrides...) -> validated config writing under tmp_path."""

    def make(overrides: dict | None = None) -> dict:
        base = QG.apply_overrides(TINY, {"training.path": str(tmp_path / "runs"), "data.root": str(data_root)})
        return QG.load_config(base, overrides or {})

    return make


class _Collect(logging.Handler):
    def __init__(self, level: int):
        super().__init__(level)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def collect_log():
    """collect_log(logger_name, level="WARNING") -> the list that logger's messages land in during
    this test, whatever setup_logging did to the handlers before."""
    attached = []

    def collect(name: str, level: str = "WARNING") -> list[str]:
        log, handler = logging.getLogger(name), _Collect(logging.getLevelName(level))
        log.addHandler(handler)
        attached.append((log, handler))
        return handler.messages

    yield collect
    for log, handler in attached:
        log.removeHandler(handler)

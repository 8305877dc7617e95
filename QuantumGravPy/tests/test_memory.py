"""MemoryMonitor: fixed snapshot keys, real RSS, and exactly one warning over the limit."""

import logging

import pytest
import torch

from QuantumGrav.training.memory import SNAPSHOT_KEYS, MemoryMonitor


@pytest.fixture
def collected(collect_log):
    """A private logger whose messages land in a list (independent of setup_logging)."""
    log = logging.getLogger("test_memory_monitor")
    log.propagate = False
    return log, collect_log(log.name, "DEBUG")


def test_snapshot_has_fixed_keys_and_real_rss():
    snapshot = MemoryMonitor(torch.device("cpu")).snapshot()
    assert tuple(snapshot) == SNAPSHOT_KEYS
    assert snapshot["rss_mb"] > 1.0  # a Python process with torch loaded is far above 1 MB
    assert snapshot["cuda_allocated_mb"] == snapshot["cuda_reserved_mb"] == snapshot["cuda_peak_mb"] == 0.0


def test_tiny_limit_warns_exactly_once(collected):
    log, messages = collected
    monitor = MemoryMonitor(torch.device("cpu"), limit_mb=1.0, logger=log)
    for _ in range(3):
        snapshot = monitor.check()
    assert set(snapshot) == set(SNAPSHOT_KEYS)
    assert len(messages) == 1
    assert "training.memory_limit_mb" in messages[0] and "1 MB" in messages[0]


def test_given_snapshot_is_checked_and_returned(collected):
    log, messages = collected
    monitor = MemoryMonitor("cpu", limit_mb=100.0, logger=log)
    below = dict.fromkeys(SNAPSHOT_KEYS, 0.0) | {"rss_mb": 99.0}
    assert monitor.check(below) is below and messages == []
    monitor.check(below | {"rss_mb": 250.0})
    assert len(messages) == 1 and "250 MB" in messages[0] and "100 MB" in messages[0]


def test_no_limit_never_warns(collected):
    log, messages = collected
    monitor = MemoryMonitor(torch.device("cpu"), limit_mb=None, logger=log)
    monitor.check(dict.fromkeys(SNAPSHOT_KEYS, 1e9))
    monitor.check()
    assert messages == []


def test_format_is_one_short_line():
    monitor = MemoryMonitor(torch.device("cpu"))
    text = monitor.format({"rss_mb": 812.4, "cuda_allocated_mb": 0.0, "cuda_reserved_mb": 0.0, "cuda_peak_mb": 0.0})
    assert text == "RSS 812 MB"
    assert monitor.format().startswith("RSS ")


def test_each_epoch_starts_a_new_cuda_peak(monkeypatch):
    # No GPU here: stand-ins record what the monitor asks of torch.cuda on a CUDA device.
    resets = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: resets.append(device))
    MemoryMonitor(torch.device("cuda", 1)).start_new_peak()
    MemoryMonitor(torch.device("cpu")).start_new_peak()
    assert resets == [torch.device("cuda", 1)]

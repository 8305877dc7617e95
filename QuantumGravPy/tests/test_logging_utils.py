"""Rank-aware logging: prefixes, console levels per rank, one file per rank, idempotent set-up."""

import io
import logging
import sys

import pytest

from QuantumGrav.common import logging_utils
from QuantumGrav.common.logging_utils import get_logger, rank_zero_only, rank_zero_warn, setup_logging, warn_once


@pytest.fixture(autouse=True)
def restore_package_logger():
    """Each test configures "QuantumGrav" freely; the state before is restored afterwards."""
    package = logging.getLogger("QuantumGrav")
    saved = (list(package.handlers), package.level, package.propagate)
    chosen, warned = dict(logging_utils._chosen_level), set(logging_utils._warned_messages)
    logging_utils._chosen_level.clear()
    logging_utils._warned_messages.clear()
    yield
    logging_utils._chosen_level.clear()
    logging_utils._chosen_level.update(chosen)
    logging_utils._warned_messages.clear()
    logging_utils._warned_messages.update(warned)
    for handler in package.handlers:
        if handler not in saved[0]:
            handler.close()
    package.handlers[:], package.level, package.propagate = saved


def test_rank_0_prints_info_with_its_rank_prefix(capsys):
    setup_logging(rank=0)
    get_logger("test").info("hello from rank zero")
    err = capsys.readouterr().err
    assert "[RANK 0]" in err and "INFO QuantumGrav.test: hello from rank zero" in err


def test_other_ranks_print_only_warnings(capsys):
    setup_logging(rank=1)
    log = get_logger("test")
    log.info("info that rank 1 keeps off the console")
    log.warning("warning from rank 1")
    err = capsys.readouterr().err
    assert "info that rank 1" not in err
    assert "[RANK 1]" in err and "WARNING QuantumGrav.test: warning from rank 1" in err


def test_level_argument_overrides_the_console_level_of_rank_0(capsys):
    setup_logging(rank=0, level="WARNING")
    get_logger("test").info("quiet info")
    assert "quiet info" not in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown log level"):
        setup_logging(rank=0, level="LOUD")


def test_every_rank_writes_a_complete_file(tmp_path, capsys):
    setup_logging(rank=1, run_dir=tmp_path)
    get_logger("training").info("only in the file of rank 1")
    text = (tmp_path / "logs" / "rank_1.log").read_text()
    assert "[RANK 1]" in text and "INFO QuantumGrav.training: only in the file of rank 1" in text
    assert "only in the file" not in capsys.readouterr().err


def test_second_setup_replaces_handlers_and_adds_the_file(tmp_path, capsys):
    setup_logging(rank=0)
    setup_logging(rank=0, run_dir=tmp_path)
    setup_logging(rank=0, run_dir=tmp_path)
    get_logger("test").info("said once")
    assert capsys.readouterr().err.count("said once") == 1
    assert (tmp_path / "logs" / "rank_0.log").read_text().count("said once") == 1
    package = logging.getLogger("QuantumGrav")
    ours = [h for h in package.handlers if getattr(h, logging_utils._OWN_HANDLER, False)]
    assert len(ours) == 2 and package.propagate is False  # console + file (pytest may add its own)


def test_console_follows_a_replaced_stderr(monkeypatch):
    # Jupyter (and pytest) swap sys.stderr after the handler exists.
    setup_logging(rank=0)
    replacement = io.StringIO()
    monkeypatch.setattr(sys, "stderr", replacement)
    get_logger("notebook").info("into the notebook cell")
    assert "into the notebook cell" in replacement.getvalue()


def test_get_logger_names_children_of_the_package():
    assert get_logger("training").name == "QuantumGrav.training"
    assert get_logger("QuantumGrav.launch").name == "QuantumGrav.launch"
    assert get_logger("QuantumGrav").name == "QuantumGrav"


def test_rank_zero_warn_is_said_once_and_only_by_rank_0(monkeypatch, capsys):
    setup_logging(rank=0)
    log = get_logger("test")
    monkeypatch.setattr(logging_utils, "_rank", lambda: 1)
    rank_zero_warn(log, "same warning on every rank")
    assert "same warning" not in capsys.readouterr().err
    monkeypatch.setattr(logging_utils, "_rank", lambda: 0)
    rank_zero_warn(log, "same warning on every rank")
    rank_zero_warn(log, "same warning on every rank")
    assert capsys.readouterr().err.count("same warning on every rank") == 1


def test_warn_once_deduplicates_on_any_rank(capsys):
    setup_logging(rank=3)
    log = get_logger("test")
    for _ in range(3):
        warn_once(log, "warned once per process")
    warn_once(log, "a different message")
    err = capsys.readouterr().err
    assert err.count("warned once per process") == 1 and err.count("a different message") == 1


def test_rank_zero_only_checks_the_rank_at_call_time(monkeypatch):
    @rank_zero_only
    def answer() -> int:
        return 42

    monkeypatch.setattr(logging_utils, "_rank", lambda: 1)
    assert answer() is None
    monkeypatch.setattr(logging_utils, "_rank", lambda: 0)
    assert answer() == 42
    assert answer.__name__ == "answer"


def test_a_level_chosen_by_the_user_survives_the_trainers_own_setup_call(tmp_path, capsys):
    setup_logging(rank=0, level="WARNING")
    setup_logging(rank=0, run_dir=tmp_path)  # what Trainer does once its run directory exists
    get_logger("test").info("quiet on the console")
    assert "quiet on the console" not in capsys.readouterr().err
    assert "quiet on the console" in (tmp_path / "logs" / "rank_0.log").read_text()


def test_a_removed_run_directory_is_never_recreated_by_another_rank(tmp_path, capsys):
    removed = tmp_path / "run-that-failed"  # rank 0 removed it (bad input) before rank 1 set up its log
    setup_logging(rank=1, run_dir=removed)
    get_logger("test").warning("rank 1 still reports on the console")
    assert not removed.exists()
    assert "rank 1 still reports on the console" in capsys.readouterr().err
    setup_logging(rank=0, run_dir=removed)  # rank 0 (or a user's own call) creates what it names
    assert (removed / "logs" / "rank_0.log").is_file()

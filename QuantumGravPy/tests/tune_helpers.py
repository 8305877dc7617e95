"""Importable pieces for the tuner's tests: a deterministic sampler and callbacks that fail or slow a trial
(spawned ranks import them by name, so they live in a module, not in a test)."""

from __future__ import annotations

import time

import optuna

import QuantumGrav as QG


class OrderedSampler(optuna.samplers.BaseSampler):
    """Trial n takes choice n (cyclically) of every categorical parameter, and of every range its low bound
    (n even) or its high bound (n odd): which trial samples what is known in advance."""

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, name, distribution):
        if isinstance(distribution, optuna.distributions.CategoricalDistribution):
            return distribution.choices[trial.number % len(distribution.choices)]
        return distribution.low if trial.number % 2 == 0 else distribution.high


class FailOnRank(QG.Callback):
    """Raises on one rank at the end of the first epoch; the other ranks are then inside a collective."""

    def __init__(self, rank: int):
        self.rank = rank

    def on_epoch_end(self, trainer, record):
        if trainer.runtime.rank == self.rank:
            raise RuntimeError(f"a failure on rank {self.rank} only")


class SlowEpochs(QG.Callback):
    """Every epoch takes ``seconds`` longer: time to kill a trial in the middle."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_epoch_end(self, trainer, record):
        time.sleep(self.seconds)


def open_new_database(rank: int, world_size: int, port: int, results, path: str) -> None:
    """One of several workers opening the same new SQLite study database at once (``spawn_ranks``'s signature)."""
    from QuantumGrav.studies.storage import open_storage

    _report_opening(rank, results, lambda: open_storage(f"sqlite:///{path}"))


def open_one_study(rank: int, world_size: int, port: int, results, settings_of_each_rank: list) -> None:
    """One of several workers opening (creating or joining) one study at once, each with its own settings."""
    from QuantumGrav.studies.storage import open_study

    _report_opening(rank, results, lambda: open_study(settings_of_each_rank[rank]))


def _report_opening(rank: int, results, open_it) -> None:
    """(rank, "opened") or (rank, the error) to the parent, which asserts on every rank's outcome."""
    try:
        open_it()
        results.put((rank, "opened"))
    except Exception as err:  # noqa: BLE001 - the test shows what went wrong
        results.put((rank, f"{type(err).__name__}: {err}"))

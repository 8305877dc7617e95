"""Where a study lives: an Optuna storage that every worker opens, with a heartbeat for each running trial.

``tune.storage``:

- null (the default): a journal file in the study folder, ``<path>/<study>/study.journal``. No server;
  many processes and nodes may share it (Optuna locks it with a symlink, which network filesystems
  such as NFS support), so a SLURM job array can keep its study on the cluster's shared filesystem;
- an Optuna RDB URL: ``sqlite:///path/study.db`` (one machine: SQLite's locks are unreliable on NFS),
  ``postgresql://user@host/db``, ``mysql://...`` (a database server, for many nodes);
- any other text: the path of a journal file.

Every opener builds its own connection from the text above (a launched trial's rank 0 too, for pruning):
no storage object crosses a process boundary, so nothing opened before a fork is used after it.

A trial whose worker stops without telling (``kill -9``, a lost node, a cancelled job) stays RUNNING in
the storage, and its heartbeat stops. Before every trial each worker fails the RUNNING trials whose last
heartbeat is older than ``HEARTBEAT_GRACE_S`` and enqueues a copy of each with the same parameters
(Optuna's ``RetryHeartbeatStaleTrialCallback``, at most ``MAX_RETRIES`` times per trial), which the next
free worker runs. RDB storages have Optuna's own heartbeat; journal files get the same through
``JournalHeartbeatStorage``.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import warnings
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

import optuna
from optuna.storages import JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from ..common.errors import UserError
from .config import StudySettings

HEARTBEAT_INTERVAL_S = 5
HEARTBEAT_GRACE_S = 20  # four missed heartbeats: a live worker under load is not mistaken for a dead one
MAX_RETRIES = 2  # a trial that kills its worker every time (say, out of memory) is not retried forever
HEARTBEAT_ATTR = "quantumgrav:heartbeat"
CREATE_ATTEMPTS = 5  # opening a new database that other workers are creating at the same moment
IDENTITY_WAIT_S = 30  # for the worker that created a study to write its metric and search space


class JournalHeartbeatStorage(JournalStorage, BaseHeartbeat):
    """A journal storage with Optuna's heartbeat protocol: the heartbeat is a system attribute of the trial
    (the wall-clock time of its worker's last beat; the nodes of a cluster share a clock through NTP)."""

    def __init__(self, path: str, retry: RetryHeartbeatStaleTrialCallback):
        super().__init__(JournalFileBackend(path))
        self._retry = retry

    def record_heartbeat(self, trial_id: int) -> None:
        self.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        """RUNNING trials whose last sign of life, their heartbeat or their start, is older than the grace. A
        retry carries the failed trial's system attributes, its old heartbeat too (Optuna's retry callback
        copies them): counted from its own start, it is not taken for dead before its first beat."""
        def last_alive(trial) -> float:
            return max(trial.system_attrs.get(HEARTBEAT_ATTR, 0.0), trial.datetime_start.timestamp())

        now = time.time()
        running = self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
        return [t._trial_id for t in running if now - last_alive(t) > HEARTBEAT_GRACE_S]

    def get_heartbeat_interval(self) -> int:
        return HEARTBEAT_INTERVAL_S

    def get_heartbeat_stale_trial_callback(self) -> RetryHeartbeatStaleTrialCallback:
        return self._retry


def open_storage(spec: str):
    """The storage named by ``spec`` (see the module docstring), opened by this process; UserError when it
    cannot be opened (a folder that does not exist, a server that does not answer, a missing driver)."""
    try:
        with warnings.catch_warnings():  # the heartbeat and its retries are marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            retry = RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES)
            if "://" not in spec:
                if not Path(spec).parent.is_dir():
                    raise FileNotFoundError(f"the folder {Path(spec).parent} does not exist")
                return JournalHeartbeatStorage(spec, retry)
            return _open_database(spec, retry)
    except Exception as err:  # noqa: BLE001 - whatever the driver raises, the user fixes tune.storage
        reason = " ".join(str(err).split())[:300] or type(err).__name__
        raise UserError(f"tune.storage: cannot open {spec!r}: {reason}; give a reachable storage: null (a journal "
                        "file in the study folder), sqlite:///path/study.db, postgresql://user@host/db, or the "
                        "path of a journal file in an existing folder") from None


def _open_database(spec: str, retry: RetryHeartbeatStaleTrialCallback) -> RDBStorage:
    """An RDB storage. Workers started together (a job array, two terminals) may all find a new database and
    create its tables at once; all but one then fail on a table or row the winner has just written
    (``UNIQUE constraint failed: alembic_version``, ``already exists``). The tables exist by then: such a
    worker opens the storage again, after a random pause, a few times at most."""
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    # SQLite: several processes write (heartbeats, pruning reports); wait for the lock, not 5 s.
    engine = {"connect_args": {"timeout": 60}} if spec.startswith("sqlite") else None
    for attempts_left in reversed(range(CREATE_ATTEMPTS)):
        try:
            return RDBStorage(spec, engine_kwargs=engine, heartbeat_interval=HEARTBEAT_INTERVAL_S,
                              grace_period=HEARTBEAT_GRACE_S, heartbeat_stale_trial_callback=retry)
        except (IntegrityError, OperationalError, ProgrammingError) as err:
            created_by_another = isinstance(err, IntegrityError) or "already exists" in str(err)
            if not created_by_another or not attempts_left:
                raise
            time.sleep(random.uniform(0.2, 1.0))


def open_study(settings: StudySettings):
    """Create the study, or load it when another worker (or an earlier run) did; the study must have been
    started with the same metric and search space, or its trials would not compare."""
    if "://" not in settings.storage and settings.storage == str(settings.folder / "study.journal"):
        settings.folder.mkdir(parents=True, exist_ok=True)  # the default storage: the study folder is its home
    storage = open_storage(settings.storage)
    identity = {"metric": settings.metric, "space": settings.space.describe()}
    try:  # the storage lets one worker create a study of a name: that one writes what it was started with
        study = optuna.create_study(storage=storage, study_name=settings.study, sampler=settings.sampler(),
                                    pruner=settings.pruner(), direction=settings.direction)
        for key, value in identity.items():
            study.set_user_attr(key, value)
        return study
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=settings.study, storage=storage, sampler=settings.sampler(),
                                  pruner=settings.pruner())
    stored = _identity_of(study, identity)
    if stored != identity:
        what = "metric" if stored["metric"] != identity["metric"] else "search space"
        raise UserError(f"tune.study: the study '{settings.study}' in {settings.storage} was started with another "
                        f"{what} ({stored[what.split()[-1]]!r}); its trials would not compare with these. Give this "
                        "search a new tune.study, or restore the study's tune section")
    return study


def _identity_of(study, identity: dict[str, Any]) -> dict[str, Any]:
    """What ``study`` was started with. A worker started at the same moment as the one that created it may load
    it before its creator has written that: it waits for it, ``IDENTITY_WAIT_S`` at most; a study left without
    it (its creator was killed at that moment) gets this worker's."""
    deadline = time.monotonic() + IDENTITY_WAIT_S
    while None in (stored := {key: study.user_attrs.get(key) for key in identity}).values():
        if time.monotonic() > deadline:
            for key, value in identity.items():
                if stored[key] is None:
                    study.set_user_attr(key, value)
            return {key: study.user_attrs.get(key) for key in identity}
        time.sleep(0.2)
    return stored


def fail_stale_trials(study) -> None:
    """Fail the trials whose worker stopped beating, and enqueue their retries (each once, whichever worker
    looks first: the storage refuses a second worker's update of a finished trial)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


@contextlib.contextmanager
def heartbeat(study, trial_id: int) -> Iterator[None]:
    """Beat for the trial every HEARTBEAT_INTERVAL_S while the block runs (a thread of this process: the
    trial's training may run here or in processes this one waits for)."""
    storage = study._storage

    def beat() -> bool:
        with contextlib.suppress(Exception):  # one failed write is not a dead worker; the next one counts
            storage.record_heartbeat(trial_id)
        return True

    with repeating(beat, HEARTBEAT_INTERVAL_S, f"heartbeat-trial-{trial_id}", at_start=True):
        yield


@contextlib.contextmanager
def repeating(action: Callable[[], bool], interval_s: float, name: str, at_start: bool = False) -> Iterator[None]:
    """Call ``action`` from a daemon thread every ``interval_s`` (and at once with ``at_start``) while the block
    runs, until it returns False; the thread is joined when the block ends."""
    stop = threading.Event()

    def loop() -> None:
        if at_start and not action():
            return
        while not stop.wait(interval_s):
            if not action():
                return

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def retried_as(trials: list) -> dict[int, int]:
    """The number of each retried trial's retry, by the retried trial's number (Optuna's ``retry_history``)."""
    return {t.system_attrs["retry_history"][-1]: t.number for t in trials if t.system_attrs.get("retry_history")}


def retry_now(study, trial) -> None:
    """An interrupted trial (SIGTERM, Ctrl-C): FAIL, and its retry enqueued at once, as a stale one would be."""
    frozen = study._storage.get_trial(trial._trial_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES)(study, frozen)

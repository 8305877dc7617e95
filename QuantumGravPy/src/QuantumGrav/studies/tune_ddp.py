"""A study worked on by the processes of one torchrun job (a SLURM job, or each task of a job array).

Every rank runs this loop; rank 0 alone talks to the study. The ranks coordinate through the job's
key-value store (torchrun's, which outlives every process group), never through a collective that one
rank could miss:

1. rank 0 decides (``StudyWorker.next_action`` and ``ask``) and publishes command number ``round``: train
   this config, wait (the trials of other workers may complete the study; rank 0 looks again), done, or
   abort (rank 0 failed or was interrupted: every rank raises the same);
2. for a trial, every rank joins a process group of its own for this round (a fresh prefix of the store)
   and trains the config with ``run_job``; rank 0's trainer has the ``PruneTrial`` callback, whose vote
   stops every rank at the same epoch;
3. a rank whose training raises numbers its failure in the store first (the first number is the cause),
   then leaves the group: under gloo the collective the other ranks are waiting in fails at once
   ("Connection closed by peer") instead of after ``parallel.timeout_s``. Every rank then writes its
   outcome, and the group of the round is gone, so the next trial starts in a clean one;
4. rank 0 reads every rank's outcome and records the trial (COMPLETE or PRUNED as rank 0 trained it;
   FAIL with the first error when any rank failed) and the next round begins.

Every wait is bounded: the other ranks wait for a command as long as rank 0 beats (a counter in the store,
raised every KEEPALIVE_S or a quarter of their wait, whichever is shorter, by a thread of rank 0, whatever
rank 0 does meanwhile: its test and baselines after a trial, sampling the next one, waiting for other
workers' trials), and ``parallel.data_timeout_s + parallel.timeout_s`` longer once it stops; an outcome within
the trial's own timeouts (``parallel.data_timeout_s`` + ``parallel.timeout_s`` after rank 0's training ended). Under NCCL,
leaving the group does not release a collective the others wait in: they fail at ``parallel.timeout_s``
(NCCL's watchdog ends them), the job ends, and the same command started again continues the study
(the trial is failed as stale and retried).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import os
import pickle
import time
from collections.abc import Iterator
from typing import Any

import torch.distributed as dist

from ..distributed.lifeline import stop_when_the_agent_dies
from ..distributed.process_group import store_of_this_attempt
from ..common.errors import ConfigError, Preempted, UserError
from ..jobs.entry import run_process
from ..common.logging_utils import get_logger
from .config import StudySettings
from .storage import open_study, repeating
from .trials import WAIT_POLL_S, Outcome, StudyFailed, StudyWorker, one_line, outcome_of_run

logger = get_logger("tune")
KEEPALIVE_S = 60.0  # rank 0 beats at least this often while the other ranks wait for its next command
ACK_TIMEOUT_S = 60.0


class Channel:
    """Commands from rank 0 and outcomes to it, as keys of the job's store (pickled)."""

    def __init__(self, store, rank: int, world_size: int, timeout_s: float):
        self.store, self.rank, self.world_size = dist.PrefixStore("QuantumGrav/tune", store), rank, world_size
        self.timeout = datetime.timedelta(seconds=timeout_s)

    def publish(self, round_: int, command: tuple) -> None:
        self.store.set(f"command/{round_}", pickle.dumps(command))

    def receive(self, round_: int) -> tuple:
        """Command ``round_``, waited for as long as rank 0 beats: its test and baselines after a trial (or
        the next trial's sampling) may take longer than the timeout of one wait."""
        beats = self.beats()
        while True:
            try:
                return self._read(f"command/{round_}", self.timeout)
            except dist.DistStoreError as err:
                if "timeout" not in str(err).lower():
                    raise
                now = self.beats()
                if now == beats:
                    raise StudyFailed(f"rank 0 sent no command and no keep-alive for "
                                      f"{self.timeout.total_seconds():.0f} s (parallel.data_timeout_s + "
                                      "parallel.timeout_s): it is stuck or gone, so this rank stops") from None
                beats = now

    def beat(self) -> None:
        """Rank 0: still deciding what comes next."""
        self.store.add("lead/beats", 1)

    def beats(self) -> int:
        return self.store.add("lead/beats", 0)

    def report(self, round_: int, outcome: tuple) -> None:
        self.store.set(f"outcome/{round_}/{self.rank}", pickle.dumps(outcome))

    def outcomes(self, round_: int) -> list[tuple]:
        return [self._read(f"outcome/{round_}/{rank}", self.timeout) for rank in range(self.world_size)]

    def number_failure(self, round_: int) -> int:
        """1 for the first rank whose trial raised in this round, 2 for the next, ..."""
        return self.store.add(f"failure/{round_}", 1)

    def acknowledge(self, round_: int) -> None:
        self.store.add(f"ack/{round_}", 1)

    def wait_for_acknowledgements(self, round_: int) -> None:
        """Rank 0 stays until every rank has read the last command (its exit may take a store with it)."""
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while self.store.add(f"ack/{round_}", 0) < self.world_size - 1 and time.monotonic() < deadline:
            time.sleep(0.1)

    def group_store(self, round_: int):
        return dist.PrefixStore(f"group/{round_}", self.store)

    def _read(self, key: str, timeout: datetime.timedelta) -> Any:
        self.store.wait([key], timeout)
        return pickle.loads(self.store.get(key))


def run_distributed_worker(settings: StudySettings, base: dict[str, Any]) -> dict[str, Any] | None:
    """This rank's part of the study (every rank of the torchrun job calls it); rank 0 returns the summary."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    stop_when_the_agent_dies()  # a torchrun killed with kill -9 must not leave its tuner ranks running
    timeout_s = base["parallel"]["data_timeout_s"] + base["parallel"]["timeout_s"]
    store = store_of_this_attempt(timeout_s)
    if store is None:
        raise UserError("the tuner on several processes runs under torchrun (its store coordinates the ranks); "
                        "start it with torchrun, or as one process: python -m QuantumGrav tune --nproc N")
    channel = Channel(store, rank, world_size, timeout_s)
    if rank != 0:
        _follow(channel)
        return None
    return Lead(channel, settings, base).run()


class Lead:
    """Rank 0: the study's worker, telling the other ranks what to do, one command per round."""

    def __init__(self, channel: Channel, settings: StudySettings, base: dict[str, Any]):
        self.channel, self.settings, self.base = channel, settings, base
        self.round = 0
        # Within a quarter of the time the other ranks wait for a command (short where parallel timeouts are).
        self.keepalive_s = min(KEEPALIVE_S, channel.timeout.total_seconds() / 4)

    def run(self) -> dict[str, Any]:
        with beating(self.channel, self.keepalive_s):
            return self._run()

    def _run(self) -> dict[str, Any]:
        worker = None
        try:
            worker = StudyWorker(self.settings, self.base, open_study(self.settings))
            while (action := worker.next_action()) != "done":
                time.sleep(WAIT_POLL_S) if action == "wait" else self._trial(worker)
        except BaseException as err:  # the other ranks wait for a command: they raise the same
            self._send(("abort", isinstance(err, UserError), isinstance(err, Preempted), one_line(err)))
            self.channel.wait_for_acknowledgements(self.round - 1)
            if worker is not None:
                worker.finish_after_error()
            raise
        self._send(("done",))
        self.channel.wait_for_acknowledgements(self.round - 1)
        return worker.finish()

    def _send(self, command: tuple) -> None:
        self.channel.publish(self.round, command)
        self.round += 1

    def _trial(self, worker: StudyWorker) -> None:
        trial = worker.ask()
        if trial is None:
            return
        started = time.perf_counter()
        try:
            config = worker.trial_config(trial)
        except ConfigError as err:  # refused before any rank started: the others never hear of it
            worker.record(trial, Outcome.failed(err, user_error=True), time.perf_counter() - started)
            return
        callbacks = [worker.pruning(trial)]
        round_ = self.round
        self._send(("trial", config, callbacks))
        with worker.running(trial):
            _train_in_group(self.channel, round_, config, callbacks)
            outcome = _merged(self.channel.outcomes(round_), self.settings.metric)
        worker.record(trial, outcome, time.perf_counter() - started)


@contextlib.contextmanager
def beating(channel: Channel, interval_s: float) -> Iterator[None]:
    """Rank 0 beats every ``interval_s`` from a thread while the block runs, so that the other ranks, waiting
    for its next command, know it is alive however long its main thread is busy."""
    # The beats go through a client of the store of their own: one client serialises its requests, so a beat sent
    # through the main thread's client would wait behind a blocking read of it (rank 0 waiting for the ranks'
    # outcomes) and the other ranks, waiting for the next command, would see no beat.
    own_client = copy.copy(channel)
    own_client.store = channel.store.clone()

    def beat() -> bool:
        try:
            own_client.beat()
            return True
        except dist.DistError:  # the store is gone (the job is ending): the other ranks learn it anyway
            return False

    with repeating(beat, interval_s, "QuantumGrav-tune-keepalive"):
        yield


def _follow(channel: Channel) -> None:
    """Ranks other than 0: do what rank 0 says, round after round, until it says done (or abort)."""
    round_ = 0
    while True:
        command = channel.receive(round_)
        if command[0] in ("done", "abort"):
            channel.acknowledge(round_)
        if command[0] == "done":
            return
        if command[0] == "abort":
            _, user_error, preempted, message = command
            raise (UserError(message) if user_error else Preempted(message) if preempted
                   else StudyFailed(f"rank 0 failed, so every rank stops: {message}"))
        if command[0] == "trial":
            _train_in_group(channel, round_, *command[1:])
        round_ += 1


def _train_in_group(channel: Channel, round_: int, config: dict[str, Any], callbacks: list) -> tuple:
    """Train the trial on every rank, in a process group of this round; report how it ended on this rank."""
    ended: list[tuple] = []

    def note(result: dict[str, Any] | None, err: BaseException | None) -> None:  # before this rank leaves
        ended.append(_rank_outcome(channel, round_, result, err))

    try:
        run_process(config, channel.rank, report=note, callbacks=callbacks, store=channel.group_store(round_))
    except Exception:  # the trial fails (its outcome says how); the study goes on
        if not ended:  # the report itself failed (the store is gone)
            raise
    # After leaving: under gloo, a rank still inside this trial's collectives got "Connection closed by peer".
    channel.report(round_, ended[0])
    return ended[0]


def _rank_outcome(channel: Channel, round_: int, result: dict[str, Any] | None,
                  err: BaseException | None) -> tuple | None:
    """How the trial ended on this rank; None for an interruption (Ctrl-C), which goes on up."""
    if err is None:
        return "ok", {"summary": result["summary"], "history": result["history"]} if channel.rank == 0 else None
    if isinstance(err, Preempted):  # every rank was asked to stop (the vote): rank 0 fails the trial and retries it
        return "preempted", str(err)
    if not isinstance(err, Exception):
        return None
    # Numbered before this rank leaves the group: a rank that fails because this one left comes later.
    user_error = isinstance(err, UserError)
    message = one_line(err) if user_error else f"{type(err).__name__}: {one_line(err)}"
    return "failed", channel.number_failure(round_), user_error, message


def _merged(reports: list[tuple], metric: str) -> Outcome:
    """The trial's outcome from every rank's: the first failure is the cause; else rank 0's run."""
    failures = sorted((report[1], rank, report) for rank, report in enumerate(reports) if report[0] == "failed")
    if failures:
        _, rank, (_, _, user_error, message) = failures[0]
        return Outcome.failed(f"rank {rank} failed: {message}", user_error=user_error)
    preempted = [report[1] for report in reports if report[0] == "preempted"]
    if preempted:
        raise Preempted(preempted[0])
    return outcome_of_run(reports[0][1], metric)

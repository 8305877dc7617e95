"""The callback protocol: what a run does besides the loop, at a few points of it (Lightning's idea, kept small).

A callback subclasses ``Callback`` and overrides the hooks it needs; each hook receives the run's state
(``callbacks.state.RunState``: rank, model, optimizer, run directory, history, ...)::

    class ExtraMetric(QG.Callback):
        def on_epoch_end(self, state, record):
            record["val_error"] = 1.0 - record["val_accuracy"]   # lands in metrics.csv, W&B, the history

    QG.Trainer(config, callbacks=[ExtraMetric()])       # or QG.launch(config, nproc, callbacks=[...])
    # or in YAML:  callbacks: [{type: !pyobject my_module.ExtraMetric, kwargs: {}}]

Every hook runs on every rank (``main_process_only = True``: on rank 0 alone) with the same arguments:
the epoch's ``record`` is rank 0's, broadcast before the hooks run. A callback never calls a collective
itself (one rank calling one the others skip is a hang). To stop the run it *votes*: ``on_epoch_end``
returns ``Stop("why")``, and the loop gathers every callback's vote on every rank in one collective, so
every rank stops at the same epoch, whichever rank voted. ``Stop(..., resumable=True)`` interrupts the
run instead of ending it (the preemption callback's vote): every rank checkpoints and stops with
``Preempted``; the same command continues the run. ``on_step_end`` may vote too, for interruptions
only: step votes are reduced without a blocking collective, one optimizer step later.

State a resumed run needs (``state_dict``/``load_state_dict``, plain numbers, strings, lists and dicts)
is stored in the checkpoint under the callback's ``state_key``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..distributed.votes import Decision, Stop
from ..common.errors import ConfigError
from .state import RunState


class Callback:
    """Your code at a few points of a run: subclass it and override the hooks you need (each default does
    nothing).

    Every hook runs on every rank (``main_process_only = True``: on rank 0 alone) with the same arguments.
    A callback never calls a collective itself (one rank calling one the others skip is a hang); to stop
    the run it returns ``Stop("why")`` from ``on_epoch_end``, and every rank stops at the same epoch,
    whichever rank voted. State a resumed run needs goes in ``state_dict``/``load_state_dict``.

    Example:
        >>> import QuantumGrav as QG
        >>> class ExtraMetric(QG.Callback):
        ...     def on_epoch_end(self, state, record):
        ...         record["val_error"] = 1.0 - record["val_accuracy"]  # lands in metrics.csv and W&B
        >>> trainer = QG.Trainer("configs/train.yaml", callbacks=[ExtraMetric()])  # doctest: +SKIP
    """

    main_process_only: bool = False  # True: the hooks run on rank 0 only (writers: files, W&B, the console)
    # True: an analysis (QuantumGrav.analyses), which reads the test's predictions and the rivals': it runs after
    # them and before the writers, wherever it was switched on.
    analysis: bool = False

    @property
    def state_key(self) -> str:
        """Where ``state_dict()`` is kept in the checkpoint; unique per callback of a run."""
        return type(self).__qualname__

    def on_fit_start(self, state: RunState) -> None:
        """``run_training`` begins (after a resume restored the state)."""

    def on_step_end(self, state: RunState, epoch: int, completed_batches: int) -> Stop | None:
        """After every optimizer step. Keep it cheap: no ``.item()`` on GPU tensors, no collectives.

        Args:
            state: the run's state.
            epoch: the current epoch.
            completed_batches: the batches of this epoch done so far.

        Returns:
            None, or ``Stop("why", resumable=True)`` to interrupt the run (checkpoint and stop, one
            optimizer step later on every rank).
        """

    def on_epoch_end(self, state: RunState, record: dict[str, Any]) -> Stop | None:
        """After validation, with the epoch's record (rank 0's, on every rank).

        Args:
            state: the run's state.
            record: the epoch's metrics; keys added here go into metrics.csv, W&B and the history (user
                callbacks run after early stopping and before the writers).

        Returns:
            None, or ``Stop("why")`` to end the run after this epoch (every rank stops at the same epoch).
        """

    def on_fit_end(self, state: RunState, decision: Decision) -> None:
        """``run_training`` ends normally (not on an interruption or an error)."""

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        """After ``run_test`` (rank 0 only, as ``run_test`` is); ``result`` may be extended."""

    def teardown(self, state: RunState) -> None:
        """The run is closed (after success, an interruption or an error): release resources."""

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs (plain numbers, strings, lists and dicts), stored in the checkpoint under
        ``state_key``; the default: nothing."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned, on every rank, when a run resumes."""


def _as_stop(vote: Any, callback: Callback, hook: str) -> Stop | None:
    if vote is None:
        return None
    if isinstance(vote, str):  # a plain reason is a vote to stop
        vote = Stop(vote)
    if not isinstance(vote, Stop):
        raise TypeError(f"{type(callback).__qualname__}.{hook} returned {type(vote).__name__}; a hook returns "
                        "None or QuantumGrav.Stop('why')")
    if hook == "on_step_end" and not vote.resumable:  # it would end as a preemption
        raise TypeError(f"{type(callback).__qualname__}.on_step_end voted Stop({vote.reason!r}); a step vote "
                        "interrupts the run: return Stop('why', resumable=True), or vote from on_epoch_end "
                        "to end it")
    return vote


class CallbackList:
    """The run's callbacks in order; calls a hook on those that run on this rank, collects their votes."""

    def __init__(self, callbacks: Sequence[Callback], is_main: bool):
        keys = [c.state_key for c in callbacks]
        duplicated = sorted({k for k in keys if keys.count(k) > 1})
        if duplicated:
            raise ValueError(f"two callbacks share the state key {', '.join(duplicated)}; give each its own "
                             "state_key (a property of the callback)")
        self.callbacks = [c for c in callbacks if is_main or not c.main_process_only]
        self.all = list(callbacks)  # for the checkpoint: rank 0 saves every callback's state
        self._implementing: dict[str, list[Callback]] = {}

    def implementing(self, hook: str) -> list[Callback]:
        """The callbacks of this rank whose ``hook`` does something (overridden in their class or set on them):
        ``on_step_end`` runs at every optimizer step, and most callbacks leave it as Callback's no-op."""
        if hook not in self._implementing:
            self._implementing[hook] = [c for c in self.callbacks if hook in vars(c)
                                        or getattr(type(c), hook) is not getattr(Callback, hook)]
        return self._implementing[hook]

    def call(self, hook: str, *args: Any) -> None:
        for callback in self.implementing(hook):
            getattr(callback, hook)(*args)

    def votes(self, hook: str, *args: Any) -> list[tuple[str, Stop]]:
        """(callback name, vote) of each callback that voted to stop at this hook, on this rank."""
        found = []
        for callback in self.implementing(hook):
            vote = _as_stop(getattr(callback, hook)(*args), callback, hook)
            if vote is not None:
                found.append((type(callback).__qualname__, vote))
        return found

    def state_dict(self) -> dict[str, Any]:
        return {c.state_key: c.state_dict() for c in self.all}

    def load_state_dict(self, states: dict[str, Any]) -> None:
        for callback in self.all:
            if callback.state_key in states:
                callback.load_state_dict(states[callback.state_key])


def configured_callbacks(entries: Sequence[Mapping[str, Any]]) -> list[Callback]:
    """The callbacks of the config's ``callbacks:`` list, each built as ``type(**kwargs)`` (kwargs as the YAML gave
    them: plain lists and dicts)."""
    built = []
    for i, entry in enumerate(entries):
        try:
            built.append(entry["type"](**entry["kwargs"]))
        except (TypeError, ValueError) as err:
            raise ConfigError(f"callbacks.{i}.kwargs: {entry['type'].__qualname__}(**kwargs) failed: {err}") from None
    return built

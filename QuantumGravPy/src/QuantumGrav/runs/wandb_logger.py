"""Weights & Biases logging that is safe under DDP and never stops a training.

Exactly one W&B run per job: only the main process (rank 0) creates one; every other
rank holds a logger whose methods do nothing. W&B is an extra: if it is not installed,
cannot start, or fails mid-run, the logger switches itself off with one warning and
the training goes on (every metric is in ``metrics.csv`` anyway).

Offline runs (the default mode) are written to ``run_dir/wandb/offline-run-*`` and can
be uploaded later with ``wandb sync``; ``wandb_files.read_offline_runs`` reads them back locally.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config.sections.wandb import WANDB_DEFAULTS, WANDB_MODES
from ..distributed.environment import is_main_process
from ..common.logging_utils import get_logger
from ..common.files import shown_path
from .artifacts import MetricsCSV
from .wandb_files import epochs_on_disk, wait_for_exit_record

logger = get_logger("wandb")

FINISH_WAIT_S = 10.0


def _with_defaults(cfg: dict) -> dict:
    merged = {**copy.deepcopy(WANDB_DEFAULTS), **(cfg or {})}
    merged["watch"] = {**WANDB_DEFAULTS["watch"], **((cfg or {}).get("watch") or {})}
    return merged


def _json_safe(value: Any) -> Any:
    """A plain-JSON copy: classes and functions become their dotted path, other objects their str."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "__qualname__") and hasattr(value, "__module__"):
        return f"{value.__module__}.{value.__qualname__}"
    return str(value)


def _number(text: str) -> int | float:
    """A value of metrics.csv as it was logged (Python writes floats so that they read back exactly)."""
    try:
        return int(text)
    except ValueError:
        return float(text)


class WandbLogger:
    """One W&B run for a training job (see the module docstring for the rules).

    ``cfg`` is the ``logger.wandb`` config section. The environment variable WANDB_MODE,
    when set to one of ``WANDB_MODES``, overrides ``cfg["mode"]``: ``WANDB_MODE=disabled``
    switches W&B off without editing the config, and the test suite's WANDB_MODE=offline
    guarantees that no test can reach the network.
    """

    def __init__(self, cfg: dict, run_dir: Path, resolved_config: dict, resume_id: str | None = None):
        self.cfg = _with_defaults(cfg)
        self.run_dir = Path(run_dir)
        env_mode = os.environ.get("WANDB_MODE")
        self.mode = env_mode if env_mode in WANDB_MODES else self.cfg["mode"]
        self._run = None
        self._run_id: str | None = None
        self._first_epoch_missing: int | None = None  # a resumed offline run: see _log_lost_epochs
        # Defensive: the trainer creates the logger on rank 0 only, but a second run per
        # job (one per rank) would split the metrics and multiply the uploads.
        if self.mode == "disabled" or not is_main_process():
            return
        self._start(resolved_config, resume_id)

    # ------------------------------------------------------------------ start and failure
    def _start(self, resolved_config: dict, resume_id: str | None) -> None:
        try:
            import wandb
        except ImportError:
            self._disable("wandb is not installed (pip install wandb)")
            return
        self._wandb = wandb
        offline = self.mode == "offline"
        try:
            settings = wandb.Settings(  # inside the try: x_ settings may be renamed by a future wandb
                console="off",  # no capture of stdout/stderr: our logging and tqdm stay as they are
                quiet=True,
                disable_git=True,
                x_save_requirements=False,
                # Offline means no network at all: no system metrics (their probes include a cloud
                # metadata endpoint) and no machine metadata.
                x_disable_stats=offline,
                x_disable_meta=offline,
                x_disable_machine_info=offline,
            )
            self._run = wandb.init(
                project=self.cfg["project"], entity=self.cfg["entity"], name=self.cfg["name"],
                group=self.cfg["group"], tags=list(self.cfg["tags"]) or None, mode=self.mode,
                dir=str(self.run_dir), config=_json_safe(resolved_config),
                id=resume_id, resume="allow" if resume_id else None,
                # This logger owns its run: another run open in the process is left alone.
                reinit="create_new", settings=settings)
        except Exception as err:  # noqa: BLE001 - any failure of W&B must not stop the training
            self._disable(f"wandb.init failed ({type(err).__name__}: {err})")
            return
        self._run_id = self._run.id
        if resume_id and offline:
            try:
                self._first_epoch_missing = 1 + max(epochs_on_disk(self.run_dir, resume_id), default=-1)
            except ValueError as err:  # a damaged file: what it lacks is unknown, so nothing is logged twice
                logger.warning(f"W&B: cannot read the earlier offline runs ({err}); epochs they lack stay missing")
        where = f"{shown_path(self.run_dir / 'wandb')}; upload later with `wandb sync`" if offline else self._run.url
        logger.info(f"W&B run {self._run_id} ({self.mode}{', resumed' if resume_id else ''}): {where}")

    def _disable(self, what_failed: str) -> None:
        """Switch W&B off for the rest of the run, with the one warning that says so."""
        logger.warning(f"W&B logging is off for the rest of this run: {what_failed}. "
                       f"Training continues; every metric is still written to {self.run_dir / 'metrics.csv'}.")
        run, self._run = self._run, None
        if run is not None:
            with contextlib.suppress(Exception):  # the run is already broken; nothing more to report
                self._close(run, exit_code=1)

    def _close(self, run, exit_code: int | None = None) -> None:
        run.finish(exit_code=exit_code)
        # wandb 0.31's finish() returns before its service has written the offline
        # transaction log (the file may still hold only its header). Wait for the file's
        # final "exit" record, so the run is complete on disk when finish returns: for
        # read_offline_runs and `wandb sync`, and in a DDP worker that exits right after
        # (processes started by multiprocessing skip the atexit hook that would wait).
        if self.mode == "offline" and not wait_for_exit_record(Path(run.settings.sync_file), FINISH_WAIT_S):
            logger.warning(f"W&B: {run.settings.sync_file} was still incomplete {FINISH_WAIT_S:.0f} s after "
                           "finishing the run; the last records may be missing from the offline run")

    def _call(self, what: str, action: Callable[[Any], None]) -> None:
        """Run ``action(run)`` if a run is open; any exception disables the logger."""
        if self._run is None:
            return
        try:
            action(self._run)
        except Exception as err:  # noqa: BLE001 - e.g. the wandb service died mid-run
            self._disable(f"{what} failed ({type(err).__name__}: {err})")

    # ------------------------------------------------------------------ public API
    @property
    def run_id(self) -> str | None:
        """The W&B run id (kept after finish or failure: a resumed training continues this run)."""
        return self._run_id

    def log_model_info(self, info: dict[str, Any]) -> None:
        """Parameter counts etc., counted by hand (wandb.watch is not needed for them),
        stored as ``model/<key>`` in the run config and summary."""
        values = {(k if "/" in k else f"model/{k}"): _json_safe(v) for k, v in info.items()}

        def store(run) -> None:
            run.config.update(values, allow_val_change=True)
            run.summary.update(values)

        self._call("logging the model info", store)

    def watch(self, model) -> None:
        """Gradient/parameter histograms via wandb.watch, if ``watch.enabled``.

        Pass the plain model, not the DDP wrapper. The histograms are rank 0's *local*
        gradients: wandb's tensor hooks fire before DDP averages the gradients over ranks.
        """
        if self._run is None or not self.cfg["watch"]["enabled"]:
            return
        watch = self.cfg["watch"]
        try:
            self._run.watch(model, log=watch["log"], log_freq=watch["log_freq"])
        except Exception as err:  # noqa: BLE001 - a model wandb cannot hook is no reason to stop
            # Unlike a failed log, this says nothing about the run itself: keep logging metrics.
            logger.warning(f"wandb.watch failed ({type(err).__name__}: {err}): no gradient histograms; "
                           "the rest of the W&B logging continues")

    def log_epoch(self, metrics: dict[str, Any], epoch: int) -> None:
        """One history row: exactly ``metrics`` (the metrics.csv row) at step ``epoch``.

        commit=True hands the row to W&B's service now (what the service had not written to disk when
        a job was stopped is logged again by the resumed run: ``_log_lost_epochs``) and keeps the histograms
        of wandb.watch, logged during the next epoch, on that epoch's step. With step = epoch, a resumed run
        continues at the steps after its checkpoint.
        """
        if self._first_epoch_missing is not None:
            self._log_lost_epochs(before=epoch)
        self._call(f"logging epoch {epoch}", lambda run: run.log(dict(metrics), step=epoch, commit=True))

    def _log_lost_epochs(self, before: int) -> None:
        """A resumed offline run logs first the rows of ``metrics.csv`` that the earlier attempts' files lack.

        W&B's service writes its file every 15 s or so, and a job stopped by a scheduler loses what it had
        not written: SLURM (preemption, the time limit, ``scancel``, a requeue) sends SIGTERM to every process
        of the job, the service too, which exits at once, while the ranks still checkpoint. The epochs logged
        in those seconds (or all of them, in a short attempt) are in the checkpointed ``metrics.csv`` only."""
        first, self._first_epoch_missing = self._first_epoch_missing, None
        lost = [row for row in MetricsCSV(self.run_dir / "metrics.csv").rows() if first <= int(row["epoch"]) < before]
        if lost:
            logger.info(f"W&B: epochs {first}..{before - 1} are not in the offline files of the earlier attempts "
                        "(W&B's service was stopped with the job); logging them from metrics.csv")
        for row in lost:
            values = {key: _number(text) for key, text in row.items() if text != ""}
            self._call(f"logging epoch {values['epoch']}",
                       lambda run, values=values: run.log(values, step=values["epoch"], commit=True))

    def log_summary(self, summary: dict[str, Any]) -> None:
        self._call("updating the summary", lambda run: run.summary.update(_json_safe(summary)))

    def log_images(self, paths: dict[str, Path]) -> None:
        """Images (e.g. matplotlib PNGs) in one history row of their own, at the step after
        the last one logged (the epoch row is already committed and steps only increase)."""
        self._call("logging images", lambda run: run.log(
            {name: self._wandb.Image(str(path)) for name, path in paths.items()}))

    def finish(self) -> None:
        """Close the run (flushes it to disk, or uploads it when online). Safe to call twice."""
        run, self._run = self._run, None
        if run is None:
            return
        try:
            self._close(run)
        except Exception as err:  # noqa: BLE001
            logger.warning(f"W&B: finishing run {self._run_id} failed ({type(err).__name__}: {err}); "
                           f"every metric is still in {self.run_dir / 'metrics.csv'}")

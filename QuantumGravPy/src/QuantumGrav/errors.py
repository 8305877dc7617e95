"""Errors a user can fix. The CLI prints their message (no traceback) and exits 2."""


class UserError(Exception):
    """Bad input (config, data, command line, environment): the message says what to change."""


class ConfigError(UserError):
    """The config is invalid. The message names each key path and what was expected."""


class Preempted(Exception):
    """The job was asked to stop (SIGTERM: a SLURM preemption or time limit, ``scancel``) and every rank
    stopped after checkpointing. Starting the same job again (a requeue) continues the run."""

    def __init__(self, run_dir, epoch: int, completed_batches: int):
        super().__init__(f"stopped on SIGTERM after checkpointing epoch {epoch} (batch {completed_batches}) in "
                         f"{run_dir}; the same job started again (a requeue) continues from there")
        self.run_dir = run_dir

"""Errors a user can fix. The CLI prints their message (no traceback) and exits 2."""


class UserError(Exception):
    """Bad input (config, data, command line, environment): the message says what to change.

    The command line prints the message without a traceback and exits with code 2.
    """


class ConfigError(UserError):
    """The config is invalid: the message has one line per problem, each naming the key path and what was
    expected (e.g. ``training.batch_sise: unknown key; did you mean 'batch_size'?``)."""


class Preempted(Exception):
    """The job was asked to stop (SIGTERM: a SLURM preemption or time limit, ``scancel``) and every rank
    stopped after checkpointing. Starting the same job again (a requeue) continues the run."""

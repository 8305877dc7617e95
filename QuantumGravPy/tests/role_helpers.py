"""Objects that configs in the tests of the role checks name (QuantumGrav.config.roles)."""

from pathlib import Path

import QuantumGrav as QG
from own_data_helpers import small_sets

EVIDENCE = "pwned"  # in the working directory: proof that something a config named was called


def leave_evidence(*args, **kwargs) -> None:
    """A function of no role: called from a config (as a dataset factory it is not), it leaves EVIDENCE."""
    Path(EVIDENCE).touch()


class LeavesEvidence:
    """A class of no role (not a Dataset, Module, Optimizer, scheduler or Callback): building it leaves EVIDENCE."""

    def __init__(self, *args, **kwargs):
        leave_evidence()


@QG.dataset_factory
def causal_sets_from_a_function(num_sets: int = 60) -> list:
    """A dataset made by a function, marked as a dataset factory."""
    return small_sets(num_sets)

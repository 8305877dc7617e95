"""The loss of notebook 06: cross-entropy that takes a moment longer, so that a tiny job runs long
enough to be interrupted in the middle. torchrun and spawned workers import it by name
(``criterion: !pyobject slow_losses.cross_entropy_slowly``): a function defined in the notebook
could not be imported by them (notebook 04, section 6)."""

import os
import time

import torch.nn.functional as F


def cross_entropy_slowly(logits, target):
    """torch.nn.functional.cross_entropy, after sleeping SLOW_LOSS_SECONDS (default 0.05 s)."""
    time.sleep(float(os.environ.get("SLOW_LOSS_SECONDS", "0.05")))
    return F.cross_entropy(logits, target)

"""A callback of one's own, for notebook 05.

``QG.launch`` hands every rank a pickled copy of each callback, and a worker process can import a class
only from a module: so the class lives here, next to the notebook, not in the notebook itself.
"""

import QuantumGrav as QG


class GeneralisationGap(QG.Callback):
    """One more column per epoch (metrics.csv, the W&B history, ``trainer.history``): the validation loss
    minus the training loss, how much better the model fits the sets it trains on than unseen ones."""

    def on_epoch_end(self, state, record):
        record["generalisation_gap"] = record["val_loss"] - record["train_loss"]

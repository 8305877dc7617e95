"""Importable datasets and models for the 'your own data' tests (spawned workers import them by name)."""

import os
import sys
from pathlib import Path

import torch
from torch import nn
from torch_geometric.data import Data

import QuantumGrav as QG

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
if str(NOTEBOOKS) not in sys.path:  # the notebook's module, as the notebook imports it
    sys.path.insert(0, str(NOTEBOOKS))

from my_causal_sets import GraphAndInvariantsGNN, MyCausalSets  # noqa: E402,F401


def small_sets(num_sets: int = 60, target: str = "manifold_like", seed: int = 1) -> list[Data]:
    """A plain list of Data: the smallest 'dataset' the trainer takes."""
    return list(MyCausalSets(num_sets, n_min=12, n_max=18, target=target, seed=seed))


class SetsWithoutY(torch.utils.data.Dataset):
    def __init__(self, num_sets: int = 12):
        self.items = [Data(x=d.x, edge_index=d.edge_index) for d in small_sets(num_sets)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class SetsWithVaryingFeatureWidth(SetsWithoutY):
    def __init__(self, num_sets: int = 12):
        self.items = small_sets(num_sets)
        last = self.items[-1]
        self.items[-1] = Data(x=last.x[:, :4], edge_index=last.edge_index, y=last.y)


class SetsWithLabelTwo(SetsWithoutY):
    """y in {0, 1, 2}: not a binary target."""

    def __init__(self, num_sets: int = 12):
        self.items = [Data(x=d.x, edge_index=d.edge_index, y=torch.tensor([i % 3])) for i, d in
                      enumerate(small_sets(num_sets))]


class SetsSizedByTheEnvironment(SetsWithoutY):
    """As many sets as the worker's QG_TEST_NUM_SETS says: shows which environment a worker got."""

    def __init__(self):
        self.items = small_sets(int(os.environ["QG_TEST_NUM_SETS"]))


class ModelWithFiveOutputs(nn.Module):
    """Ignores out_channels: wrong for a binary task."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.body = QG.GNNClassifier(in_channels, 5, hidden_channels=[8], head_hidden=[], norm="none")

    def forward(self, batch):
        return self.body(batch)


def trainer_ddp_on_a_dataset_object(rank: int, world_size: int, port: int, results, config: dict) -> None:
    """Each rank builds the same dataset object and hands it to TrainerDDP."""
    QG.initialize_ddp(rank, world_size, master_port=port, backend="gloo")
    try:
        trainer = QG.TrainerDDP(rank, config, dataset=small_sets())
        train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
        trainer.run_training(train_loader, val_loader)
        test = trainer.run_test(test_loader)
        trainer.close()
        results.put((rank, trainer.history[-1], test, str(trainer.run_dir)))
    except Exception as err:  # the parent asserts on what every rank reports
        results.put((rank, None, f"{type(err).__name__}: {err}", None))
    finally:
        QG.cleanup_ddp()

"""Importable datasets and models for the 'your own data' tests (spawned workers import them by name)."""

import os
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn import GraphConv

import QuantumGrav as QG

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
if str(NOTEBOOKS) not in sys.path:  # the notebook's module, as the notebook imports it
    sys.path.insert(0, str(NOTEBOOKS))

from my_causal_sets import GraphAndInvariantsGNN, MyCausalSets  # noqa: E402,F401


def small_sets(num_sets: int = 60, target: str = "manifold_like", seed: int = 1) -> list[Data]:
    """A plain list of Data: the smallest 'dataset' the trainer takes."""
    return list(MyCausalSets(num_sets, n_min=12, n_max=18, target=target, seed=seed))


# --------------------------------------------------------------------------- a user's causal sets, numpy only
def _closure(R: np.ndarray) -> np.ndarray:
    """Transitive closure by repeated squaring."""
    while True:
        grown = R | (R.astype(np.int64) @ R.astype(np.int64) > 0)
        if (grown == R).all():
            return R
        R = grown


def _sprinkling(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """n points uniform in the causal diamond |t| + |x| < 1 of dim-dimensional Minkowski space (by rejection
    from the cube); i precedes j when j lies in the future light cone of i."""
    points = np.empty((0, dim))
    while len(points) < n:
        candidates = rng.uniform(-1, 1, size=(10 * n, dim))
        points = np.concatenate([points, candidates[np.abs(candidates[:, 0])
                                                    + np.linalg.norm(candidates[:, 1:], axis=1) < 1]])
    t, x = points[:n, 0], points[:n, 1:]
    return t[None, :] - t[:, None] > np.linalg.norm(x[None, :, :] - x[:, None, :], axis=-1)


def _layered(n: int, rng: np.random.Generator) -> np.ndarray:
    """Three layers (about n/4, n/2, n/4), each pair in consecutive layers related with one probability."""
    layer = rng.choice(3, size=n, p=[0.25, 0.5, 0.25])
    return _closure((layer[None, :] == layer[:, None] + 1) & (rng.random((n, n)) < rng.uniform(0.2, 0.6)))


def _percolation(n: int, rng: np.random.Generator) -> np.ndarray:
    """Transitive percolation: each pair i < j related with one probability, then closed."""
    return _closure(np.triu(rng.random((n, n)) < rng.uniform(0.05, 0.2), k=1))


class UserCausalSets(torch.utils.data.Dataset):
    """Causal sets as a user writes them, with numpy and none of the library's code: sprinklings into 2d and 4d
    causal diamonds, random layered orders and transitive percolation, in a random labelling. Each item is
    Data(x, edge_index, y) and nothing else: x = three columns the user chose (links in, links out, past
    size, each / N), edge_index = the links, past to future, y = the class. No invariants."""

    class_names = ("minkowski_2d", "minkowski_4d", "layered", "percolation")

    def __init__(self, num_sets: int = 120, n_min: int = 16, n_max: int = 32, seed: int = 0):
        self.items = [self._make(i, np.random.default_rng([seed, i]), n_min, n_max) for i in range(num_sets)]

    @staticmethod
    def _make(i: int, rng: np.random.Generator, n_min: int, n_max: int) -> Data:
        n, label = int(rng.integers(n_min, n_max + 1)), i % 4
        makers = (lambda: _sprinkling(n, 2, rng), lambda: _sprinkling(n, 4, rng), lambda: _layered(n, rng),
                  lambda: _percolation(n, rng))
        R = makers[label]()
        perm = rng.permutation(n)
        R = R[np.ix_(perm, perm)]
        links = R & ~(R.astype(np.int64) @ R.astype(np.int64) > 0)
        x = np.stack([links.sum(axis=0), links.sum(axis=1), R.sum(axis=0)], axis=1) / n
        return Data(x=torch.tensor(x, dtype=torch.float32), edge_index=torch.tensor(np.array(np.nonzero(links))),
                    y=torch.tensor([label]))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class UndirectedUserCausalSets(UserCausalSets):
    """A user's causal sets with every link given both ways, as PyG's to_undirected makes them: not orders."""

    def __init__(self, num_sets: int = 12):
        from torch_geometric.utils import to_undirected

        super().__init__(num_sets)
        self.items = [Data(x=d.x, edge_index=to_undirected(d.edge_index), y=d.y) for d in self.items]


class UserCausalSetsWithOneCycle(UserCausalSets):
    """A user's causal sets, item ``bad`` with a directed cycle 1 -> 2 -> 3 -> 1 added to its links."""

    def __init__(self, bad: int, num_sets: int = 12):
        super().__init__(num_sets)
        item = self.items[bad]
        cycle = torch.tensor([[1, 2, 3], [2, 3, 1]])
        self.items[bad] = Data(x=item.x, edge_index=torch.cat([item.edge_index, cycle], dim=1), y=item.y)


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


class SetsWithThreeFeatures(SetsWithoutY):
    """Binary-labelled causal sets whose x keeps 3 of the library's node features: data a model of the library's
    features cannot read."""

    def __init__(self, num_sets: int = 6):
        self.items = [Data(x=d.x[:, :3], edge_index=d.edge_index, y=d.y) for d in small_sets(num_sets)]


class SetsSizedByTheEnvironment(SetsWithoutY):
    """As many sets as the worker's QG_TEST_NUM_SETS says: shows which environment a worker got."""

    def __init__(self):
        self.items = small_sets(int(os.environ["QG_TEST_NUM_SETS"]))


class ModelWithFiveOutputs(nn.Module):
    """Ignores out_channels: wrong for a binary task."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.body = QG.GNNClassifier(in_channels, 5, conv=GraphConv, hidden_channels=[8],
                                     head_hidden=[], norm="none", pooling="mean_max", directions="forward")

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

"""The DataLoaders of the three splits: ``training:``'s loader keys, ``validation:`` and ``testing:``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


from ..checks import boolean, choice, integer, integer_or_auto
from .base import Section, setting, subsection


@dataclass(frozen=True)
class BatchBudgetSection(Section):
    """``training.batch_budget``: batches bounded by size instead of a number of graphs."""

    yaml: ClassVar[str] = "training.batch_budget"

    nodes: int | None = setting(None, integer(1), nullable=True,
                                doc="batches by size instead of batch_size: at most this many nodes per batch, per "
                                    "process (training, validation and testing); with edges, graphs or both")
    edges: int | None = setting(None, integer(1), nullable=True,
                                doc="at most this many edges per batch; similar sizes share a batch, every rank runs "
                                    "the same number of steps and each step's batches hold about the same edges "
                                    "(docs/large_data.md); a set larger than the budget is an error")
    graphs: int | None = setting(None, integer(1), "at most this many graphs per batch (null: any)", nullable=True)



# No drop_last for validation and testing: every item counts, or the metrics are not exact.
@dataclass(frozen=True)
class LoaderSection(Section):
    """The DataLoader of one split (the training split's; validation and testing add their own keys)."""

    yaml: ClassVar[str] = "training"

    batch_size: int = setting(32, integer(1), "graphs per batch, per process")
    num_workers: int | str = setting(0, integer_or_auto(0),
                                     "DataLoader worker processes, per process; auto: this process's share of the "
                                     "cores less one, its own (as QG.launch shares the cores' threads), so that the "
                                     "workers follow the machine they run on")
    pin_memory: bool = setting(False, boolean,
                               "page-locked host memory for faster copies to a GPU; only helps with CUDA")
    prefetch_factor: int | None = setting(None, integer(1), nullable=True,
                                          doc="batches each worker loads ahead; null: PyTorch's default (2 with "
                                              "workers)")



TRAINING_SAMPLERS: tuple[str, ...] = ("uniform", "class_balanced")


@dataclass(frozen=True)
class TrainingLoaderSection(LoaderSection):
    """The training split's loader: batch size or budget, shuffling, the incomplete last batch."""

    batch_budget: BatchBudgetSection | None = subsection(BatchBudgetSection, optional=True)
    drop_last: bool = setting(False, boolean, "drop each epoch's incomplete last training batch")
    shuffle: bool = setting(True, boolean, "reshuffle the training set every epoch (DistributedSampler.set_epoch)")
    sampler: str = setting("uniform", choice(*TRAINING_SAMPLERS),
                           "uniform: every training set once per epoch; class_balanced: as many draws, with "
                           "replacement, each class equally likely (torch's WeightedRandomSampler with weights 1 / "
                           "the class's count; upstream QuantumGrav's balanced variant); for graph-level classes")



@dataclass(frozen=True)
class ValidationSection(LoaderSection):
    """``validation:``: the loader and how the validation after every epoch runs."""

    yaml: ClassVar[str] = "validation"

    batch_size: int = setting(128, integer(1), "graphs per batch, per process")
    mode: str = setting("sharded", choice("sharded", "rank0"),
                        "sharded: every rank evaluates a shard, sums reduced; rank0: rank 0 evaluates all; same numbers")
    recompute_batch_norm: bool = setting(
        True, boolean,
        "before each validation, set every batch norm's statistics to those of the whole training set at the "
        "current weights (one forward pass, sums over all ranks); false: the running averages of the last batches, "
        "which swing with each batch's mix and made the validation loss jump")
    recompute_batch_norm_sets: int | None = setting(
        None, integer(1),
        "the batch norm pass reads at least this many training sets (the first batches of the epoch's shuffled "
        "order, split among the ranks) instead of all: a pass of a fraction of the cost (docs/stable_training.md "
        "measures both); null: the whole training set", nullable=True)



STRONG_BASELINE_FEATURES: tuple[str, ...] = ("invariants", "invariants_and_elements")



@dataclass(frozen=True)
class TestingSection(LoaderSection):
    """``testing:``: the loader of the test after training and its baselines."""

    yaml: ClassVar[str] = "testing"

    batch_size: int = setting(128, integer(1), "graphs per batch, per process")
    baselines: bool = setting(True, boolean, "fit the order-invariant baselines (scikit-learn) on the training split "
                                             "and report them next to the test result (items without invariants get "
                                             "them derived from edge_index); false: the model's result alone")
    strong_baseline: str = setting("invariants", choice(*STRONG_BASELINE_FEATURES),
                                   "the strong baseline's input: invariants (the order invariants); "
                                   "invariants_and_elements: also the distribution over the elements of each "
                                   "per-element feature and the layer widths (for QuantumGrav.jl's kinds)")
    strongest_baseline: bool = setting(False, boolean,
                                       "also fit the strongest rival: gradient boosting on the order invariants, the "
                                       "per-element features' distributions, the exact 2D-order test and the graph "
                                       "observables, computed from each set's edges (about 10 ms per set at N = 128)")



@dataclass(frozen=True)
class LoadersSection(Section):
    """The three splits' loaders."""

    training: TrainingLoaderSection = subsection(TrainingLoaderSection)
    validation: ValidationSection = subsection(ValidationSection)
    testing: TestingSection = subsection(TestingSection)

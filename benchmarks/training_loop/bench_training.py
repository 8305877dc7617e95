#!/usr/bin/env python3
"""Training throughput for 1..N processes on this machine (CPU/gloo or CUDA/NCCL), what the loop's
cross-rank stop check costs per optimizer step, and the loop side by side with a hand-written DDP loop and
Lightning, as tables.

    python benchmarks/training_loop/bench_training.py --nproc 1 2 --epochs 3 --samples 800
    python benchmarks/training_loop/bench_training.py --tables stop-check --nproc 2 --steps 1000
    python benchmarks/training_loop/bench_training.py --tables epochs --epochs 20
    OMP_NUM_THREADS=1 python benchmarks/training_loop/bench_training.py --tables compare --nproc 1 2 3 --epochs 3 --repetitions 5

``--tables epochs`` trains the job of ``--config`` for ``--epochs`` epochs in one process, once with the
library's flush of denormal floats and once without, and prints every epoch's training graphs/s and the
slowest epoch's against the fastest: without the flush, epochs slow down as the attention weights' softmax
underflows into denormals (``benchmarks/stable_training/diagnose_training.py`` counts them).

Each row of the first table is one job started with QG.launch (the launcher users call); graphs/s is the
training throughput of the whole job averaged over the epochs after the first (which includes start-up
costs), ms/step an epoch's wall time (training and validation) divided by its optimizer steps per rank. A
benchmark, not a test: on a 2-core CPU machine DDP mostly shows its communication overhead; on GPUs it shows
the scaling.

The second table times the stop check alone in N processes, as the extra time per step of a loop of steps
that do ``--step-ms`` of work each: the blocking check the loop used (all-reduce a flag, read it with
.item() at every step) against ``distributed.StepVotes`` (an asynchronous all-reduce on a gloo group, read
one step later). On CUDA the blocking check also synchronised the host with the GPU at every step, which
this CPU timing does not show.

The third (``--tables compare``) trains the job of ``--config`` (configs/train.yaml: the default job, its
model as the config says) with QuantumGrav, with the loop of PyTorch's DDP tutorial written out below, and
with Lightning where it is installed (it is not a dependency: ``pip install lightning`` to include it), on
the same model, data, split, batch, optimizer and seed, gloo and one thread per process. QuantumGrav flushes
denormal floats to zero (``training.flush_denormals``); the other two keep them, as users' code does, or flush
them too with ``--contenders-flush on``. Each repetition runs
every contender once in an order rotated per repetition, so that a slow spell of a shared machine does not
always fall on the same one; the ratios of one repetition were measured minutes apart. The numbers are stored
as JSON (``--json``) with the command and the machine's load average.
"""

import argparse
import datetime
import importlib.util
import logging
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

import QuantumGrav as QG


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else what platform knows): the comparison's numbers hold
    for one kind of CPU (denormals cost nothing on some, much on others)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure(nproc: int, epochs: int, samples: int, workdir: str) -> dict:
    config = QG.load_config("configs/train.yaml", {
        "training.num_epochs": epochs, "training.path": f"{workdir}/runs", "training.progress_bar": False,
        "early_stopping.enabled": False, "data.num_samples": samples, "data.root": f"{workdir}/data",
    })
    QG.CausalSetDataset.from_config(config["data"])  # generate once, outside the timing
    started = time.perf_counter()
    result = QG.launch(config, nproc=nproc)
    wall = time.perf_counter() - started
    later = result["history"][1:] or result["history"]
    train = round(samples * config["data"]["split"][0])
    steps = math.ceil(math.ceil(train / nproc) / config["training"]["batch_size"])
    epoch_s = statistics.mean(r["epoch_time_s"] for r in later)
    return {"nproc": nproc, "graphs_per_s": statistics.mean(r["graphs_per_s"] for r in later), "epoch_s": epoch_s,
            "ms_per_step": 1000 * epoch_s / steps, "wall_s": wall, "val_accuracy": result["history"][-1]["val_accuracy"]}


def _epoch_rates_process(config: dict, results) -> None:
    """One fresh process (forked before any flag was set) trains ``config`` and reports every epoch's graphs/s."""
    from QuantumGrav.jobs.entry import run_job

    QG.setup_logging(0, level="WARNING")
    history = run_job(config)["history"]
    results.put([(record["graphs_per_s"], record["epoch_time_s"]) for record in history])


def epoch_throughput(epochs: int, flush: bool, workdir: str, config_path: str) -> list[tuple[float, float]]:
    """(training graphs/s, epoch seconds) of every epoch of the job of ``config_path`` in one fresh process,
    with the library's flush of denormal floats (``training.flush_denormals``) on or off. An epoch's seconds
    hold its training, the batch norm statistics' pass (validation.recompute_batch_norm) and validation."""
    from QuantumGrav.common.processes import worker_context

    config = QG.apply_overrides(comparison_config(epochs, None, workdir, config_path),
                                {"training.flush_denormals": flush, "validation.recompute_batch_norm": True})
    QG.CausalSetDataset.from_config(config["data"])  # generated once, outside the timing
    context = worker_context()
    results = context.Queue()
    process = context.Process(target=_epoch_rates_process, args=(config, results))
    process.start()
    rates = results.get(timeout=7200)
    process.join()
    return rates


def print_epoch_table(epochs: int, config_path: str) -> dict:
    """Graphs/s of every epoch with and without the flush, and each run's slowest epoch against its fastest."""
    with tempfile.TemporaryDirectory() as workdir:
        config = comparison_config(epochs, None, workdir, config_path)
        measured = {flush: epoch_throughput(epochs, flush, workdir, config_path) for flush in (True, False)}
    rates = {flush: [rate for rate, _ in rows] for flush, rows in measured.items()}
    seconds = {flush: [s for _, s in rows] for flush, rows in measured.items()}
    train_sets = round(config["data"]["num_samples"] * config["data"]["split"][0])
    print(f"Training graphs/s per epoch of {config_path} ({epochs} epochs, {torch.get_num_threads()} thread(s), one "
          "process), with training.flush_denormals true (the default) and false, and each epoch's seconds "
          "(training, batch norm statistics, validation):")
    print("| epoch | graphs/s flushed | graphs/s IEEE denormals | epoch s flushed | epoch s IEEE denormals |")
    print("|---:|---:|---:|---:|---:|")
    for epoch in range(len(rates[True])):
        print(f"| {epoch} | {rates[True][epoch]:.0f} | {rates[False][epoch]:.0f} | {seconds[True][epoch]:.1f} | "
              f"{seconds[False][epoch]:.1f} |")
    ratios = {flush: min(r) / max(r) for flush, r in rates.items()}
    print(f"| slowest / fastest | {ratios[True]:.2f} | {ratios[False]:.2f} | | |\n")
    return {"epochs": epochs, "threads": torch.get_num_threads(), "training_sets": train_sets,
            "graphs_per_s": {"flushed": rates[True], "ieee_denormals": rates[False]},
            "epoch_s": {"flushed": seconds[True], "ieee_denormals": seconds[False]},
            "slowest_over_fastest": {"flushed": ratios[True], "ieee_denormals": ratios[False]}}


def _work(milliseconds: float, gradients: torch.Tensor) -> None:
    """Stands in for a DDP training step: the CPU busy for about ``milliseconds``, then the gradients'
    all-reduce, which already makes every rank wait for the slowest at every step."""
    until = time.perf_counter() + milliseconds / 1000
    x = torch.ones(64, 64)
    while time.perf_counter() < until:
        x = x @ x / 64
    dist.all_reduce(gradients)


def default_model_parameters() -> int:
    """The parameters of configs/train.yaml's model on the generator's node features (5 classes)."""
    from QuantumGrav.data import causal_sets
    from QuantumGrav.models.gnn import count_parameters
    from QuantumGrav.training.model_builder import build_model

    model = build_model(QG.load_config("configs/train.yaml")["model"], len(causal_sets.NODE_FEATURES), 5)
    return count_parameters(model)["total_params"]


def time_stop_checks(rank: int, world_size: int, port: int, results, steps: int, step_ms: float,
                     parameters: int) -> None:
    """``steps`` steps of ``step_ms`` of work and a gradient all-reduce (of the default model's parameters):
    without a check, with the old blocking check after each, with StepVotes after each. The overhead of a
    check is its steps' time minus the unchecked steps' time."""
    QG.initialize_ddp(rank, world_size, master_port=port, backend="gloo")
    torch.set_num_threads(1)
    try:
        runtime = QG.distributed.runtime.Runtime(rank=rank, world_size=world_size, backend="gloo")
        gradients = torch.zeros(parameters)

        def timed(check) -> float:
            dist.barrier()
            started = time.perf_counter()
            for _ in range(steps):
                _work(step_ms, gradients)
                check()
            return (time.perf_counter() - started) / steps

        def blocking() -> None:  # what _after_optimizer_step did before
            flag = torch.tensor([0.0])
            dist.all_reduce(flag)
            bool(flag.item() > 0)

        unchecked = timed(lambda: None)
        old = timed(blocking)
        with runtime.step_votes(timeout_s=60) as votes:
            new = timed(lambda: votes.exchange(False))
        results.put((rank, old - unchecked, new - unchecked))
    finally:
        QG.cleanup_ddp()


def stop_check_table(nprocs: list[int], steps: int, step_ms: float) -> None:
    from QuantumGrav.common.processes import worker_context

    parameters = default_model_parameters()
    print(f"Stop check overhead per step of {step_ms:g} ms of work and an all-reduce of {parameters:,} gradients "
          f"({steps} steps; slowest rank):")
    print("| processes | blocking all-reduce + .item() (µs per step) | StepVotes (µs per step) |")
    print("|---:|---:|---:|")
    for nproc in nprocs:
        if nproc < 2:
            continue  # one process exchanges nothing
        context, port = worker_context(), QG.find_free_port()
        results = context.Queue()
        processes = [context.Process(target=time_stop_checks,
                                     args=(r, nproc, port, results, steps, step_ms, parameters))
                     for r in range(nproc)]
        for process in processes:
            process.start()
        rows = [results.get(timeout=600) for _ in processes]
        for process in processes:
            process.join()
        blocking = max(r[1] for r in rows) * 1e6  # the slowest rank sets the pace
        asynchronous = max(r[2] for r in rows) * 1e6
        print(f"| {nproc} | {blocking:.1f} | {asynchronous:.1f} |")


# --------------------------------------------------------------------------- side by side: QG, by hand, Lightning
CONTENDERS = ("QuantumGrav", "hand-written DDP", "Lightning")


def lightning_installed() -> bool:
    return importlib.util.find_spec("lightning") is not None


def comparison_config(epochs: int, samples: int | None, workdir: str, config_path: str) -> dict:
    """The job of ``config_path`` (its model whatever it is now) for ``epochs`` epochs, on ``samples`` sets if
    given; what runs outside the training epochs (figures, early stopping, the test's baselines, the batch norm
    pass before validation) is off: it is not timed (the batch norm pass: bench_batch_norm_pass.py)."""
    overrides = {"training.num_epochs": epochs, "training.path": f"{workdir}/runs", "training.progress_bar": False,
                 "training.figures": False, "early_stopping.enabled": False, "data.root": f"{workdir}/data",
                 "testing.baselines": False, "validation.recompute_batch_norm": False}
    return QG.load_config(config_path, {**overrides, **({"data.num_samples": samples} if samples else {})})


def _join_group(rank: int, world_size: int, port: int) -> None:
    """What each contender's process does first: one thread (as torchrun sets OMP_NUM_THREADS=1), and the
    rendezvous address for a process group that the contender itself creates."""
    torch.set_num_threads(1)
    # OMP_NUM_THREADS too: Lightning, not finding it, would give each process its share of the cores instead.
    os.environ.update(OMP_NUM_THREADS="1", MASTER_ADDR="localhost", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size), NODE_RANK="0")


def cpu_ms_per_step(marks: list[tuple[int, float]]) -> float:
    """The median CPU time between consecutive optimizer steps of one epoch, epochs after the first, from
    (epoch, time.process_time()) at each step's end: the process's work per step (all its threads, the
    collectives' too), far less disturbed than wall time by other processes on a shared machine."""
    later = [m for m in marks if m[0] > marks[0][0]] or marks
    return 1000 * statistics.median(b - a for (e, a), (f, b) in zip(later, later[1:]) if e == f)


class _StepClock(QG.Callback):
    def __init__(self):
        self.marks: list[tuple[int, float]] = []

    def on_step_end(self, trainer, epoch, completed_batches):
        self.marks.append((epoch, time.process_time()))


def _run_quantumgrav(rank: int, world_size: int, config: dict) -> dict:
    """The library as a user runs it: each rank runs QG.launch's per-process job (Trainer, or TrainerDDP on
    a gloo group). Its records' graphs/s: all ranks' training graphs over rank 0's training-loop time."""
    from QuantumGrav.jobs.entry import run_job

    QG.setup_logging(rank, level="WARNING")  # as the benchmark's own process: no per-epoch lines
    if world_size > 1:
        QG.initialize_ddp(rank, world_size, master_port=int(os.environ["MASTER_PORT"]), backend="gloo")
    try:
        clock = _StepClock()
        history = run_job(config, callbacks=[clock])["history"]
        return {"graphs_per_s": [record["graphs_per_s"] for record in history],
                "cpu_ms_per_step": cpu_ms_per_step(clock.marks)}
    finally:
        QG.cleanup_ddp()


def _run_data(config: dict):
    """The job's data as QuantumGrav splits it: (training sets, number of classes)."""
    from QuantumGrav.data import sources as data_sources
    from QuantumGrav.training.loaders import load_run_data

    data = load_run_data(QG.load_config(config).sections, QG.distributed.runtime.Runtime())
    return data_sources.subset(data.dataset, data.split["train"]), data.task.output_width


def _plain_model(config: dict, num_classes: int, train_set) -> torch.nn.Module:
    from QuantumGrav.training.model_builder import build_model

    torch.manual_seed(config["training"]["seed"])
    return build_model(config["model"], train_set[0].x.size(1), num_classes)


def _plain_loader(config: dict, train_set, rank: int, world_size: int):
    from torch.utils.data.distributed import DistributedSampler
    from torch_geometric.loader import DataLoader

    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=config["training"]["seed"])
    return DataLoader(train_set, batch_size=config["training"]["batch_size"], sampler=sampler)


def _run_hand_written(rank: int, world_size: int, config: dict) -> dict:
    """The loop of PyTorch's DDP tutorial on the same model, data, batch, optimizer and seed: no checkpoints,
    no stop votes, no records. Timed as QuantumGrav times itself: the epoch's training loop on rank 0."""
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    if world_size > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    train_set, num_classes = _run_data(config)
    model = _plain_model(config, num_classes, train_set)
    ddp_model = DistributedDataParallel(model) if world_size > 1 else model
    tcfg = config["training"]
    optimizer = tcfg["optimizer_type"](model.parameters(), **tcfg["optimizer_kwargs"])
    loader = _plain_loader(config, train_set, rank, world_size)
    rates, marks = [], []
    for epoch in range(tcfg["num_epochs"]):
        loader.sampler.set_epoch(epoch)
        ddp_model.train()
        graphs, started = 0, time.perf_counter()
        for batch in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(ddp_model(batch), batch.y.view(-1))
            loss.backward()
            optimizer.step()
            graphs += batch.num_graphs
            marks.append((epoch, time.process_time()))
        rates.append(graphs * world_size / (time.perf_counter() - started))  # every rank has as many (padding)
    if world_size > 1:
        dist.destroy_process_group()
    return {"graphs_per_s": rates, "cpu_ms_per_step": cpu_ms_per_step(marks)}


def _run_lightning(rank: int, world_size: int, config: dict) -> dict:
    """The same model, data, batch, optimizer and seed in a LightningModule, trained by lightning.Trainer
    (DDP on gloo over the processes started here; no validation, logger, checkpoints or progress bar)."""
    import lightning as L
    import torch.nn.functional as F
    from lightning.pytorch.plugins.environments import LightningEnvironment
    from lightning.pytorch.strategies import DDPStrategy

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # its start-up tips and banners
    train_set, num_classes = _run_data(config)
    tcfg = config["training"]

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = _plain_model(config, num_classes, train_set)

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.model(batch), batch.y.view(-1))

        def configure_optimizers(self):
            return tcfg["optimizer_type"](self.parameters(), **tcfg["optimizer_kwargs"])

    class EpochTimer(L.Callback):
        def __init__(self):
            self.rates: list[float] = []
            self.marks: list[tuple[int, float]] = []

        def on_train_epoch_start(self, trainer, module):
            self.graphs, self.started = 0, time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):  # after the optimizer step
            self.graphs += batch.num_graphs
            self.ended = time.perf_counter()
            self.marks.append((trainer.current_epoch, time.process_time()))

        def on_train_epoch_end(self, trainer, module):
            self.rates.append(self.graphs * world_size / (self.ended - self.started))

    timer = EpochTimer()
    strategy = (DDPStrategy(cluster_environment=LightningEnvironment(), process_group_backend="gloo")
                if world_size > 1 else "auto")
    trainer = L.Trainer(accelerator="cpu", devices=world_size, strategy=strategy, max_epochs=tcfg["num_epochs"],
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, use_distributed_sampler=False, callbacks=[timer])
    trainer.fit(Module(), train_dataloaders=_plain_loader(config, train_set, rank, world_size))
    if world_size > 1:
        dist.destroy_process_group()
    return {"graphs_per_s": timer.rates, "cpu_ms_per_step": cpu_ms_per_step(timer.marks)}


def _contender_process(name: str, rank: int, world_size: int, port: int, config: dict, results,
                       contenders_flush: bool) -> None:
    _join_group(rank, world_size, port)
    if name != "QuantumGrav" and contenders_flush:  # QuantumGrav flushes per its config (training.flush_denormals)
        torch.set_flush_denormal(True)  # one thread (_join_group): this one is all there is
    run = {"QuantumGrav": _run_quantumgrav, "hand-written DDP": _run_hand_written, "Lightning": _run_lightning}[name]
    try:
        results.put((rank, run(rank, world_size, config), None))
    except BaseException as err:  # noqa: BLE001 - the parent reports it
        results.put((rank, None, f"{type(err).__name__}: {err}"))
        raise


def run_contender(name: str, world_size: int, config: dict, contenders_flush: bool) -> dict:
    """Train the job with ``name`` in ``world_size`` fresh processes; rank 0's graphs/s of every epoch and
    CPU ms per step."""
    from QuantumGrav.common.processes import worker_context

    context, port = worker_context(), QG.find_free_port()
    results = context.Queue()
    processes = [context.Process(target=_contender_process,
                                 args=(name, r, world_size, port, config, results, contenders_flush))
                 for r in range(world_size)]
    for process in processes:
        process.start()
    rows = dict((rank, (rates, error)) for rank, rates, error in (results.get(timeout=1800) for _ in processes))
    for process in processes:
        process.join()
    failed = [f"rank {rank}: {error}" for rank, (_, error) in sorted(rows.items()) if error]
    if failed:
        raise RuntimeError(f"{name} at world size {world_size} failed: " + "; ".join(failed))
    return rows[0][0]


def compare(nprocs: list[int], repetitions: int, epochs: int, samples: int | None, config_path: str,
            store, contenders_flush: bool) -> list[dict]:
    """Each repetition trains every contender once, in an order rotated per repetition (so that a slow spell
    of a shared machine does not always hit the same one); a contender's figure for one job is the median
    over its epochs after the first (start-up), the table's the median over repetitions. ``store(rows)`` is
    called after every job, so that an interrupted run keeps what it measured."""
    contenders = [c for c in CONTENDERS if c != "Lightning" or lightning_installed()]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as workdir:
        config = comparison_config(epochs, samples, workdir, config_path)
        QG.CausalSetDataset.from_config(config["data"])  # generated once, outside every timing
        for world_size in nprocs:
            runs: dict[str, list[float]] = {c: [] for c in contenders}
            cpu: dict[str, list[float]] = {c: [] for c in contenders}
            rows.append({"nproc": world_size, "graphs_per_s": runs, "cpu_ms_per_step": cpu})
            for repetition in range(repetitions):
                shift = repetition % len(contenders)
                for name in contenders[shift:] + contenders[:shift]:
                    measured = run_contender(name, world_size, config, contenders_flush)
                    rates = measured["graphs_per_s"]
                    runs[name].append(statistics.median(rates[1:] or rates))
                    cpu[name].append(measured["cpu_ms_per_step"])
                    print(f"world size {world_size}, repetition {repetition + 1}: {name} {runs[name][-1]:.1f} "
                          f"graphs/s (epochs: {', '.join(f'{r:.1f}' for r in rates)}), {cpu[name][-1]:.1f} CPU ms "
                          "per step", file=sys.stderr, flush=True)
                    store(rows)
    return rows


def _ratio_cells(values: dict[str, list[float]], invert: bool) -> list[str]:
    """QuantumGrav's ratio to each other contender: of the medians, and of every repetition (as speeds:
    a time per step is inverted, so that above 1 means QuantumGrav is faster in both tables)."""
    cells = []
    for other in CONTENDERS[1:]:
        if other not in values:
            cells.append("-")
            continue
        pairs = [(o, q) if invert else (q, o) for q, o in zip(values["QuantumGrav"], values[other])]
        medians = (statistics.median(values[other]), statistics.median(values["QuantumGrav"]))
        medians = medians if invert else medians[::-1]
        cells.append(f"{medians[0] / medians[1]:.3f} ({', '.join(f'{a / b:.3f}' for a, b in pairs)})")
    return cells


def print_comparison(rows: list[dict]) -> None:
    for key, title, invert in (
            ("graphs_per_s", "Training graphs/s (rank 0's training loop; per repetition the median of the epochs "
                             "after the first)", False),
            ("cpu_ms_per_step", "CPU ms per optimizer step (rank 0, all its threads; median over the steps of "
                                "the epochs after the first)", True)):
        print(f"{title}, median over repetitions, and QuantumGrav's speed relative to each (median, and every "
              "repetition's; above 1: QuantumGrav faster):")
        print("| processes | QuantumGrav | hand-written DDP | Lightning | QG vs hand-written | QG vs Lightning |")
        print("|---:|---:|---:|---:|---|---|")
        for row in rows:
            values = {name: v for name, v in row[key].items() if v}
            cells = [f"{statistics.median(values[name]):.1f}" if name in values else "not installed"
                     for name in CONTENDERS]
            print(f"| {row['nproc']} | {' | '.join(cells)} | {' | '.join(_ratio_cells(values, invert))} |")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=None,
                        help="causal sets generated (default: 800 for throughput, the config's for compare)")
    parser.add_argument("--tables", nargs="+", choices=("throughput", "stop-check", "compare", "epochs"),
                        default=["throughput", "stop-check"],
                        help="which tables (throughput alone also runs against an older QuantumGrav)")
    parser.add_argument("--steps", type=int, default=1000, help="steps timed per stop check (second table)")
    parser.add_argument("--step-ms", type=float, default=5.0, help="work per step in the second table")
    parser.add_argument("--repetitions", type=int, default=3, help="jobs per contender and world size (compare)")
    parser.add_argument("--config", default="configs/train.yaml", help="the job compared (compare)")
    parser.add_argument("--json", default="benchmarks/training_loop/results_training_comparison.json",
                        help="where the comparison's numbers are stored")
    parser.add_argument("--epochs-json", default="benchmarks/training_loop/results_training_epochs.json",
                        help="where the per-epoch table's numbers are stored (--tables epochs)")
    parser.add_argument("--contenders-flush", choices=("off", "on"), default="off",
                        help="compare: the hand-written loop and Lightning keep IEEE denormal floats (off, as users' "
                             "code does) or flush them as QuantumGrav does (on)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: study_results.py
    import study_results  # written whole or not at all

    QG.setup_logging(level="WARNING")
    if "throughput" in args.tables:
        with tempfile.TemporaryDirectory() as workdir:
            rows = [measure(n, args.epochs, args.samples or 800, workdir) for n in args.nproc]
        print("| processes | graphs/s (train) | ms/step | epoch (s) | job wall time (s) | final val accuracy |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['nproc']} | {r['graphs_per_s']:.0f} | {r['ms_per_step']:.1f} | {r['epoch_s']:.2f} | "
                  f"{r['wall_s']:.1f} | {r['val_accuracy']:.3f} |")
        print()
    if "stop-check" in args.tables:
        stop_check_table(args.nproc, args.steps, args.step_ms)
    if "epochs" in args.tables:
        table = print_epoch_table(args.epochs, args.config)
        study_results.write_json(args.epochs_json, {
            "command": " ".join(sys.argv), "date": datetime.datetime.now(datetime.UTC).isoformat(),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__},
            **table}, indent=1)
        print(f"stored in {args.epochs_json}\n")
    if "compare" in args.tables:
        load_before, flush = os.getloadavg(), args.contenders_flush == "on"

        def store(rows: list[dict]) -> None:
            study_results.write_json(args.json, {
                "command": " ".join(sys.argv), "date": datetime.datetime.now(datetime.UTC).isoformat(),
                "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "load_average_before": load_before,
                            "load_average_now": os.getloadavg(), "platform": platform.platform(),
                            "torch": torch.__version__},
                "lightning": lightning_installed(),
                "flush_denormals": {"QuantumGrav": True, "hand-written DDP and Lightning": flush},
                "rows": rows}, indent=1)

        print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average {load_before}")
        print(f"QuantumGrav flushes denormal floats (training.flush_denormals: true); the hand-written loop and "
              f"Lightning {'flush them too' if flush else 'keep them, as plain user code does'} "
              f"(--contenders-flush {args.contenders_flush})")
        print_comparison(compare(args.nproc, args.repetitions, args.epochs, args.samples, args.config, store, flush))
        print(f"\nstored in {args.json}")

if __name__ == "__main__":
    main()

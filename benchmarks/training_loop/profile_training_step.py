#!/usr/bin/env python3
"""The library's optimizer step against the hand-written DDP loop's, cost by cost, as a table.

    OMP_NUM_THREADS=1 python benchmarks/training_loop/profile_training_step.py --nproc 1 2 --repetitions 3
    python benchmarks/training_loop/profile_training_step.py --nproc 1 --steps-profiled 5 --json /tmp/profile.json

Each process trains the job of ``--config`` (the default job: its model, data and batch) with QuantumGrav as
``QG.launch`` runs it (``run_job``: the Trainer with every built-in callback) and, inside the same run, after
each of the library's optimizer steps, one step of ``bench_training.py``'s hand-written DDP loop on its own
copy of the model and its own loader over the same sample order. The two are therefore timed step by step,
paired, under the same load and the same floating-point flags (the library's flush of denormals is
process-wide): what differs is the loop.

Times are CPU time (the machine this was written on is shared, and CPU time moves far less with the others' load
than wall time does): of the process for whole steps (every thread: gloo's too), of the training thread for each
cost (another thread's work would land in whichever cost runs meanwhile). Each cost the library adds is
timed by wrapping the function that does it (its calls counted); forward, loss, backward, the optimizer and the
loader are timed the same way in both loops; the rest of the library's step (the loss and count sums, the
step's bookkeeping) is what is left of its step's time, less the timing's own cost (two clock reads per timed
call, measured in the process and taken out). The first epoch warms up; the next ``--timed-epochs`` are timed
by whole steps only (no clock inside a step: the two loops' steps compared as they run), then one epoch cost
by cost. Training steps only, never the batch norm pass or validation.

``torch.profiler`` then records ``--steps-profiled`` steps of both in the run's last epoch (not timed), and the
second table lists the operators whose count per step differs between the two loops: the tensor work the
library adds (``aten::item`` / ``aten::_local_scalar_dense``: a read of a tensor's value, which on a GPU waits
for it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_training as bench  # noqa: E402 - the comparison's config, loader and model: the same work

import QuantumGrav as QG  # noqa: E402

CORE = ("data loader (next batch)", "forward", "loss", "backward", "optimizer step and zero_grad")


class Costs:
    """Exclusive CPU time (a wrapped call's time less that of the wrapped calls inside it) and calls per label
    while ``active``; the hand-written steps run inside the library's step are ``excluded`` from every library
    time that encloses them."""

    def __init__(self):
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: Counter = Counter()
        self.active = False  # inside a training epoch that is timed
        self.breakdown = False  # its costs timed one by one (else only whole steps: no clock inside a step)
        self.excluded = self.excluded_thread = 0.0  # process and this thread's CPU of the hand-written steps
        self.steps: Counter = Counter()  # per mode, "whole" or "breakdown"
        self.step_cpu: dict[str, float] = defaultdict(float)
        self._inner = [0.0]  # per open wrapped call: the time of the wrapped calls inside it

    def timed(self, label: str, fn: Callable, when: Callable[..., bool] = lambda *a, **k: True) -> Callable:
        def wrapped(*args, **kwargs):
            if not (self.active and self.breakdown and when(*args, **kwargs)):
                return fn(*args, **kwargs)
            # This thread's CPU: other threads' work (gloo's) would land in whichever call runs meanwhile.
            started, excluded = time.thread_time(), self.excluded_thread
            self._inner.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.thread_time() - started - (self.excluded_thread - excluded)
                self.cpu[label] += elapsed - self._inner.pop()
                self._inner[-1] += elapsed
                self.calls[label] += 1
        return wrapped


def library_costs() -> list[tuple[str, Any, str]]:
    """(label, owner, attribute) of every per-step cost of the library's loop beyond forward, loss, backward and
    the optimizer: each is wrapped where it is defined (times are exclusive: the optimizer's step inside
    ``Optimization.step``, the RSS read inside the report are not counted twice)."""
    from QuantumGrav.callbacks.base import CallbackList
    from QuantumGrav.distributed.preemption import StopRequest
    from QuantumGrav.distributed.runtime import StepVotes
    from QuantumGrav.training import memory, optimization, progress, trainer
    from torch_geometric.data.data import BaseData

    return [("step seed (dropout replayable)", trainer, "seed_step_generators"),
            ("batch to device", BaseData, "to"),
            ("autocast context", optimization.Optimization, "autocast"),
            ("Optimization.step's own lines (clip check, schedule)", optimization.Optimization, "step"),
            ("callbacks' step hooks (on_step_end)", CallbackList, "votes"),
            ("SIGTERM vote", StopRequest, "vote"),
            ("step votes' exchange (StepVotes)", StepVotes, "exchange"),
            ("step votes' settling", StepVotes, "settle"),
            ("progress and memory report", progress.Progress, "after_batch"),
            ("RSS read (in the report, or the epoch's record)", memory.MemoryMonitor, "snapshot")]


class TimedLoader:
    """The library's training loader, its batches' fetch timed; its training iterations (the model in training
    mode, not the batch norm pass) switch the timing on, and their end switches it off."""

    def __init__(self, loader, costs: Costs, model: torch.nn.Module, counting: Callable[[], bool]):
        self._loader, self._costs, self._model, self._counting = loader, costs, model, counting

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def __len__(self):
        return len(self._loader)

    def __iter__(self):
        costs, mode = self._costs, self._counting() if self._model.training else None
        iterator, steps = iter(self._loader), 0
        fetch = costs.timed("data loader (next batch)", next)
        if mode:
            costs.active, costs.breakdown = True, mode == "breakdown"
            started, excluded = time.process_time(), costs.excluded
        try:
            while True:
                try:
                    batch = fetch(iterator)
                except StopIteration:
                    return
                steps += 1
                yield batch
        finally:
            if mode:
                costs.step_cpu[mode] += time.process_time() - started - (costs.excluded - excluded)
                costs.steps[mode] += steps
                costs.active = costs.breakdown = False


class HandWritten(QG.Callback):
    """After each of the library's optimizer steps, one step of the hand-written loop (bench_training's) on
    its own model and loader, timed in pieces; in the last epoch, both recorded by torch.profiler instead."""

    def __init__(self, config: dict, rank: int, world_size: int, profiled_steps: int):
        self.config, self.rank, self.world_size, self.profiled_steps = config, rank, world_size, profiled_steps
        self.costs, self.library = Costs(), Costs()
        self.whole_cpu, self.whole_steps = 0.0, 0  # the hand-written steps of the epochs timed whole
        self.breakdown_cpu = 0.0  # and of the epoch timed cost by cost (its rest: what no piece holds)
        self.iterator = None
        self.profiler: torch.profiler.profile | None = None
        self.events: list[tuple[str, bool]] = []  # (operator, inside the hand-written step)

    def setup(self, trainer) -> None:
        from torch.nn.parallel import DistributedDataParallel

        train_set = QG.data.sources.subset(trainer.state.dataset, trainer.state.split["train"])
        self.model = bench._plain_model(self.config, trainer.task.output_width, train_set)
        self.ddp_model = DistributedDataParallel(self.model) if self.world_size > 1 else self.model
        tcfg = self.config["training"]
        self.optimizer = tcfg["optimizer_type"](self.model.parameters(), **tcfg["optimizer_kwargs"])
        self.loader = bench._plain_loader(self.config, train_set, self.rank, self.world_size)
        self.epochs, self.state = tcfg["num_epochs"], trainer.state

    def counting(self) -> str | None:
        """How the library's epoch now starting is timed: the first warms up (None), then whole steps, then one
        epoch cost by cost ("breakdown"), and the last is recorded by torch.profiler (None)."""
        epoch = self.state.epoch
        return None if epoch in (0, self.epochs - 1) else "breakdown" if epoch == self.epochs - 2 else "whole"

    def on_step_end(self, state, epoch, completed_batches):
        # All of this hook is left out of the library's times, not only the step.
        entered, entered_thread = time.process_time(), time.thread_time()
        if completed_batches == 1:
            self.loader.sampler.set_epoch(epoch)
            self.iterator = iter(self.loader)
            self.ddp_model.train()
        started = time.process_time()
        self.costs.active = self.costs.breakdown = self.library.active and self.library.breakdown
        with torch.profiler.record_function("hand-written step") if self.profiler is not None else _nothing():
            self._step()
        elapsed = time.process_time() - started
        if self.library.active and not self.library.breakdown:
            self.whole_cpu, self.whole_steps = self.whole_cpu + elapsed, self.whole_steps + 1
        elif self.costs.active:
            self.breakdown_cpu += elapsed
        if epoch == self.epochs - 1 and completed_batches == 1:  # from the next step on: both loops' operators
            self.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            self.profiler.start()
        elif self.profiler is not None and completed_batches == self.profiled_steps + 1:
            self._stop_profiler()
        self.library.excluded += time.process_time() - entered
        self.library.excluded_thread += time.thread_time() - entered_thread

    def _step(self) -> None:
        c, t = self.costs, self.costs.timed
        if c.active:
            c.steps["breakdown"] += 1
        batch = t("data loader (next batch)", next)(self.iterator)
        t("optimizer step and zero_grad", self.optimizer.zero_grad)()
        outputs = t("forward", self.ddp_model)(batch)
        loss = t("loss", F.cross_entropy)(outputs, batch.y.view(-1))
        t("backward", loss.backward)()
        t("optimizer step and zero_grad", self.optimizer.step)()

    def _stop_profiler(self) -> None:
        self.profiler.stop()
        events = self.profiler.events()
        # This thread's operators only: gloo's threads have no parent here to say which loop they served.
        thread = next(e.thread for e in events if e.name == "hand-written step")
        for event in (e for e in events if e.thread == thread):
            parent, hand = event.cpu_parent, False
            while parent is not None and not hand:
                hand, parent = parent.name == "hand-written step", parent.cpu_parent
            self.events.append((event.name, hand or event.name == "hand-written step"))
        self.profiler = None


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _wrap_library(trainer, hand: HandWritten) -> list[Callable[[], None]]:
    """Wrap each of the library's per-step costs (and its forward, loss, backward, optimizer) in ``hand.library``;
    returns the undo of each class-level wrap."""
    costs, undo = hand.library, []
    for label, owner, name in library_costs():
        original = getattr(owner, name)
        when = (lambda self, hook, *a: hook == "on_step_end") if name == "votes" else (lambda *a, **k: True)
        setattr(owner, name, costs.timed(label, original, when))
        undo.append(lambda owner=owner, name=name, original=original: setattr(owner, name, original))
    trainer.model.forward = costs.timed("forward", trainer.model.forward)
    trainer.criterion = costs.timed("loss", trainer.criterion)
    trainer.optimization.backward = costs.timed("backward", trainer.optimization.backward)
    optimizer = trainer.optimization.optimizer
    step, zero_grad = optimizer.step, optimizer.zero_grad
    optimizer.step = costs.timed("optimizer step and zero_grad", step)
    optimizer.zero_grad = costs.timed("optimizer step and zero_grad", zero_grad)
    prepare = trainer.prepare_dataloaders

    def timed_loaders():
        train, val, test = prepare()
        return TimedLoader(train, costs, trainer.core_model, hand.counting), val, test

    trainer.prepare_dataloaders = timed_loaders
    return undo


def _profile_process(rank: int, world_size: int, port: int, config: dict, profiled_steps: int, results) -> None:
    from QuantumGrav.jobs.entry import run_job

    bench._join_group(rank, world_size, port)
    QG.setup_logging(rank, level="WARNING")
    if world_size > 1:
        QG.initialize_ddp(rank, world_size, master_port=port, backend="gloo")
    hand, undo = HandWritten(config, rank, world_size, profiled_steps), []
    try:
        def on_start(trainer):
            hand.setup(trainer)
            undo.extend(_wrap_library(trainer, hand))

        run_job(config, on_start=on_start, callbacks=[hand])
        results.put((rank, _summary(hand, profiled_steps), None))
    except BaseException as err:  # noqa: BLE001 - the parent reports it
        results.put((rank, None, f"{type(err).__name__}: {err}"))
        raise
    finally:
        for u in undo:
            u()
        QG.cleanup_ddp()


def _wrapper_cost_s(calls: int = 20000) -> float:
    """CPU seconds a timed call adds (its two clock reads and bookkeeping), to take out of the library's rest."""
    costs = Costs()
    costs.active = costs.breakdown = True
    nothing = costs.timed("nothing", lambda: None)
    started = time.thread_time()
    for _ in range(calls):
        nothing()
    plain = time.thread_time()
    for _ in range(calls):
        (lambda: None)()
    return ((plain - started) - (time.thread_time() - plain)) / calls


def _summary(hand: HandWritten, profiled_steps: int) -> dict:
    """Per optimizer step: each cost's CPU µs and calls (the breakdown epoch), both loops' whole step (the
    epochs timed whole: no clock inside a step), and operator counts per profiled step."""
    def per_step(costs: Costs) -> dict:
        steps = costs.steps["breakdown"]
        return {"steps": steps, "cpu_us": {k: 1e6 * v / steps for k, v in costs.cpu.items()},
                "calls": {k: v / steps for k, v in costs.calls.items()}}

    library, handwritten = per_step(hand.library), per_step(hand.costs)
    wrapper_us = 1e6 * _wrapper_cost_s()
    for loop, step_us in ((library, 1e6 * hand.library.step_cpu["breakdown"] / hand.library.steps["breakdown"]),
                          (handwritten, 1e6 * hand.breakdown_cpu / hand.costs.steps["breakdown"])):
        loop["instrumentation_us"] = wrapper_us * sum(loop["calls"].values())
        loop["rest_us"] = step_us - sum(loop["cpu_us"].values()) - loop["instrumentation_us"]
    library["whole_step_us"] = 1e6 * hand.library.step_cpu["whole"] / hand.library.steps["whole"]
    library["whole_steps"] = hand.library.steps["whole"]
    handwritten["whole_step_us"] = 1e6 * hand.whole_cpu / hand.whole_steps
    operators = {"QuantumGrav": Counter(), "hand-written DDP": Counter()}
    for name, inside in hand.events:
        if name != "hand-written step":
            operators["hand-written DDP" if inside else "QuantumGrav"][name] += 1 / profiled_steps
    return {"QuantumGrav": library, "hand-written DDP": handwritten, "operators_per_step": differing(operators)}


def differing(operators: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The operators whose count per step differs between the two loops (what the library adds or leaves out)."""
    names = {n for counts in operators.values() for n in counts}
    kept = {n for n in names if len({round(counts.get(n, 0.0), 6) for counts in operators.values()}) > 1}
    return {loop: {n: counts.get(n, 0.0) for n in sorted(kept)} for loop, counts in operators.items()}


def profile(world_size: int, config: dict, profiled_steps: int) -> dict:
    """One job of ``world_size`` fresh processes; rank 0's costs."""
    from QuantumGrav.common.processes import worker_context

    context, port = worker_context(), QG.find_free_port()
    results = context.Queue()
    processes = [context.Process(target=_profile_process, args=(r, world_size, port, config, profiled_steps, results))
                 for r in range(world_size)]
    for process in processes:
        process.start()
    rows = {rank: (found, error) for rank, found, error in (results.get(timeout=3600) for _ in processes)}
    for process in processes:
        process.join()
    failed = [f"rank {rank}: {error}" for rank, (_, error) in sorted(rows.items()) if error]
    if failed:
        raise RuntimeError(f"the profile at world size {world_size} failed: " + "; ".join(failed))
    return rows[0][0]


def _median(runs: list[dict], loop: str, key: str, label: str) -> float:
    return statistics.median(run[loop][key].get(label, 0.0) for run in runs)


def print_tables(world_size: int, runs: list[dict]) -> None:
    """The cost table (medians over repetitions) and the operators whose count per step differs."""
    loops = ("QuantumGrav", "hand-written DDP")
    print(f"\nCPU µs per optimizer step and calls per step, {world_size} process(es), rank 0, median of "
          f"{len(runs)} repetition(s) (one epoch of {runs[0]['QuantumGrav']['steps']} steps each, cost by cost):")
    print("| cost | QuantumGrav calls/step | QuantumGrav µs/step | hand-written calls/step | hand-written µs/step |")
    print("|---|---:|---:|---:|---:|")
    for label in CORE:
        print(f"| {label} | " + " | ".join(f"{_median(runs, loop, 'calls', label):.2f} | "
                                           f"{_median(runs, loop, 'cpu_us', label):.0f}" for loop in loops) + " |")
    for label, _, _ in library_costs():
        print(f"| {label} | {_median(runs, 'QuantumGrav', 'calls', label):.2f} | "
              f"{_median(runs, 'QuantumGrav', 'cpu_us', label):.0f} | | |")
    rest = [statistics.median(run[loop]["rest_us"] for run in runs if "rest_us" in run[loop]) for loop in loops]
    clocks = statistics.median(run["QuantumGrav"]["instrumentation_us"] for run in runs)
    print(f"| the rest of the step (the last step's autograd graph freed, the loss and count sums, the loop's own "
          f"lines; the timing's own {clocks:.0f} µs taken out) | | {rest[0]:.0f} | | {rest[1]:.0f} |")
    totals = [statistics.median(run[loop]["whole_step_us"] for run in runs) for loop in loops]
    print(f"| whole step (other epochs: {runs[0]['QuantumGrav']['whole_steps']} steps timed whole) | | "
          f"{totals[0]:.0f} | | {totals[1]:.0f} |")
    ratios = [run["hand-written DDP"]["whole_step_us"] / run["QuantumGrav"]["whole_step_us"] for run in runs]
    print(f"\nhand-written / QuantumGrav CPU per whole step: {statistics.median(ratios):.4f} (repetitions: "
          f"{', '.join(f'{r:.4f}' for r in ratios)}; above 1: the library's step is cheaper)")
    names = sorted({n for run in runs for loop in loops for n in run["operators_per_step"][loop]})
    counts = {n: [statistics.median(run["operators_per_step"][loop].get(n, 0.0) for run in runs) for loop in loops]
              for n in names}
    differing = [n for n in names if abs(counts[n][0] - counts[n][1]) >= 0.5]
    print("\nOperators (torch.profiler) whose count per step differs, median over repetitions:")
    print("| operator | QuantumGrav per step | hand-written per step |")
    print("|---|---:|---:|")
    for n in sorted(differing, key=lambda n: counts[n][1] - counts[n][0]):
        print(f"| `{n}` | {counts[n][0]:.1f} | {counts[n][1]:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repetitions", type=int, default=3, help="fresh jobs per world size")
    parser.add_argument("--timed-epochs", type=int, default=1,
                        help="epochs timed whole (after a first that warms up; then one cost by cost, and a last "
                             "recorded by torch.profiler)")
    parser.add_argument("--steps-profiled", type=int, default=5, help="steps recorded by torch.profiler")
    parser.add_argument("--samples", type=int, default=None, help="causal sets generated (default: the config's)")
    parser.add_argument("--config", default="configs/train.yaml")
    parser.add_argument("--json", default="benchmarks/training_loop/results_training_step_profile.json")
    parser.add_argument("--append", action="store_true",
                        help="add this call's repetitions to those stored in --json (the tables show them all): "
                             "repetitions of two versions of the library can then alternate")
    parser.add_argument("--table-only", action="store_true", help="print the tables of the runs stored in --json")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: study_results.py
    import study_results  # written whole or not at all

    if args.table_only:
        stored = json.loads(Path(args.json).read_text())
        for world_size, runs in stored["runs"].items():
            for run in runs:
                run["operators_per_step"] = differing(run["operators_per_step"])
            print_tables(int(world_size), runs)
        study_results.write_json(args.json, stored, indent=1)
        return
    QG.setup_logging(level="WARNING")
    cpu = bench.cpu_model()
    print(f"CPU: {cpu}; {os.cpu_count()} cores; load average {os.getloadavg()}")
    stored = json.loads(Path(args.json).read_text()) if args.append and Path(args.json).exists() else {}
    found: dict[str, list[dict]] = stored.get("runs", {})
    commands = [*stored.get("commands", []), " ".join(sys.argv)]
    with tempfile.TemporaryDirectory() as workdir:
        config = bench.comparison_config(args.timed_epochs + 3, args.samples, workdir, args.config)
        QG.CausalSetDataset.from_config(config["data"])  # generated once, outside every timing
        for world_size in args.nproc:
            runs = found.setdefault(str(world_size), [])
            for repetition in range(args.repetitions):
                runs.append(profile(world_size, config, args.steps_profiled))
                ratio = runs[-1]["hand-written DDP"]["whole_step_us"] / runs[-1]["QuantumGrav"]["whole_step_us"]
                print(f"world size {world_size}, repetition {repetition + 1}: hand-written / QuantumGrav CPU per "
                      f"step {ratio:.4f}", file=sys.stderr, flush=True)
            print_tables(world_size, runs)
    study_results.write_json(args.json, {
        "commands": commands, "date": datetime.datetime.now(datetime.UTC).isoformat(),
        "machine": {"cpu": cpu, "cpus": os.cpu_count(), "load_average_after": os.getloadavg(),
                    "platform": platform.platform(), "torch": torch.__version__},
        "runs": found}, indent=1)
    print(f"\nstored in {args.json}")


if __name__ == "__main__":
    main()

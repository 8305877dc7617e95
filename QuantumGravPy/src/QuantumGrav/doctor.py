"""``python -m QuantumGrav doctor``: is this machine ready for (distributed) training?

One line per check, starting with ``[ok]``, ``[warn]`` or ``[fail]``; warnings and
failures say what to do. It ends with a real two-process gloo all-reduce on localhost,
the smallest thing that proves DDP works here, and, given ``--config``, that job's memory preflight
(its largest training batch run once: ``preflight``). Nothing contacts the network.
"""

from __future__ import annotations

import errno
import importlib
import importlib.metadata
import importlib.util
import netrc
import os
import platform
import queue
import socket
import sys
import time
from dataclasses import dataclass
from typing import Callable, TextIO
from urllib.parse import urlparse

import torch
import torch.distributed as dist

from .config.schema import resolve_config
from .common.processes import usable_cpu_count, worker_context
from .distributed.environment import TORCHRUN_VARIABLES, find_free_port
from .distributed.process_group import cleanup_ddp, initialize_ddp
from .common.errors import UserError
from .runs.wandb_logger import WANDB_MODES  # a constant only: importing it does not import wandb
from .training.preflight import estimate_for_config

SMOKE_WORLD_SIZE = 2
SMOKE_TIMEOUT_S = 30.0


@dataclass
class Check:
    status: str  # "ok" | "warn" | "fail"
    message: str
    advice: str = ""

    def line(self) -> str:
        return f"[{self.status}] {self.message}" + (f" -> {self.advice}" if self.advice else "")


# --------------------------------------------------------------------------- the checks
def check_versions() -> Check:
    versions = f"python {platform.python_version()}, torch {torch.__version__}"
    try:
        pyg = importlib.import_module("torch_geometric")
    except Exception as err:  # noqa: BLE001 - a broken install raises more than ImportError
        return Check("fail", f"{versions}; torch_geometric cannot be imported ({type(err).__name__}: {err})",
                     f"pip install torch_geometric (a version built for torch {torch.__version__})")
    return Check("ok", f"{versions}, torch_geometric {pyg.__version__}")


def check_cuda(nproc: int) -> Check:
    if not torch.cuda.is_available():
        return Check("warn", "CUDA is not available: training runs on the CPU, DDP with the gloo backend",
                     "expected without a GPU; on a GPU machine install a CUDA build of torch and check nvidia-smi")
    count = torch.cuda.device_count()
    names = ", ".join(sorted({torch.cuda.get_device_name(i) for i in range(count)}))
    message = f"CUDA {torch.version.cuda}: {count} GPU(s) ({names})"
    if nproc > count:
        # NCCL refuses two ranks on one GPU ("Duplicate GPU detected").
        return Check("warn", f"{message}, fewer than the {nproc} processes planned",
                     f"use --nproc {count} (one process per GPU)")
    return Check("ok", message)


def check_nccl() -> Check:
    nccl = dist.is_available() and dist.is_nccl_available()
    if nccl:
        version = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "built in"
        return Check("ok", f"NCCL available ({version})")
    if torch.cuda.is_available():
        return Check("fail", "CUDA is present but this torch has no NCCL: multi-GPU DDP cannot run",
                     "install the official Linux CUDA wheel of torch (it bundles NCCL)")
    return Check("ok", "NCCL not available (not needed: no CUDA here, gloo is used)")


def check_gloo() -> Check:
    if dist.is_available() and dist.is_gloo_available():
        return Check("ok", "gloo available (the CPU backend)")
    gpu_only = torch.cuda.is_available() and dist.is_available() and dist.is_nccl_available()
    return Check("warn" if gpu_only else "fail", "gloo is not available: DDP on the CPU cannot run",
                 "install an official torch wheel (it includes gloo)")


def check_port(port: int | None) -> Check:
    """Can the rendezvous port be bound on localhost? A port given explicitly that is in
    use is a failure: a launch with it would stop at once with 'address already in use'."""
    chosen = port if port is not None else find_free_port()
    what = f"rendezvous port {chosen} on localhost" + ("" if port is not None else " (picked by the OS)")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("localhost", chosen))
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            return Check("fail", f"{what} is already in use",
                         "choose another with --port / parallel.master_port, or leave it unset: a free one is "
                         "then picked for each launch")
        return Check("fail", f"{what} cannot be bound ({err})",
                     "check that 'localhost' resolves (/etc/hosts) and that ports >= 1024 are used")
    return Check("ok", f"{what} can be bound")


def check_cpus(nproc: int, num_workers: int) -> Check:
    cpus, needed = usable_cpu_count(), nproc * (num_workers + 1)
    message = f"{cpus} CPU cores for {nproc} process(es) x (1 + {num_workers} DataLoader workers) = {needed}"
    if needed > cpus:
        return Check("warn", f"{message}: oversubscribed",
                     "lower --nproc or training.num_workers; the processes will slow each other down")
    return Check("ok", message)


def _wandb_login_source() -> str | None:
    """Where an API key would come from, without contacting the server."""
    if os.environ.get("WANDB_API_KEY"):
        return "WANDB_API_KEY"
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        return f"netrc entry for {host}" if netrc.netrc(path).authenticators(host) else None
    except (OSError, netrc.NetrcParseError):
        return None


def check_wandb() -> Check:
    # find_spec + metadata instead of `import wandb`: fast, and no side effects.
    try:  # a folder named wandb/ in the working directory is found as a package without metadata
        version = importlib.metadata.version("wandb") if importlib.util.find_spec("wandb") else None
    except importlib.metadata.PackageNotFoundError:
        version = None
    if version is None:
        return Check("warn", "wandb is not installed: W&B logging will be off (metrics.csv is always written)",
                     "pip install wandb, or leave logger.wandb out of the config")
    mode = os.environ.get("WANDB_MODE")
    mode_text = f"WANDB_MODE={mode} (overrides logger.wandb.mode)" if mode else "mode from logger.wandb.mode"
    login = _wandb_login_source()
    message = f"wandb {version}, {mode_text}, " + (f"API key via {login}" if login else "no API key found")
    if mode and mode not in WANDB_MODES:
        return Check("warn", f"{message}; QuantumGrav ignores this WANDB_MODE",
                     f"set WANDB_MODE to one of {', '.join(WANDB_MODES)}, or unset it")
    if mode == "online" and not login:
        return Check("warn", message, "run `wandb login`, or use offline mode and `wandb sync` later")
    return Check("ok", message)


# --------------------------------------------------------------------------- DDP smoke test
def _smoke_worker(rank: int, world_size: int, port: int, timeout_s: float, results) -> None:
    """One rank of the smoke test (module level: the worker process imports it by name)."""
    try:
        # A doctor started from inside a torchrun job would otherwise join *that* job.
        for name in (*TORCHRUN_VARIABLES, "LOCAL_RANK"):
            os.environ.pop(name, None)
        # The library's own path to a process group, so the test covers what training uses.
        initialize_ddp(rank, world_size, master_port=port, backend="gloo", timeout_s=timeout_s)
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value)
        results.put((rank, "ok", value.item()))
    except Exception as err:  # noqa: BLE001 - reported by the parent as a fail line
        results.put((rank, "error", f"{type(err).__name__}: {err}"))
    finally:
        cleanup_ddp()


def _collect(processes: list, results, deadline: float) -> dict[int, tuple[str, object]]:
    """Results by rank until all arrived, one failed, or the deadline passed.

    Stops at the first failure: the other ranks would only wait for it at the all-reduce
    until their own timeout.
    """
    collected: dict[int, tuple[str, object]] = {}
    while len(collected) < len(processes) and time.monotonic() < deadline:
        try:
            rank, status, payload = results.get(timeout=0.2)
            collected[rank] = (status, payload)
        except queue.Empty:  # a worker killed by a signal or a crash in C++ puts nothing
            for rank, process in enumerate(processes):
                if process.exitcode not in (None, 0) and rank not in collected:
                    collected[rank] = ("error", f"process exited with code {process.exitcode}")
        if any(status != "ok" for status, _ in collected.values()):
            break
    return collected


def check_ddp_smoke_test(timeout_s: float = SMOKE_TIMEOUT_S) -> Check:
    port, expected = find_free_port(), SMOKE_WORLD_SIZE * (SMOKE_WORLD_SIZE + 1) / 2
    what = f"DDP smoke test ({SMOKE_WORLD_SIZE} processes started as QG.launch starts them, gloo, all-reduce on localhost:{port})"
    context = worker_context()  # the way launch starts its workers: fork is unsafe once torch has started threads
    results = context.Queue()
    started = time.monotonic()
    processes = [context.Process(target=_smoke_worker, args=(rank, SMOKE_WORLD_SIZE, port, timeout_s, results),
                                 daemon=True) for rank in range(SMOKE_WORLD_SIZE)]
    for process in processes:
        process.start()
    collected = _collect(processes, results, started + timeout_s)
    elapsed = time.monotonic() - started
    succeeded = len(collected) == SMOKE_WORLD_SIZE and all(s == "ok" for s, _ in collected.values())
    for process in processes:  # our own workers only: a hung or failed rank is killed at once
        process.join(timeout=5 if succeeded else 0.1)
        if process.is_alive():
            process.kill()
            process.join()
    advice = ("check that 'localhost' resolves to 127.0.0.1, that no firewall blocks local TCP, and try "
              "GLOO_SOCKET_IFNAME=lo; rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL for details")
    errors = [f"rank {r}: {payload}" for r, (status, payload) in sorted(collected.items()) if status != "ok"]
    if errors:
        return Check("fail", f"{what} failed after {elapsed:.1f} s: {'; '.join(errors)}", advice)
    if len(collected) < SMOKE_WORLD_SIZE:
        return Check("fail", f"{what} timed out after {timeout_s:g} s (starting the processes included)",
                     advice + "; where importing torch is slow (network file systems) this alone can take long")
    values = {payload for _, payload in collected.values()}
    if values != {expected}:
        return Check("fail", f"{what} summed to {sorted(values)} instead of {expected:g}", advice)
    return Check("ok", f"{what}: sum {expected:g} on every rank in {elapsed:.1f} s")


def check_memory_preflight(config: dict, nproc: int) -> Check:
    """The training preflight of ``config`` (``preflight``): its largest batch, run once here, against the limit."""
    try:
        sections = resolve_config(config).sections
        found = estimate_for_config(sections, nproc)
    except UserError as err:
        return Check("fail", f"memory preflight: the config cannot be prepared: {err}", "fix the config")
    if found.fits:
        return Check("ok", f"memory preflight: {found.line()}")
    return Check("fail", f"memory preflight: {found.line()}", found.advice(sections.loaders.training))


def run_doctor(nproc: int = 2, num_workers: int = 0, port: int | None = None, out: TextIO | None = None,
               config: dict | None = None) -> int:
    """Print one line per check (to ``out``, default: sys.stdout at call time); return 1 if any failed, else 0.
    With a (loaded) training ``config``, its memory preflight too."""
    out = out or sys.stdout
    checks: list[Callable[[], Check]] = [
        check_versions, lambda: check_cuda(nproc), check_nccl, check_gloo, lambda: check_port(port),
        lambda: check_cpus(nproc, num_workers), check_wandb, check_ddp_smoke_test,
    ]
    if config is not None:
        checks.append(lambda: check_memory_preflight(config, nproc))
    failed = False
    for check in checks:
        try:
            result = check()
        except Exception as err:  # noqa: BLE001 - one broken check must not hide the others
            result = Check("fail", f"a check crashed ({type(err).__name__}: {err})", "please report this")
        failed = failed or result.status == "fail"
        print(result.line(), file=out, flush=True)  # flush: the smoke test takes seconds
    return 1 if failed else 0

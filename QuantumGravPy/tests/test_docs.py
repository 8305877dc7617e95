"""The documents as tests: every command in them runs as written.

Every fenced ```bash / ```sh / ```console block of README.md, QUICK_REFERENCE_DDP.md,
notebooks/README.md and docs/*.md, and every ```python block of README.md and docs/training.md, runs in a fresh copy of
the repository, in document order, as a new user would run them: from the repository root, with
the project's environment active (the test's virtual environment stands in for `.venv`) and the
documented smoke-test switch QUANTUMGRAV_SMOKE_TEST=1 (a tiny data set, same code path). A block
that cannot run here carries a marker in the document, on the line before it:

    <!-- doc-test: skip (the reason, e.g. needs a GPU) -->

and is only checked for syntax (``bash -n``, ``compile``). A block that fails, or a fenced block
without a language, fails the suite.

To stay within seconds on two cores: a command that appears again word for word (the quick
reference repeats the launchers of docs/training.md) runs once, where it first appears (the README and
docs/training.md come first), and the shell blocks of the README and docs/training.md (the main job and the
training commands) run in order in one lane while the other documents' blocks run in a second lane
beside it (each lane in document order; the two share the copy and its data cache).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import threading
from concurrent.futures import Future
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
# The README and the training guide first: their commands are the main job and the training commands that the other
# documents repeat.
FIRST_LANE = ["README.md", "docs/training.md"]
DOCUMENTS = [*FIRST_LANE, "QUICK_REFERENCE_DDP.md", "notebooks/README.md",
             *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")
                     if str(p.relative_to(REPO)) not in FIRST_LANE)]
SHELL = {"bash", "sh", "console"}
RUN_PYTHON_IN = {"README.md", "docs/training.md"}
NOT_COMMANDS = {"yaml", "text", "json", "toml", "ini"}  # shown, never run
FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*doc-test:\s*(\S+)\s*\((.+)\)\s*-->$")
# A block of several launches takes about a minute on an idle 2-core machine; the bound is for a busy one.
BLOCK_TIMEOUT_S = 600


@dataclass
class Block:
    document: str
    line: int
    language: str
    text: str
    skip_reason: str | None

    @property
    def name(self) -> str:
        return f"{self.document}:{self.line}"

    @property
    def script(self) -> str:
        """The commands: a console block's lines after `$ `, any other block as it stands."""
        if self.language != "console":
            return self.text
        return "\n".join(line[2:] for line in self.text.splitlines() if line.startswith("$ "))


def collect_blocks(document: str) -> list[Block]:
    lines = (REPO / document).read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before)
        if marker and marker.group(1) != "skip":
            raise ValueError(f"{document}:{i + 1}: unknown doc-test marker '{marker.group(1)}' (only 'skip')")
        blocks.append(Block(document, i + 1, fence.group(1), "\n".join(lines[i + 1:end]) + "\n",
                            marker.group(2).strip() if marker else None))
        i = end + 1
    return blocks


ALL_BLOCKS = [block for document in DOCUMENTS for block in collect_blocks(document)]
RUNNABLE = [b for b in ALL_BLOCKS if b.skip_reason is None and (
    b.language in SHELL or (b.language == "python" and b.document in RUN_PYTHON_IN))]
SKIPPED = [b for b in ALL_BLOCKS if b.skip_reason is not None]


def test_every_block_is_run_or_marked_with_a_reason():
    assert len(RUNNABLE) >= 5, [b.name for b in RUNNABLE]  # the collector found the documents' commands
    unlabelled = [b.name for b in ALL_BLOCKS if not b.language]
    assert not unlabelled, f"fenced blocks without a language (bash, python, yaml, ...): {unlabelled}"
    unknown = [f"{b.name} ({b.language})" for b in ALL_BLOCKS
               if b.language not in SHELL | NOT_COMMANDS | {"python"}]
    assert not unknown, f"blocks in a language the documentation test does not know: {unknown}"
    python_elsewhere = [b.name for b in ALL_BLOCKS if b.language == "python" and b.document not in RUN_PYTHON_IN
                        and b.skip_reason is None]
    assert not python_elsewhere, f"python blocks the test does not run; run them or mark them: {python_elsewhere}"


def test_commands_use_the_active_environment_not_venv_paths():
    """One way to run commands everywhere: `source .venv/bin/activate` once, then plain commands."""
    pattern = re.compile(r"(?<!source )\.venv/bin/")
    offenders = [b.name for b in ALL_BLOCKS if b.language in SHELL and pattern.search(b.script)]
    assert not offenders, f"commands calling .venv/bin/... directly: {offenders}"


@pytest.mark.parametrize("block", SKIPPED, ids=lambda b: b.name)
def test_a_skipped_block_still_parses(block):
    if block.language == "python":
        compile(block.text, block.name, "exec")
        return
    assert block.language in SHELL, f"{block.name}: a skip marker on a '{block.language}' block"
    checked = subprocess.run(["bash", "-n"], input=block.script, text=True, capture_output=True)
    assert checked.returncode == 0, f"{block.name}: {checked.stderr}"


def _stand_in_venv(copy: Path) -> None:
    """`.venv` of the copy: the test's own virtual environment, marked as set up for this pyproject.toml
    (the stamp scripts/setup_venv.sh checks), so that `make` does not try to install anything."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("the documentation test stands its virtual environment in for .venv; run it from one")
    venv = copy / ".venv"
    venv.mkdir()
    for entry in Path(sys.prefix).iterdir():
        if not entry.name.startswith(".setup-"):
            (venv / entry.name).symlink_to(entry)
    setup = (copy / "scripts" / "setup_venv.sh").read_text()
    digest = hashlib.sha1((copy / "pyproject.toml").read_bytes() + setup.encode()).hexdigest()[:12]
    torch_version = re.search(r"TORCH_VERSION=\$\{TORCH_VERSION:-([^}]+)\}", setup).group(1)
    (venv / f".setup-{digest}-{os.environ.get('TORCH_VERSION', torch_version)}").touch()


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The repository's files (tracked, and new ones not ignored) in a new folder, and the environment of
    a shell in which `source .venv/bin/activate` ran, with the smoke-test switch on."""
    copy = tmp_path_factory.mktemp("fresh_clone")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if name.split("/")[0] != ".venv" and source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    _stand_in_venv(copy)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "COV_"))}
    env.update({
        "VIRTUAL_ENV": str(copy / ".venv"), "PATH": f"{copy / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        # The copy's own package (what the editable install of a fresh clone points to).
        "PYTHONPATH": str(copy / "QuantumGravPy" / "src"),
        "QUANTUMGRAV_SMOKE_TEST": "1", "CI": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true",
    })
    return copy, env


def logical_lines(script: str) -> list[str]:
    """The script's commands, one per entry: continuation lines joined, comments and blank lines kept."""
    lines, pending = [], ""
    for line in script.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    return lines


def without_repeats(script: str, seen: set[str]) -> str:
    """``script`` with the commands that already ran (in ``seen``) left out; adds its own commands to ``seen``."""
    kept = []
    for line in logical_lines(script):
        command = " ".join(line.split("#")[0].split()) if not line.lstrip().startswith("#") else ""
        if command and command in seen:
            kept.append(f": already run above: {command!r}")
            continue
        seen.add(command)
        kept.append(line)
    return "\n".join(kept) + "\n"


def _run(block: Block, script: str, copy: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    if block.language == "python":
        snippet = copy.parent / f"snippet_{block.line}.py"  # outside the copy, so it leaves no file there
        snippet.write_text(block.text)
        command = [str(copy / ".venv" / "bin" / "python"), str(snippet)]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", script]
    return subprocess.run(command, cwd=copy, env=env, text=True, capture_output=True, timeout=BLOCK_TIMEOUT_S)


@pytest.fixture(scope="module")
def documented_runs(fresh_copy) -> dict[str, Future]:
    """Starts every runnable block in its lane; block name -> Future of (script run, CompletedProcess)."""
    copy, env = fresh_copy
    seen: set[str] = set()
    scripts = {b.name: without_repeats(b.script, seen) if b.language in SHELL else b.text for b in RUNNABLE}
    futures = {b.name: Future() for b in RUNNABLE}
    lanes = [[b for b in RUNNABLE if b.document in FIRST_LANE and b.language in SHELL]]
    lanes.append([b for b in RUNNABLE if b not in lanes[0]])

    def run_lane(blocks: list[Block]) -> None:
        for block in blocks:
            try:
                futures[block.name].set_result((scripts[block.name], _run(block, scripts[block.name], copy, env)))
            except BaseException as err:  # noqa: BLE001 - reported by the block's own test
                futures[block.name].set_exception(err)

    threads = [threading.Thread(target=run_lane, args=(lane,), daemon=True) for lane in lanes]
    for thread in threads:
        thread.start()
    yield futures
    for thread in threads:
        thread.join()


@pytest.mark.timeout(BLOCK_TIMEOUT_S + 60)  # waits for its lane's earlier blocks too
@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.name)
def test_documented_commands_run_as_written(block, documented_runs):
    script, done = documented_runs[block.name].result()
    output = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"{block.name} exited with {done.returncode}:\n{script}\n---\n{output}"
    assert "Traceback" not in done.stderr, f"{block.name} printed a traceback:\n{output}"


def test_the_runs_of_the_documented_commands_record_how_they_were_made(fresh_copy, documented_runs):
    """After the commands above: every run directory they left says its world size and versions."""
    for future in documented_runs.values():
        future.exception()  # wait for every block
    copy, _ = fresh_copy
    summaries = [json.loads(path.read_text()) for path in sorted((copy / "runs").glob("*/summary.json"))]
    assert {s["world_size"] for s in summaries} == {1, 2}, summaries
    assert all(s["wall_time_s"] > 0 and s["versions"]["QuantumGrav"] for s in summaries)
    resumed = json.loads((copy / "runs" / "first" / "summary.json").read_text())
    assert resumed["stop_reason"] == "completed 5 epochs"  # docs/training.md's resume example, extended from 3 epochs


def _training_signature(config_file: Path) -> str:
    """What decides a run's training: its config without the run's name, folder, logger and resume."""
    import yaml

    config = yaml.load(config_file.read_text(), Loader=yaml.BaseLoader)  # !pyobject tags kept as text
    for key in ("run_name", "path", "resume"):
        config["training"].pop(key, None)
    config.pop("logger", None)
    config.pop("derived", None)
    return json.dumps(config, sort_keys=True)


def _metrics(run_dir: Path) -> list[dict[str, float]]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [{k: float(row[k]) for k in ("train_loss", "val_loss", "val_accuracy")} for row in csv.DictReader(f)]


def test_the_documented_launchers_train_the_same_model(fresh_copy, documented_runs):
    """Runs of the documents' commands with the same config and world size trained the same model, whichever
    launcher started them: docs/training.md's `train --nproc 2` (QG.launch) and torchrun, the quick reference's spawning
    script (with W&B) and its torchrun with --max-restarts. (test_launchers.py compares the launchers the
    documents do not show: two torchrun nodes, torch.distributed.launch.)"""
    for future in documented_runs.values():
        future.exception()  # wait for every block
    copy, _ = fresh_copy
    groups: dict[tuple, list[Path]] = {}
    for run_dir in sorted(p.parent for p in (copy / "runs").glob("*/summary.json")):
        world_size = json.loads((run_dir / "summary.json").read_text())["world_size"]
        groups.setdefault((world_size, _training_signature(run_dir / "config.yaml")), []).append(run_dir)
    ddp_runs = max((runs for (world_size, _), runs in groups.items() if world_size == 2), key=len, default=[])
    assert len(ddp_runs) >= 4, ("the four documented launches of configs/train_ddp.yaml, "
                                 f"one config: {[(ws, [r.name for r in runs]) for (ws, _), runs in groups.items()]}")
    first, *others = ddp_runs
    expected, weights = _metrics(first), torch.load(first / "checkpoints" / "last.pt", weights_only=True)["model"]
    for run_dir in others:
        rows = _metrics(run_dir)
        assert len(rows) == len(expected) and all(row == pytest.approx(want, rel=1e-5) for row, want in
                                                  zip(rows, expected)), f"{run_dir.name} trained unlike {first.name}"
        for name, tensor in torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"].items():
            torch.testing.assert_close(tensor, weights[name], rtol=1e-5, atol=1e-6, msg=f"{run_dir.name}: {name}")


def test_make_train_passes_args_to_the_train_command():
    dry_run = subprocess.run(["make", "-n", "train", 'ARGS=--set training.num_epochs=3'], cwd=REPO,
                             capture_output=True, text=True)
    if dry_run.returncode != 0 and "No such file" in dry_run.stderr:
        pytest.skip("make is not installed")
    assert ".venv/bin/python -m QuantumGrav train --config configs/train.yaml --set training.num_epochs=3" \
        in dry_run.stdout, dry_run.stdout + dry_run.stderr


def test_an_unknown_option_names_the_command_that_was_run(capsys):
    from QuantumGrav.cli import main

    assert main(["doctor", "--fast"]) == 2
    assert "error: python -m QuantumGrav doctor: unrecognized arguments: --fast" in capsys.readouterr().err


def test_the_smoke_switch_shrinks_the_data_and_the_epochs_of_config_files_only(monkeypatch, tmp_path):
    import QuantumGrav as QG

    config_file = REPO / "configs" / "train.yaml"
    monkeypatch.setenv("QUANTUMGRAV_SMOKE_TEST", "1")
    smoke = QG.load_config(config_file)
    assert (smoke["data"]["num_samples"], smoke["data"]["n_min"], smoke["data"]["n_max"]) == (40, 8, 12)
    assert smoke["training"]["num_epochs"] == 2  # the file says 40
    explicit = QG.load_config(config_file, {"training.num_epochs": 5, "data.num_samples": 1000})
    assert explicit["training"]["num_epochs"] == 5 and explicit["data"]["num_samples"] == 40
    assert QG.load_config(explicit)["training"]["num_epochs"] == 5  # a resolved config is not capped again
    monkeypatch.setenv("QUANTUMGRAV_SMOKE_TEST", "0")
    assert QG.load_config(config_file)["data"]["num_samples"] == 2000

"""training.compile: the training step runs torch.compile'd (dynamic shapes) with the losses of eager mode, its
checkpoints are the plain model's (no ``_orig_mod.``) and load compiled or not, DDP trains the compiled inner
module, and a machine without inductor's compiler gets one line and exit 2.

Compiling takes tens of seconds on 2 cores: the runs here are the tiny config with the default attention layer
(both directions, dropout on) at 16 wide, and the tests that compile are left to the full suite."""

import math

import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.config.yaml_io import dump_config
from QuantumGrav.models.sparse_attention import SparseTransformerConv

# The default model's layer, both directions and dropout, at the tiny config's width: what users compile.
ATTENTION = {"model.conv": SparseTransformerConv, "model.conv_kwargs": {"heads": 2, "concat": False},
             "model.directions": "both", "model.dropout": 0.1}


def train(config: dict) -> tuple[list[dict], QG.Trainer]:
    trainer = QG.Trainer(config)
    try:
        train_loader, val_loader, _ = trainer.prepare_dataloaders()
        trainer.run_training(train_loader, val_loader)
    finally:
        trainer.close()
    return trainer.history, trainer


def assert_same_losses(got: list[dict], expected: list[dict]) -> None:
    assert [r["epoch"] for r in got] == [r["epoch"] for r in expected]
    for mine, theirs in zip(got, expected):
        for key in ("train_loss", "val_loss"):
            assert math.isclose(mine[key], theirs[key], rel_tol=1e-4), (key, mine[key], theirs[key])


def test_a_machine_without_inductors_compiler_gets_one_line_and_exit_2_and_nothing_on_disk(
        cli_in_process, tiny_config, tmp_path):
    config_file = tmp_path / "config.yaml"
    config_file.write_text(dump_config(tiny_config({**ATTENTION, "training.compile": True})))
    with torch._inductor.config.patch({"cpp.cxx": ("no-such-c++-compiler",)}):  # what CXX=... would name
        result = cli_in_process("train", "--config", str(config_file), cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("error: training.compile: torch.compile's backend (inductor) needs a C++ compiler")
    assert "no-such-c++-compiler" in lines[0] and "or set training.compile: false" in lines[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.full_suite
def test_compiled_training_gives_eager_losses_and_checkpoints_that_load_either_way(tiny_config, collect_log):
    """Same seed: the compiled run's losses are eager's, epoch by epoch (dropout draws the same masks); a run
    checkpointed compiled continues eager, and one checkpointed eager continues compiled, with the same losses."""
    eager, _ = train(tiny_config({**ATTENTION, "training.num_epochs": 2, "training.run_name": "eager"}))
    log = collect_log("QuantumGrav.training", "INFO")
    compiled, trainer = train(tiny_config({**ATTENTION, "training.num_epochs": 2, "training.compile": True,
                                           "training.run_name": "compiled"}))
    assert_same_losses(compiled, eager)
    assert any(line.startswith("training.compile: compiling the model took ") for line in log), log
    state = QG.runs.checkpoint_files.load_checkpoint(trainer.run_dir / "checkpoints" / "last.pt")
    assert not [key for key in state["model"] if "_orig_mod" in key]
    model = QG.build_model(trainer.config["model"], trainer.model_io["in_channels"], trainer.task.output_width)
    model.load_state_dict(state["model"])  # strict: a plain model, compiled or not

    for first, then in ((True, False), (False, True)):
        name = f"compiled_{first}_then_{then}"
        train(tiny_config({**ATTENTION, "training.num_epochs": 1, "training.compile": first,
                           "training.run_name": name}))
        resumed, _ = train(tiny_config({**ATTENTION, "training.num_epochs": 2, "training.compile": then,
                                        "training.resume": str(trainer.run_dir.parent / name)}))
        assert_same_losses(resumed, eager)


@pytest.mark.full_suite
def test_ddp_trains_the_compiled_inner_module_with_the_losses_of_eager_ddp(tiny_config):
    overrides = {**ATTENTION, "training.num_epochs": 1}
    eager = QG.launch(tiny_config({**overrides, "training.run_name": "eager"}), nproc=2)
    compiled = QG.launch(tiny_config({**overrides, "training.run_name": "compiled", "training.compile": True}),
                         nproc=2)
    assert_same_losses(compiled["history"], eager["history"])

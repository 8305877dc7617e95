"""Studies (issue 17): the search space checked before the first trial, pruning that every rank obeys, a
trial that fails on one rank, kill -9 and resume, two workers on one study, the study's files.

Trials are tiny (conftest.TINY, one or two epochs); ``tune_helpers.OrderedSampler`` makes trial n take
choice n of every categorical parameter, so each test knows which trial samples what.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

optuna = pytest.importorskip("optuna")

import QuantumGrav as QG  # noqa: E402
from QuantumGrav import cli  # noqa: E402
from QuantumGrav.config.yaml_io import resolve_pyobject  # noqa: E402
from QuantumGrav.studies.search_space import SearchSpace  # noqa: E402
from QuantumGrav.studies.storage import HEARTBEAT_GRACE_S  # noqa: E402
from QuantumGrav.runs.wandb_files import read_offline_runs  # noqa: E402
from conftest import REPO, TINY  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks" / "fault_tolerance"))
import stress_teardown  # noqa: E402  (its kill helpers)

HERE = Path(__file__).resolve().parent
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1",
       "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
ORDERED = resolve_pyobject("tune_helpers.OrderedSampler")
FAIL_ON_RANK = resolve_pyobject("tune_helpers.FailOnRank")
SLOW = resolve_pyobject("tune_helpers.SlowEpochs")
NEVER_GOOD_ENOUGH = {"pruner_type": resolve_pyobject("optuna.pruners.ThresholdPruner"),
                     "pruner_kwargs": {"upper": -1.0}}  # every val_loss is above -1: pruned at the first report


def study(tmp_path: Path, data_root: Path, space: dict, **tune) -> dict:
    """A tiny training config plus a tune section (its study folder under tmp_path/studies/s)."""
    base = QG.apply_overrides(TINY, {"training.path": str(tmp_path / "runs"), "data.root": str(data_root),
                                     "training.num_epochs": 2})
    return {**base, "tune": {"study": "s", "path": str(tmp_path / "studies"), "trials": 2, "space": space,
                             "sampler_type": ORDERED, **tune}}


def rows(result_or_folder) -> list[dict[str, str]]:
    folder = Path(result_or_folder["folder"] if isinstance(result_or_folder, dict) else result_or_folder)
    with open(folder / "trials.csv", newline="") as f:
        return list(csv.DictReader(f))


def states(table: list[dict[str, str]]) -> list[str]:
    return [row["state"] for row in table]


# ---------------------------------------------------------------------------------------------- the space
def test_the_space_samples_ranges_choices_and_coupled_choices_as_overrides():
    space = SearchSpace({
        "training.optimizer_kwargs.lr": {"low": 1e-4, "high": 1e-2, "log": True},
        "training.batch_size": {"low": 8, "high": 32, "step": 8},
        "model.conv": {"choices": [resolve_pyobject("torch_geometric.nn.GraphConv"),
                                   resolve_pyobject("torch_geometric.nn.GINConv")]},
        "model.pooling": {"choices": ["mean", "max"]},
        "width": {"choices": [{"model.hidden_channels": [16], "training.batch_size": 8},
                              {"model.hidden_channels": [32, 32], "training.batch_size": 16}]},
    })
    assert space.problems == [("tune.space.width: sets training.batch_size, which tune.space.training.batch_size "
                               "sets too; each key path may be searched by one entry")]
    del space.dimensions[1]
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1)).ask()
    overrides = space.suggest(trial)
    assert set(overrides) == {"training.optimizer_kwargs.lr", "model.conv", "model.pooling", "model.hidden_channels",
                              "training.batch_size"}
    assert 1e-4 <= overrides["training.optimizer_kwargs.lr"] <= 1e-2
    assert trial.params["model.conv"] in ("GraphConv", "GINConv")  # a class is stored by its name ...
    assert overrides["model.conv"].__name__ == trial.params["model.conv"]  # ... and sampled as the class
    assert trial.params["width"] in ("hidden_channels=[16], batch_size=8", "hidden_channels=[32, 32], batch_size=16")
    assert space.overrides(trial.params) == overrides  # a finished trial's stored labels give its config back


def test_a_log_range_takes_a_step_only_where_optuna_does_int_ranges_with_step_1():
    float_log = {"low": 1e-4, "high": 1e-2, "log": True, "step": 1.0}  # Optuna refuses it at the first suggest
    assert [p for p in SearchSpace({"training.optimizer_kwargs.lr": float_log}).problems] == [
        "tune.space.training.optimizer_kwargs.lr: log and step cannot be combined (float range with log: true "
        "takes no step)"]
    int_log = SearchSpace({"training.batch_size": {"low": 8, "high": 64, "log": True, "step": 1}})
    assert int_log.problems == []
    trial = optuna.create_study().ask()
    assert 8 <= int_log.suggest(trial)["training.batch_size"] <= 64


def test_bad_study_configs_get_one_line_each_exit_2_and_leave_nothing(tmp_path, data_root, capsys):
    problems = {
        "model.convv": ({"choices": [1]}, ("tune.space.model.convv: unknown key 'model.convv'; did you mean "
                                           "'model.conv'?")),
        "model.dropout": ({"low": 0.5, "high": 0.1}, "tune.space.model.dropout: empty range: low 0.5 > high 0.1"),
        "training.optimizer_kwargs.lr": ({"low": 0.0, "high": 0.1, "log": True},
                                         "tune.space.training.optimizer_kwargs.lr: log: true needs low > 0"),
        "model.hidden_channels": ({"choices": [[16], "wide"]},
                                  ("tune.space.model.hidden_channels: choice 'wide' gives an invalid config: "
                                   "model.hidden_channels: expected a list with at least 1 item(s), got 'wide'")),
    }
    config = study(tmp_path, data_root, {key: entry for key, (entry, _) in problems.items()},
                   metric="val_f1")  # the multiclass task has no F1
    assert cli.main(["tune", "--config", str(_write(tmp_path, config))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid study config (5 problems):\n"), err
    lines = [line.removeprefix("  - ") for line in err.splitlines()[1:]]
    assert len(lines) == 5 and all(not line.startswith(" ") for line in lines)
    expected = [text for _, text in problems.values()] + ["tune.metric: val_f1 is not reported by the multiclass task"]
    for text in expected:
        assert sum(line.startswith(text) for line in lines) == 1, (text, err)
    assert not (tmp_path / "studies").exists()

    unreachable = study(tmp_path, data_root, {"model.dropout": {"low": 0.0, "high": 0.2}},
                        storage=f"sqlite:///{tmp_path}/no/such/folder/study.db")
    assert cli.main(["tune", "--config", str(_write(tmp_path, unreachable))]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: tune.storage: cannot open 'sqlite:///{tmp_path}/no/such/folder/study.db'")
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "studies").exists() and not (tmp_path / "no").exists()


def _write(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(QG.dump_config(config))
    return path


def _ranks_stopped_by_the_pruner(run_dir: Path) -> None:
    """Every rank's log says the trial stopped at epoch 0 because the pruner said so."""
    for rank in (0, 1):
        log = (run_dir / "logs" / f"rank_{rank}.log").read_text()
        assert "training finished at epoch 0: pruned by ThresholdPruner at epoch 0" in log, (rank, log)
    with open(run_dir / "metrics.csv", newline="") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0"]


# ---------------------------------------------------------------------------------------------- trials
def test_world_size_2_every_rank_obeys_the_pruner_and_the_command_exits_0(tmp_path, data_root, capsys):
    config = study(tmp_path, data_root, {"model.dropout": {"low": 0.0, "high": 0.2}}, **NEVER_GOOD_ENOUGH)
    assert cli.main(["tune", "--config", str(_write(tmp_path, config)), "--nproc", "2"]) == 0
    assert "no trial completed (pruned or failed): no best.yaml" in capsys.readouterr().out
    table = rows(tmp_path / "studies" / "s")
    assert states(table) == ["PRUNED", "PRUNED"]
    for row in table:
        run_dir = Path(row["run_dir"])
        _ranks_stopped_by_the_pruner(run_dir)
        with open(run_dir / "metrics.csv", newline="") as f:
            last = float(next(csv.DictReader(f))["val_loss"])
        assert float(row["value"]) == pytest.approx(last)  # PRUNED with its last reported value
        assert row["reason"] == f"pruned by ThresholdPruner at epoch 0 (val_loss {last:.4g})"
    assert not (tmp_path / "studies" / "s" / "best.yaml").exists()


def test_world_size_2_a_trial_failing_on_rank_1_alone_fails_and_the_study_goes_on(tmp_path, data_root):
    space = {"callbacks": {"choices": [[], [{"type": FAIL_ON_RANK, "kwargs": {"rank": 1}}]]}}
    summary = QG.tune(study(tmp_path, data_root, space), nproc=2)
    table = rows(summary)
    assert states(table) == ["COMPLETE", "FAIL", "COMPLETE"]
    assert table[1]["reason"] == "rank 1 failed: RuntimeError: a failure on rank 1 only"
    assert summary["counts"] == {"COMPLETE": 2, "FAIL": 1}


def test_a_user_error_of_a_sampled_combination_fails_its_trial_with_one_line(tmp_path, data_root):
    space = {"model.conv_kwargs": {"choices": [{"heads": 2}, {}]}}  # GraphConv takes no heads
    table = rows(QG.tune(study(tmp_path, data_root, space, trials=1)))
    assert states(table) == ["FAIL", "COMPLETE"]
    reason = table[0]["reason"]
    assert reason.startswith("model.conv_kwargs: GraphConv rejects") and "heads" in reason and "\n" not in reason, reason
    assert table[0]["run_dir"] == ""  # refused before its run directory was made


def test_a_worker_stopped_by_a_preemption_leaves_trials_csv_with_what_the_study_has(tmp_path, data_root):
    interrupt = {"type": resolve_pyobject("ddp_helpers.InterruptAtEpoch"), "kwargs": {"epoch": 0}}
    with pytest.raises(QG.common.errors.Preempted, match="a maintenance window"):
        QG.tune(study(tmp_path, data_root, {"callbacks": {"choices": [[], [interrupt]]}}))
    assert states(rows(tmp_path / "studies" / "s")) == ["COMPLETE", "FAIL", "WAITING"]  # its retry waits


def test_under_torchrun_every_rank_obeys_the_pruner_and_a_failure_on_rank_1_fails_only_its_trial(tmp_path, data_root):
    space = {"callbacks": {"choices": [[], [{"type": FAIL_ON_RANK, "kwargs": {"rank": 1}}]]}}
    path = _write(tmp_path, study(tmp_path, data_root, space, **NEVER_GOOD_ENOUGH))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={QG.find_free_port()}", "-m", "QuantumGrav", "tune", "--config", str(path)],
                          env=ENV, cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    table = rows(tmp_path / "studies" / "s")
    assert states(table) == ["PRUNED", "FAIL", "PRUNED"]
    assert table[1]["reason"] == "rank 1 failed: RuntimeError: a failure on rank 1 only"
    for row in (table[0], table[2]):
        _ranks_stopped_by_the_pruner(Path(row["run_dir"]))
    assert "=== QuantumGrav study 's' ===" in done.stdout  # printed once, by rank 0
    assert done.stdout.count("=== QuantumGrav study") == 1


# ---------------------------------------------------------------------------------------------- workers
def _slow(config: dict, seconds: float) -> dict:
    return {**config, "callbacks": [{"type": SLOW, "kwargs": {"seconds": seconds}}]}


def _tune_command(path: Path) -> list[str]:
    return [sys.executable, "-m", "QuantumGrav", "tune", "--config", str(path)]


def test_two_workers_share_one_study_and_stop_together_at_its_trials(tmp_path, data_root):
    config = _slow(study(tmp_path, data_root, {"model.pooling": {"choices": ["mean", "max", "add", "mean_max"]}},
                         trials=4, storage=f"sqlite:///{tmp_path}/study.db"), 1.0)
    command = _tune_command(_write(tmp_path, config))
    workers = [subprocess.Popen(command, env=ENV, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outputs = [worker.communicate(timeout=300) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], [err[:3000] for _, err in outputs]
    table = rows(tmp_path / "studies" / "s")
    finished = [row for row in table if row["state"] == "COMPLETE"]
    assert len(finished) == 4
    # A claim beyond the study's trials (two workers asking at the same moment) is given back, never run.
    assert all(row["reason"].startswith("not run: ") and not row["run_dir"] for row in table if row["state"] == "FAIL")
    assert len({row["run_dir"] for row in finished}) == 4
    assert sorted(row["model.pooling"] for row in finished) == ["add", "max", "mean", "mean_max"]
    assert len({row["worker"] for row in finished}) == 2, "both workers trained trials of the study"
    for row in finished:  # each trial trained once, by one worker: two epochs in its run directory
        with open(Path(row["run_dir"]) / "metrics.csv", newline="") as f:
            assert [r["epoch"] for r in csv.DictReader(f)] == ["0", "1"]


# ---------------------------------------------------------------------------------------------- the files
def test_a_study_leaves_its_files_wandb_runs_grouped_and_a_best_yaml_that_trains(tmp_path, data_root, capsys):
    wandb = QG.load_config(REPO / "configs" / "logger" / "wandb_ddp.yaml")["logger"]
    space = {"model.pooling": {"choices": ["mean", "max"]},
             "training.optimizer_kwargs.lr": {"low": 1.0e-3, "high": 1.0e-2, "log": True}}
    config = {**study(tmp_path, data_root, space), "logger": wandb}
    assert cli.main(["tune", "--config", str(_write(tmp_path, config))]) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "studies" / "s"
    assert "trials          2 finished of 2 (COMPLETE 2; all workers)" in out
    assert f"retrain         python -m QuantumGrav train --config {folder / 'best.yaml'}" in out
    table = rows(folder)
    assert list(table[0]) == ["number", "state", "value", "model.pooling", "training.optimizer_kwargs.lr", "run_dir",
                              "seconds", "worker", "reason"]
    assert [(row["model.pooling"], float(row["training.optimizer_kwargs.lr"])) for row in table] == \
        [("mean", pytest.approx(1.0e-3)), ("max", pytest.approx(1.0e-2))]
    assert sorted(p.name for p in (folder / "figures").iterdir()) == ["optimization_history.png",
                                                                       "param_importances.png", "slice.png"]
    for row in table:  # one W&B run per trial, all in the study's group
        (run,) = read_offline_runs(row["run_dir"])
        assert (run["group"], run["name"]) == ("s", f"s-trial_000{row['number']}")

    best = min(table, key=lambda row: float(row["value"]))
    retrained = QG.load_config(folder / "best.yaml")
    assert retrained["model"]["pooling"] == best["model.pooling"]
    assert retrained["training"]["optimizer_kwargs"]["lr"] == pytest.approx(float(best["training.optimizer_kwargs.lr"]))
    assert retrained["training"]["path"] == str(tmp_path / "runs")  # where the base config's runs go
    assert cli.main(["train", "--config", str(folder / "best.yaml")]) == 0
    assert len(list((tmp_path / "runs").iterdir())) == 1


def test_the_slice_figure_of_a_coupled_choice_has_no_label_over_another():
    """Notebook 08's slice figure: the coupled choice's values ('hidden_channels=[...], batch_size=...') ran, rotated,
    into the learning rate's axis name. Every x tick label and axis name must stay clear of the other axes'."""
    import matplotlib.pyplot as plt
    from optuna.distributions import CategoricalDistribution, FloatDistribution
    from optuna.visualization.matplotlib import plot_slice

    from QuantumGrav.studies.report import _with_readable_ticks

    space = {"model.pooling": CategoricalDistribution(["mean", "max"]),
             "training.optimizer_kwargs.lr": FloatDistribution(1e-4, 3e-2, log=True),
             "width_and_batch": CategoricalDistribution(["hidden_channels=[64, 64, 64], batch_size=32",
                                                          "hidden_channels=[128, 128], batch_size=64"])}
    study = optuna.create_study()
    for pooling, lr, width, value in [("mean", 2e-3, 0, 0.3), ("mean", 2e-4, 1, 0.9), ("max", 1e-2, 1, 0.2)]:
        study.add_trial(optuna.trial.create_trial(params={"model.pooling": pooling, "training.optimizer_kwargs.lr": lr,
                                                          "width_and_batch": space["width_and_batch"].choices[width]},
                                                  distributions=space, value=value))
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        axes = list(plot_slice(study).flat)
    figure = _with_readable_ticks(axes)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()

    def drawn(ax) -> list:  # the tick labels inside the axis's limits (those outside are not drawn), its name
        low, high = sorted(ax.get_xlim())
        return [*(text for text in ax.get_xticklabels() if low <= text.get_position()[0] <= high), ax.xaxis.label]

    boxes = [[text.get_window_extent(renderer) for text in drawn(ax) if text.get_text()] for ax in axes]
    for i, j in [(i, j) for i in range(len(axes)) for j in range(len(axes)) if i != j]:
        clashes = [(a, b) for a in boxes[i] for b in boxes[j] if a.overlaps(b)]
        assert not clashes, f"labels of axis {i} run over those of axis {j}: {clashes}"
    ticks = [text.get_text() for text in axes[2].get_xticklabels()]
    assert ticks[0] == "'hidden_channels=[64, 64, 64],\nbatch_size=32'", ticks
    plt.close(figure)


def test_without_optuna_the_command_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna now raises ImportError
    assert cli.main(["tune", "--config", str(REPO / "configs" / "tune.yaml")]) == 2
    assert capsys.readouterr().err == ("error: the tuner needs Optuna, which is not installed; install it with "
                                       "pip install 'QuantumGrav[tune]'\n")


RANKS_GONE_WITHIN_S = 120  # a rank stops at its next step, or within parallel.timeout_s (30 s) where a peer is gone


def _wait_for_ranks_to_stop(agent: subprocess.Popen, ranks: list) -> None:
    """torchrun starts its ranks in sessions of their own: killing its process group reaches the agent alone, and
    each rank must stop by itself (``stop_when_the_agent_dies``). They hold the agent's pipes until they do, so
    the wait is bounded: a rank still there afterwards prints its Python stack (SIGABRT, PYTHONFAULTHANDLER=1) and
    the test fails naming it, instead of hanging in ``communicate``."""
    try:
        agent.communicate(timeout=RANKS_GONE_WITHIN_S)
        return
    except subprocess.TimeoutExpired:
        pass
    left = [f"{rank.pid} {' '.join(rank.cmdline())[:160]}" for rank in ranks if rank.is_running()]
    stress_teardown.print_stacks_and_kill(ranks)
    pytest.fail(f"{len(left)} rank(s) still running {RANKS_GONE_WITHIN_S} s after their torchrun was killed: "
                f"{left}\n{agent.communicate()[1][-6000:]}")


def test_world_size_2_kill_9_of_a_torchrun_job_then_two_torchrun_workers_finish_the_study(tmp_path, data_root):
    """A torchrun job (every rank in the study loop) killed mid-trial with its processes (as a lost node or
    ``kill -9`` would), then two torchrun jobs of 2 processes each on the same study: the killed trial is
    retried with its parameters. (One test for the kill and the shared study: on one process the study loop is
    the same code, and a fresh set of processes costs the suite more than the rest of the test.)"""
    space = {"model.pooling": {"choices": ["mean", "max", "add", "mean_max"]}}
    path = _write(tmp_path, _slow(study(tmp_path, data_root, space, trials=3), 1.5))

    def torchrun() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                 "-m", "QuantumGrav", "tune", "--config", str(path)], env=ENV, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    first = torchrun()
    first_epoch = tmp_path / "studies" / "s" / "trials" / "trial_0000" / "metrics.csv"
    deadline = time.monotonic() + 180
    while not first_epoch.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert first.poll() is None, first.communicate()[1][-3000:]
    ranks = psutil.Process(first.pid).children(recursive=True)
    os.killpg(first.pid, signal.SIGKILL)  # the agent's process group, as a lost node or a killed job step kills it
    _wait_for_ranks_to_stop(first, ranks)

    workers = [torchrun(), torchrun()]
    outputs = [worker.communicate(timeout=300) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], [err[-3000:] for _, err in outputs]
    table = rows(tmp_path / "studies" / "s")
    killed = table[0]
    retry = int(killed["reason"].split("retried as trial ")[1].split()[0])
    assert killed["reason"] == (f"its worker stopped without reporting (killed, or its node lost); retried as trial "
                                f"{retry} (no heartbeat for {HEARTBEAT_GRACE_S} s)")
    assert killed["state"] == "FAIL" and table[retry]["model.pooling"] == killed["model.pooling"] == "mean"
    finished = [row for row in table if row["state"] == "COMPLETE"]
    reasons = [(row["number"], row["state"], row["worker"], row["reason"]) for row in table]
    assert len(finished) == 3 and table[retry] in finished, reasons
    assert all(row["reason"].startswith("not run: ") for row in table[1:] if row["state"] == "FAIL")
    assert len({row["worker"] for row in finished}) == 2, "both torchrun jobs trained trials of the study"
    for row in finished:  # each trial trained once, on 2 processes
        assert sorted(p.name for p in (Path(row["run_dir"]) / "logs").iterdir()) == ["rank_0.log", "rank_1.log"]


def test_workers_opening_a_new_database_at_once_all_open_it(tmp_path):
    """The race of two workers started together: both create the tables of a new database, one fails on the
    row the other wrote (UNIQUE constraint failed: alembic_version) unless it opens the storage again. A
    race is a distribution: 8 rounds of 3 workers. They are forked from this process after it imported the
    database storage (Optuna, SQLAlchemy, Alembic), so that each starts creating tables at once instead of
    spending a second on those imports first (24 imports of them were most of this test's CPU time)."""
    import multiprocessing

    from ddp_helpers import spawn_ranks
    from tune_helpers import open_new_database
    from QuantumGrav.studies.storage import open_storage

    open_storage(f"sqlite:///{tmp_path / 'imports.db'}")  # imports what the workers use
    for round_ in range(8):
        outcomes = spawn_ranks(open_new_database, 3, str(tmp_path / f"study_{round_}.db"),
                               context=multiprocessing.get_context("fork"))
        assert sorted(outcome for _, outcome in outcomes) == ["opened"] * 3, outcomes


def _settings(tmp_path: Path, folder: str, space: dict):
    from QuantumGrav.studies.config import read_study_config

    config = study(tmp_path, tmp_path / "data", space)
    return read_study_config(QG.apply_overrides(config, {"tune.path": str(tmp_path / folder)}))[0]


def test_workers_joining_a_new_study_at_once_agree_and_one_with_another_space_is_refused(tmp_path):
    """Workers started together (the documented two terminals, a job array): one creates the study and writes its
    metric and space one after the other, the others may load it in between. Those with the same config join;
    of two with different spaces, exactly one goes on. A race is a distribution: 8 rounds, forked at once."""
    import multiprocessing

    from ddp_helpers import spawn_ranks
    from tune_helpers import open_one_study

    same, other = {"model.dropout": {"low": 0.0, "high": 0.2}}, {"model.dropout": {"low": 0.0, "high": 0.3}}
    for round_ in range(8):
        settings = [_settings(tmp_path, f"same_{round_}", same)] * 3
        outcomes = spawn_ranks(open_one_study, 3, settings, context=multiprocessing.get_context("fork"))
        assert sorted(outcome for _, outcome in outcomes) == ["opened"] * 3, outcomes
        settings = [_settings(tmp_path, f"other_{round_}", space) for space in (same, other)]
        outcomes = sorted(outcome for _, outcome in spawn_ranks(open_one_study, 2, settings,
                                                                  context=multiprocessing.get_context("fork")))
        assert outcomes[1] == "opened" and "was started with another search space" in outcomes[0], outcomes


def test_a_worker_waits_for_the_creator_of_a_study_to_write_what_it_was_started_with(tmp_path):
    import dataclasses
    import threading

    from QuantumGrav.studies.storage import open_storage, open_study

    settings = _settings(tmp_path, "studies", {"model.dropout": {"low": 0.0, "high": 0.2}})
    settings.folder.mkdir(parents=True)
    created = optuna.create_study(storage=open_storage(settings.storage), study_name=settings.study)
    created.set_user_attr("metric", settings.metric)  # the creator, half-way through writing its identity
    late = threading.Timer(0.5, lambda: created.set_user_attr("space", settings.space.describe()))
    late.start()
    open_study(settings)
    late.join()
    with pytest.raises(QG.UserError, match="was started with another metric"):
        open_study(dataclasses.replace(settings, metric="val_accuracy"))


def test_the_other_ranks_wait_for_rank_0_as_long_as_it_beats_and_stop_with_one_line_when_it_does_not():
    """The other ranks wait parallel.timeout_s + data_timeout_s for rank 0's next command, and rank 0 may be busy
    for longer: testing and fitting baselines after a trial, sampling the next, waiting for other workers' trials.
    Its thread beats meanwhile, which keeps them waiting; once it is silent they stop with one line (they
    failed with the store's 'wait timeout' traceback after rank 0's test and baselines)."""
    import datetime
    import threading

    import torch.distributed as dist

    from QuantumGrav.studies import tune_ddp
    from QuantumGrav.studies.trials import StudyFailed

    store = dist.TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=datetime.timedelta(seconds=10),
                          wait_for_workers=False)
    # Each rank has its own client of the store, as in a job: one client serialises its requests, so a beat sent
    # through the follower's client would wait behind the follower's own blocking read (with one client shared, the
    # test failed whenever the beat came after the read's timeout: once in a full suite, then every time alone).
    follower_store = dist.TCPStore("127.0.0.1", store.port, 2, is_master=False, timeout=datetime.timedelta(seconds=10))
    lead, follower = tune_ddp.Channel(store, 0, 2, timeout_s=1.0), tune_ddp.Channel(follower_store, 1, 2, timeout_s=1.0)
    busy = threading.Timer(3.0, lead.publish, args=(0, ("done",)))  # rank 0's next command comes 3 waits later
    with tune_ddp.beating(lead, interval_s=0.25):
        busy.start()
        assert follower.receive(0) == ("done",)
    with pytest.raises(StudyFailed, match="rank 0 sent no command and no keep-alive for 1 s"):
        follower.receive(1)


def test_rank_0_beats_while_its_main_thread_blocks_on_the_store():
    """Rank 0 waiting for the ranks' outcomes blocks its client of the store; the beats must not queue behind that
    read (they did: one client serialises its requests), or the ranks that reported first stop waiting."""
    import datetime
    import threading

    import torch.distributed as dist

    from QuantumGrav.studies import tune_ddp

    store = dist.TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=datetime.timedelta(seconds=10),
                          wait_for_workers=False)
    follower_store = dist.TCPStore("127.0.0.1", store.port, 2, is_master=False, timeout=datetime.timedelta(seconds=10))
    lead, follower = tune_ddp.Channel(store, 0, 2, timeout_s=1.0), tune_ddp.Channel(follower_store, 1, 2, timeout_s=1.0)
    received = []
    waiting = threading.Thread(target=lambda: received.append(_outcome_of(follower.receive, 0)))
    with tune_ddp.beating(lead, interval_s=0.25):
        waiting.start()
        with pytest.raises(dist.DistStoreError):  # a rank's outcome that does not come within 3 waits
            lead._read("outcome/0/1", datetime.timedelta(seconds=3))
        lead.publish(0, ("done",))
        waiting.join(timeout=10)
    assert received == [("done",)]


def _outcome_of(function, *args):
    try:
        return function(*args)
    except Exception as err:  # noqa: BLE001 - the test compares it
        return err


def test_a_retry_is_not_taken_for_dead_before_its_first_heartbeat(tmp_path, monkeypatch):
    """Optuna's retry copies the dead trial's system attributes, its last heartbeat among them: between
    being asked for and its first beat, the retry looked dead already to any worker that looked (the
    two-torchrun-workers test failed so under the suite's load)."""
    from QuantumGrav.studies import storage as study_storage

    storage = study_storage.open_storage(str(tmp_path / "study.journal"))
    study = optuna.create_study(storage=storage)
    dead = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    storage.set_trial_system_attr(dead._trial_id, study_storage.HEARTBEAT_ATTR, time.time() - 3 * HEARTBEAT_GRACE_S)
    later = time.time() + 2 * HEARTBEAT_GRACE_S  # the worker died a while ago: its start is old too
    with monkeypatch.context() as patched:
        patched.setattr(study_storage.time, "time", lambda: later)
        study_storage.fail_stale_trials(study)
    retry = study.ask()  # the enqueued retry, RUNNING from now on, not beating yet
    assert storage.get_trial(retry._trial_id).system_attrs["failed_trial"] == dead.number
    study_storage.fail_stale_trials(study)  # another worker looks at once
    assert study.trials[retry.number].state == optuna.trial.TrialState.RUNNING


def test_a_dead_trial_keeps_its_place_until_its_retry_is_enqueued(tmp_path):
    """Failing a dead trial and enqueuing its retry are two writes: a worker that asked between them ran a new
    trial in the dead one's place, and the retry then found the study's trials claimed and was not run (the
    two-torchrun-workers kill test failed so once in CI). The place stays taken until the retry exists."""
    from types import SimpleNamespace

    from optuna.storages import RetryHeartbeatStaleTrialCallback

    from QuantumGrav.studies import storage as study_storage
    from QuantumGrav.studies.trials import StudyWorker

    study = optuna.create_study(storage=study_storage.open_storage(str(tmp_path / "study.journal")))
    worker = StudyWorker(SimpleNamespace(trials=3, seed=None, folder=tmp_path), {}, study)
    dead = worker.ask()
    study.tell(dead, state=optuna.trial.TrialState.FAIL)  # its heartbeat stopped; the retry is not enqueued yet
    assert worker.ask() is not None and worker.ask() is not None
    assert worker.ask() is None  # the third place is the dead trial's
    failed = study._storage.get_trial(dead._trial_id)
    RetryHeartbeatStaleTrialCallback(max_retry=study_storage.MAX_RETRIES)(study, failed)
    retry = worker.ask()
    assert retry is not None and study._storage.get_trial(retry._trial_id).system_attrs["failed_trial"] == dead.number
    assert worker.ask() is None  # and the study's three places are taken: no fourth trial

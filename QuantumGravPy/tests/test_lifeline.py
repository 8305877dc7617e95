"""Nothing left running (issue 25): whatever ends the process that called QG.launch or QG.tune, the processes
it started end too, and the run stays continuable.

The launching process is killed alone with SIGKILL once rank 0 has logged its first epoch (as the
out-of-memory killer kills a script or a notebook kernel), or Jupyter restarts the kernel; every process
it had started (fork server, workers, resource tracker) must be gone within a bounded, polled wait. The
same kills, repeated, are in benchmarks/fault_tolerance/stress_teardown.py --kill (a race is a distribution).
"""

import subprocess
import sys

import pytest

import QuantumGrav as QG
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "fault_tolerance"))
import stress_teardown  # noqa: E402

LIBRARY = REPO / "QuantumGravPy" / "src"
GONE_WITHIN_S = 60.0  # the workers' hard exit comes LAUNCHER_GONE_GRACE_S (30 s) after the kill at the latest


@pytest.fixture
def job_config(tmp_path, tiny_config):
    """A config file of the tiny job (its runs under tmp_path/runs)."""
    path = tmp_path / "tiny.yaml"
    path.write_text(QG.dump_config(tiny_config()))
    return path


def _assert_clean(outcome: stress_teardown.KillOutcome) -> None:
    assert outcome.left == [], "still running after the kill:\n" + "\n".join(outcome.left) + outcome.output[-3000:]


def test_kill_9_of_a_script_in_launch_stops_every_worker_and_the_rerun_continues(tmp_path, job_config):
    run_dir = tmp_path / "first" / "runs" / "killed"
    overrides = {**stress_teardown.LONG_RUN, "training.path": str(run_dir.parent), "training.run_name": "killed",
                 "training.num_workers": 1}  # DataLoader workers, which must go too
    outcome = stress_teardown.kill_script(tmp_path / "first", job_config, 2, overrides, GONE_WITHIN_S,
                                          library=LIBRARY)
    _assert_clean(outcome)
    # The fork server, the resource tracker, 2 ranks and their persistent DataLoader workers (train, validation).
    assert len(outcome.started) >= 6, outcome.started
    assert "the process that started this job (QG.launch) is gone" in outcome.output, outcome.output[-3000:]
    assert "stopped on SIGTERM after checkpointing" in outcome.output, outcome.output[-3000:]
    assert (run_dir / "checkpoints" / "last.pt").is_file(), "the workers stopped without a checkpoint"
    assert not (run_dir / ".lock").exists(), "the workers stopped without releasing the run's lock"
    epochs_done = len((run_dir / "metrics.csv").read_text().splitlines()) - 1
    # The same script again, given an end now: it continues the run from the checkpoint.
    script = stress_teardown.write_job_script(tmp_path / "again", job_config, 2,
                                              {**overrides, "training.num_epochs": epochs_done + 1}, LIBRARY)
    done = subprocess.run([sys.executable, str(script)], cwd=script.parent, capture_output=True, text=True,
                          timeout=300, env=stress_teardown.job_environment())
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming {run_dir}" in done.stderr
    assert len((run_dir / "metrics.csv").read_text().splitlines()) - 1 == epochs_done + 1


def test_kill_9_during_data_generation_stops_the_generators_pool(tmp_path, job_config):
    """One process generating a data set in a pool (its workers forked by the fork server, not by it)."""
    import psutil

    def generating(process, log) -> bool:
        pool = [p for p in psutil.Process(process.pid).children(recursive=True) if "forkserver" in " ".join(p.cmdline())]
        return len(pool) >= 3  # the fork server and the pool's 2 workers: generating

    overrides = {"training.path": str(tmp_path / "runs"), "data.root": str(tmp_path / "data"), "data.workers": 2,
                 "data.num_samples": 20_000, "data.n_min": 64, "data.n_max": 96}
    outcome = stress_teardown.kill_script(tmp_path / "generating", job_config, 1, overrides, GONE_WITHIN_S,
                                          library=LIBRARY, ready=generating)
    _assert_clean(outcome)


def test_a_kernel_killed_alone_or_restarted_leaves_no_process_of_its_launch(tmp_path, job_config):
    pytest.importorskip("jupyter_client")
    for how in ("kill", "restart"):  # kill: the out-of-memory killer; restart: Jupyter's restart button
        outcome = stress_teardown.kill_kernel(tmp_path / how, job_config, 2,
                                              {**stress_teardown.LONG_RUN, "training.path": str(tmp_path / how)},
                                              how, within_s=GONE_WITHIN_S, library=LIBRARY)
        _assert_clean(outcome)


def test_a_kernel_running_a_study_killed_alone_leaves_no_trial_worker(tmp_path, job_config):
    pytest.importorskip("jupyter_client")
    pytest.importorskip("optuna")
    study = tmp_path / "study.yaml"
    study.write_text(job_config.read_text() + "\ntune:\n  study: killed\n  trials: 2\n  space:\n"
                                              "    model.pooling: {choices: [mean, max]}\n")
    outcome = stress_teardown.kill_kernel(tmp_path / "kernel", study, 2,
                                          {**stress_teardown.LONG_RUN, "tune.path": str(tmp_path / "kernel" / "studies")},
                                          tune=True, within_s=GONE_WITHIN_S, library=LIBRARY)
    _assert_clean(outcome)


@pytest.mark.parametrize("moment", ["ranks_started", "first_epoch"])  # imports, data, the study's set-up; training
def test_a_torchrun_study_job_killed_with_its_process_group_leaves_no_rank(tmp_path, job_config, moment):
    """``torchrun -m QuantumGrav tune`` killed as a lost node kills it (SIGKILL to its process group): its ranks,
    in sessions of their own, stop by themselves wherever the kill finds them. The same kills at random moments,
    repeated, are ``benchmarks/fault_tolerance/stress_teardown.py --kill torchrun_tune_random``."""
    pytest.importorskip("optuna")
    study = tmp_path / "study.yaml"
    study.write_text(job_config.read_text() + "\ntune:\n  study: killed\n  trials: 2\n  space:\n"
                                              "    model.pooling: {choices: [mean, max]}\n")
    job = tmp_path / "job"  # its runs and study under it: the first epoch is looked for there
    outcome = stress_teardown.kill_torchrun_tune(job, study, 2, {**stress_teardown.LONG_RUN, "tune.path": str(job / "studies"),
                                                                 "training.path": str(job / "runs")},
                                                 GONE_WITHIN_S, moment, library=LIBRARY)
    _assert_clean(outcome)
    assert len([p for p in outcome.started if "QuantumGrav tune" in p]) == 2, outcome.started  # both ranks killed


# ---------------------------------------------------------------------------------- the main guard
@pytest.mark.parametrize("call, exit_code", [
    ("QG.launch(QG.load_config(CONFIG), nproc=2)", 1),  # an uncaught QG.UserError
    ("sys.exit(main(['train', '--config', CONFIG, '--nproc', '2']))", 2),  # the CLI's exit for bad input
])
def test_a_script_without_the_main_guard_gets_one_line_and_no_worker_starts(tmp_path, job_config, call, exit_code):
    script = tmp_path / "unguarded.py"
    script.write_text(f"import sys\nimport QuantumGrav as QG\nfrom QuantumGrav.cli import main\nCONFIG = "
                      f"{str(job_config)!r}\n\n\ndef run():\n    {call}\n\n\nrun()\n")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=stress_teardown.job_environment())
    assert done.returncode == exit_code, done.stderr[-3000:]
    assert 'Put the call under `if __name__ == "__main__":`' in done.stderr
    assert f"{script} (line 11) without the main guard" in done.stderr
    assert "multiprocessing" not in done.stderr and "bootstrapping" not in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "studies").exists(), "a worker started"
    if exit_code == 2:
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


# A data set whose generation starts a pool (2 workers, 2 kinds: a block each), built by a script's top level.
BUILD_KINDS = ("cfg = QG.load_config({config!r}, ['data.kwargs.path=' + {data!r}, 'data.kwargs.num_per_kind=4',\n"
               "                     'data.kwargs.n_min=24', 'data.kwargs.n_max=32', 'data.kwargs.workers=2'])\n"
               "sets = cfg['data']['type'](**cfg['data']['kwargs'])\n"
               "print('sets:', len(sets))\n")


@pytest.mark.parametrize("guarded", [False, True])
def test_a_data_set_generated_by_workers_from_a_script_needs_the_main_guard(tmp_path, guarded):
    data = tmp_path / "kinds"
    build = BUILD_KINDS.format(config=str(REPO / "configs" / "inserted_block.yaml"), data=str(data))
    if guarded:
        build = 'if __name__ == "__main__":\n' + "".join(f"    {line}\n" for line in build.splitlines())
    script = tmp_path / "build.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(LIBRARY)!r})\nimport QuantumGrav as QG\n{build}")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=stress_teardown.job_environment())
    if guarded:
        assert done.returncode == 0 and "sets: 8" in done.stdout, done.stderr[-3000:]
        finished = list(data.iterdir())
        assert len(finished) == 1 and (finished[0] / "generation.json").is_file(), finished
        return
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"KindsDataset is called at the top level of {script} (line 6) without the main guard" in done.stderr
    assert 'Put the call under `if __name__ == "__main__":`' in done.stderr and "workers=1" in done.stderr
    assert "BrokenProcessPool" not in done.stderr and "bootstrapping" not in done.stderr, done.stderr[-3000:]
    assert not data.exists() or list(data.iterdir()) == [], "a store or its partial folder was left behind"


def _run_as_main(monkeypatch, path, source: str) -> None:
    """Run ``source`` as the script ``path`` run by ``python path`` would (its module is ``__main__``)."""
    import types

    path.write_text(source)
    module = types.ModuleType("__main__")
    module.__file__ = str(path)
    monkeypatch.setitem(sys.modules, "__main__", module)
    exec(compile(source, str(path), "exec"), module.__dict__)


def test_tune_refuses_a_call_outside_the_main_guard_before_its_study_opens(tmp_path, job_config, monkeypatch):
    pytest.importorskip("optuna")
    study = tmp_path / "study.yaml"
    study.write_text(job_config.read_text() + f"\ntune:\n  study: s\n  trials: 1\n  path: {tmp_path / 'studies'}\n"
                                              "  space:\n    model.pooling: {choices: [mean, max]}\n")
    monkeypatch.setitem(sys.modules, "QuantumGrav", QG)
    with pytest.raises(QG.UserError, match=r"QG.tune is called at the top level of .*script.py \(line 2\) without"):
        _run_as_main(monkeypatch, tmp_path / "script.py", f"import QuantumGrav as QG\nQG.tune({str(study)!r}, nproc=2)\n")
    assert not (tmp_path / "studies").exists()


@pytest.mark.parametrize("guard", ['if __name__ == "__main__":', "if '__main__' == __name__:"])
def test_a_call_under_the_main_guard_either_way_round_is_accepted(tmp_path, monkeypatch, guard):
    from QuantumGrav.common.processes import check_main_guard

    _run_as_main(monkeypatch, tmp_path / "script.py",
                 f"from QuantumGrav.common.processes import check_main_guard\n\n\ndef main():\n    check_main_guard('QG.launch')\n"
                 f"\n\n{guard}\n    main()\n")
    with pytest.raises(QG.UserError, match=r"line 3\) without the main guard"):
        _run_as_main(monkeypatch, tmp_path / "script.py",
                     "from QuantumGrav.common.processes import check_main_guard\nif True:\n    check_main_guard('QG.launch')\n")
    monkeypatch.undo()
    check_main_guard("QG.launch")  # from pytest's own __main__ (python -m pytest), whose call is under its guard

"""The environment doctor: passes here (with a real 2-process all-reduce), flags a busy port."""

import io
import socket

from QuantumGrav import doctor
from QuantumGrav.doctor import Check, run_doctor

TAGS = ("[ok]", "[warn]", "[fail]")


def test_doctor_passes_on_this_machine_with_a_real_smoke_test():
    out = io.StringIO()
    assert run_doctor(nproc=2, num_workers=0, out=out) == 0, out.getvalue()
    lines = out.getvalue().splitlines()
    assert len(lines) == 8 and all(line.startswith(TAGS) for line in lines)
    assert all(" -> " in line for line in lines if line.startswith(("[warn]", "[fail]")))  # advice given
    smoke = lines[-1]
    assert smoke.startswith("[ok] DDP smoke test") and "sum 3 on every rank" in smoke


def test_port_in_use_is_a_failure_with_advice(monkeypatch):
    # The smoke test is covered above; here it is stubbed to keep the test fast.
    monkeypatch.setattr(doctor, "check_ddp_smoke_test", lambda: Check("ok", "smoke test skipped"))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("localhost", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = io.StringIO()
        assert run_doctor(port=port, out=out) == 1
    [line] = [line for line in out.getvalue().splitlines() if f"port {port}" in line]
    assert line.startswith("[fail]") and "already in use" in line and "--port" in line


def test_smoke_test_that_cannot_finish_fails_with_what_to_check():
    # A deadline that has passed before any rank can report (workers from a warm fork server report in
    # a fraction of a second, so no positive timeout is sure to be missed).
    result = doctor.check_ddp_smoke_test(timeout_s=0.0)
    assert result.status == "fail" and "timed out" in result.message
    assert "GLOO_SOCKET_IFNAME" in result.advice and result.line().startswith("[fail]")


def test_oversubscribed_cpus_warn(monkeypatch):
    monkeypatch.setattr(doctor, "usable_cpu_count", lambda: 4)
    assert doctor.check_cpus(nproc=2, num_workers=1).status == "ok"
    result = doctor.check_cpus(nproc=2, num_workers=3)
    assert result.status == "warn" and "= 8" in result.message and "num_workers" in result.advice


def test_wandb_check_finds_the_login_without_the_network(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_MODE", "online")
    result = doctor.check_wandb()
    assert result.status == "warn" and "no API key" in result.message and "wandb login" in result.advice
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password 0123456789\n")
    result = doctor.check_wandb()
    assert result.status == "ok" and "netrc entry for api.wandb.ai" in result.message
    monkeypatch.setenv("WANDB_MODE", "dryrun")
    assert doctor.check_wandb().status == "warn"

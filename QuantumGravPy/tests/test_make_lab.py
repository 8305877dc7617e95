"""`make lab`, the README's one command from a fresh clone to the notebooks: JupyterLab on the repository with
notebook 01 open, whose kernel is the environment's Python and runs in notebooks/, as nbval runs the notebooks.

The test starts the command as the README types it (with LAB_ARGS for a port of its own, a token and no browser),
opens notebook 01's session through JupyterLab's server, runs a cell in its kernel, and stops the server.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import QuantumGrav as QG
from conftest import REPO

pytestmark = pytest.mark.full_suite  # starts JupyterLab and a kernel: about 15 s

NOTEBOOK = "notebooks/01_causal_sets.ipynb"


def _request(url: str, token: str, data: dict | None = None) -> dict:
    request = urllib.request.Request(url, data=None if data is None else json.dumps(data).encode(),
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
                                     method="GET" if data is None else "POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _wait_for_server(lab: subprocess.Popen, url: str, token: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if lab.poll() is not None:
            pytest.fail(f"make lab exited with {lab.returncode} before its server answered:\n{lab.stdout.read()[-3000:]}")
        try:
            _request(f"{url}/api/status", token)
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer at {url} within {timeout_s:.0f} s")


def _run_in_kernel(connection_file: Path, code: str) -> str:
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        printed = []
        reply = client.execute_interactive(code, timeout=60, output_hook=lambda message: printed.append(
            message["content"].get("text", "")) if message["msg_type"] == "stream" else None)
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(printed)
    finally:
        client.stop_channels()


def test_make_lab_opens_notebook_01_with_the_environments_kernel_in_notebooks(tmp_path):
    port, token = QG.find_free_port(), secrets.token_hex(16)
    runtime = tmp_path / "runtime"  # the kernels' connection files, where this test can read them
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime), "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    lab_args = f"--no-browser --port={port} --ServerApp.port_retries=0 --IdentityProvider.token={token}"
    lab = subprocess.Popen(["make", "lab", f"LAB_ARGS={lab_args}"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(lab, url, token)
        notebook = _request(f"{url}/api/contents/{NOTEBOOK}?content=0", token)
        assert notebook["type"] == "notebook" and notebook["path"] == NOTEBOOK
        session = _request(f"{url}/api/sessions", token,
                           {"path": NOTEBOOK, "type": "notebook", "name": "", "kernel": {"name": "python3"}})
        kernel = session["kernel"]["id"]
        printed = _run_in_kernel(runtime / f"kernel-{kernel}.json",
                                 "import os, sys\nprint(os.getcwd())\nprint(sys.prefix)")
        cwd, prefix = printed.splitlines()[:2]
        assert Path(cwd) == REPO / "notebooks", "the notebook's kernel runs where its relative paths point"
        assert Path(prefix) == REPO / ".venv", "the kernel is the environment that make created"
        # What the browser opens (without --no-browser it does so itself): notebook 01, in the repository's tree.
        (opened,) = runtime.glob("jpserver-file-to-run-*-open.html")
        assert f"/lab/tree/{NOTEBOOK}?token=" in opened.read_text()
    finally:
        if lab.poll() is None:
            os.killpg(lab.pid, signal.SIGTERM)  # JupyterLab shuts its kernels down on SIGTERM
        try:
            output, _ = lab.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, signal.SIGKILL)
            output, _ = lab.communicate()
    assert "Shutting down 1 kernel" in output, output[-3000:]

"""Lint in the suite: `ruff check` (the rules of pyproject.toml's [tool.ruff.lint]) finds nothing in the
repository's Python (the library, tests, examples, benchmarks, notebooks and the modules next to them), so
dead code does not come back as modules are split and moved."""

import subprocess
import sys

from conftest import REPO


def _ruff(*args: str, cwd) -> subprocess.CompletedProcess:
    # --no-cache: the suite writes nothing into the repository.
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *args],
                            cwd=cwd, capture_output=True, text=True, timeout=120)
    assert "No module named ruff" not in result.stderr, "ruff is in the test extra: pip install -e '.[test]'"
    return result


def test_ruff_finds_nothing_in_the_repositorys_python():
    result = _ruff(".", cwd=REPO)
    assert result.returncode == 0, f"ruff check found (fix them, or run `ruff check --fix .`):\n{result.stdout}"


def test_the_configured_rules_find_unused_imports_and_variables(tmp_path):
    """The check above cannot pass for want of rules: the repository's selection finds dead code."""
    (tmp_path / "dead.py").write_text("import os\n\n\ndef f():\n    unused = 1\n")
    result = _ruff("--config", str(REPO / "pyproject.toml"), "dead.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "dead.py:1:8: F401" in result.stdout and "dead.py:5:5: F841" in result.stdout

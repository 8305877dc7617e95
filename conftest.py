"""nbval runs the tutorial notebooks in their test mode: the switch of the commands, QUANTUMGRAV_SMOKE_TEST=1.

The notebooks' parameters hold full-size values (their stored outputs are full-size runs); under the switch each
notebook shrinks them to its test sizes (QG.shrink_for_smoke_test) and every config it loads to the smoke-test
data. nbval starts a notebook's kernel when it sets up the notebook's first cell; the kernel inherits the
environment of that moment, so the switch is set before every cell of a notebook and put back after it: the tests
that share this pytest process (``make test`` runs the suite and the notebooks in the same workers) never see it.

Why here, at the repository's root, and not in notebooks/: pytest imports every conftest.py outside a package as
the module ``conftest``, the last one loaded replacing the others, and the suite's modules import their helpers
with ``from conftest import ...`` (QuantumGravPy/tests/conftest.py). The root's is loaded first, before the
suite's, so it never takes that name from it; a notebooks/conftest.py, loaded after it, did.
"""

import os

import pytest

SMOKE_TEST_ENV = "QUANTUMGRAV_SMOKE_TEST"  # QuantumGrav.config.smoke_test.SMOKE_TEST_ENV, not imported: no torch here
_saved: list[str | None] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if not _is_notebook_cell(item):
        return
    _saved.append(os.environ.get(SMOKE_TEST_ENV))
    os.environ[SMOKE_TEST_ENV] = "1"


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if not _is_notebook_cell(item):
        return
    before = _saved.pop()
    if before is None:
        os.environ.pop(SMOKE_TEST_ENV, None)
    else:
        os.environ[SMOKE_TEST_ENV] = before


def _is_notebook_cell(item) -> bool:
    return item.path.suffix == ".ipynb"

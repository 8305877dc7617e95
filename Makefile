# The commands of the README: `make lab` (the notebooks in JupyterLab), `make train` (the main job) and `make test`
# (the suite). Each creates .venv first when needed (scripts/setup_venv.sh). Options for the run go in ARGS:
#   make train ARGS="--set training.num_epochs=3"
PY := .venv/bin/python
# Test files run in parallel, each file whole in one worker (a notebook's cells in order, a module's fixtures
# built once), longest first (tests/conftest.py: LONGEST_FIRST).
TEST_WORKERS ?= 2
export PATH := $(CURDIR)/.venv/bin:$(PATH)
# Bytecode caches on, whatever the environment says (container images often set PYTHONDONTWRITEBYTECODE=1): the
# suite starts about 250 interpreters, and without caches each compiled the package's sources again (0.35 CPU s
# a process; in __pycache__/, which git ignores). pytest caches its rewritten test modules the same way.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup lab train test test-fast docs
setup:
	@bash scripts/setup_venv.sh

# JupyterLab on the repository (its file browser, and the links of the notebooks to ../docs) with notebook 01 open; the kernel "Python 3 (ipykernel)" is .venv's Python, and each
# notebook runs in notebooks/. Options for JupyterLab go in LAB_ARGS, e.g. LAB_ARGS="--no-browser --port=8899".
# As root (a container, a cloud machine) JupyterLab refuses to start without --allow-root: it is added there.
lab: setup
	$(PY) -m jupyter lab --ServerApp.root_dir=. notebooks/01_causal_sets.ipynb $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

train: setup
	$(PY) -m QuantumGrav train --config configs/train.yaml $(ARGS)

test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder QuantumGravPy/tests notebooks --nbval --nbval-sanitize-with notebooks/sanitize.cfg -p no:cacheprovider

# The edit-test loop: every test but those marked full_suite (fresh process pools, SLURM, browser, notebooks,
# the docs' commands; tests/conftest.py), under 3 minutes on 2 cores. `make test` keeps every proof.
test-fast: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not full_suite" QuantumGravPy/tests -p no:cacheprovider

# The documentation site, offline, every warning an error (docs/site/conf.py), then its links checked.
docs: setup
	$(PY) -m sphinx -W --keep-going -q -b html -c docs/site . build/docs/html
	$(PY) docs/site/site_check.py build/docs/html
	@echo "the site: open build/docs/html/index.html in a browser"

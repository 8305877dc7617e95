# The two commands of the README: `make train` (the main job) and `make test` (the suite).
# Both create .venv first when needed (scripts/setup_venv.sh). Options for the run go in ARGS:
#   make train ARGS="--set training.num_epochs=3"
PY := .venv/bin/python
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup train test
setup:
	@bash scripts/setup_venv.sh

train: setup
	$(PY) -m QuantumGrav train --config configs/train.yaml $(ARGS)

test: setup
	$(PY) -m pytest QuantumGravPy/tests notebooks --nbval --nbval-sanitize-with notebooks/sanitize.cfg -p no:cacheprovider

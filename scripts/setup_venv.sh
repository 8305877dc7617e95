#!/usr/bin/env bash
# Create .venv with everything QuantumGrav needs, once (re-run when pyproject.toml changes).
#   TORCH_VERSION      torch to pin (default 2.13.0); GPU clusters may pick the build they need
#   TORCH_INDEX_URL    index to take torch from, e.g. https://download.pytorch.org/whl/cu126
#   PYTHON             the interpreter of the environment (default python3); after changing it, rm -r .venv
# On a machine without an NVIDIA GPU the CPU build of torch is taken, never the multi-GB CUDA stack.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
STAMP="$VENV/.setup-$(cat pyproject.toml scripts/setup_venv.sh | sha1sum | cut -c1-12)-$TORCH_VERSION"
[ -f "$STAMP" ] && exit 0

"${PYTHON:-python3}" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
# Some machines list package folders in pip's config that do not exist; pip warns about each one.
quiet_pip() { $PIP "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
torch_source=()
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  torch_source=(--index-url "$TORCH_INDEX_URL")
elif ! command -v nvidia-smi >/dev/null 2>&1; then
  # No GPU here: if the default index would bring CUDA packages, take the CPU build instead.
  # (The report is read whole first: `pip ... | grep -q` under pipefail would fail with SIGPIPE
  # exactly when grep finds a match early, and the CUDA stack would be installed.)
  report=$($PIP install --dry-run --quiet --report - "torch==$TORCH_VERSION" 2>/dev/null || true)
  if grep -q '"name": "nvidia-' <<<"$report"; then
    echo "setup: no NVIDIA GPU found; installing the CPU build of torch $TORCH_VERSION"
    torch_source=(--index-url https://download.pytorch.org/whl/cpu)
  fi
fi
echo "setup: installing torch==$TORCH_VERSION into $VENV"
quiet_pip install --quiet "torch==$TORCH_VERSION" "${torch_source[@]}"
echo "setup: installing QuantumGrav and its test, notebook and documentation tools"
# torch is installed already, so the package's wide torch range adds nothing.
quiet_pip install --quiet -e ".[test,notebooks,wandb,docs]"
rm -f "$VENV"/.setup-*
touch "$STAMP"
echo "setup: done ($($VENV/bin/python -c 'import torch, torch_geometric as g; print("torch", torch.__version__, "| torch_geometric", g.__version__)'))"

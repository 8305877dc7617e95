#!/usr/bin/env bash
# Re-execute the tutorial notebooks in place, so that their stored outputs match the library.
# Run it after changing the library (then check `make test` and commit the notebooks):
#   scripts/execute_notebooks.sh                                  # every notebooks/NN_*.ipynb
#   scripts/execute_notebooks.sh notebooks/04_train_ddp.ipynb     # just these
# Each notebook runs with its default parameters, with notebooks/ as working directory (as nbval
# and Jupyter do) and the "python3" kernel of .venv. Outputs are kept; execution timings are not
# recorded, so a re-run changes only what really changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ -x .venv/bin/python ] || bash scripts/setup_venv.sh
export PATH="$ROOT/.venv/bin:$PATH"   # the kernel named "python3" is then the venv's Python

if [ "$#" -gt 0 ]; then
  notebooks=("$@")
else
  notebooks=(notebooks/[0-9][0-9]_*.ipynb)
fi

for notebook in "${notebooks[@]}"; do
  [ -f "$notebook" ] || { echo "error: no notebook '$notebook'" >&2; exit 2; }
  echo "executing $notebook"
  start=$SECONDS
  # nbconvert runs the kernel in the notebook's own folder (notebooks/), like nbval.
  python -m jupyter nbconvert --to notebook --execute --inplace \
    --ExecutePreprocessor.kernel_name=python3 \
    --ExecutePreprocessor.timeout=600 \
    --ExecutePreprocessor.record_timing=False \
    --log-level=WARN \
    "$notebook"
  echo "  done in $((SECONDS - start)) s"
done

#!/usr/bin/env bash
# Re-execute the tutorial notebooks in place at full size, so that their stored outputs are real results that match
# the library. Run it after changing the library (then check `make test` and commit the notebooks):
#   scripts/execute_notebooks.sh                                  # every notebooks/NN_*.ipynb
#   scripts/execute_notebooks.sh notebooks/04_train_ddp.ipynb     # just these
# Each notebook runs with the full-size values of its parameters cell (QUANTUMGRAV_SMOKE_TEST is unset: never a
# test-mode run), with notebooks/ as working directory (as nbval and Jupyter do) and the "python3" kernel of .venv.
# The minutes each took are printed, stamped into the notebook's header line and recorded in
# notebooks/stored_runs.json (scripts/stamp_notebook_run.py); then the total. Outputs are kept; execution timings
# are not recorded, so a re-run changes only what really changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ -x .venv/bin/python ] || bash scripts/setup_venv.sh
export PATH="$ROOT/.venv/bin:$PATH"   # the kernel named "python3" is then the venv's Python
unset QUANTUMGRAV_SMOKE_TEST

if [ "$#" -gt 0 ]; then
  notebooks=("$@")
else
  notebooks=(notebooks/[0-9][0-9]_*.ipynb)
fi
for notebook in "${notebooks[@]}"; do   # every problem before the first long run
  [ -f "$notebook" ] || { echo "error: no notebook '$notebook'" >&2; exit 2; }
  grep -q 'print_run_header(' "$notebook" \
    || { echo "error: $notebook prints no header (QG.print_run_header after its parameters cell)" >&2; exit 2; }
done

total=0
for notebook in "${notebooks[@]}"; do
  echo "executing $notebook"
  start=$(date +%s.%N)
  # nbconvert runs the kernel in the notebook's own folder (notebooks/), like nbval.
  python -m jupyter nbconvert --to notebook --execute --inplace \
    --ExecutePreprocessor.kernel_name=python3 \
    --ExecutePreprocessor.timeout=1800 \
    --ExecutePreprocessor.record_timing=False \
    --log-level=WARN \
    "$notebook"
  seconds=$(python -c "print($(date +%s.%N) - $start)")
  total=$(python -c "print($total + $seconds)")
  python scripts/stamp_notebook_run.py "$notebook" "$seconds"
done
python -c "print(f'all {len(\"${notebooks[*]}\".split())} notebooks: {$total / 60:.1f} min')"

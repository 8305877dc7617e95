"""Stamp an executed notebook's header with the minutes its run took, and record them in notebooks/stored_runs.json.

Called by scripts/execute_notebooks.sh after each full-size run:
    python scripts/stamp_notebook_run.py NOTEBOOK SECONDS
The notebook's first output line, printed by QG.print_run_header ("this run: 2,000 causal sets of 64-128 elements,
40 epochs, 1 process"), becomes "stored outputs: ..., 5.9 min on 2 CPU cores": the minutes of the run that made
these outputs, measured around it by the script, never a number from an earlier run. A test-mode run (the line says
so) is refused: stored outputs are full-size. Exit code 2, and nothing written, on any problem.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat

RUN_PREFIX, STORED_PREFIX = "this run: ", "stored outputs: "
RECORD = Path(__file__).resolve().parents[1] / "notebooks" / "stored_runs.json"


def header_output(notebook: nbformat.NotebookNode):
    """The stdout output holding the header line: the first output of the notebook."""
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.outputs:
            first = cell.outputs[0]
            if first.output_type == "stream" and first.name == "stdout" and first.text.startswith(RUN_PREFIX):
                return first
            return None
    return None


def stamp(path: Path, seconds: float, cpu_cores: int, record: Path = RECORD) -> str:
    notebook = nbformat.read(path, as_version=4)
    output = header_output(notebook)
    if output is None:
        raise SystemExit(f"error: {path}: its first output is not the line of QG.print_run_header "
                         f"('{RUN_PREFIX}...'); call it in the cell after the parameters cell")
    line, _, rest = output.text.partition("\n")
    if "(test mode" in line:
        raise SystemExit(f"error: {path} ran in test mode; unset QUANTUMGRAV_SMOKE_TEST and run it again")
    minutes = round(seconds / 60, 1)
    run = line[len(RUN_PREFIX):]
    output.text = f"{STORED_PREFIX}{run}, {minutes} min on {cpu_cores} CPU cores\n{rest}"
    runs = json.loads(record.read_text()) if record.exists() else {}
    runs[path.name] = {"run": run, "minutes": minutes, "cpu_cores": cpu_cores}
    nbformat.write(notebook, path)
    record.write_text(json.dumps(dict(sorted(runs.items())), indent=1) + "\n")
    return output.text.partition("\n")[0]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python scripts/stamp_notebook_run.py NOTEBOOK SECONDS")
    try:
        print("  " + stamp(Path(sys.argv[1]), float(sys.argv[2]), len(os.sched_getaffinity(0))))
    except SystemExit as err:
        print(err, file=sys.stderr)
        sys.exit(2)

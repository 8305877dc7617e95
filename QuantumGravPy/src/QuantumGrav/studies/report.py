"""What a study leaves in its folder, read back from the storage: trials.csv, best.yaml, figures/, and the
one-screen summary the command prints.

Every worker writes them when it stops (atomically: a reader never sees half a file), so the last worker
to stop leaves the complete study; ``optuna-dashboard <storage>`` shows the same study live meanwhile.
"""

from __future__ import annotations

import csv
import io
import math
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from ..config.yaml_io import apply_overrides, dump_config
from ..config.schema import validate_config
from ..common.files import atomic_replace, atomic_write_text, shown_path
from .search_space import short_text
from .config import StudySettings
from .storage import HEARTBEAT_GRACE_S, retried_as

FIGURES = ("optimization_history", "param_importances", "slice")
STATES = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")


def write_study_outputs(study, settings: StudySettings, base: dict[str, Any]) -> dict[str, Any]:
    """Write trials.csv, best.yaml (when a trial completed) and figures/; return the study's summary."""
    trials = study.get_trials(deepcopy=False)
    rows = trial_rows(trials, settings)
    folder = settings.folder
    _write_csv(folder / "trials.csv", rows)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = study.best_trial if complete else None
    files: dict[str, Any] = {"trials_csv": str(folder / "trials.csv"), "best_yaml": None}
    if best is not None:
        files["best_yaml"] = str(write_best_yaml(folder / "best.yaml", best, settings, base))
    figures, skipped = draw_figures(study, len(complete), folder / "figures")
    files["figures"] = figures
    counts = {state: sum(row["state"] == state for row in rows) for state in STATES}
    return {"study": settings.study, "folder": str(folder), "storage": settings.storage,
            "metric": settings.metric, "direction": settings.direction, "trials": settings.trials,
            "counts": {state: n for state, n in counts.items() if n},
            "best": None if best is None else {"number": best.number, "value": best.value, "params": best.params,
                                               "run_dir": best.user_attrs.get("run_dir", "")},
            "files": files, "figures_skipped": skipped, "rows": rows}


def trial_rows(trials: list, settings: StudySettings) -> list[dict[str, Any]]:
    """One row per trial: number, state, value, each parameter, run directory, seconds, worker, why."""
    retries = retried_as(trials)
    names = [d.name for d in settings.space.dimensions]
    rows = []
    for t in sorted(trials, key=lambda t: t.number):
        reason = t.user_attrs.get("reason", "")
        if t.number in retries:
            reason = f"{reason}; retried as trial {retries[t.number]}"
            if "stopped without reporting" in reason:
                reason += f" (no heartbeat for {HEARTBEAT_GRACE_S} s)"
        rows.append({"number": t.number, "state": t.state.name,
                     "value": "" if t.value is None else t.value,
                     **{name: t.params.get(name, "") for name in names},
                     "run_dir": t.user_attrs.get("run_dir", ""), "seconds": t.user_attrs.get("seconds", ""),
                     "worker": t.user_attrs.get("worker", ""), "reason": reason if t.state != TrialState.RUNNING else ""})
    return rows


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    if not rows:
        atomic_write_text(path, "number,state,value,run_dir,seconds,worker,reason\n")
        return
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, text.getvalue())


def write_best_yaml(path: Path, best, settings: StudySettings, base: dict[str, Any]) -> Path:
    """The complete config of the best trial (the base config with its sampled values), runs where the base
    config's runs go: ``python -m QuantumGrav train --config best.yaml`` trains it again as it is."""
    config = validate_config(apply_overrides(base, settings.space.overrides(best.params)))
    config["training"].update(resume=None, run_name=None)
    header = (f"# The best trial of study '{settings.study}': trial {best.number}, {settings.metric} {best.value:.6g} "
              f"(run {best.user_attrs.get('run_dir', '?')}).\n"
              f"# Train it again: python -m QuantumGrav train --config {path}\n")
    atomic_write_text(path, header + dump_config(config))
    return path


def draw_figures(study, complete: int, folder: Path) -> tuple[list[str], dict[str, str]]:
    """Optuna's matplotlib figures as PNG: (files written, why others were not)."""
    import matplotlib.pyplot as plt  # Optuna draws with pyplot; each figure is closed once saved
    from optuna.visualization import matplotlib as figures

    needs = {"optimization_history": 1, "param_importances": 2, "slice": 1}
    written, skipped = [], {}
    for name in FIGURES:
        if complete < needs[name]:
            skipped[name] = f"needs {needs[name]} COMPLETE trial(s), the study has {complete}"
            continue
        try:
            with warnings.catch_warnings():  # experimental, and warns about axes of a single value
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                warnings.simplefilter("ignore", UserWarning)
                axes = getattr(figures, f"plot_{name}")(study)
        except (ValueError, RuntimeError, ZeroDivisionError) as err:  # e.g. importances of parameters that never varied
            skipped[name] = " ".join(str(err).split())[:200]
            continue
        figure = _with_readable_ticks(list(getattr(axes, "flat", [axes])))
        path = folder / f"{name}.png"
        atomic_replace(path, lambda tmp, figure=figure: figure.savefig(tmp, format="png", dpi=90, bbox_inches="tight"))
        plt.close(figure)
        written.append(str(path))
    return written, skipped


def _with_readable_ticks(axes: list) -> Any:
    """The figure of ``axes``, with room for the slice plot's categorical values: a coupled choice such as
    'hidden_channels=[64, 64, 64], batch_size=32' is one line per setting, each axis is wide enough for it,
    and no label runs into the next axis's name (Optuna gives each axis 3.2 inches, rotated labels ran over)."""
    figure = axes[0].figure
    if len(axes) > 1:
        figure.set_size_inches(3.6 * len(axes), figure.get_size_inches()[1])
        figure.set_layout_engine("constrained")  # spaces the axes by their labels, the colour bar included
    for ax in axes:
        labels = [label.get_text() for label in ax.get_xticklabels()]
        if any(", " in text for text in labels):
            ax.set_xticks(ax.get_xticks(), [_one_setting_per_line(text) for text in labels])
        ax.tick_params(axis="x", labelsize=7)
    return figure


def _one_setting_per_line(text: str) -> str:
    r"""'a=[1, 2], b=3' -> 'a=[1, 2],\nb=3': breaks at the commas outside brackets only."""
    depth, out = 0, []
    for i, char in enumerate(text):
        depth += char in "[({"
        depth -= char in "])}"
        out.append(",\n" if char == "," and depth == 0 and text[i + 1:i + 2] == " " else char)
    return "".join(out).replace("\n ", "\n")


def summarise_study(summary: dict[str, Any]) -> str:
    """The one-screen summary: best value and parameters, counts by state, where the files are."""
    counts = ", ".join(f"{state} {n}" for state, n in summary["counts"].items()) or "none"
    finished = summary["counts"].get("COMPLETE", 0) + summary["counts"].get("PRUNED", 0)
    lines = ["", f"=== QuantumGrav study '{summary['study']}' ===",
             f"trials          {finished} finished of {summary['trials']} ({counts}; all workers)",
             f"metric          {summary['metric']} ({summary['direction']})"]
    best = summary["best"]
    if best is None:
        lines.append("best            no trial completed (pruned or failed): no best.yaml")
    else:
        lines.append(f"best            trial {best['number']}: {summary['metric']} {best['value']:.4g}  "
                     f"({shown_path(best['run_dir'])})")
        width = max(len(name) for name in best["params"]) if best["params"] else 0
        lines += [f"  {name:<{width}}  {_value_text(value)}" for name, value in best["params"].items()]
        lines.append(f"retrain         python -m QuantumGrav train --config "
                     f"{shown_path(summary['files']['best_yaml'])}")
    figures = ", ".join(Path(f).stem for f in summary["files"]["figures"]) or "none"
    lines += [f"files           {shown_path(summary['folder'])}/: trials.csv{', best.yaml' if best else ''}, "
              f"figures/ ({figures})",
              f"live view       optuna-dashboard {shown_path(summary['storage'])}"]
    return "\n".join(lines)


def _value_text(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}"
    return short_text(value)

#!/usr/bin/env python3
"""Does tuning beat the strong baseline on the default task? A study, then its best configurations
re-trained on several data seeds against the strong baseline.

    python benchmarks/default_model/study_tune.py --trials 40 --epochs 20                        # the study (hours on 2 cores)
    python benchmarks/default_model/study_tune.py --trials 2 --epochs 1 --samples 120 --n-max 32 --retrain-epochs 2 --top 1

1. The study of ``configs/tune.yaml`` (``QG.tune``): its space is the convolution class (GraphConv, GINConv,
   GATv2Conv, SparseTransformerConv: PyG's TransformerConv with sparse products; the stored study ran PyG's),
   depth and width, message directions, pooling, learning rate and weight decay; ``--epochs`` per trial
   (the median pruner stops the unpromising ones), on ``--data-seed``'s sets.
   The study lives in ``--workdir``/studies: running the script again continues it (and only trains the
   trials it still lacks).
2. The ``--top`` best COMPLETE trials, and the default (``configs/train.yaml``), each re-trained for
   ``--retrain-epochs`` epochs on every data seed of ``--seeds`` (other sets than the study's, so the
   choice is not judged on the data it was made on), with the baselines fitted on the same split.

The table gives, per configuration, the test accuracy of the GNN and of the strong baseline (mean +- std
over the seeds), the gain (GNN - strong) and the seconds per run. A configuration *beats the strong
baseline* when its mean gain exceeds twice the seed-to-seed spread of the gain (its standard deviation
over the seeds). ``--out`` writes every number as JSON. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))  # study_results.py: the results file of every study
sys.path.insert(0, str(REPO / "QuantumGravPy" / "src"))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40, help="finished trials of the study (default: 40)")
    parser.add_argument("--epochs", type=int, default=20, help="epochs per trial (default: 20)")
    parser.add_argument("--nproc", type=int, default=1, help="processes per trial and per re-training (default: 1)")
    parser.add_argument("--study", default="study_tune", help="the study's name (default: study_tune)")
    parser.add_argument("--data-seed", type=int, default=1234, help="data seed of the study's sets (default: 1234)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3],
                        help="data seeds of the re-trainings (default: 1 2 3)")
    parser.add_argument("--top", type=int, default=3, help="best trials re-trained (default: 3)")
    parser.add_argument("--retrain-epochs", type=int, default=40,
                        help="epochs of each re-training (default: 40, as configs/train.yaml)")
    parser.add_argument("--samples", type=int, default=2000, help="causal sets per data set (default: 2000)")
    parser.add_argument("--n-min", type=int, default=64)
    parser.add_argument("--n-max", type=int, default=128)
    parser.add_argument("--workdir", default="benchmark_runs/study_tune", help="studies, runs (default: %(default)s)")
    parser.add_argument("--data-root", default="data", help="the data cache (default: data, as the configs)")
    parser.add_argument("--out", help="write the results as JSON to this file")
    return parser.parse_args(argv)


def data_overrides(args, seed: int) -> dict:
    return {"data.seed": seed, "data.num_samples": args.samples, "data.n_min": args.n_min, "data.n_max": args.n_max,
            "data.root": args.data_root, "training.progress_bar": False}


def run_study(args) -> tuple:
    """The study (continued if it exists); its settings, base config and finished trials."""
    import optuna

    import QuantumGrav as QG
    from QuantumGrav.studies.config import read_study_config
    from QuantumGrav.studies.storage import open_storage

    overrides = {**data_overrides(args, args.data_seed), "training.num_epochs": args.epochs,
                 "tune.study": args.study, "tune.path": f"{args.workdir}/studies", "tune.trials": args.trials}
    started = time.perf_counter()
    summary = QG.tune(str(REPO / "configs" / "tune.yaml"), nproc=args.nproc, overrides=overrides)
    print(f"study '{args.study}': {summary['counts']} after {time.perf_counter() - started:.0f} s in this call "
          f"({summary['folder']})", flush=True)
    settings, base = read_study_config(str(REPO / "configs" / "tune.yaml"), overrides)
    study = optuna.load_study(study_name=settings.study, storage=open_storage(settings.storage))
    return settings, base, study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def candidates(args, settings, base, complete: list) -> dict[str, tuple[str, dict]]:
    """name -> (description, config without its data seed): the default and the best trials."""
    import QuantumGrav as QG
    from QuantumGrav.studies.search_space import short_text

    found = {"default": ("configs/train.yaml", QG.load_config(str(REPO / "configs" / "train.yaml")))}
    ranked = sorted(complete, key=lambda t: t.value, reverse=settings.direction == "maximize")
    for trial in ranked[: args.top]:
        params = ", ".join(f"{k.rsplit('.', 1)[-1]}={short_text(v) if not isinstance(v, float) else f'{v:.3g}'}"
                           for k, v in trial.params.items())
        config = QG.validate_config(QG.apply_overrides(base, settings.space.overrides(trial.params)))
        found[f"trial {trial.number}"] = (f"{settings.metric} {trial.value:.4f}: {params}", config)
    return found


def retrain(args, config: dict, seed: int, name: str) -> dict:
    import QuantumGrav as QG

    overrides = {**data_overrides(args, seed), "training.num_epochs": args.retrain_epochs,
                 "training.path": f"{args.workdir}/retrain", "training.run_name": None, "training.resume": None,
                 "testing.baselines": True, "training.figures": False}
    started = time.perf_counter()
    result = QG.launch(QG.apply_overrides(config, overrides), nproc=args.nproc)
    test = result["test"]
    row = {"candidate": name, "seed": seed, "accuracy": test["test_accuracy"],
           "strong": test["strong_baseline_accuracy"], "simple": test["baseline_accuracy"],
           "epochs": len(result["history"]), "seconds": time.perf_counter() - started, "run_dir": result["run_dir"]}
    print(f"  {name:>10} seed {seed}: GNN {row['accuracy']:.3f}  strong {row['strong']:.3f}  "
          f"({row['epochs']} epochs, {row['seconds']:.0f} s)", flush=True)
    return row


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else float("nan")


def print_table(rows: list[dict], descriptions: dict[str, str], seeds: list[int]) -> None:
    print(f"\nre-trained on data seeds {seeds} (test accuracy, mean +- std over the seeds)\n")
    print("| configuration | GNN | strong baseline | gain (GNN - strong) | beats strong by > 2 spreads | s per run |")
    print("|---|---:|---:|---:|:---:|---:|")
    for name in descriptions:
        mine = [r for r in rows if r["candidate"] == name]
        gnn, strong = mean_std([r["accuracy"] for r in mine]), mean_std([r["strong"] for r in mine])
        gain = mean_std([r["accuracy"] - r["strong"] for r in mine])
        verdict = "yes" if gain[0] > 2 * gain[1] else "no"
        seconds = statistics.fmean(r["seconds"] for r in mine)
        print(f"| {name} | {gnn[0]:.3f} +- {gnn[1]:.3f} | {strong[0]:.3f} +- {strong[1]:.3f} | "
              f"{gain[0]:+.3f} +- {gain[1]:.3f} | {verdict} | {seconds:.0f} |")
    print()
    for name, description in descriptions.items():
        print(f"- {name}: {description}")


def main(argv=None) -> int:
    args = parse_args(argv)
    settings, base, complete = run_study(args)
    found = candidates(args, settings, base, complete)
    rows = [retrain(args, config, seed, name) for name, (_, config) in found.items() for seed in args.seeds]
    descriptions = {name: description for name, (description, _) in found.items()}
    print_table(rows, descriptions, args.seeds)
    if args.out:
        import study_results  # benchmarks/study_results.py: written whole or not at all

        study_results.write_json(args.out, {"arguments": vars(args), "candidates": descriptions, "runs": rows},
                                 indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

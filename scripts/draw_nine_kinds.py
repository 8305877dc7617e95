"""Draw one generated set of each of QuantumGrav.jl's nine kinds as its relation matrix (docs/figures/nine_kinds.png).

    .venv/bin/python scripts/draw_nine_kinds.py [--n 96] [--seed 4] [--out docs/figures/nine_kinds.png]

Elements are labelled by time, so every relation lies above the diagonal: a black cell (i, j) says that i
precedes j. A sprinkling fills the upper triangle with a light-cone pattern; defects show as its breaks.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from QuantumGrav.data.kinds.catalogue import GENERATORS, generate_kind

REPO = Path(__file__).resolve().parents[1]


def describe(sample) -> str:
    shown = {key: value for key, value in sample.params.items()
             if key in ("flip_fraction", "block_size", "n_vertical_cuts", "n_finite_cuts", "lattice", "layer_count",
                        "target_ordering_fraction")}
    words = ", ".join(f"{key} {value:.3g}" if isinstance(value, float) else f"{key} {value}" for key, value in shown.items())
    return f"{sample.kind} (N = {sample.n}{', manifold-like' if sample.manifold_like else ''})\n{words}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=96)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "figures" / "nine_kinds.png")
    args = parser.parse_args()
    figure = Figure(figsize=(10.5, 11.5))
    for axes, kind in zip(figure.subplots(3, 3).ravel(), GENERATORS):
        sample = generate_kind(kind, np.random.default_rng([args.seed, len(kind)]), n=args.n)
        axes.imshow(sample.relation, cmap="Greys", interpolation="nearest")
        if sample.node_labels is not None:  # merged: the inserted block's elements on the diagonal
            block = np.flatnonzero(sample.node_labels)
            axes.plot(block, block, "s", color="tab:red", markersize=2)
        axes.set_title(describe(sample), fontsize=8)
        axes.set_xticks([])
        axes.set_yticks([])
    figure.suptitle("QuantumGrav.jl's nine kinds, generated here: relation matrices, elements by time", fontsize=11)
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=80)
    print(args.out)


if __name__ == "__main__":
    main()

"""``random`` (not manifold-like): a random naturally labelled order tuned to a target ordering fraction (the
share of related pairs) by a Metropolis search over edge sets, each step flipping a number of random pairs
proportional to the distance from the goal and closing the edges transitively (QuantumGrav.jl's
csetgenerationbyconnectivity.jl, cset_factories.jl).

Upstream's flip table is tuned so that the first step lands near the goal at its grid points; in between, the
bilinear value can overshoot, and random flips then add edges more often than they remove them, so the search
rarely comes back down. At n = 2,048 goals of about 0.955 to 0.98 fail every try (about 0.7 s each) and the
set is refused after num_tries, as upstream's maker does (its factory then draws a new set)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .common import KindSample, SetRefused, random_pairs

# Upstream's flip parameter: rows are ordering-fraction goals, columns element counts, bilinear in between and
# clamped at the edges (csetgenerationbyconnectivity.jl, FlipParamDeterminer).
FLIP_GOALS = np.array([0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.91, 0.95, 0.99])
FLIP_SIZES = np.array([128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0])
FLIP_TABLE = np.array([
    [0.05, 0.04, 0.025, 0.015, 0.013, 0.012],
    [0.03, 0.035, 0.026, 0.016, 0.013, 0.007],
    [0.02, 0.03, 0.023, 0.012, 0.01, 0.005],
    [0.025, 0.02, 0.024, 0.015, 0.01, 0.006],
    [0.025, 0.025, 0.025, 0.02, 0.014, 0.008],
    [0.03, 0.035, 0.03, 0.025, 0.015, 0.008],
    [0.06, 0.04, 0.04, 0.027, 0.016, 0.009],
    [0.1, 0.07, 0.05, 0.032, 0.019, 0.01],
    [0.17, 0.1, 0.065, 0.042, 0.025, 0.014],
    [0.27, 0.18, 0.11, 0.07, 0.04, 0.025],
    [0.28, 0.19, 0.125, 0.075, 0.045, 0.027],
    [0.45, 0.32, 0.19, 0.11, 0.07, 0.047],
    [1.2, 0.7, 0.45, 0.3, 0.3, 0.2],
])


@dataclass(frozen=True)
class RandomOrderSettings:
    """The random order's draws and search; defaults are QuantumGrav.jl's (createdata_default.yaml: goal
    ~ U(0.1, 1.0), max_iter 30, num_tries 100, abs_tol 0.01; the Metropolis acceptance beta = 5e5)."""

    goal_range: tuple[float, float] = (0.1, 1.0)
    max_iter: int = 30
    num_tries: int = 100
    abs_tol: float = 0.01
    acceptance: float = 5e5


class OrderingFractionNotReached(SetRefused):
    """No try of the Metropolis search came within the tolerance of the goal (upstream throws too, and its
    factory then draws a new element count)."""


def flip_parameter(goal: float, n: int) -> float:
    """Upstream's flips per unit of distance from the goal: bilinear in its table, clamped to its range."""
    per_size = np.array([np.interp(goal, FLIP_GOALS, column) for column in FLIP_TABLE.T])
    return float(np.interp(float(n), FLIP_SIZES, per_size))


def closure_bits(edges: np.ndarray) -> np.ndarray:
    """The reflexive transitive closure of the strictly upper-triangular ``edges`` as packed bit rows
    ((n, ceil(n / 64)) little-endian uint64): from the last element back, each row is its own bit or'ed with
    the rows of its successors, which are final already. O(edges * n / 64) word operations."""
    n = edges.shape[0]
    words = (n + 63) // 64
    elements = np.arange(n)
    reach = np.zeros((n, words), dtype="<u8")
    reach[elements, elements // 64] = np.left_shift(np.uint64(1), (elements % 64).astype(np.uint64))
    sources, targets = np.nonzero(edges)
    starts = np.searchsorted(sources, np.arange(n + 1))
    for element in np.flatnonzero(np.diff(starts))[::-1]:
        reach[element] |= np.bitwise_or.reduce(reach[targets[starts[element]:starts[element + 1]]], axis=0)
    return reach


def unpack_relation(reach: np.ndarray) -> np.ndarray:
    """The strict relation (n, n) bool of packed reflexive bit rows."""
    n = reach.shape[0]
    relation = np.unpackbits(reach.view(np.uint8), axis=1, bitorder="little")[:, :n].astype(bool)
    np.fill_diagonal(relation, False)
    return relation


def search_ordering_fraction(n: int, goal: float, rng: np.random.Generator,
                             settings: RandomOrderSettings) -> tuple[np.ndarray, float, int] | None:
    """One try of upstream's Metropolis search from the empty order: the closed relation, its ordering fraction
    and the steps taken once within ``abs_tol`` of ``goal``, or None after max_iter - 1 steps. A step flips
    ceil(fp |c - goal| N) pairs of block C (a pair drawn twice flips once), closes the edges and keeps the flips
    if the distance did not grow, else with probability exp(-beta * growth)."""
    pairs = n * (n - 1) / 2
    flips_per_distance = flip_parameter(goal, n) * pairs
    edges = np.zeros((n, n), dtype=bool)
    fraction = 0.0
    for step in range(1, settings.max_iter):
        first, second = random_pairs(rng, n, math.ceil(flips_per_distance * abs(fraction - goal)))
        before = edges[first, second]
        edges[first, second] = ~before
        reach = closure_bits(edges)
        trial = (int(np.bitwise_count(reach).sum()) - n) / pairs
        if abs(trial - goal) < settings.abs_tol:
            return unpack_relation(reach), trial, step
        growth = abs(trial - goal) - abs(fraction - goal)
        if growth <= 0 or rng.random() < math.exp(-settings.acceptance * growth):
            fraction = trial
        else:
            edges[first, second] = before
    return None


def generate_random_order(n: int, rng: np.random.Generator,
                          settings: RandomOrderSettings = RandomOrderSettings()) -> KindSample:
    """A ``random`` set of ``n`` elements; its params are the target ordering fraction, the one reached, and
    the tries and steps the search took. Raises OrderingFractionNotReached after num_tries failed tries."""
    goal = float(rng.uniform(*settings.goal_range))
    for attempt in range(1, settings.num_tries + 1):
        found = search_ordering_fraction(n, goal, rng, settings)
        if found is not None:
            relation, reached, steps = found
            params = {"target_ordering_fraction": goal, "ordering_fraction": reached, "tries": attempt,
                      "steps": steps}
            return KindSample("random", relation, False, params)
    raise OrderingFractionNotReached(
        f"no random order of {n} elements reached ordering fraction {goal:.4f} within {settings.abs_tol} "
        f"in {settings.num_tries} tries")

"""``destroyed`` and ``destroyed_ambiguous`` (not manifold-like): a ``polynomial`` sprinkling whose order is
corrupted by random toggles of pairs and then closed again (QuantumGrav.jl's destroy_manifold_like_cset.jl and
its DestroyedCsetMaker).

The toggles: f = ceil(phi n(n-1)/2) pairs, each drawn as QuantumGrav.jl draws them (first i, then j > i, so late
pairs are favoured), each toggling the pair's relation; a pair drawn twice is toggled back (parity). The
transitive closure then restores most removed relations (those that are not links) and completes every added one,
so the damage is mostly added relations.

``destroyed``: phi ~ Uniform(0, 1), QuantumGrav.jl's default; most sets end near a total order.
``destroyed_ambiguous``: QuantumGrav.jl builds it with the same maker from a config section that was never
published. Here it is the hard end of the defect: phi log-uniform on [1e-4, 1e-2], so a set of 64-128 elements
gets 1-82 toggles and stays close to its manifold-like sprinkling (log-uniform, because the difficulty changes
with the order of magnitude of phi, not with phi). Both ends are settings (``DestroyedSettings``). Its toggles are
drawn again while the closed result is the sprinkling itself (``require_change``): with one or two toggles that
remove relations the closure restores, one set in ten was a sprinkling labelled not manifold-like, an error no
method can avoid (measured on 1,000 sets of seed 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..orders import transitive_closure
from .common import (DECAY_RANGE, ORDER_RANGE, KindSample, conformal_coefficients, minkowski_relation, random_pairs,
                     sprinkle)


@dataclass(frozen=True)
class DestroyedSettings:
    """The draws of a destroyed set. Defaults are QuantumGrav.jl's (createdata_default.yaml, `destroyed`: the
    `polynomial` anchor's order and decay, flip_distribution Uniform(0, 1))."""

    flip_fraction_range: tuple[float, float] = (0.0, 1.0)
    flip_fraction_log_uniform: bool = False
    # Toggles drawn again (the same phi) while the closed result is the sprinkling itself: a toggle that removes a
    # relation which is not a link is restored by the closure, and a set that is its sprinkling is no destroyed set.
    require_change: bool = False
    order_range: tuple[int, int] = ORDER_RANGE
    decay_range: tuple[float, float] = DECAY_RANGE


# The hard end of the defect (upstream's `destroyed_ambiguous` parameters are unpublished): see the docstring.
DESTROYED_AMBIGUOUS = DestroyedSettings(flip_fraction_range=(1e-4, 1e-2), flip_fraction_log_uniform=True,
                                        require_change=True)


def draw_flip_fraction(rng: np.random.Generator, settings: DestroyedSettings) -> float:
    """phi, uniform or log-uniform on the settings' range."""
    low, high = settings.flip_fraction_range
    if settings.flip_fraction_log_uniform:
        return float(np.exp(rng.uniform(np.log(low), np.log(high))))
    return float(rng.uniform(low, high))


def flip_count(n: int, flip_fraction: float) -> int:
    """f = ceil(phi n(n-1)/2), as QuantumGrav.jl counts it; at least one (upstream throws on zero, which has
    probability zero under its Uniform(0, 1) draw), at most every pair."""
    pairs = n * (n - 1) // 2
    return int(min(max(np.ceil(flip_fraction * pairs), 1), pairs))


def toggled_pairs(rng: np.random.Generator, n: int, flips: int) -> np.ndarray:
    """(n, n) bool, strictly upper triangular: the pairs toggled an odd number of times by ``flips`` draws. The
    sequential toggles of QuantumGrav.jl reduce to the parity of each pair's count."""
    first, second = random_pairs(rng, n, flips)
    counts = np.bincount(first * n + second, minlength=n * n)
    return (counts % 2 == 1).reshape(n, n)


def destroy(relation: np.ndarray, toggled: np.ndarray) -> np.ndarray:
    """The transitive closure of ``relation`` with the ``toggled`` pairs flipped."""
    return transitive_closure(relation ^ toggled)


def generate_destroyed(n: int, rng: np.random.Generator, settings: DestroyedSettings = DestroyedSettings(),
                       kind: str = "destroyed") -> KindSample:
    """A destroyed set of ``n`` elements. Its params: the conformal factor's order and decay, the drawn flip
    fraction phi and count f, the fraction of pairs actually toggled (odd counts) and of pairs the closed result
    relates that the sprinkling did not, and the realised defect as counts (``realised_changes``)."""
    coefficients, order, decay = conformal_coefficients(rng, order_range=settings.order_range,
                                                        decay_range=settings.decay_range)
    sprinkled = minkowski_relation(sprinkle(rng, n, coefficients))
    flip_fraction = draw_flip_fraction(rng, settings)
    flips = flip_count(n, flip_fraction)
    toggled = toggled_pairs(rng, n, flips)
    relation = destroy(sprinkled, toggled)
    draws = 1
    while settings.require_change and np.array_equal(relation, sprinkled):
        toggled, draws = toggled_pairs(rng, n, flips), draws + 1
        relation = destroy(sprinkled, toggled)
    pairs = n * (n - 1) / 2
    params = {"conformal_order": order, "conformal_decay": decay, "flip_fraction": flip_fraction, "flips": flips,
              "toggled_fraction": float(toggled.sum() / pairs),
              "added_fraction": float((relation & ~sprinkled).sum() / pairs),
              "changed_fraction": float((relation ^ sprinkled).sum() / pairs), "toggle_draws": draws,
              **realised_changes(relation, sprinkled)}
    return KindSample(kind, relation, False, params)


def realised_changes(relation: np.ndarray, sprinkled: np.ndarray) -> dict[str, int]:
    """The realised defect as counts of pairs (what a detector has to see, whatever was drawn): the relations the
    closed result has and its sprinkling lacks (added), those it lacks (removed), and their sum (changed)."""
    added, removed = int((relation & ~sprinkled).sum()), int((sprinkled & ~relation).sum())
    return {"changed_relations": added + removed, "added_relations": added, "removed_relations": removed}


def generate_destroyed_ambiguous(n: int, rng: np.random.Generator,
                                 settings: DestroyedSettings = DESTROYED_AMBIGUOUS) -> KindSample:
    """A ``destroyed_ambiguous`` set: a destroyed set at the hard end of the defect (few toggles)."""
    return generate_destroyed(n, rng, settings, kind="destroyed_ambiguous")

"""``destroyed`` and ``destroyed_ambiguous`` (not manifold-like): a ``polynomial`` sprinkling (in d = 2, 3 or 4)
whose order is corrupted by random toggles of pairs and then closed again (QuantumGrav.jl's
destroy_manifold_like_cset.jl and its DestroyedCsetMaker); or, with ``changes``, toggled until exactly that many
relations differ from the sprinkling (``destroy_exactly``).

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

``destroy`` (flip the toggled pairs, close) is the library's one destroyer: the built-in generator's ``destroyed``
class (``kinds.minkowski``) draws its toggles otherwise, each pair i < j with a probability (``destroy_order``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..orders import as_batch, transitive_closure
from ..sprinkling import ConformalBox, check_dimension, light_cone_relation, sprinkle
from .common import DECAY_RANGE, ORDER_RANGE, KindSample, SetRefused, conformal_coefficients, random_pairs


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


# An exact count of changes (``destroy_exactly``): pairs are drawn in batches of this many, and a set that has not
# reached its count after this many draws per change asked is refused (drawn again).
PAIR_DRAW_BATCH = 256
MAX_PAIR_DRAWS_PER_CHANGE = 2000

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
    """The transitive closure of ``relation`` with the ``toggled`` pairs flipped: the library's one destroyer, for one
    set or a batch (B, n, n), whichever way the toggles were drawn (QuantumGrav.jl's pair draws here, each pair
    flipped with a probability in the built-in generator's ``destroy_order``)."""
    return transitive_closure(relation ^ toggled)


def destroy_order(R: np.ndarray, fraction: float | np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Flip each pair i < j of the natural labelling with probability ``fraction``, then close (``destroy``): the
    built-in generator's ``destroyed`` sets (``kinds.minkowski``). For a batch, ``fraction`` may also hold one
    probability per set.

    Flipping only pairs with i < j keeps the relation acyclic (strictly upper triangular), so the closure is again a
    partial order; a few random relations already destroy the local light-cone structure of a sprinkling.
    """
    probability = np.asarray(fraction, dtype=float)
    if probability.ndim > 1 or np.any((probability < 0) | (probability > 1) | np.isnan(probability)):
        raise ValueError(f"fraction: expected a number in [0, 1] or one per set, got {fraction!r}")
    batch, single = as_batch(R)
    n = batch.shape[-1]
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    closed = destroy(batch.astype(bool), upper & (rng.random(batch.shape) < probability.reshape(-1, 1, 1)))
    return closed[0] if single else closed


def generate_destroyed(n: int, rng: np.random.Generator, settings: DestroyedSettings = DestroyedSettings(),
                       kind: str = "destroyed", dimension: int = 2, changes: int | None = None) -> KindSample:
    """A destroyed set of ``n`` elements sprinkled in ``dimension`` dimensions: its toggles drawn by a flip
    fraction, or, with ``changes``, toggled until the closed order differs from its sprinkling in exactly that
    many relations (``destroy_exactly``). Its params: the conformal factor's order and decay, the dimension, how
    the toggles were drawn (flip fraction phi and count f and the fraction of pairs toggled; or the toggles kept
    and the pairs drawn), the fraction of pairs the closed result relates that the sprinkling did not, and the
    realised defect as counts (``realised_changes``). Its ``relation_labels`` are the changed pairs themselves
    (``relation ^ sprinkled``: added and removed relations, after the closure), so that a task can ask which."""
    check_dimension(dimension)
    coefficients, order, decay = conformal_coefficients(rng, order_range=settings.order_range,
                                                        decay_range=settings.decay_range, dimension=dimension)
    sprinkled = light_cone_relation(sprinkle(rng, n, ConformalBox(coefficients)))
    params = {"conformal_order": order, "conformal_decay": decay, "dimension": dimension}
    if changes is None:
        relation, drawn = destroy_by_fraction(rng, sprinkled, settings)
    else:
        relation, drawn = destroy_exactly(rng, sprinkled, changes)
    pairs = n * (n - 1) / 2
    params.update(drawn, added_fraction=float((relation & ~sprinkled).sum() / pairs),
                  changed_fraction=float((relation ^ sprinkled).sum() / pairs), **realised_changes(relation, sprinkled))
    return KindSample(kind, relation, False, params, relation_labels=relation ^ sprinkled)


def destroy_by_fraction(rng: np.random.Generator, sprinkled: np.ndarray,
                        settings: DestroyedSettings) -> tuple[np.ndarray, dict]:
    """QuantumGrav.jl's destruction: f = ceil(phi n(n-1)/2) toggles at once, then the closure (drawn again while
    the result is the sprinkling itself, where the settings ask for a change)."""
    n = len(sprinkled)
    flip_fraction = draw_flip_fraction(rng, settings)
    flips = flip_count(n, flip_fraction)
    toggled = toggled_pairs(rng, n, flips)
    relation = destroy(sprinkled, toggled)
    draws = 1
    while settings.require_change and np.array_equal(relation, sprinkled):
        toggled, draws = toggled_pairs(rng, n, flips), draws + 1
        relation = destroy(sprinkled, toggled)
    return relation, {"flip_fraction": flip_fraction, "flips": flips,
                      "toggled_fraction": float(toggled.sum() / (n * (n - 1) / 2)), "toggle_draws": draws}


def destroy_exactly(rng: np.random.Generator, sprinkled: np.ndarray, changes: int) -> tuple[np.ndarray, dict]:
    """The sprinkled order toggled until its closure differs from the sprinkling in exactly ``changes`` relations.

    Pairs are drawn as QuantumGrav.jl draws them (building block C), one at a time, and each toggle is applied to
    the current closed order and closed again: toggling on an unrelated pair i, j relates everything up to i to
    everything from j on; toggling off a link removes that one relation; toggling off a relation that is not a
    link changes nothing (the closure restores it). A toggle that would take the count of changed relations past
    ``changes`` is not kept. Since turning a pair on relates at least the pasts and futures of both ends, few
    changes are mostly removed links, more changes mix in added relations (``added_relations``). Refused
    (``SetRefused``) when ``MAX_PAIR_DRAWS_PER_CHANGE`` draws per change do not reach the count."""
    n, relation = len(sprinkled), sprinkled.copy()
    if not 1 <= changes <= n * (n - 1) // 2:
        raise ValueError(f"changes: expected 1 to {n * (n - 1) // 2} (the pairs of {n} elements), got {changes}")
    changed = kept = draws = 0
    while changed < changes:
        if draws >= MAX_PAIR_DRAWS_PER_CHANGE * changes:
            raise SetRefused(f"{draws} pair draws changed {changed} of the {changes} relations asked for")
        firsts, seconds = random_pairs(rng, n, PAIR_DRAW_BATCH)
        for first, second in zip(firsts.tolist(), seconds.tolist()):
            draws += 1
            step = toggle_within(relation, sprinkled, first, second, changed, changes - changed)
            changed, kept = changed + step, kept + (step != 0)
            if changed == changes:
                break
    return relation, {"toggles": kept, "pair_draws": draws}


def toggle_within(relation: np.ndarray, sprinkled: np.ndarray, first: int, second: int, changed: int,
                  room: int) -> int:
    """Toggle pair (first, second) of the closed ``relation`` in place and close it again, if that raises the
    count of relations that differ from ``sprinkled`` (now ``changed``) by at most ``room``; returns the count's
    change (0: nothing done). Only the pairs the toggle touches are read."""
    if relation[first, second]:
        if (relation[first] & relation[:, second]).any():
            return 0  # not a link: the closure restores it
        relation[first, second] = False
        return 1 if sprinkled[first, second] else -1
    past, future = relation[:, first].copy(), relation[second].copy()
    past[first] = future[second] = True
    # a cheap bound first: the new relations of row `first` and column `second` alone, less twice those that may
    # restore removed sprinkled ones (a restored relation lowers the count by one), at most the `changed` so far
    at_least = int((future & ~relation[first]).sum() + (past & ~relation[:, second]).sum()) - 1
    if at_least - 2 * changed > room:
        return 0
    block = np.ix_(past, future)
    new = ~relation[block]
    step = int(new.sum()) - 2 * int((new & sprinkled[block]).sum())
    if step > room:
        return 0
    relation[block] = True
    return step


def realised_changes(relation: np.ndarray, sprinkled: np.ndarray) -> dict[str, int]:
    """The realised defect as counts of pairs (what a detector has to see, whatever was drawn): the relations the
    closed result has and its sprinkling lacks (added), those it lacks (removed), and their sum (changed)."""
    added, removed = int((relation & ~sprinkled).sum()), int((sprinkled & ~relation).sum())
    return {"changed_relations": added + removed, "added_relations": added, "removed_relations": removed}


def generate_destroyed_ambiguous(n: int, rng: np.random.Generator, settings: DestroyedSettings = DESTROYED_AMBIGUOUS,
                                 dimension: int = 2, changes: int | None = None) -> KindSample:
    """A ``destroyed_ambiguous`` set: a destroyed set at the hard end of the defect (few toggles)."""
    return generate_destroyed(n, rng, settings, kind="destroyed_ambiguous", dimension=dimension, changes=changes)

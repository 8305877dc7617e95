"""``complex_topology`` (manifold-like): the sprinkling of a random, truncated conformal factor, cut by slits that
causal curves cannot cross (QuantumGrav.jl's branchedcsetgeneration.jl, main 69d44eb). Vertical (timelike) cuts
run from a branch point up through the future boundary (trouser-like topology); finite cuts are straight segments.
Sprinkled points closer than ``tolerance`` to a cut are removed, so a set has n' <= n elements.

The cuts are drawn as upstream draws them: branch points uniform in the box; finite segments with both ends
uniform, rejected when colinear-overlapping with an existing cut or when any cut would then cross more than one
other (upstream's tolerant ``segments_intersect``, vertical cuts reaching t = 1).

The relation: x precedes y iff some causal curve (|ds/dt| <= 1) runs from x to y without crossing a cut. Upstream
(``in_past_of_cut``) approximates this per pair by walking null rays around the cuts; its golden cases are exactly
this relation's. Here it is computed exactly and vectorised: a curve that avoids the cuts can be pulled taut onto a
polyline that bends only at cut endpoints, so x precedes y iff the straight segment x -> y is causal and crosses
no cut, or x reaches a cut endpoint v through such segments (between endpoints) and v reaches y by one.

Transitivity, decided: no closure is applied, because none is needed. The relation is the existence of a causal
curve avoiding the cuts, and two such curves joined at a kept point (never on a cut) are one, so the relation is
transitive by construction (the tests check it). Upstream applies no closure to its ray walk either, which can
therefore be intransitive (spec §13.4); the exact relation is the one that walk approximates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..sprinkling import light_cone_relation
from .common import KindSample
from .polynomial import polynomial_points

# Far above the box [-1, 1]^2: a vertical cut is a ray to the future boundary, so its top is never walked around.
VERTICAL_CUT_TOP = 3.0


@dataclass(frozen=True)
class ComplexTopologySettings:
    """QuantumGrav.jl's defaults (createdata_default.yaml:49-57): n_v, n_f = round(U(1, 5)) each, tol = 0.01."""

    vertical_cut_range: tuple[float, float] = (1.0, 5.0)
    finite_cut_range: tuple[float, float] = (1.0, 5.0)
    tolerance: float = 0.01


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The 2D cross product a_t b_s - a_s b_t over the last axis."""
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def segments_intersect(first: np.ndarray, second: np.ndarray, tolerance: float) -> bool:
    """Upstream's tolerant segment test (segments_intersect): disjoint bounding boxes never meet; nearly parallel
    segments (|det| < tol) meet iff their t- and s-ranges overlap within tol; others iff both line parameters
    lie in [-tol, 1 + tol]."""
    low1, high1 = first.min(axis=0), first.max(axis=0)
    low2, high2 = second.min(axis=0), second.max(axis=0)
    if (low1 > high2).any() or (low2 > high1).any():
        return False
    direction1, direction2 = first[1] - first[0], second[1] - second[0]
    det = direction1[0] * direction2[1] - direction2[0] * direction1[1]
    if abs(det) < tolerance:
        return bool((np.maximum(low1, low2) <= np.minimum(high1, high2) + tolerance).all())
    offset = first[0] - second[0]
    alpha = (direction2[0] * offset[1] - direction2[1] * offset[0]) / det
    beta = (direction1[0] * offset[1] - direction1[1] * offset[0]) / det
    return -tolerance <= alpha <= 1 + tolerance and -tolerance <= beta <= 1 + tolerance


def colinear_overlapping(first: np.ndarray, second: np.ndarray, tolerance: float) -> bool:
    """Upstream's are_colinear_overlapping: both coordinate ranges overlap within tol, and the directions and the
    offset between the starts are linearly dependent (|2x2 minor| <= tol)."""
    low1, high1 = first.min(axis=0), first.max(axis=0)
    low2, high2 = second.min(axis=0), second.max(axis=0)
    if (np.maximum(low1, low2) > np.minimum(high1, high2) + tolerance).any():
        return False
    direction1, direction2, offset = first[1] - first[0], second[1] - second[0], second[0] - first[0]
    return abs(_cross(direction1, direction2)) <= tolerance and abs(_cross(direction1, offset)) <= tolerance


def _accepts(candidate: np.ndarray, cuts: list[np.ndarray], crossings: list[int], tolerance: float) -> bool:
    """Whether a finite cut may join ``cuts`` (``crossings`` counts each cut's intersections, updated in place
    when it may): no colinear overlap, and no cut then crossing more than one other."""
    if any(colinear_overlapping(candidate, cut, tolerance) for cut in cuts):
        return False
    hits = [i for i, cut in enumerate(cuts) if segments_intersect(candidate, cut, tolerance)]
    if len(hits) > 1 or any(crossings[i] > 0 for i in hits):
        return False
    for i in hits:
        crossings[i] += 1
    crossings.append(len(hits))
    return True


def draw_cuts(rng: np.random.Generator, n_vertical: int, n_finite: int,
              tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """Branch points (n_vertical, 2) and finite cuts (n_finite, 2, 2) as upstream draws them
    (generate_random_branch_points): each segment ordered by t, rejected until it fits, then both lists sorted
    by the t of their (first) point."""
    branch_points = rng.uniform(-1.0, 1.0, size=(n_vertical, 2))
    cuts = [np.array([point, [1.0, point[1]]]) for point in branch_points]
    crossings = [0] * n_vertical
    while len(cuts) < n_vertical + n_finite:
        ends = rng.uniform(-1.0, 1.0, size=(2, 2))
        candidate = ends[np.argsort(ends[:, 0], kind="stable")]
        if _accepts(candidate, cuts, crossings, tolerance):
            cuts.append(candidate)
    finite = np.array(cuts[n_vertical:]).reshape(n_finite, 2, 2)
    return (branch_points[np.argsort(branch_points[:, 0], kind="stable")],
            finite[np.argsort(finite[:, 0, 0], kind="stable")])


def _distance_to_segments(points: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """Euclidean distance (n, k) of each point to each closed segment (k, 2, 2)."""
    start, direction = segments[:, 0], segments[:, 1] - segments[:, 0]
    length2 = np.maximum((direction ** 2).sum(axis=1), 1e-300)
    offset = points[:, None, :] - start[None, :, :]
    along = np.clip((offset * direction[None]).sum(axis=2) / length2, 0.0, 1.0)
    return np.linalg.norm(offset - along[..., None] * direction[None], axis=2)


def near_cuts(points: np.ndarray, branch_points: np.ndarray, finite_cuts: np.ndarray,
              tolerance: float) -> np.ndarray:
    """Points closer than tol to a finite cut, or to a vertical cut up to the latest sprinkled time (upstream's
    filter_sprinkling_near_cuts)."""
    t_max = points[:, 0].max() if len(points) else 1.0
    vertical = np.stack([branch_points, np.column_stack([np.full(len(branch_points), t_max), branch_points[:, 1]])],
                        axis=1)
    segments = np.concatenate([finite_cuts.reshape(-1, 2, 2), vertical.reshape(-1, 2, 2)])
    if not len(segments):
        return np.zeros(len(points), dtype=bool)
    return (_distance_to_segments(points, segments) < tolerance).any(axis=1)


def cut_segments(branch_points: np.ndarray, finite_cuts: np.ndarray) -> np.ndarray:
    """Every cut as a segment (k, 2, 2), the vertical ones reaching far beyond the box."""
    tops = np.column_stack([np.full(len(branch_points), VERTICAL_CUT_TOP), branch_points[:, 1]])
    return np.concatenate([finite_cuts.reshape(-1, 2, 2), np.stack([branch_points, tops], axis=1).reshape(-1, 2, 2)])


def _unobstructed(starts: np.ndarray, ends: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """(A, B) bool: the segment starts[a] -> ends[b] properly crosses no cut. Touching a cut (at a segment's own
    end, or running along it from its endpoint) is no crossing: the curve passes beside it."""
    p, q = cuts[:, 0], cuts[:, 1]
    side_start = np.sign(_cross((q - p)[None], starts[:, None] - p[None]))  # (A, k)
    side_end = np.sign(_cross((q - p)[None], ends[:, None] - p[None]))  # (B, k)
    straddles = side_start[:, None, :] * side_end[None, :, :] < 0
    direction = ends[None, :, None] - starts[:, None, None]  # (A, B, 1, 2)
    side_p = np.sign(_cross(direction, p[None, None] - starts[:, None, None]))
    side_q = np.sign(_cross(direction, q[None, None] - starts[:, None, None]))
    return ~(straddles & (side_p * side_q < 0)).any(axis=2)


def _causal(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """(A, B) bool: ends[b] lies in the flat causal future of starts[a]."""
    dt = ends[None, :, 0] - starts[:, None, 0]
    return dt >= np.abs(ends[None, :, 1] - starts[:, None, 1])


def _direct_relation(points: np.ndarray, cuts: np.ndarray, minkowski: np.ndarray) -> np.ndarray:
    """Minkowski-related pairs whose straight segment crosses no cut, by sign tests on the pairs whose ends lie on
    either side of a cut's line: the cross product of (y - x) with (p - x) is C(x, y) + C(y, p) - C(x, p), with C
    the 2D cross product."""
    first, second = np.nonzero(minkowski)
    t, s = points[:, 0], points[:, 1]
    pair_cross = t[first] * s[second] - s[first] * t[second]
    open_pairs = np.ones(len(first), dtype=bool)
    for p, q in cuts:
        side = np.sign(_cross((q - p)[None], points - p[None])).astype(np.int8)
        straddling = np.flatnonzero(side[first] != side[second])
        x, y = first[straddling], second[straddling]
        to_p, to_q, crossed = _cross(points, p[None]), _cross(points, q[None]), pair_cross[straddling]
        side_p = np.sign(crossed + to_p[y] - to_p[x])
        side_q = np.sign(crossed + to_q[y] - to_q[x])
        open_pairs[straddling[(side[x] * side[y] < 0) & (side_p * side_q < 0)]] = False
    relation = np.zeros((len(points), len(points)), dtype=bool)
    relation[first[open_pairs], second[open_pairs]] = True
    return relation


def cut_relation(points: np.ndarray, branch_points: np.ndarray, finite_cuts: np.ndarray,
                 minkowski: np.ndarray | None = None) -> np.ndarray:
    """(n, n) bool: x_i precedes x_j iff a causal curve joins them without crossing a cut, for time-sorted
    ``points`` (none on a cut): straight, or bent at cut endpoints that the curve reaches in causal order.
    ``minkowski``: the points' flat relation, when the caller already has it."""
    cuts = cut_segments(np.asarray(branch_points, float).reshape(-1, 2), np.asarray(finite_cuts, float))
    relation = _direct_relation(points, cuts, light_cone_relation(points) if minkowski is None else minkowski)
    corners = np.concatenate([cuts[:len(finite_cuts)].reshape(-1, 2), np.asarray(branch_points, float).reshape(-1, 2)])
    if not len(corners):
        return relation
    between_corners = _causal(corners, corners) & _unobstructed(corners, corners, cuts)
    reachable = between_corners | np.eye(len(corners), dtype=bool)
    for _ in range(int(np.ceil(np.log2(len(corners)))) + 1):
        reachable = reachable | (reachable.astype(np.float32) @ reachable.astype(np.float32) > 0)
    into = (_causal(points, corners) & _unobstructed(points, corners, cuts)).astype(np.float32)
    out_of = (_causal(corners, points) & _unobstructed(corners, points, cuts)).astype(np.float32)
    bent = ((into @ reachable.astype(np.float32)) > 0).astype(np.float32) @ out_of > 0
    return np.triu(relation | bent, k=1)


def draw_cut_count(rng: np.random.Generator, bounds: tuple[float, float]) -> int:
    """round(U(a, b)), half to even as Julia rounds: for U(1, 5), 1..5 with weights 1/8, 1/4, 1/4, 1/4, 1/8."""
    return int(np.round(rng.uniform(*bounds)))


def generate_complex_topology(n: int, rng: np.random.Generator,
                              settings: ComplexTopologySettings = ComplexTopologySettings()) -> KindSample:
    """A ``complex_topology`` set: n points sprinkled with a truncated conformal factor, the cuts drawn, the
    points near a cut removed (n' <= n elements), related by causal curves that avoid the cuts. Its params: the
    numbers of cuts, the conformal order and decay, the points removed and the fraction of the kept points'
    Minkowski relations that the cuts remove."""
    n_vertical = draw_cut_count(rng, settings.vertical_cut_range)
    n_finite = draw_cut_count(rng, settings.finite_cut_range)
    points, params = polynomial_points(rng, n, truncated=True)
    branch_points, finite_cuts = draw_cuts(rng, n_vertical, n_finite, settings.tolerance)
    kept = points[~near_cuts(points, branch_points, finite_cuts, settings.tolerance)]
    minkowski = light_cone_relation(kept)
    relation = cut_relation(kept, branch_points, finite_cuts, minkowski)
    minkowski_count = int(minkowski.sum())
    params.update(n_vertical_cuts=n_vertical, n_finite_cuts=n_finite, n_sprinkled=n,
                  n_removed=n - len(kept),
                  cut_relation_fraction=1.0 - int(relation.sum()) / max(minkowski_count, 1))
    return KindSample("complex_topology", relation, True, params)

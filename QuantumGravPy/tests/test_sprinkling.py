"""One sprinkler, one destroyer, one catalogue (issue 62, part 3).

The built-in generator's classes (minkowski_{d}d, destroyed, layered) are generators beside QuantumGrav.jl's nine
kinds in one catalogue; every sprinkled set of either is made by ``sprinkling.sprinkle`` and ordered by
``sprinkling.light_cone_relation``, and every destroyed set by ``kinds.destroyed.destroy``. The sets of a seed did not
change (test_causal_sets.py's and test_kinds_catalogue.py's fingerprints, taken before)."""

import ast
import itertools
import re
from pathlib import Path

import numpy as np
import pytest

import QuantumGrav
from QuantumGrav.config.sections.data import CSET_TYPES, MANIFOLD_CLASSES
from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data.kinds import catalogue, destroyed
from QuantumGrav.data.kinds.common import conformal_coefficients
from QuantumGrav.data.sprinkling import CausalDiamond, ConformalBox, light_cone_relation, sprinkle

PACKAGE = Path(QuantumGrav.__file__).resolve().parent


def functions_of_the_library():
    """(module path, function node, names it calls) of every function defined in the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                called = {call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
                          for call in ast.walk(node) if isinstance(call, ast.Call)}
                yield path.relative_to(PACKAGE).as_posix(), node, called


def test_the_library_has_one_sprinkler_and_one_destroyer():
    """Only ``sprinkling.sprinkle`` draws a region's points, every other function named as a sprinkler (``sprinkle``,
    ``sprinkle_*``) calls it, and the one function named as a destroyer that closes flipped pairs is
    ``destroyed.destroy``."""
    drawing = [f"{module}:{node.name}" for module, node, called in functions_of_the_library() if "draw" in called]
    assert drawing == ["data/sprinkling.py:sprinkle"]  # the regions' draw is called there alone
    sprinklers = {f"{module}:{node.name}": "sprinkle" in called for module, node, called in functions_of_the_library()
                  if re.match(r"sprinkle($|_)", node.name) and f"{module}:{node.name}" != "data/sprinkling.py:sprinkle"}
    assert sprinklers and all(sprinklers.values()), f"named as sprinklers but not calling sprinkle: {sprinklers}"
    destroyers = [f"{module}:{node.name}" for module, node, called in functions_of_the_library()
                  if "destroy" in node.name and "transitive_closure" in called]
    assert destroyers == ["data/kinds/destroyed.py:destroy"], destroyers


def count_draws(monkeypatch) -> dict[str, int]:
    """Counts the draws of each region, wherever a sprinkling is asked for."""
    counts = {"CausalDiamond": 0, "ConformalBox": 0}
    for region in (CausalDiamond, ConformalBox):
        def counted(self, *args, _real=region.draw, _name=region.__name__):
            counts[_name] += 1
            return _real(self, *args)
        monkeypatch.setattr(region, "draw", counted)
    return counts


def test_every_sprinkled_set_is_drawn_by_the_one_sprinkler(monkeypatch):
    counts = count_draws(monkeypatch)
    cs.sprinkle_diamond(10, 3, np.random.default_rng(0))
    cs.generate_causal_sets(6, n_min=8, n_max=8, classes=("minkowski_2d", "destroyed"), dimensions=(2, 4), seed=1)
    # one for sprinkle_diamond, one per batch of the generator: minkowski_2d; destroyed from 2D and from 4D
    assert counts == {"CausalDiamond": 4, "ConformalBox": 0}
    for kind in ("polynomial", "complex_topology", "destroyed", "merged", "destroyed_ambiguous", "merged_ambiguous"):
        catalogue.generate_kind(kind, np.random.default_rng(2), n=30)
    assert counts["ConformalBox"] == 6
    for kind in ("grid", "layered", "random"):  # not sprinkled
        catalogue.generate_kind(kind, np.random.default_rng(2), n=30)
    assert counts["ConformalBox"] == 6 and counts["CausalDiamond"] == 4


def test_the_catalogue_holds_the_built_in_classes_beside_the_nine_kinds():
    assert list(catalogue.BUILTIN_CLASSES) == list(CSET_TYPES)  # the config's names, in its order
    for name, generator in catalogue.BUILTIN_CLASSES.items():
        assert generator.manifold_like == (name in MANIFOLD_CLASSES)
        assert generator.dimension == MANIFOLD_CLASSES.get(name, -1)
        drawn = generator.draw_batch(np.random.default_rng(0), 3, 12, source_dimension=3, destroy_fraction=0.05)
        relations = drawn.relations(np.random.default_rng(1), slice(0, 3))
        assert relations.shape == (3, 12, 12) and not np.tril(relations).any()
        assert np.array_equal(cs.transitive_closure(relations), relations) and drawn.flip_fractions.shape == (3,)
    assert len(catalogue.GENERATORS) == 9


# --------------------------------------------------------------------------- the regions and the light cone
@pytest.mark.parametrize("dimension", [2, 3, 4])
def test_a_diamond_sprinkling_lies_in_the_diamond_sorted_by_time(dimension):
    points = sprinkle(np.random.default_rng(dimension), 200, CausalDiamond(dimension))
    t, x = points[:, 0], points[:, 1:]
    assert points.shape == (200, dimension) and np.all(np.diff(t) >= 0)
    assert np.all(np.linalg.norm(x, axis=1) <= 1 - np.abs(t))
    batch = sprinkle(np.random.default_rng(dimension), 200, CausalDiamond(dimension), batch=2)
    assert batch.shape == (2, 200, dimension) and np.all(np.diff(batch[..., 0], axis=1) >= 0)
    assert not np.array_equal(batch[0], batch[1])


def test_a_conformal_box_sprinkling_follows_the_density_f_squared():
    """f = T_1(t) = t: density proportional to t^2 on [-1, 1], so E[|t|] = 3/4 (a flat factor gives 1/2)."""
    coefficients = np.array([[0.0], [1.0]])  # c[a, b]: T_a(t) T_b(x)
    points = sprinkle(np.random.default_rng(3), 20_000, ConformalBox(coefficients))
    assert points.shape == (20_000, 2) and np.all(np.abs(points) <= 1) and np.all(np.diff(points[:, 0]) >= 0)
    assert abs(np.abs(points[:, 0]).mean() - 0.75) < 0.01
    flat = sprinkle(np.random.default_rng(3), 20_000, ConformalBox(np.ones((1, 1))))
    assert abs(np.abs(flat[:, 0]).mean() - 0.5) < 0.01


@pytest.mark.parametrize("dimension", [2, 4])
def test_the_light_cone_relation_of_one_set_and_of_a_batch(dimension):
    points = sprinkle(np.random.default_rng(5), 30, CausalDiamond(dimension), batch=3)
    relation = light_cone_relation(points)
    assert relation.shape == (3, 30, 30) and relation.dtype == bool
    for k in range(3):
        assert np.array_equal(light_cone_relation(points[k]), relation[k])
        t, x = points[k, :, 0], points[k, :, 1:]
        for i, j in itertools.combinations(range(30), 2):
            assert relation[k, i, j] == (t[j] - t[i] >= np.linalg.norm(x[j] - x[i]))
        assert not np.tril(relation[k]).any()


def test_bad_regions_and_counts_are_named():
    with pytest.raises(ValueError, match="dimension: expected one of 2, 3, 4, got 5"):
        CausalDiamond(5)
    with pytest.raises(ValueError, match="dimension: expected one of 2, 3, 4, got 1"):
        ConformalBox(np.ones(3))
    with pytest.raises(ValueError, match="n and batch: expected positive integers"):
        sprinkle(np.random.default_rng(0), 0, CausalDiamond(2))


def test_the_one_destroyer_closes_the_flipped_pairs_whichever_way_they_were_drawn():
    rng = np.random.default_rng(4)
    coefficients, _, _ = conformal_coefficients(rng)
    sprinkled = light_cone_relation(sprinkle(rng, 40, ConformalBox(coefficients)))
    toggled = destroyed.toggled_pairs(rng, 40, 30)  # QuantumGrav.jl's pair draws
    assert np.array_equal(destroyed.destroy(sprinkled, toggled), cs.transitive_closure(sprinkled ^ toggled))
    batch = cs.sprinkle_diamond_batch(2, 40, 2, np.random.default_rng(6))[1]
    flipped = cs.destroy_order(batch, [0.0, 1.0], np.random.default_rng(7))  # each pair flipped with a probability
    assert np.array_equal(flipped[0], batch[0])
    assert np.array_equal(flipped[1], cs.transitive_closure(np.triu(~batch[1], k=1)))

"""What a store's ``cset_type`` codes mean, and the cross-check against the kind its name gives.

QuantumGrav.jl numbers its nine kinds in two ways (ssciwr/QuantumGrav, ``QuantumGrav.jl/``, main 69d44eb):

* ``produce_data``: ``cset_type_encoder`` in ``examples/produce_data.jl``, the script that writes the stores
  (polynomial 1, complex_topology 2, destroyed 3, merged 4, grid 5, layered 6, random 7, merged_ambiguous 8,
  destroyed_ambiguous 9). Our generator (``data.kinds``) writes these codes too.
* ``encode_csettype``: ``encode_csettype`` in ``src/cset_factories.jl``, which the package exports (polynomial 1,
  layered 2, random 3, grid 4, destroyed 5, destroyed_ambiguous 6, merged 7, merged_ambiguous 8,
  complex_topology 9). Only polynomial (1) and merged_ambiguous (8) have the same code in both.

A store written with the other numbering reads with the wrong kinds, silently, unless something says which kind a
store holds: ``produce_data`` names each store after its kind (``{cset_type}_{pid}_{datetime}.zarr``,
``src/preparation.jl``), as our writer does (``{kind}_{seed}.zarr``). So the reader compares every set's code with
the kind in its store's name (``store_kind``) and refuses a disagreement in one line naming both
(``check_code``), unless ``cset_type_encoding`` names the numbering that agrees.

Code 10 (``minkowski_kr_insertion``) is in neither numbering: both stop at 9. It is this reader's name for sets of
QuantumGrav.jl's later generator ``generate_causet_with_KR_defect``
(``src/minkowski_causet_with_local_KR_insertion.jl``: a Minkowski sprinkling in which the elements of a causal
diamond are replaced by a random three-layer Kleitman-Rothschild order, then closed; not manifold-like), which no
upstream encoder numbers yet: a store of them must have been numbered by its writer's own extension of
``produce_data``'s encoder.
"""

from __future__ import annotations

from pathlib import Path

from ...common.errors import UserError
from .limits import store_error

PRODUCE_DATA, ENCODE_CSETTYPE = "produce_data", "encode_csettype"
ENCODINGS: dict[str, dict[int, str]] = {
    PRODUCE_DATA: {1: "polynomial", 2: "complex_topology", 3: "destroyed", 4: "merged", 5: "grid", 6: "layered",
                   7: "random", 8: "merged_ambiguous", 9: "destroyed_ambiguous", 10: "minkowski_kr_insertion"},
    ENCODE_CSETTYPE: {1: "polynomial", 2: "layered", 3: "random", 4: "grid", 5: "destroyed",
                      6: "destroyed_ambiguous", 7: "merged", 8: "merged_ambiguous", 9: "complex_topology"},
}
# Where each numbering is written in QuantumGrav.jl: what a message names.
ENCODER_SOURCES = {PRODUCE_DATA: "cset_type_encoder in QuantumGrav.jl's examples/produce_data.jl",
                   ENCODE_CSETTYPE: "encode_csettype in QuantumGrav.jl's src/cset_factories.jl"}
# The codes items carry (``julia_cset_type``) and results name kinds by: produce_data's, whichever wrote the store.
ITEM_CODES: dict[str, int] = {kind: code for code, kind in ENCODINGS[PRODUCE_DATA].items()}
KIND_NAMES = tuple(ITEM_CODES)
_HINT_KEY = "data.kwargs.cset_type_encoding"


def check_encoding(encoding: str | None) -> str | None:
    if encoding is not None and encoding not in ENCODINGS:
        raise UserError(f"cset_type_encoding: expected one of {', '.join(ENCODINGS)} (which QuantumGrav.jl encoder "
                        f"numbered the stores' cset_type), or null (produce_data's, checked against each store's "
                        f"name), got {encoding!r}")
    return encoding


def store_kind(store: Path) -> str | None:
    """The kind a store's folder name starts with (``merged_ambiguous_1234_2025-01-01_10-00-00.zarr``:
    ``merged_ambiguous``, the longest kind that fits), or None if it names none."""
    name = store.name
    fits = [kind for kind in KIND_NAMES if name == kind or name.startswith((f"{kind}_", f"{kind}."))]
    return max(fits, key=len) if fits else None


def kind_of_code(code: object, encoding: str | None, problem) -> str:
    """The kind a set's ``cset_type`` ``code`` names in ``encoding`` (None: produce_data's), or ``problem(text)``
    (an error naming store and group) raised for a code that numbering does not have."""
    used = encoding or PRODUCE_DATA
    if type(code) is not int or code not in ENCODINGS[used]:  # not a bool or a float 1.0
        other = "" if encoding else f"; written in another numbering: set {_HINT_KEY}"
        raise problem(f"unknown cset_type code {code!r}; expected one of {ENCODINGS[used]} "
                      f"({ENCODER_SOURCES[used]}{other})")
    return ENCODINGS[used][code]


def check_code(kind: str, code: int, named_kind: str | None, encoding: str | None, problem) -> None:
    """Refuse (``problem(text)``) a set whose code reads as ``kind`` where its store's name says ``named_kind``,
    naming both, and the numbering in which they agree if there is one."""
    if named_kind is None or kind == named_kind:
        return
    used = encoding or PRODUCE_DATA
    agreeing = [other for other, table in ENCODINGS.items() if other != used and table.get(code) == named_kind]
    fix = (f"if {ENCODER_SOURCES[agreeing[0]]} numbered the codes (there {code} is {named_kind}), set "
           f"{_HINT_KEY}: {agreeing[0]}" if agreeing else
           "if the store's name does not name the kind of its sets, rename it")
    raise problem(f"cset_type code {code} is {kind} in {ENCODER_SOURCES[used]}, but the store's name says "
                  f"{named_kind}; {fix}")


class StoreKinds:
    """The kind of each set of ``stores``: its code read in the numbering ``encoding`` (None: produce_data's),
    checked against the kind its store's name gives; each disagreement one UserError naming store and group."""

    def __init__(self, stores: list[Path], encoding: str | None):
        self.stores, self.encoding = stores, check_encoding(encoding)
        self.named = [store_kind(store) for store in stores]

    def kind(self, store_index: int, group: str, code: object) -> str:
        def problem(text: str) -> UserError:
            return store_error(self.stores[store_index], group, text)
        kind = kind_of_code(code, self.encoding, problem)
        check_code(kind, code, self.named[store_index], self.encoding, problem)
        return kind

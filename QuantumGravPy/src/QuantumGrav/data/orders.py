"""The relations of a causal matrix: products, transitive closure and reduction, longest chains, a natural
labelling.

A causal set is here a boolean *causal matrix* ``R`` (N x N) with ``R[i, j]`` true when element ``i``
precedes ``j``; in a natural labelling (a linear extension of the order) ``R`` is strictly upper triangular.
Every function takes one matrix (N x N) or a batch of equal-sized ones (B x N x N) and returns the same
rank; batches are processed at once with matrix products and whole-array operations, never with Python
loops over pairs.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch


def as_batch(matrix: np.ndarray) -> tuple[np.ndarray, bool]:
    """A (B, N, N) view of a square matrix or batch, and whether the input was a single one."""
    matrix = np.asarray(matrix)
    if matrix.ndim not in (2, 3) or matrix.shape[-1] != matrix.shape[-2]:
        raise ValueError(f"R: expected a square N x N matrix or a B x N x N batch, got shape {matrix.shape}")
    return (matrix[None], True) if matrix.ndim == 2 else (matrix, False)


@contextmanager
def _one_torch_thread() -> Iterator[None]:
    """Run torch on one thread, then restore: for these small products a second thread only
    adds synchronisation, which costs 10-200x when another process holds a core."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def elements_between(R: np.ndarray) -> np.ndarray:
    """``(R @ R)[i, j]`` for one causal matrix or a batch: the number of elements z with i < z < j,
    i.e. the size of the interval between i and j when they are related. Float32 batched matrix
    products (counts are exact below 2^24, whatever the order of the sums), in torch because numpy's
    BLAS threads cannot be limited. Links, interval abundances and the 3-chain count all come from
    this one product. A strictly upper-triangular ``R`` (a natural labelling, as every generated set
    and every store's set once relabelled) is multiplied tile by tile (``_upper_triangular_square``)."""
    batch, single = as_batch(R)
    as_float = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32))
    with _one_torch_thread():
        if batch.shape[-1] > 2 * _PRODUCT_TILE and not np.tril(batch).any():
            between = _upper_triangular_square(as_float).numpy()
        else:
            between = torch.bmm(as_float, as_float).numpy()
    return between[0] if single else between


# The tile of the triangular product: at N = 2,048 one product took 64 ms with tiles of 256, 74 ms with 128,
# 78 ms with 512 and 211 ms as one full product (one thread, the 2-core development machine, quiet).
_PRODUCT_TILE = 256


def _upper_triangular_square(A: torch.Tensor) -> torch.Tensor:
    """``A @ A`` for a batch of strictly upper-triangular matrices: tile (I, J) of the product, I <= J, only
    needs the tiles K with I <= K <= J (the others are zero), about a sixth of the full product's
    multiply-adds; the tiles below the diagonal stay zero. Exactly equal to ``torch.bmm(A, A)`` for 0/1
    entries (integer sums below 2^24 are exact in float32)."""
    n, tile = A.shape[-1], _PRODUCT_TILE
    product = torch.zeros_like(A)
    for i in range(0, n, tile):
        for j in range(i, n, tile):
            product[:, i:i + tile, j:j + tile] = torch.bmm(A[:, i:i + tile, i:j + tile], A[:, i:j + tile, j:j + tile])
    return product


def _two_step_paths(R: np.ndarray) -> np.ndarray:
    """``R @ R > 0`` for a batch: pairs (i, j) with some k, i R k R j."""
    return elements_between(R) > 0


def transitive_closure(R: np.ndarray) -> np.ndarray:
    """Smallest transitive relation containing R, by repeated squaring (log2 N matrix products)."""
    closed, single = as_batch(R)
    closed = closed.astype(bool)
    while True:
        grown = closed | _two_step_paths(closed)
        if np.array_equal(grown, closed):
            return grown[0] if single else grown
        closed = grown


def transitive_reduction(R: np.ndarray) -> np.ndarray:
    """Links of a transitively closed order: relations i < j with no element between them."""
    batch, single = as_batch(R)
    links = batch.astype(bool) & ~_two_step_paths(batch)
    return links[0] if single else links


def _chains_along_links(L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Longest chains ending at / starting at each element (int32, (B, N)) of a batch of link matrices.

    A longest chain is made of links, so chain[j] = max over links i -> j of chain[i] + 1 (0 for minimal
    elements). Relaxed over all links of the batch at once until nothing changes: height + 1 passes of
    O(links) each, instead of a Python loop over the N elements with O(N) work each."""
    batch, n, _ = L.shape
    set_of, earlier, later = np.nonzero(L)
    earlier, later = set_of * n + earlier, set_of * n + later
    return (_relax_along(earlier, later, batch * n).reshape(batch, n),
            _relax_along(later, earlier, batch * n).reshape(batch, n))


def _relax_along(source: np.ndarray, target: np.ndarray, size: int) -> np.ndarray:
    """Longest path (in edges) ending at each of ``size`` nodes of a DAG given as edges source -> target."""
    length = longest_paths(source, target, size)
    assert length is not None, "a natural labelling has no cycle"
    return length


def longest_paths(source: np.ndarray, target: np.ndarray, size: int) -> np.ndarray | None:
    """Longest path (in edges, int32) ending at each of ``size`` nodes along the edges source -> target, or None
    if the edges have a cycle (no path is longer than size - 1 edges in a DAG, so a longer one means a cycle)."""
    length = np.zeros(size, dtype=np.int32)
    for _ in range(size + 1):
        longer = length.copy()
        np.maximum.at(longer, target, length[source] + 1)
        if np.array_equal(longer, length):
            return length
        length = longer
    return None


def longest_chains(R: np.ndarray, L: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Relations in the longest chain ending at / starting at each element (int32, shape of R[..., 0]).
    ``L``, the links of ``R``, is derived from ``R`` when not given."""
    batch, single = as_batch(R)
    if np.tril(batch).any():
        raise ValueError("R: expected a strictly upper-triangular causal matrix (elements in a natural labelling)")
    links = transitive_reduction(batch) if L is None else as_batch(L)[0]
    past, future = _chains_along_links(links)
    return (past[0], future[0]) if single else (past, future)


def natural_order(R: np.ndarray) -> np.ndarray:
    """A permutation listing the elements of the strict order ``R`` (one N x N matrix, any labelling) in a
    natural labelling: the identity if ``R`` is already upper triangular, else by the size of the past
    (i before j implies a smaller past), so that ``R[np.ix_(order, order)]`` is strictly upper triangular."""
    if not np.tril(R).any():
        return np.arange(R.shape[0])
    return np.argsort(R.sum(axis=0), kind="stable")

"""The field's graph observables of a causal set, as one fixed-length feature vector for every N.

Eichhorn, Wagner, Mack et al., "Charting causal set configuration space with graph observables" (arXiv:2605.27514;
code: causal-wagner/CausalSetZoology, built on QuantumGrav.jl) separate the kinds of causal sets generated here with
three families of observables of the link (Hasse) graph and the intervals. Here they are, normalised so that the
same columns (``GRAPH_OBSERVABLE_NAMES``) describe a set of any size:

* **Link-degree histograms**, in and out: the fraction of the elements with k links into them (their immediate
  past) and out of them, for k = 0 .. ``MAX_LINK_DEGREE`` - 1, and with ``MAX_LINK_DEGREE`` or more. (The study
  counts every degree; a sprinkling's link degrees grow like log N, so the last column gathers the tail.)
* **The extremes of the spectrum of the link graph's Laplacian.** As in the study: the symmetrically normalised
  Laplacian I - D^-1/2 W D^-1/2 of the symmetrised links W = L + L^T (an element without links has a row of the
  identity), whose eigenvalues lie in [0, 2] at every N. Its second-smallest eigenvalue lambda_2 (the normalised
  algebraic connectivity: 0 when the links fall apart into several pieces) and its largest lambda_max (2 when a piece
  is bipartite), from ``scipy.sparse.linalg.eigsh`` (Lanczos) on the sparse link graph; dense for small sets.
* **The interval-abundance histogram**: how the related pairs x < y spread over the size of their interval, the
  number of elements between them as a fraction of the N - 2 that could be, in ``INTERVAL_BINS`` equal bins of
  [0, 1] (the study's cardinality abundances, scaled to N; the smallest intervals, N_0 .. N_4, are already among
  ``causal_sets.INVARIANT_NAMES``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sparse
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import LinearOperator, eigsh

from .orders import elements_between

MAX_LINK_DEGREE = 10  # link degrees 0 .. 9 get a column each, 10 or more share one
INTERVAL_BINS = 10
_DENSE_BELOW = 64  # sets this small get the whole spectrum from a dense eigensolver

GRAPH_OBSERVABLE_NAMES: tuple[str, ...] = (
    *(f"in_link_degree_{k}" for k in range(MAX_LINK_DEGREE)), f"in_link_degree_{MAX_LINK_DEGREE}_or_more",
    *(f"out_link_degree_{k}" for k in range(MAX_LINK_DEGREE)), f"out_link_degree_{MAX_LINK_DEGREE}_or_more",
    "link_laplacian_lambda_2", "link_laplacian_lambda_max",
    *(f"interval_size_{b}_of_{INTERVAL_BINS}" for b in range(INTERVAL_BINS)),
)


def link_degree_histograms(L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fractions of the elements with k = 0 .. MAX_LINK_DEGREE - 1 links into them, and with MAX_LINK_DEGREE
    or more, then the same for links out of them, of a link matrix ``L`` (``orders.transitive_reduction``)."""
    L = np.asarray(L, dtype=bool)
    n = max(len(L), 1)

    def histogram(degrees: np.ndarray) -> np.ndarray:
        return np.bincount(np.minimum(degrees, MAX_LINK_DEGREE), minlength=MAX_LINK_DEGREE + 1) / n

    return histogram(L.sum(axis=0)), histogram(L.sum(axis=1))


def _normalised_adjacency(L: np.ndarray) -> tuple[sparse.csr_matrix, np.ndarray]:
    """D^-1/2 W D^-1/2 of the symmetrised links W = L + L^T (zero rows for elements without links), and the
    degrees."""
    W = sparse.csr_matrix(np.asarray(L, dtype=bool), dtype=np.float64)
    W = W + W.T
    degree = np.asarray(W.sum(axis=1)).reshape(-1)
    scale = np.divide(1.0, np.sqrt(degree), out=np.zeros_like(degree), where=degree > 0)
    return sparse.diags(scale) @ W @ sparse.diags(scale), degree


def _largest_eigenvalue(operator, n: int) -> float:
    """The largest eigenvalue of a symmetric operator on R^n by Lanczos, from a fixed start vector (the constant
    vector is an eigenvector of a regular graph's operators, so a pseudo-random one is used): reproducible."""
    start = np.random.default_rng(0).standard_normal(n)
    return float(eigsh(operator, k=1, which="LA", v0=start, tol=1e-9, return_eigenvectors=False)[0])


def link_laplacian_extremes(L: np.ndarray) -> tuple[float, float]:
    """lambda_2 and lambda_max of the symmetrically normalised Laplacian of the symmetrised link graph of the link
    matrix ``L`` (see the module's docstring). A set of one element has the spectrum {1} (lambda_2 = lambda_max = 1
    by convention); lambda_2 is 0 when two or more pieces of the link graph have links."""
    n = len(L)
    if n < 2:
        return 1.0, 1.0
    A, degree = _normalised_adjacency(L)
    if n < _DENSE_BELOW:
        spectrum = np.linalg.eigvalsh(np.eye(n) - A.toarray())
        return float(spectrum[1]), float(spectrum[-1])
    _, piece = connected_components(A, directed=False)
    linked_pieces = len(np.unique(piece[degree > 0]))
    if linked_pieces == 0:  # no links: the spectrum is all ones
        return 1.0, 1.0
    lambda_max = 1.0 + _largest_eigenvalue(-A, n)
    if linked_pieces > 1:  # a zero eigenvalue per piece with links
        return 0.0, lambda_max
    # One piece with links: its zero mode is D^1/2 1 on it. A - 2 u u^T sends u to -u (the bottom of A's spectrum,
    # [-1, 1]) and keeps the rest, so its largest eigenvalue is 1 - lambda_2.
    u = np.sqrt(degree) / np.sqrt(degree.sum())
    deflated = LinearOperator((n, n), matvec=lambda x: A @ x - 2.0 * u * (u @ x), dtype=np.float64)
    return 1.0 - _largest_eigenvalue(deflated, n), lambda_max


def interval_size_histogram(R: np.ndarray, between: np.ndarray | None = None) -> np.ndarray:
    """The fraction of the related pairs of a causal matrix ``R`` whose interval holds a fraction of the other
    N - 2 elements in each of ``INTERVAL_BINS`` equal bins of [0, 1] (the last bin closed). ``between`` is
    ``orders.elements_between(R)``, computed when not given. All zero for a set without relations."""
    R = np.asarray(R, dtype=bool)
    n = len(R)
    between = elements_between(R) if between is None else between
    sizes = between[R] / max(n - 2, 1)
    counts = np.bincount(np.minimum((sizes * INTERVAL_BINS).astype(np.int64), INTERVAL_BINS - 1),
                         minlength=INTERVAL_BINS)
    return counts / max(len(sizes), 1)


def graph_observables(R: np.ndarray, between: np.ndarray | None = None) -> np.ndarray:
    """The observables ``GRAPH_OBSERVABLE_NAMES`` (float64) of a transitively closed causal matrix ``R`` (one set):
    link-degree histograms, the Laplacian's extremes, the interval-size histogram. ``between``, the product
    ``orders.elements_between(R)``, is computed when not given."""
    R = np.asarray(R, dtype=bool)
    if R.ndim != 2 or R.shape[0] != R.shape[1]:
        raise ValueError(f"R: expected a square N x N causal matrix, got shape {R.shape}")
    between = elements_between(R) if between is None else between
    links = R & (between == 0)
    in_degrees, out_degrees = link_degree_histograms(links)
    return np.concatenate([in_degrees, out_degrees, link_laplacian_extremes(links),
                           interval_size_histogram(R, between)])

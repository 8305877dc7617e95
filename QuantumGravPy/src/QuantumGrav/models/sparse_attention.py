"""PyG's ``TransformerConv`` computed with sparse matrix products, in memory that grows with the graph.

Why: PyG's layer gathers ``query_i``, ``key_j`` and ``value_j`` per edge, tensors of [edges, heads, channels]
kept for the backward pass; the default model needed 23.6 GB at N = 1,024 and batch 32.
``SparseTransformerConv`` computes the same function with no tensor larger than [edges, heads]: the scores
``<q_i, k_j>`` are a sampled dense-dense product (SDDMM, ``torch.sparse.sampled_addmm``) where the adjacency has
an entry, the softmax runs over each node's incoming edges, the aggregation is a sparse-dense product (SpMM),
and the backward passes (``_SampledDot``, ``_Aggregate``) are SDDMMs and SpMMs again. All heads share one
product (``HeadBlocks``: [N * heads, channels] against a block-diagonal adjacency, one block per head), so no
per-head slices or copies remain. The CSR kernels run on CPU (MKL) and CUDA (cuSPARSE) alike. It subclasses
``TransformerConv``: same parameters and ``state_dict``, so checkpoints load into either and a seed gives the
same weights.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
from torch import Tensor
from torch.nn import functional as F
from torch_geometric.nn import TransformerConv
from torch_geometric.utils import softmax

from . import generated_sources  # noqa: F401  (removes the files PyG writes for its layers at exit)

# torch warns once per process that CSR support is "beta"; the kernels used here (sampled_addmm, CSR @ dense)
# are the ones torch.sparse documents for both devices. The warning is noise in every user's log.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state", category=UserWarning)
# torch 2.11 (seen on CUDA) also warns that invariant checks are "implicitly disabled" although _csr passes
# check_invariants=False explicitly; the indices are sorted and bounded here by construction (_sort_by, _rowptr).
warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled", category=UserWarning)


@dataclass(frozen=True)
class Adjacency:
    """The edges j -> i of a graph in CSR form by target (row i lists the sources of i's incoming edges),
    with the permutations between CSR order and the caller's edge order, and the transposed CSR (row j
    lists the targets of j's outgoing edges) for the backward products. Built once per batch and shared
    by every layer (``GNNClassifier`` does so); ``flip()`` is the adjacency of the reversed edges, for free.
    """

    num_nodes: int
    rowptr: Tensor          # [N + 1] CSR by target
    col: Tensor             # [E] source of each edge, CSR order
    order: Tensor           # [E] caller's edge index of each CSR position
    rowptr_t: Tensor        # [N + 1] CSR by source
    col_t: Tensor           # [E] target of each edge, transposed CSR order
    to_t: Tensor            # [E] CSR position of each transposed CSR position
    order_t: Tensor         # [E] caller's edge index of each transposed CSR position
    edge_index: Tensor      # the caller's [2, E] (source, target), for return_attention_weights
    # built on first use and kept, so that every layer of a model shares them for its batch: the HeadBlocks per
    # head count, and the flipped Adjacency (only here: the flipped one does not point back, no reference cycle)
    _derived: dict = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def from_edge_index(edge_index: Tensor, num_nodes: int) -> Adjacency:
        src, dst = edge_index[0], edge_index[1]
        order = _sort_by(dst, src, num_nodes)
        order_t = _sort_by(src, dst, num_nodes)
        # CSR position of each edge, then of each transposed position (edges are matched by caller index,
        # so duplicate edges stay distinct, as they are in PyG's message passing)
        position = torch.empty_like(order)
        position[order] = torch.arange(order.numel(), device=order.device)
        return Adjacency(num_nodes, _rowptr(dst, num_nodes), src[order], order, _rowptr(src, num_nodes), dst[order_t],
                         position[order_t], order_t, edge_index)

    def flip(self) -> Adjacency:
        """The reversed edges i -> j: CSR and transposed CSR swap roles (built once, then the same object)."""
        if "flipped" not in self._derived:
            self._derived["flipped"] = self._flipped()
        return self._derived["flipped"]

    def _flipped(self) -> Adjacency:
        inverse = torch.empty_like(self.to_t)
        inverse[self.to_t] = torch.arange(self.to_t.numel(), device=self.to_t.device)
        return Adjacency(self.num_nodes, self.rowptr_t, self.col_t, self.order_t, self.rowptr, self.col, inverse,
                         self.order, self.edge_index.flip(0))

    def blocks(self, heads: int) -> HeadBlocks:
        """The block-diagonal adjacency of ``heads`` heads (built once per head count)."""
        if heads not in self._derived:
            self._derived[heads] = HeadBlocks.from_adjacency(self, heads)
        return self._derived[heads]


@dataclass(frozen=True)
class HeadBlocks:
    """The adjacency repeated once per head as one block-diagonal CSR matrix of N * H rows, in node-major
    order: row i * H + h holds the edges j -> i of head h at columns j * H + h, so a [N, H, C] tensor is its
    dense operand as the view [N * H, C]. Its E * H values (one per edge and head, "block order") are the
    scores and attention weights of every head at once; row i * H + h is node i's softmax group for head h.
    """

    num_rows: int           # N * H
    heads: int
    rowptr: Tensor          # [N * H + 1] block CSR by target
    col: Tensor             # [E * H]
    rowptr_t: Tensor        # [N * H + 1] block CSR by source (the transpose)
    col_t: Tensor           # [E * H]
    to_t: Tensor            # [E * H] block position of each transposed block position
    caller: Tensor          # [E * H] flat index into the caller's [E, H] (edge order) of each block position

    @staticmethod
    def from_adjacency(adjacency: Adjacency, heads: int) -> HeadBlocks:
        rowptr, col, position = _blocks_of(adjacency.rowptr, adjacency.col, heads)
        rowptr_t, col_t, position_t = _blocks_of(adjacency.rowptr_t, adjacency.col_t, heads)
        head = torch.arange(heads, device=col.device)
        to_t = torch.empty_like(col)
        to_t[position_t] = position[adjacency.to_t]
        caller = torch.empty_like(col)
        caller[position] = adjacency.order[:, None] * heads + head
        return HeadBlocks(adjacency.num_nodes * heads, heads, rowptr, col, rowptr_t, col_t, to_t, caller)

    def matrix(self, values: Tensor, transposed: bool = False) -> Tensor:
        """The [N * H, N * H] CSR matrix with ``values`` (block order) at the edges, or its transpose."""
        if transposed:
            return _csr(self.rowptr_t, self.col_t, values[self.to_t], self.num_rows)
        return _csr(self.rowptr, self.col, values, self.num_rows)


def _blocks_of(rowptr: Tensor, col: Tensor, heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """The block CSR (rowptr, col) of the CSR (rowptr, col) repeated for ``heads`` heads, and the block
    position [E, H] of each (CSR position e, head h): row i's edges come as H runs of deg(i), one per head."""
    degree = rowptr[1:] - rowptr[:-1]
    block_rowptr = rowptr.new_zeros(degree.numel() * heads + 1)
    block_rowptr[1:] = degree.repeat_interleave(heads).cumsum(0)
    row = torch.repeat_interleave(torch.arange(degree.numel(), device=col.device), degree)
    head = torch.arange(heads, device=col.device)
    position = (torch.arange(col.numel(), device=col.device) + (heads - 1) * rowptr[row])[:, None] \
        + head * degree[row][:, None]
    block_col = torch.empty(col.numel() * heads, dtype=col.dtype, device=col.device)
    block_col[position] = col[:, None] * heads + head
    return block_rowptr, block_col, position


def _sort_by(major: Tensor, minor: Tensor, num_nodes: int) -> Tensor:
    # sorted columns within a row: what the CSR kernels (MKL, cuSPARSE) expect
    return torch.argsort(major * num_nodes + minor, stable=True)


def _rowptr(rows: Tensor, num_nodes: int) -> Tensor:
    rowptr = rows.new_zeros(num_nodes + 1)
    rowptr[1:] = torch.bincount(rows, minlength=num_nodes).cumsum(0)
    return rowptr


def _csr(rowptr: Tensor, col: Tensor, values: Tensor, num_nodes: int) -> Tensor:
    return torch.sparse_csr_tensor(rowptr, col, values, (num_nodes, num_nodes), check_invariants=False)


def _sddmm(blocks: HeadBlocks, left: Tensor, right: Tensor) -> Tensor:
    """[E * H] in block order: <left[i, h], right[j, h]> for every edge j -> i and head h, without [E, H, C]."""
    mask = blocks.matrix(left.new_zeros(blocks.col.numel()))
    with _in_float32(left):
        return torch.sparse.sampled_addmm(mask, _stacked(left), _stacked(right).T, beta=0.0).values()


def _spmm(blocks: HeadBlocks, weights: Tensor, dense: Tensor, transposed: bool = False) -> Tensor:
    """[N, H, C]: the block matrix of ``weights`` [E * H] (or its transpose) times ``dense`` [N, H, C]."""
    stacked = _stacked(dense)
    # addmm into its own output with beta 0 (torch.addmm: the input is then ignored, NaN included): ``A @ B``
    # would fill a zero matrix and copy it into a second one first: 29% of its time in a CPU profile
    out = torch.empty_like(stacked)
    with _in_float32(dense):
        return torch.addmm(out, blocks.matrix(weights, transposed), stacked, beta=0.0, out=out).view(dense.shape)


def _stacked(tensor: Tensor) -> Tensor:
    """[N, H, C] as [N * H, C]: a view when contiguous (the projections are), one copy otherwise."""
    return tensor.reshape(-1, tensor.size(-1))


def _in_float32(tensor: Tensor):
    """Autocast off around the sparse products: it would cast CSR @ dense to half precision, which the CSR
    kernels do not take (MKL: no bfloat16); the inputs are float32 already (``_at_least_float32``)."""
    return torch.autocast(device_type=tensor.device.type, enabled=False)


def _at_least_float32(tensor: Tensor) -> Tensor:
    return tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor


class _SampledDot(torch.autograd.Function):
    """scores = <query[i, h], key[j, h]> for the edges j -> i and heads h (block order)."""

    @staticmethod
    def forward(ctx, query: Tensor, key: Tensor, adjacency: HeadBlocks) -> Tensor:
        ctx.adjacency = adjacency
        ctx.save_for_backward(query, key)
        return _sddmm(adjacency, query, key)

    @staticmethod
    def backward(ctx, grad_scores: Tensor):
        query, key = ctx.saved_tensors
        grad_scores = grad_scores.contiguous()
        grad_query = _spmm(ctx.adjacency, grad_scores, key) if ctx.needs_input_grad[0] else None
        grad_key = _spmm(ctx.adjacency, grad_scores, query, transposed=True) if ctx.needs_input_grad[1] else None
        return grad_query, grad_key, None


class _Aggregate(torch.autograd.Function):
    """out[i, h] = sum over the edges j -> i of weights[j -> i, h] * value[j, h] (weights in block order)."""

    @staticmethod
    def forward(ctx, weights: Tensor, value: Tensor, adjacency: HeadBlocks) -> Tensor:
        ctx.adjacency = adjacency
        ctx.save_for_backward(weights, value)
        return _spmm(adjacency, weights, value)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        weights, value = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_weights = _sddmm(ctx.adjacency, grad_out, value) if ctx.needs_input_grad[0] else None
        grad_value = _spmm(ctx.adjacency, weights, grad_out, transposed=True) if ctx.needs_input_grad[1] else None
        return grad_weights, grad_value, None


class SparseTransformerConv(TransformerConv):
    """``torch_geometric.nn.TransformerConv`` (Shi et al. 2021) without per-edge [edges, heads, channels] tensors.

    Same arguments, parameters and results as PyG's class (``heads``, ``concat``, ``beta``, ``dropout`` on the
    attention weights, ``root_weight``, ``bias``; outputs and gradients equal to float32 rounding, dropout
    included for the same random state), for graphs without edge features (``edge_dim`` is not supported).
    ``edge_index`` may be a [2, E] tensor or an ``Adjacency`` built once for several layers.
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True, beta: bool = False,
                 dropout: float = 0.0, edge_dim: int | None = None, bias: bool = True, root_weight: bool = True,
                 **kwargs):
        if edge_dim is not None:
            raise ValueError("SparseTransformerConv: edge_dim is not supported (causal-set graphs have no edge "
                             "features); use torch_geometric.nn.TransformerConv for graphs with edge features")
        if not isinstance(in_channels, int) or in_channels <= 0:
            raise ValueError(f"SparseTransformerConv: in_channels must be a positive int, got {in_channels!r} "
                             f"(bipartite and lazy inputs: use torch_geometric.nn.TransformerConv)")
        super().__init__(in_channels, out_channels, heads=heads, concat=concat, beta=beta, dropout=dropout,
                         bias=bias, root_weight=root_weight, **kwargs)

    def forward(self, x: Tensor, edge_index: Tensor | Adjacency, edge_attr: Tensor | None = None,
                return_attention_weights: bool | None = None):
        if edge_attr is not None:
            raise ValueError("SparseTransformerConv: edge_attr is not supported (no edge_dim)")
        adjacency = (edge_index if isinstance(edge_index, Adjacency)
                     else Adjacency.from_edge_index(edge_index, x.size(0)))
        heads, channels = self.heads, self.out_channels
        # under autocast the projections come out in half precision; the sparse kernels take float32 on
        # every device (cuSPARSE's SDDMM has no bfloat16), and the scores' softmax wants it anyway
        query, key, value = (_at_least_float32(lin(x).view(-1, heads, channels))
                             for lin in (self.lin_query, self.lin_key, self.lin_value))

        blocks = adjacency.blocks(heads)
        scores = _SampledDot.apply(query, key, blocks) / math.sqrt(channels)
        alpha = softmax(scores, ptr=blocks.rowptr)  # per block row: one node's incoming edges, one head
        weights = self._dropout_in_caller_order(alpha, blocks)
        out = _Aggregate.apply(weights, value, blocks)

        out = out.reshape(-1, heads * channels) if self.concat else out.mean(dim=1)
        if self.root_weight:
            x_r = self.lin_skip(x)
            if self.lin_beta is not None:
                beta = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
                out = beta * x_r + (1 - beta) * out
            else:
                out = out + x_r
        if isinstance(return_attention_weights, bool):
            alpha_in_caller_order = torch.empty_like(alpha)
            alpha_in_caller_order[blocks.caller] = alpha
            return out, (adjacency.edge_index, alpha_in_caller_order.view(-1, heads))
        return out

    def _dropout_in_caller_order(self, alpha: Tensor, blocks: HeadBlocks) -> Tensor:
        """Dropout on the attention weights with the mask PyG would draw (it draws over [E, H] in edge order),
        so that a seeded run matches PyG's class in training mode too."""
        if not self.training or self.dropout == 0.0:
            return alpha
        keep = F.dropout(alpha.new_ones(alpha.numel() // blocks.heads, blocks.heads), p=self.dropout, training=True)
        return alpha * keep.view(-1)[blocks.caller]

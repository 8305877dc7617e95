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

The dense products are ordered by shape (``summed_attention``): where a layer is no wider in than out (the
default model's), the keys and values are never projected: the scores are the input against the queries mapped
back through the keys' weights, and the values' projection runs after the aggregation, on the aggregated input.
All dense products of a layer before the sparse ones are one GEMM, and all after them another, for both
directions of ``BidirectionalConv`` together. Same function, same parameters; about a third fewer multiply-adds.
There, every head and both directions read the same right operand (the input with a column of ones), so their
sparse products are one SDDMM, one softmax and one SpMM over ``SharedBlocks`` (rows per direction, head and node,
columns per node): no per-head copy of the operand, no per-direction products.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import Tensor, nn
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
    # head count, the SharedBlocks per head count and directions, and the flipped Adjacency (only here: the
    # flipped one does not point back, no reference cycle)
    _derived: dict = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    @torch.compiler.disable  # sorts and counts of data-dependent sizes: run eagerly under torch.compile
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

    @torch.compiler.disable
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

    @torch.compiler.disable
    def shared_blocks(self, heads: int, both_ways: bool) -> SharedBlocks:
        """The adjacency of ``heads`` heads against one shared operand, along the edges or along and against them
        (``both_ways``: this adjacency's layer, then its flip's), built once per kind."""
        key = ("shared", heads, both_ways)
        if key not in self._derived:
            self._derived[key] = SharedBlocks.from_adjacencies((self, self.flip()) if both_ways else (self,), heads)
        return self._derived[key]


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
            return _csr(self.rowptr_t, self.col_t, values[self.to_t], (self.num_rows, self.num_rows))
        return _csr(self.rowptr, self.col, values, (self.num_rows, self.num_rows))


@dataclass(frozen=True)
class SharedBlocks:
    """The adjacencies of one or two layers (a layer, or both directions of ``BidirectionalConv``), each repeated
    once per head, against one dense operand of a row per node: an [L H N, N] CSR matrix whose row
    (l H + h) N + i holds the edges j -> i of layer l's adjacency for head h, at column j. Its dense operand
    [N, C] is the same for every layer and head (never repeated), and its rows are those of an [L, H, N, C] tensor
    viewed as [L H N, C]. Its L H E values (one per layer, head and edge, in that order: "block order") are the
    scores and attention weights of every layer and head at once; each row is one softmax group.
    """

    shape: tuple[int, int]  # (L H N, N)
    heads: int
    rowptr: Tensor          # [L H N + 1]
    col: Tensor             # [L H E] the source node of each entry
    rowptr_t: Tensor        # [N + 1] the transpose: row j holds the edges out of j, of each (layer, head) in turn
    col_t: Tensor           # [L H E] the block row of each transposed entry
    to_t: Tensor            # [L H E] block position of each transposed position
    caller: Tensor          # [L H E] flat index into the caller's [L, E, H] (edge order) of each block position

    @staticmethod
    def from_adjacencies(adjacencies: Sequence[Adjacency], heads: int) -> SharedBlocks:
        num_nodes, edges = adjacencies[0].num_nodes, adjacencies[0].col.numel()
        groups = [(layer, head) for layer in range(len(adjacencies)) for head in range(heads)]
        # block (l, h) is layer l's CSR as it is, its positions shifted by (l H + h) E: no reordering
        rowptr = torch.cat([adjacencies[layer].rowptr[:-1] + (layer * heads + head) * edges for layer, head in groups]
                           + [adjacencies[0].rowptr.new_full((1,), len(groups) * edges)])
        col = torch.cat([adjacencies[layer].col for layer, _ in groups])
        caller = torch.cat([(layer * edges + adjacencies[layer].order) * heads + head for layer, head in groups])
        # transposed row j: the edges out of j of block (0, 0), then of (0, 1), ...: sorted by block row
        degrees = torch.stack([adjacency.rowptr_t[1:] - adjacency.rowptr_t[:-1] for adjacency in adjacencies])
        rowptr_t = degrees.new_zeros(num_nodes + 1)
        rowptr_t[1:] = degrees.sum(0).cumsum(0) * heads
        before_layer = (degrees.cumsum(0) - degrees) * heads  # [L, N]: entries of row j in the layers before
        col_t, to_t = torch.empty_like(col), torch.empty_like(col)
        for layer, adjacency in enumerate(adjacencies):
            row = torch.repeat_interleave(torch.arange(num_nodes, device=col.device), degrees[layer],
                                          output_size=edges)
            start = rowptr_t[row] + before_layer[layer, row] + torch.arange(edges, device=col.device) \
                - adjacency.rowptr_t[row]
            for head in range(heads):
                at = start + head * degrees[layer, row]
                col_t[at] = (layer * heads + head) * num_nodes + adjacency.col_t
                to_t[at] = (layer * heads + head) * edges + adjacency.to_t
        return SharedBlocks((len(groups) * num_nodes, num_nodes), heads, rowptr, col, rowptr_t, col_t, to_t, caller)

    def matrix(self, values: Tensor, transposed: bool = False) -> Tensor:
        """The [L H N, N] CSR matrix with ``values`` (block order) at the edges, or its [N, L H N] transpose."""
        if transposed:
            return _csr(self.rowptr_t, self.col_t, values[self.to_t], (self.shape[1], self.shape[0]))
        return _csr(self.rowptr, self.col, values, self.shape)


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


def _csr(rowptr: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    return torch.sparse_csr_tensor(rowptr, col, values, shape, check_invariants=False)


Blocks = HeadBlocks | SharedBlocks


def _sddmm(blocks: Blocks, left: Tensor, right: Tensor) -> Tensor:
    """The values in block order: <left[row], right[column]> at every entry of ``blocks`` (``left``: one row per
    block row, ``right``: one per block column; [N, H, C] as [N * H, C]), without [E, H, C]."""
    mask = blocks.matrix(left.new_zeros(blocks.col.numel()))
    with _in_float32(left):
        return torch.sparse.sampled_addmm(mask, _stacked(left), _stacked(right).T, beta=0.0).values()


def _spmm(blocks: Blocks, weights: Tensor, dense: Tensor, transposed: bool = False) -> Tensor:
    """The block matrix of ``weights`` (block order), or its transpose, times ``dense``: [rows, C], viewed as
    ``dense``'s shape where the matrix is square (HeadBlocks' [N, H, C])."""
    stacked, matrix = _stacked(dense), blocks.matrix(weights, transposed)
    # addmm into its own output with beta 0 (torch.addmm: the input is then ignored, NaN included): ``A @ B``
    # would fill a zero matrix and copy it into a second one first: 29% of its time in a CPU profile
    out = stacked.new_empty(matrix.size(0), stacked.size(1))
    with _in_float32(dense):
        out = torch.addmm(out, matrix, stacked, beta=0.0, out=out)
    return out.view(dense.shape) if out.shape == stacked.shape else out


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
    """scores = <query[i, h], key[j, h]> for the edges j -> i and heads h (block order; key[j] with
    SharedBlocks)."""

    @staticmethod
    def forward(ctx, query: Tensor, key: Tensor, adjacency: Blocks) -> Tensor:
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
    """out[i, h] = sum over the edges j -> i of weights[j -> i, h] * value[j, h] (weights in block order;
    value[j] with SharedBlocks)."""

    @staticmethod
    def forward(ctx, weights: Tensor, value: Tensor, adjacency: Blocks) -> Tensor:
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
    ``edge_index`` may be a [2, E] tensor or an ``Adjacency`` built once for several layers. The products are
    ordered by shape (``summed_attention``): the state_dict is PyG's whichever order runs.
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
        adjacency = as_adjacency(edge_index, x.size(0))
        if isinstance(return_attention_weights, bool):
            out, (alpha,) = summed_attention((self,), x, adjacency, attention_weights=True)
            return out, (adjacency.edge_index, alpha)
        return summed_attention((self,), x, adjacency)[0]


def _in_caller_order(alpha: Tensor, blocks: Blocks, layers: int) -> list[Tensor]:
    """The attention weights of ``layers`` layers (block order) as [E, H] per layer in the caller's edge order."""
    in_caller_order = torch.empty_like(alpha)
    in_caller_order[blocks.caller] = alpha
    return list(in_caller_order.view(layers, -1, blocks.heads).unbind(0))


def _dropout_in_caller_order(convs: Sequence[SparseTransformerConv], alpha: Tensor, blocks: Blocks) -> Tensor:
    """Dropout on the attention weights of each layer with the mask PyG would draw (it draws over [E, H] in edge
    order, layer after layer), so that a seeded run matches PyG's class in training mode too."""
    if not any(conv.training and conv.dropout > 0.0 for conv in convs):
        return alpha
    shape = (alpha.numel() // (len(convs) * blocks.heads), blocks.heads)
    keep = torch.cat([F.dropout(alpha.new_ones(shape), p=conv.dropout, training=True).view(-1)
                      if conv.training and conv.dropout > 0.0 else alpha.new_ones(shape).view(-1) for conv in convs])
    return alpha * keep[blocks.caller]


def as_adjacency(edge_index: Tensor | Adjacency, num_nodes: int) -> Adjacency:
    return edge_index if isinstance(edge_index, Adjacency) else Adjacency.from_edge_index(edge_index, num_nodes)


def shares_projections(convs: Sequence[nn.Module]) -> bool:
    """Whether ``summed_attention`` computes the sum of these layers on one input (``BidirectionalConv``'s two
    directions): SparseTransformerConvs of the same shape whose outputs are plain sums (no ``beta`` gate)."""
    first = convs[0]
    return all(isinstance(conv, SparseTransformerConv) and conv.lin_beta is None
               and (conv.in_channels, conv.out_channels, conv.heads, conv.concat, conv.root_weight)
               == (first.in_channels, first.out_channels, first.heads, first.concat, first.root_weight)
               for conv in convs)


def summed_attention(convs: Sequence[SparseTransformerConv], x: Tensor, adjacency: Adjacency,
                     attention_weights: bool = False) -> tuple[Tensor, list[Tensor] | None]:
    """The sum over ``convs`` of each layer on ``x``: one layer along ``adjacency``, or the two layers of
    ``shares_projections`` along it and against it (``BidirectionalConv``); and, with ``attention_weights``, each
    layer's attention weights, [E, H] in the caller's edge order (else None).

    Every dense product of all the layers before the sparse ones is one GEMM, and so is every one after them: the
    root weights of all the layers are one projection (their sum). Which products run is chosen by shape:
    ``_aggregate_first`` where a layer is no wider in than out (the default model: 10 -> 128, then 128 -> 128), which
    never projects the keys and runs the sparse products of every layer and head as one, ``_project_first`` (PyG's
    order) otherwise.
    """
    first = convs[0]
    if first.lin_beta is None and (not first.concat or first.heads == 1) and x.size(1) <= first.out_channels:
        out, attention = _aggregate_first(convs, x, adjacency)
    else:
        out, attention = _project_first(convs, x, adjacency)
    if not attention_weights:
        return out, None
    return out, [alpha for weights, blocks, layers in attention for alpha in _in_caller_order(weights, blocks, layers)]


def _bias(linear: nn.Module) -> Tensor:
    return linear.bias if linear.bias is not None else linear.weight.new_zeros(linear.weight.size(0))


@torch.compiler.disable  # CSR tensors: torch.compile's graphs cannot hold them; the dense products around compile
def _attend(convs: Sequence[SparseTransformerConv], left: Tensor, right: Tensor, values: Tensor, blocks: Blocks
            ) -> tuple[Tensor, tuple[Tensor, Blocks, int]]:
    """softmax over each block row (a node's incoming edges, per layer and head) of <left_row, right_column>,
    dropout, times values_column: the aggregate (as ``_spmm`` returns it) and the attention weights of the layers
    (block order, with their blocks and number of layers)."""
    alpha = softmax(_SampledDot.apply(left, right, blocks), ptr=blocks.rowptr)
    return _Aggregate.apply(_dropout_in_caller_order(convs, alpha, blocks), values, blocks), (alpha, blocks, len(convs))


def _project_first(convs: Sequence[SparseTransformerConv], x: Tensor, adjacency: Adjacency
                   ) -> tuple[Tensor, list[tuple[Tensor, Blocks, int]]]:
    """PyG's order: query, key and value of every layer and the summed root weight, one GEMM; the scores of the
    projections; the aggregation of the values."""
    first = convs[0]
    heads, channels = first.heads, first.out_channels
    width = heads * channels
    scale = 1.0 / math.sqrt(channels)  # the scores' scale, on the queries
    weights, biases = [], []
    for conv in convs:
        weights += [conv.lin_query.weight * scale, conv.lin_key.weight, conv.lin_value.weight]
        biases += [_bias(conv.lin_query) * scale, _bias(conv.lin_key), _bias(conv.lin_value)]
    if first.root_weight:
        weights.append(sum(conv.lin_skip.weight for conv in convs))
        biases.append(sum(_bias(conv.lin_skip) for conv in convs))
    # under autocast the projections come out in half precision; the sparse kernels take float32 on every device
    # (cuSPARSE's SDDMM has no bfloat16), and the scores' softmax wants it anyway
    projected = F.linear(x, torch.cat(weights), torch.cat(biases))
    out, alphas = 0, []
    for index, conv in enumerate(convs):
        query, key, value = (_at_least_float32(projected[:, (3 * index + part) * width:(3 * index + part + 1) * width]
                                               .reshape(-1, heads, channels)) for part in range(3))
        direction = adjacency if index == 0 else adjacency.flip()
        aggregated, alpha = _attend((conv,), query, key, value, direction.blocks(heads))
        out = out + (aggregated.reshape(-1, width) if first.concat else aggregated.mean(dim=1))
        alphas.append(alpha)
    if first.root_weight:
        x_r = projected[:, 3 * len(convs) * width:]
        if first.lin_beta is not None:  # one layer (shares_projections): its gate between messages and root
            beta = first.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
            out = beta * x_r + (1 - beta) * out
        else:
            out = out + x_r
    return out, alphas


def _aggregate_first(convs: Sequence[SparseTransformerConv], x: Tensor, adjacency: Adjacency
                     ) -> tuple[Tensor, list[tuple[Tensor, Blocks, int]]]:
    """The same function with fewer products where the layer is no wider in (D) than out (C): keys and values are
    never projected, and the sparse products of every layer and head are one.

    Scores: <q_i, k_j> = <(W_q x_i + b_q) / sqrt(C), W_k x_j + b_k> = <M [x_i, 1], [x_j, 1]> per head, with
    M = [[A, a], [e, d]] ([D + 1, D + 1]), A = W_k^T W_q / sqrt(C), a = W_k^T b_q / sqrt(C), e = b_k^T W_q / sqrt(C)
    and d = <b_q, b_k> / sqrt(C), built from the weights at each call: one batched GEMM gives the left operands of
    every layer and head, and the right operand is the input with a column of ones, [x_j, 1], the same for every
    layer and head (``SharedBlocks``: one SDDMM gives every score, one softmax and one SpMM aggregate them all).
    Messages: sum_j w_ij (W_v x_j + b_v) = [W_v, b_v] y_i with y_i = sum_j w_ij [x_j, 1], the attention weights w
    applied to that operand, so one GEMM after the aggregation gives every layer's mean over heads and the summed
    root weight. Per node and head that is (D + 1)^2 + (D + 1) C multiply-adds instead of 3 D C, and sparse
    products D + 1 wide instead of C.
    """
    first = convs[0]
    layers, heads, channels, width = len(convs), first.heads, first.out_channels, x.size(1)
    scale = 1.0 / math.sqrt(channels)
    operators, after = [], []
    for conv in convs:
        w_q = conv.lin_query.weight.view(heads, channels, width) * scale
        b_q = _bias(conv.lin_query).view(heads, channels, 1) * scale
        w_k, b_k = conv.lin_key.weight.view(heads, channels, width), _bias(conv.lin_key).view(heads, channels, 1)
        w_kt = w_k.transpose(1, 2)
        operators.append(torch.cat([torch.cat([w_kt @ w_q, w_kt @ b_q], dim=2),                          # [H, D, D + 1]
                                    torch.cat([b_k.transpose(1, 2) @ w_q, (b_q * b_k).sum(1, keepdim=True)], dim=2)],
                                   dim=1).transpose(1, 2))  # M^T of every head: [H, D + 1, D + 1]
        w_v, b_v = conv.lin_value.weight.view(heads, channels, width), _bias(conv.lin_value).view(heads, channels, 1)
        after.append(torch.cat([w_v, b_v], dim=2).transpose(0, 1).reshape(channels, -1) / heads)  # mean over heads
    right = _at_least_float32(torch.cat([x, x.new_ones(x.size(0), 1)], dim=1))  # [N, D + 1]
    # [L H, N, D + 1]: one batched GEMM, its rows those of the blocks (layer, head, node): the sparse products
    # take it as it is
    left = _at_least_float32(torch.bmm(right.expand(layers * heads, -1, -1), torch.cat(operators)))
    blocks = adjacency.shared_blocks(heads, both_ways=layers == 2)
    y, attention = _attend(convs, left.view(-1, width + 1), right, right, blocks)
    aggregated = list(y.view(layers * heads, -1, width + 1).unbind(0))  # [N, D + 1] per layer and head
    bias = None
    if first.root_weight:
        aggregated.append(x)
        after.append(sum(conv.lin_skip.weight for conv in convs))
        bias = sum(_bias(conv.lin_skip) for conv in convs)
    return F.linear(torch.cat(aggregated, dim=1), torch.cat(after, dim=1), bias), [attention]

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
    # head count, and the flipped Adjacency (only here: the flipped one does not point back, no reference cycle)
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
        out, (alpha,) = summed_attention((self,), x, (adjacency,))
        if isinstance(return_attention_weights, bool):
            blocks = adjacency.blocks(self.heads)
            alpha_in_caller_order = torch.empty_like(alpha)
            alpha_in_caller_order[blocks.caller] = alpha
            return out, (adjacency.edge_index, alpha_in_caller_order.view(-1, self.heads))
        return out

    def _dropout_in_caller_order(self, alpha: Tensor, blocks: HeadBlocks) -> Tensor:
        """Dropout on the attention weights with the mask PyG would draw (it draws over [E, H] in edge order),
        so that a seeded run matches PyG's class in training mode too."""
        if not self.training or self.dropout == 0.0:
            return alpha
        keep = F.dropout(alpha.new_ones(alpha.numel() // blocks.heads, blocks.heads), p=self.dropout, training=True)
        return alpha * keep.view(-1)[blocks.caller]


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


def summed_attention(convs: Sequence[SparseTransformerConv], x: Tensor, adjacencies: Sequence[Adjacency]
                     ) -> tuple[Tensor, list[Tensor]]:
    """The sum over ``convs`` of each layer on ``x`` over its adjacency (one layer, or the layers of
    ``shares_projections``), and each layer's attention weights (block order).

    Every dense product of all the layers before the sparse ones is one GEMM, and so is every one after them: the
    root weights of all the layers are one projection (their sum). Which products run is chosen by shape:
    ``_aggregate_first`` where a layer is no wider in than out (the default model: 10 -> 128, then 128 -> 128), which
    never projects the keys, ``_project_first`` (PyG's order) otherwise.
    """
    first = convs[0]
    if first.lin_beta is None and (not first.concat or first.heads == 1) and x.size(1) <= first.out_channels:
        return _aggregate_first(convs, x, adjacencies)
    return _project_first(convs, x, adjacencies)


def _bias(linear: nn.Module) -> Tensor:
    return linear.bias if linear.bias is not None else linear.weight.new_zeros(linear.weight.size(0))


@torch.compiler.disable  # CSR tensors: torch.compile's graphs cannot hold them; the dense products around compile
def _attend(conv: SparseTransformerConv, left: Tensor, right: Tensor, values: Tensor, blocks: HeadBlocks
            ) -> tuple[Tensor, Tensor]:
    """softmax over each node's incoming edges of <left_i, right_j> (per head), dropout, times values_j: the
    aggregate [N, H, width of values] and the attention weights (block order)."""
    alpha = softmax(_SampledDot.apply(left, right, blocks), ptr=blocks.rowptr)  # per block row: one node, one head
    return _Aggregate.apply(conv._dropout_in_caller_order(alpha, blocks), values, blocks), alpha


def _project_first(convs: Sequence[SparseTransformerConv], x: Tensor, adjacencies: Sequence[Adjacency]
                   ) -> tuple[Tensor, list[Tensor]]:
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
    for index, (conv, adjacency) in enumerate(zip(convs, adjacencies)):
        query, key, value = (_at_least_float32(projected[:, (3 * index + part) * width:(3 * index + part + 1) * width]
                                               .reshape(-1, heads, channels)) for part in range(3))
        aggregated, alpha = _attend(conv, query, key, value, adjacency.blocks(heads))
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


def _aggregate_first(convs: Sequence[SparseTransformerConv], x: Tensor, adjacencies: Sequence[Adjacency]
                     ) -> tuple[Tensor, list[Tensor]]:
    """The same function with fewer products where the layer is no wider in (D) than out (C): keys and values are
    never projected.

    Scores: <q_i, k_j> = <(W_q x_i + b_q) / sqrt(C), W_k x_j + b_k> = <[A x_i + a, e.x_i + d], [x_j, 1]> per
    head, with A = W_k^T W_q / sqrt(C) ([D, D]), a = W_k^T b_q / sqrt(C), e = W_q^T b_k / sqrt(C) and d = <b_q,
    b_k> / sqrt(C), built from the weights at each call: one GEMM gives the left operands of every head and
    layer, and the right operand is the input itself. Messages: sum_j w_ij (W_v x_j + b_v) = [W_v, b_v] y_i with
    y_i = sum_j w_ij [x_j, 1], the attention weights w applied to the input, so one GEMM after the aggregation
    gives every layer's mean over heads and the summed root weight. Per node and head that is D (D + 1) + (D + 1) C
    multiply-adds instead of 3 D C, and sparse products D + 1 wide instead of C.
    """
    first = convs[0]
    heads, channels, width = first.heads, first.out_channels, x.size(1)
    scale = 1.0 / math.sqrt(channels)
    lefts, left_biases, after = [], [], []
    for conv in convs:
        w_q = conv.lin_query.weight.view(heads, channels, width) * scale
        b_q = _bias(conv.lin_query).view(heads, channels, 1) * scale
        w_k, b_k = conv.lin_key.weight.view(heads, channels, width), _bias(conv.lin_key).view(heads, channels, 1)
        w_kt = w_k.transpose(1, 2)
        lefts.append(torch.cat([w_kt @ w_q, (w_q.transpose(1, 2) @ b_k).transpose(1, 2)], dim=1))  # [H, D + 1, D]
        left_biases.append(torch.cat([w_kt @ b_q, (b_q * b_k).sum(1, keepdim=True)], dim=1))      # [H, D + 1, 1]
        w_v, b_v = conv.lin_value.weight.view(heads, channels, width), _bias(conv.lin_value).view(heads, channels, 1)
        after.append(torch.cat([w_v, b_v], dim=2).transpose(0, 1).reshape(channels, -1) / heads)  # mean over heads
    # [layers, N, H (D + 1)]: one batched GEMM whose per-layer results are contiguous, so that the sparse products
    # take them as they are (unbind, not slices: a slice's backward fills a zero gradient of the whole first)
    lefts = torch.stack(lefts).view(len(convs), heads * (width + 1), width).transpose(1, 2)
    left = torch.baddbmm(torch.stack(left_biases).view(len(convs), 1, -1), x.expand(len(convs), -1, -1), lefts)
    right = _at_least_float32(torch.cat([x, x.new_ones(x.size(0), 1)], dim=1))
    right = right.unsqueeze(1).expand(-1, heads, -1).contiguous()  # [N, H, D + 1]: every head's operand, one copy
    aggregated, alphas = [], []
    for conv, adjacency, left_of_conv in zip(convs, adjacencies, _at_least_float32(left).unbind(0)):
        y, alpha = _attend(conv, left_of_conv.view(-1, heads, width + 1), right, right, adjacency.blocks(heads))
        aggregated.append(y.reshape(-1, heads * (width + 1)))
        alphas.append(alpha)
    bias = None
    if first.root_weight:
        aggregated.append(x)
        after.append(sum(conv.lin_skip.weight for conv in convs))
        bias = sum(_bias(conv.lin_skip) for conv in convs)
    return F.linear(torch.cat(aggregated, dim=1), torch.cat(after, dim=1), bias), alphas


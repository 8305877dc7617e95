"""PyG's ``TransformerConv`` computed with sparse matrix products, in memory that grows with the graph.

PyG's ``TransformerConv`` gathers ``query_i``, ``key_j`` and ``value_j`` for every edge and multiplies them
elementwise: tensors of shape [edges, heads, channels], several of them kept for the backward pass. A causal
set of 1,024 elements has about 27,000 links, so a batch of 32 holds 870,000 edges and one such tensor at 2 x 128
channels is 0.9 GB; the default model (3 layers, both directions) needed 23.6 GB at N = 1,024 and batch 32.

``SparseTransformerConv`` computes the same function with no tensor larger than [edges, heads]:

- the scores ``<q_i, k_j>`` of every edge j -> i are a sampled dense-dense product (SDDMM,
  ``torch.sparse.sampled_addmm``): ``Q K^T`` evaluated only where the adjacency has an entry;
- the softmax runs over each node's incoming edges on the [edges, heads] scores (PyG's own ``softmax``);
- the aggregation ``sum_j alpha_ij v_j`` is a sparse-dense product (SpMM, CSR @ dense);
- their backward passes (``_SampledDot``, ``_Aggregate``) are again SDDMMs and SpMMs, with the transposed
  adjacency for the gradients of keys and values.

The same ``torch.sparse`` CSR kernels run on CPU (MKL) and CUDA (cuSPARSE); nothing here names a device.
It subclasses ``TransformerConv``: same parameters, names, shapes, initialisation and ``state_dict``, so a
checkpoint of one loads into the other and the same seed gives the same weights.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional as F
from torch_geometric.nn import TransformerConv
from torch_geometric.utils import softmax

# torch warns once per process that CSR support is "beta"; the kernels used here (sampled_addmm, CSR @ dense)
# are the ones torch.sparse documents for both devices. The warning is noise in every user's log.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state", category=UserWarning)


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
        """The reversed edges i -> j: CSR and transposed CSR swap roles."""
        inverse = torch.empty_like(self.to_t)
        inverse[self.to_t] = torch.arange(self.to_t.numel(), device=self.to_t.device)
        return Adjacency(self.num_nodes, self.rowptr_t, self.col_t, self.order_t, self.rowptr, self.col, inverse,
                         self.order, self.edge_index.flip(0))

    def target(self) -> Tensor:
        """The target node of each edge in CSR order."""
        counts = self.rowptr[1:] - self.rowptr[:-1]
        return torch.repeat_interleave(torch.arange(self.num_nodes, device=counts.device), counts)

    def matrix(self, values: Tensor, transposed: bool = False) -> Tensor:
        """The [N, N] CSR matrix with ``values`` (CSR order) at the edges, or its transpose."""
        if transposed:
            return _csr(self.rowptr_t, self.col_t, values[self.to_t], self.num_nodes)
        return _csr(self.rowptr, self.col, values, self.num_nodes)


def _sort_by(major: Tensor, minor: Tensor, num_nodes: int) -> Tensor:
    # sorted columns within a row: what the CSR kernels (MKL, cuSPARSE) expect
    return torch.argsort(major * num_nodes + minor, stable=True)


def _rowptr(rows: Tensor, num_nodes: int) -> Tensor:
    rowptr = rows.new_zeros(num_nodes + 1)
    rowptr[1:] = torch.bincount(rows, minlength=num_nodes).cumsum(0)
    return rowptr


def _csr(rowptr: Tensor, col: Tensor, values: Tensor, num_nodes: int) -> Tensor:
    return torch.sparse_csr_tensor(rowptr, col, values, (num_nodes, num_nodes), check_invariants=False)


def _sddmm(adjacency: Adjacency, left: Tensor, right: Tensor) -> Tensor:
    """[E, H] in CSR order: <left[i, h], right[j, h]> for every edge j -> i, per head, without [E, H, C]."""
    mask = adjacency.matrix(left.new_zeros(adjacency.col.numel()))
    with _in_float32(left):
        return torch.stack([torch.sparse.sampled_addmm(mask, left[:, h].contiguous(), right[:, h].contiguous().T,
                                                       beta=0.0).values()
                            for h in range(left.size(1))], dim=1)


def _spmm(adjacency: Adjacency, weights: Tensor, dense: Tensor, transposed: bool = False) -> Tensor:
    """[N, H, C]: per head, the CSR matrix of ``weights`` [E, H] (or its transpose) times ``dense`` [N, H, C]."""
    with _in_float32(dense):
        return torch.stack([adjacency.matrix(weights[:, h].contiguous(), transposed) @ dense[:, h].contiguous()
                            for h in range(dense.size(1))], dim=1)


def _in_float32(tensor: Tensor):
    """Autocast off around the sparse products: it would cast CSR @ dense to half precision, which the CSR
    kernels do not take (MKL: no bfloat16); the inputs are float32 already (``_at_least_float32``)."""
    return torch.autocast(device_type=tensor.device.type, enabled=False)


def _at_least_float32(tensor: Tensor) -> Tensor:
    return tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor


class _SampledDot(torch.autograd.Function):
    """scores[e, h] = <query[i, h], key[j, h]> for the edges e = j -> i (CSR order)."""

    @staticmethod
    def forward(ctx, query: Tensor, key: Tensor, adjacency: Adjacency) -> Tensor:
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
    """out[i, h] = sum over the edges e = j -> i of weights[e, h] * value[j, h]."""

    @staticmethod
    def forward(ctx, weights: Tensor, value: Tensor, adjacency: Adjacency) -> Tensor:
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

        scores = _SampledDot.apply(query, key, adjacency) / math.sqrt(channels)
        alpha = softmax(scores, adjacency.target(), num_nodes=adjacency.num_nodes)
        weights = self._dropout_in_caller_order(alpha, adjacency)
        out = _Aggregate.apply(weights, value, adjacency)

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
            alpha_in_caller_order[adjacency.order] = alpha
            return out, (adjacency.edge_index, alpha_in_caller_order)
        return out

    def _dropout_in_caller_order(self, alpha: Tensor, adjacency: Adjacency) -> Tensor:
        """Dropout on the attention weights with the mask PyG would draw (it draws over [E, H] in edge order),
        so that a seeded run matches PyG's class in training mode too."""
        if not self.training or self.dropout == 0.0:
            return alpha
        keep = F.dropout(alpha.new_ones(alpha.shape), p=self.dropout, training=True)
        return alpha * keep[adjacency.order]

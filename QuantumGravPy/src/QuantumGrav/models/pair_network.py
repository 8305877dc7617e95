"""A pair-level network with triangle updates (PPGN, Maron et al., NeurIPS 2019; the 2-FWL of Morris et al.): dense
states on every ordered pair of a set's elements, updated by batched matrix products over the third element.

What it can compute that message passing cannot: each block multiplies two learned functions of the pair states,
P[i, j] = (1/N) sum_k m1[i, k] m2[k, j], which is one step of 2-FWL colour refinement (as powerful as 3-WL), so it
counts the elements between two related ones (|I(x, y)| is R R), the common past and future of any two elements and
every triangle pattern of related, unrelated and linked pairs. Deciding dimension <= 2 asks whether the unrelated
pairs can be oriented transitively; Golumbic's forcing, which finds such an orientation, is a rule over triangles
(i-j and i-k unrelated, j and k related: the two pairs point the same way at i) and propagates by exactly these
products, one Gamma-step per block. ``realizer.RealizerHead`` reads the orientation off the final pair states, so the
model has the computation a transitive orientation needs in principle (with a symmetry-breaking seed the data, not
the model, must provide: the states are equivariant); whether training finds it is what the study measures.

Input channels of pair (i, j): i < j, j < i, unrelated, link i -< j, link j -< i, |I(i, j)| / N and |I(j, i)| / N,
i == j, and each element's features (``x``, ``order_pe``) on the diagonal, as PPGN puts them. Each block reads the
states and their transpose, forms the product, and mixes it back (1x1 maps, a residual connection, a per-pair
normalisation over the channels); padded elements stay zero. The readout: each element's state (its diagonal entry
and the means of its row and column) pooled by ``readouts.GraphReadout``, and the mean and the largest pair state
per channel: a defect of a few relations is a few anomalous pairs among N^2 (a link removed from a sprinkling leaves
an unrelated pair whose pasts and futures nest, a triangle count), which a mean dilutes and a maximum keeps.

Cost: ``layers * channels * N^3`` multiply-adds per set and about ``10 * channels * N^2`` floats per block kept for
the backward pass (``benchmarks/order_models``: affordable at N = 128, not at N = 1,024 on a CPU). Written here:
the blocks (PyG has no dense 2-FWL layer); the products are ``torch.matmul``, the readouts PyG's aggregations.
"""

from __future__ import annotations

import torch
from torch import nn

from .gnn import ACTIVATIONS, GraphFeatureNorm
from .order_inputs import attribute, dense_order, read_order, set_features
from .readouts import GraphReadout
from .realizer import RealizerHead, add_to_loss

PAIR_INPUTS = 8  # the pair channels before the elements' features (see the module's docstring)


class TriangleBlock(nn.Module):
    """One PPGN block on pair states [G, n, n, C]: LayerNorm(X + mix(X, X^T, m1 @ m2 / N)), where m1 and m2 are one
    learned map of (X, X^T) each and @ multiplies over the third element, channel by channel. The maps of (X, X^T)
    are applied to X alone and the part for X^T transposed after (no [G, n, n, 2C] copy), and are single linear
    layers: at these sizes every pass over the pair states costs more than the product (``benchmarks/order_models``)."""

    def __init__(self, channels: int, activation: str):
        super().__init__()
        self.channels = channels
        self.inner = nn.Linear(channels, 4 * channels)  # m1 and m2 from X, and from X^T
        self.mix = nn.Linear(channels, 2 * channels)  # the update from X and from X^T
        self.mix_product = nn.Linear(channels, channels, bias=False)
        self.activation = ACTIVATIONS[activation]()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x: torch.Tensor, pair_mask: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        direct, transposed = self.inner(x).split(2 * self.channels, dim=-1)
        first, second = (self.activation(direct + transposed.transpose(1, 2)) * pair_mask).split(self.channels, -1)
        product = (first.permute(0, 3, 1, 2) @ second.permute(0, 3, 1, 2)).permute(0, 2, 3, 1) / sizes
        direct, transposed = self.mix(x).split(self.channels, dim=-1)
        update = direct + transposed.transpose(1, 2) + self.mix_product(product)
        return self.norm(x + update) * pair_mask


class PairNetwork(nn.Module):
    """``model.type: !pyobject QuantumGrav.models.pair_network.PairNetwork`` (``configs/order_pair_network.yaml``).

    Args:
        in_channels: element features ``x``; out_channels: outputs per set.
        channels: the width of every pair state.
        layers: the triangle blocks.
        pe_channels: the width of ``data.order_pe`` to put on the diagonal (0: none).
        readout, readout_width: ``readouts.GraphReadout``'s kind and width over the element states.
        realizer_dimension: d > 0 adds ``realizer.RealizerHead`` on the pair states (its loss added to training's
            with ``realizer_weight``; its per-set loss and violations join the head).
        set_features: F > 0 makes it a hybrid: ``data.set_features`` [graphs, F] join the head.
        head_hidden, dropout, activation: the classifier head.
    """

    def __init__(self, in_channels: int, out_channels: int, *, channels: int = 16, layers: int = 3,
                 pe_channels: int = 0, readout: str = "distribution", readout_width: int = 16,
                 realizer_dimension: int = 0, realizer_weight: float = 1.0, set_features: int = 0,
                 head_hidden: tuple[int, ...] = (64,), dropout: float = 0.1, activation: str = "relu"):
        super().__init__()
        if channels < 1 or layers < 1:
            raise ValueError(f"PairNetwork: channels and layers must be >= 1, got {channels}, {layers}")
        self.in_channels, self.pe_channels, self.set_width = in_channels, pe_channels, set_features
        self.embed = nn.Linear(PAIR_INPUTS + in_channels + pe_channels, channels)
        self.blocks = nn.ModuleList(TriangleBlock(channels, activation) for _ in range(layers))
        self.readout = GraphReadout(3 * channels, readout, readout_width)
        self.realizer = RealizerHead(channels, realizer_dimension) if realizer_dimension else None
        self.realizer_weight = realizer_weight
        width = self.readout.out_width + 2 * channels + set_features + (RealizerHead.num_features if self.realizer else 0)
        self.set_norm = GraphFeatureNorm(set_features) if set_features else None
        head: list[nn.Module] = []
        for hidden in head_hidden:
            head += [nn.Linear(width, hidden), ACTIVATIONS[activation](), nn.Dropout(dropout)]
            width = hidden
        self.head = nn.Sequential(*head, nn.Linear(width, out_channels))

    def pair_inputs(self, data, R: torch.Tensor, between: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The input pair channels [G, n, n, C0]."""
        n = R.size(1)
        sizes = mask.sum(1).clamp(min=1).to(R.dtype).view(-1, 1, 1)
        eye = torch.eye(n, dtype=R.dtype, device=R.device).expand_as(R)
        pairs = (mask[:, :, None] & mask[:, None, :]).to(R.dtype)
        links = R * (between == 0)
        interval = R * between / sizes
        unrelated = (1 - R - R.transpose(1, 2) - eye) * pairs
        channels = [R, R.transpose(1, 2), unrelated, links, links.transpose(1, 2), interval,
                    interval.transpose(1, 2), eye * pairs]
        nodes = data.x if not self.pe_channels else torch.cat([data.x, attribute(data, "order_pe", "PairNetwork")], 1)
        if nodes.size(1) != self.in_channels + self.pe_channels:
            raise ValueError(f"PairNetwork: expected {self.in_channels} node features and {self.pe_channels} "
                             f"order_pe columns, got {nodes.size(1)} columns in all")
        diagonal = R.new_zeros(R.size(0), n, n, nodes.size(1))
        position = torch.arange(n, device=R.device)
        dense = R.new_zeros(R.size(0), n, nodes.size(1))
        dense[mask] = nodes.to(R.dtype)
        diagonal[:, position, position] = dense
        return torch.cat([torch.stack(channels, -1), diagonal], -1)

    def forward(self, data) -> torch.Tensor:
        order = read_order(data, "PairNetwork")
        R, between, mask = dense_order(data, order, "PairNetwork")
        pair_mask = (mask[:, :, None] & mask[:, None, :]).to(R.dtype)[..., None]
        sizes = mask.sum(1).clamp(min=1).to(R.dtype).view(-1, 1, 1, 1)
        x = self.embed(self.pair_inputs(data, R, between, mask)) * pair_mask
        for block in self.blocks:
            x = block(x, pair_mask, sizes)
        position = torch.arange(x.size(1), device=x.device)
        rows, columns = x.sum(2) / sizes[..., 0], x.sum(1) / sizes[..., 0]  # [G, n, C]
        elements = torch.cat([x[:, position, position], rows, columns], -1)[mask]  # [nodes, 3C]
        largest = x.masked_fill(pair_mask == 0, float("-inf")).amax((1, 2))  # one anomalous pair among N^2 is kept
        parts = [self.readout(elements, order.graph, order.num_graphs), x.sum((1, 2)) / sizes[:, :, 0, 0] ** 2, largest]
        extra = None
        if self.realizer is not None:
            features, extra = self.realizer(x, R, mask)
            parts.append(features)
        if self.set_norm is not None:
            parts.append(self.set_norm(set_features(data, self.set_width, "PairNetwork")))
        out = self.head(torch.cat(parts, 1))
        return out if extra is None else add_to_loss(out, extra, self.realizer_weight)

"""A realizer head: d coordinates per element whose product order should reproduce the relation, trained with a
soft-order loss; its residual is a learned, any-d cousin of the exact 2D-order test.

An order has dimension <= d iff it is the intersection of d linear orders (a realizer): x < y iff x is below y in
every one, i.e. iff the coordinates c_k(x), the positions in the d linear orders, satisfy c_k(x) < c_k(y) for all k.
For d = 2 these are the two light-cone coordinates of a sprinkling, whatever the conformal factor. The head predicts
coordinates for every element and scores, for every ordered pair (i, j) of a set, a smooth minimum over k of
c_k(j) - c_k(i) against the relation R[i, j] (binary cross-entropy): 0 loss and 0 violations are reachable exactly
for sets of dimension <= d. Its per-set outputs, the soft-order loss and the share of pairs the product order gets
wrong, join the classifier's head *detached*: the head reads an honest measurement, and only the soft-order loss,
added to the training loss (``add_to_loss``), shapes the coordinates.

Where the coordinates come from decides what the head can compute:

* ``level="pair"`` (from the pair network's states): each coordinate is a soft rank in a linear extension,
  c_k(j) = (1/N) sum_i b_k[i, j], where b_k[i, j] = 1 if i < j, 0 if j < i, and for unrelated i, j a learned
  antisymmetric orientation sigmoid(a_k[i, j] - a_k[j, i]). With d = 2 and the orientation a transitive orientation
  Q of the incomparable pairs, R + Q and R + Q^T are linear orders whose intersection is R (Dushnik and Miller): the
  head realizes every 2D order exactly when the pair states orient the incomparable pairs transitively, which is
  what triangle updates can propagate (Golumbic's forcing: i-j and i-k unrelated with j, k related force the same
  orientation at i). Tied coordinates (twins, whose orientation no equivariant model can choose) read as unrelated,
  which they are.
* ``level="element"`` (from message-passing states): c = linear map of each element's state, a heuristic embedding
  (a 1-WL model cannot orient the incomparable pairs consistently in general).
"""

from __future__ import annotations

import torch
from torch import nn

LEVELS = ("pair", "element")


class _AddToLoss(torch.autograd.Function):
    """Identity on ``outputs``; the backward pass hands ``extra`` the gradient ``weight``, so that training
    minimises the task's loss plus ``weight * extra`` whatever the trainer's criterion is."""

    @staticmethod
    def forward(ctx, outputs: torch.Tensor, extra: torch.Tensor, weight: float) -> torch.Tensor:
        ctx.weight, ctx.extra_shape = weight, extra.shape
        return outputs.view_as(outputs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, grad.new_full(ctx.extra_shape, ctx.weight), None


def add_to_loss(outputs: torch.Tensor, extra: torch.Tensor, weight: float) -> torch.Tensor:
    """``outputs`` unchanged, with ``weight * extra`` (a scalar) added to whatever loss is taken of them when the
    gradient flows (training); a no-op when no gradient is asked for (validation, test)."""
    if not (torch.is_grad_enabled() and extra.requires_grad and weight):
        return outputs
    return _AddToLoss.apply(outputs, extra, weight)


def soft_order(coordinates: torch.Tensor, R: torch.Tensor, mask: torch.Tensor, margin: torch.Tensor,
               temperature: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per set [G]: the mean soft-order loss over its ordered pairs of distinct elements, and the share of them
    where the product order of ``coordinates`` [G, n, d] (i < j iff c_k(j) - c_k(i) > margin for every k) differs
    from ``R`` [G, n, n]. ``margin`` and ``temperature``: [G, 1, 1]."""
    difference = coordinates[:, None, :, :] - coordinates[:, :, None, :]  # [G, i, j, d]: c(j) - c(i)
    smooth_min = -temperature * torch.logsumexp(-difference / temperature[..., None], dim=-1)  # [G, i, j]
    logits = (smooth_min - margin) / temperature
    n = R.size(1)
    pairs = (mask[:, :, None] & mask[:, None, :] & ~torch.eye(n, dtype=torch.bool, device=R.device)).to(R.dtype)
    count = pairs.sum((1, 2)).clamp(min=1)
    loss = nn.functional.binary_cross_entropy_with_logits(logits, R, reduction="none")
    wrong = ((difference.amin(-1) > margin) != (R > 0)).to(R.dtype)
    return (loss * pairs).sum((1, 2)) / count, (wrong * pairs).sum((1, 2)) / count


class RealizerHead(nn.Module):
    """Coordinates of ``dimension`` linear orders per element, their soft-order loss and violations per set.

    Args:
        channels: the width of the states read (pair states [G, n, n, C] or element states [G, n, C]).
        dimension: d, the linear orders of the realizer.
        level: ``"pair"`` or ``"element"`` (see the module's docstring).
        temperature: of the smooth minimum and the loss, in units of 1/N for ``pair`` (coordinates are ranks / N,
            1/N apart), absolute for ``element``.

    ``forward`` returns the per-set features [G, 2] (log of the loss + 1e-3, the share of pairs wrong; detached) and
    the batch's mean soft-order loss (a scalar with its gradient, for ``add_to_loss``).
    """

    num_features = 2

    def __init__(self, channels: int, dimension: int = 2, level: str = "pair", temperature: float = 0.1):
        super().__init__()
        if level not in LEVELS:
            raise ValueError(f"realizer level: expected one of {LEVELS}, got {level!r}")
        if dimension < 1 or temperature <= 0:
            raise ValueError(f"realizer: dimension must be >= 1 and temperature > 0, got {dimension}, {temperature}")
        self.level, self.temperature = level, temperature
        self.coordinates = nn.Linear(channels, dimension)

    def forward(self, states: torch.Tensor, R: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self._check(states, R, mask)
        sizes = mask.sum(1).clamp(min=1).to(R.dtype).view(-1, 1, 1)
        if self.level == "pair":
            a = self.coordinates(states)  # [G, n, n, d]
            unrelated = (1 - R - R.transpose(1, 2)) * (mask[:, :, None] & mask[:, None, :]).to(R.dtype)
            unrelated = unrelated * (1 - torch.eye(R.size(1), dtype=R.dtype, device=R.device))
            below = R[..., None] + unrelated[..., None] * torch.sigmoid(a - a.transpose(1, 2))
            coordinates = below.sum(1) / sizes  # [G, n, d]: each element's soft rank in each linear order
            margin, temperature = 0.5 / sizes, self.temperature / sizes
        else:
            coordinates = self.coordinates(states)
            # a tolerance, so that twins (equal states up to float rounding) read as unrelated whatever the labels
            margin, temperature = torch.full_like(sizes, 1e-3), torch.full_like(sizes, self.temperature)
        loss, wrong = soft_order(coordinates, R, mask, margin, temperature)
        features = torch.stack([torch.log(loss.detach() + 1e-3), wrong.detach()], dim=1)
        return features, loss.mean()

    def _check(self, states: torch.Tensor, R: torch.Tensor, mask: torch.Tensor) -> None:
        """One ValueError for states, relation or mask of the wrong shape, and for a relation that is no strict
        order on its pairs (an entry other than 0 or 1, an element below itself, two elements below each other):
        the loss would train the coordinates towards it. Transitivity is the models' check (``order_inputs``)."""
        width = self.coordinates.in_features
        expected = [*R.shape, width] if self.level == "pair" else [*R.shape[:2], width]
        if R.dim() != 3 or R.size(1) != R.size(2) or list(states.shape) != expected or \
                list(mask.shape) != list(R.shape[:2]):
            raise ValueError(f"realizer ({self.level}): expected R [G, n, n], mask [G, n] and states "
                             f"{'[G, n, n, C]' if self.level == 'pair' else '[G, n, C]'} with C = {width}, got "
                             f"R {list(R.shape)}, mask {list(mask.shape)}, states {list(states.shape)}")
        with torch.no_grad():
            if not ((R == 0) | (R == 1)).all():
                raise ValueError("realizer: the relation R must hold 0 and 1 only")
            if R.diagonal(dim1=1, dim2=2).any():
                raise ValueError("realizer: the relation is no partial order: an element precedes itself")
            both = (R * R.transpose(1, 2)).nonzero()
            if len(both):
                g, i, j = (int(v) for v in both[0])
                raise ValueError(f"realizer: the relation is no partial order: in set {g}, {i} and {j} precede "
                                 "each other")

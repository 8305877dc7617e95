"""FLOPs of a training step with sparse products counted as what they compute (by their nonzeros).

Self-contained (torch only), so that a benchmark can load it from its file to count another source tree's step
the same way (``benchmarks/step_vs_peak``).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode


class ProductCounter(FlopCounterMode):
    """``torch.utils.flop_counter.FlopCounterMode`` that counts a sparse product by its nonzeros: 2 * nnz * width
    FLOPs for a SpMM (CSR @ dense, SparseTransformerConv's aggregation) and a SDDMM (``sampled_addmm``), where the stock formulas count the
    CSR operand as a dense [N * heads, N * heads] matrix. ``dense`` and ``sparse`` split the total by kind.

    Example:
        >>> import torch
        >>> counter = ProductCounter()
        >>> with counter:
        ...     _ = torch.randn(4, 3) @ torch.randn(3, 2)
        >>> counter.dense, counter.sparse
        (48, 0)
    """

    def __init__(self):
        self.sparse = 0
        super().__init__(display=False, custom_mapping={torch.ops.aten.mm: self._raw(self._mm),
                                                        torch.ops.aten.addmm: self._raw(self._addmm),
                                                        torch.ops.aten.sparse_sampled_addmm: self._raw(self._sddmm)})

    @property
    def dense(self) -> int:
        return self.get_total_flops() - self.sparse

    @staticmethod
    def _raw(formula):
        def counted(*args, out_val=None, **kwargs):
            return formula(*args)
        counted._get_raw = True  # FlopCounterMode hands such formulas the tensors, not their shapes
        return counted

    def _mm(self, left: Tensor, right: Tensor) -> int:
        if left.layout != torch.sparse_csr:
            return 2 * left.size(0) * left.size(1) * right.size(1)
        flops = 2 * left._nnz() * right.size(1)
        self.sparse += flops
        return flops

    def _addmm(self, _input: Tensor, left: Tensor, right: Tensor, *rest) -> int:
        return self._mm(left, right)

    def _sddmm(self, mask: Tensor, left: Tensor, right: Tensor, *rest) -> int:
        flops = 2 * mask._nnz() * left.size(1)
        self.sparse += flops
        return flops

"""Fixed rows whose leading features are mostly zero (bag-of-words) and need no gradient,
held by their non-zero entries, and a Linear layer over them with input dropout
(:func:`sparse_linear`): DPDGC's full-batch classifier reads its 2,033 training rows of
Cora (1,433 features, 1.3 % non-zero) 200 times, and the dense product with its weight
gradient was most of its CPU time (issue 52 §7)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

#: Rows are held sparsely when at most one feature entry in this many is non-zero.
SPARSE_DENSITY = 8


def _csr(crow: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.filterwarnings("ignore", "Sparse CSR tensor support", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


def dropout_values(values: Tensor, p: float) -> Tensor:
    """``values`` after dropout with probability ``p`` (0 < p < 1): each kept with
    probability 1 − p (its mask drawn as ``torch.rand(...) >= p`` from torch's global
    generator, in ``values``' order) and scaled by 1/(1 − p): dropout's distribution. The
    one draw of :meth:`SparseRows.dropped`, ``input_dropout`` and ``mask_dropout``."""
    keep = torch.rand(values.shape, device=values.device) >= p
    return values * keep.to(values.dtype).mul_(1.0 / (1.0 - p))


def _row_pointers(rows: Tensor, num_rows: int) -> Tensor:
    crow = torch.zeros(num_rows + 1, dtype=torch.long, device=rows.device)
    crow[1:] = torch.bincount(rows, minlength=num_rows).cumsum(0)
    return crow


@dataclass(frozen=True)
class SparseRows:
    """Rows ``[x_v, H_v]`` with x ``[n, in_dim]`` held as its non-zero entries (row-major,
    ``x.nonzero()``'s order) in compressed-row form, and x's transpose likewise (for the
    weight gradient), beside the dense H ``[n, w]``. Built once by :meth:`of`."""

    crow: Tensor  # [n + 1] row pointers of x
    col: Tensor  # [nnz] columns of x's entries, row-major
    values: Tensor  # [nnz]
    t_crow: Tensor  # [in_dim + 1] row pointers of x^T
    t_col: Tensor  # [nnz] its columns (rows of x)
    t_order: Tensor  # [nnz]: x^T's entries as positions in ``values``
    h: Tensor  # [n, w]
    in_dim: int

    @classmethod
    def of(cls, xh: Tensor, in_dim: int) -> SparseRows | None:
        """The rows ``xh`` ``[n, in_dim + w]`` in this form; :obj:`None` when its first
        ``in_dim`` columns are not sparse enough (more than one entry in
        :data:`SPARSE_DENSITY` non-zero) or ``xh`` needs a gradient."""
        if xh.requires_grad or xh.layout != torch.strided or xh.dim() != 2:
            return None
        x = xh[:, :in_dim]
        rows, cols = x.nonzero(as_tuple=True)
        if rows.numel() * SPARSE_DENSITY > x.numel():
            return None
        order = torch.argsort(cols * x.shape[0] + rows)
        return cls(_row_pointers(rows, x.shape[0]), cols.contiguous(),
                   x[rows, cols].contiguous(), _row_pointers(cols, in_dim),
                   rows[order].contiguous(), order, xh[:, in_dim:].contiguous(), in_dim)

    @property
    def num_rows(self) -> int:
        return int(self.crow.numel() - 1)

    def dropped(self, p: float) -> Tensor:
        """x's non-zero values after dropout with probability ``p``: each kept with
        probability 1 − p (drawn as ``torch.rand(nnz) >= p`` from torch's global
        generator, row-major, as :func:`~dpgnn_core.models.dpdgc.input_dropout` does) and
        scaled by 1/(1 − p). A zero entry is zero whatever its mask, so x then has
        dropout's distribution exactly."""
        if p <= 0.0:
            return self.values
        if p >= 1.0:
            return torch.zeros_like(self.values)
        return dropout_values(self.values, p)

    def matrices(self, values: Tensor) -> tuple[Tensor, Tensor]:
        """x and x^T, sparse (CSR), with non-zero ``values`` (row-major)."""
        n = self.num_rows
        return (_csr(self.crow, self.col, values, (n, self.in_dim)),
                _csr(self.t_crow, self.t_col, values[self.t_order], (self.in_dim, n)))

    def dense(self) -> Tensor:
        """The rows ``[x_v, H_v]`` as one dense tensor."""
        return torch.cat([self.matrices(self.values)[0].to_dense(), self.h], 1)


class _SparseLinear(torch.autograd.Function):
    """x W^T + b for a sparse x (no gradient); W's gradient is x^T's product with the
    output's (x^T held in compressed-row form too: transposing x at every backward pass
    costs more than the product)."""

    @staticmethod
    def forward(ctx: Any, weight: Tensor, bias: Tensor, x: Tensor, xt: Tensor) -> Tensor:
        ctx.xt = xt
        return torch.addmm(bias, x, weight.t())

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
        gw = (ctx.xt @ grad).t().contiguous() if ctx.needs_input_grad[0] else None
        gb = grad.sum(0) if ctx.needs_input_grad[1] else None
        return gw, gb, None, None


def sparse_linear(rows: SparseRows, weight: Tensor, bias: Tensor, dropout: float = 0.0
                  ) -> Tensor:
    """``nn.functional.linear(dropout(x), weight, bias)`` ``[n, out]`` for the sparse
    feature part x of ``rows`` (dropout with probability ``dropout``:
    :meth:`SparseRows.dropped`)."""
    if rows.in_dim != weight.shape[1]:
        raise ValueError(f"rows of {rows.in_dim} features, a Linear layer of "
                         f"{weight.shape[1]}")
    x, xt = rows.matrices(rows.dropped(dropout))
    out: Tensor = _SparseLinear.apply(weight, bias, x, xt)  # type: ignore[no-untyped-call]
    return out


__all__ = ["SPARSE_DENSITY", "SparseRows", "dropout_values", "sparse_linear"]

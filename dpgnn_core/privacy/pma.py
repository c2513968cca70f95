"""GAP's private multi-hop aggregation (PMA, Sajadmanesh et al.) as pure math: the
row-normalised sum over in-neighbours, row clipping, the Gaussian noise of each hop, and
the L2 sensitivity of one hop at edge and node level (derived in docs/privacy.md, "GAP's
composition"). GAP, ProGAP and their tests use it; the recipe is
:mod:`dpgnn_core.methods.gap`."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from dpgnn_core.errors import DataError

if TYPE_CHECKING:  # annotation only: the progress callback of the methods layer
    from dpgnn_core.methods._private import StageProgress


def row_normalise(x: Tensor) -> Tensor:
    """Each row scaled to unit L2 norm (zero rows stay zero)."""
    out: Tensor = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return out


def aggregation_matrix(edge_index: Tensor, num_nodes: int) -> Tensor:
    """:math:`A^\\top` as a sparse CSR matrix: row i sums the rows of the nodes that send to
    i (``edge_index`` src -> dst, without duplicates, as datasets store them).

    CSR rather than COO: ``torch.sparse.mm`` runs about twice as fast, and a stable sort by
    destination replaces COO's coalesce (a sort and a merge of duplicates) at build time."""
    src, dst = edge_index[0], edge_index[1]
    if edge_index.shape[1] and not bool((dst[1:] >= dst[:-1]).all()):
        dst, order = torch.sort(dst, stable=True)
        src = src[order]
    crow = torch.zeros(num_nodes + 1, dtype=torch.int64, device=edge_index.device)
    crow[1:] = torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0)
    values = torch.ones(src.shape[0], device=edge_index.device)
    with warnings.catch_warnings():  # torch marks sparse CSR as beta at every construction
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, src, values, (num_nodes, num_nodes),
                                       check_invariants=False)


def clip_rows(x: Tensor, c: float | None) -> Tensor:
    """Each row scaled down to L2 norm at most ``c`` (:obj:`None`: unchanged). A projection
    onto a ball, hence non-expansive: ``||clip(a) - clip(b)|| <= ||a - b||``."""
    if c is None:
        return x
    out: Tensor = x * (c / x.norm(dim=1, keepdim=True).clamp_min(c))
    return out


def pma(x0: Tensor, adj_t: Tensor, hops: int, sigma: float,
        generator: torch.Generator | None = None, row_clip: float | None = None,
        progress: StageProgress | None = None) -> list[Tensor]:
    """PMA: ``[X(0), X(1), ..., X(K)]`` with noise std ``sigma`` on every aggregation.

    .. math::
        X^{(k)} = \\mathrm{normalise}\\big(\\mathrm{clip}_c(A^\\top X^{(k-1)})
                  + \\mathcal{N}(0, \\sigma^2 I)\\big)

    Args:
        x0 (Tensor): encodings ``[n, d]`` (normalised here).
        adj_t (Tensor): :func:`aggregation_matrix`.
        hops (int): K >= 1.
        sigma (float): noise std (multiplier times sensitivity); 0 for GAP-∞.
        generator (torch.Generator, optional): the noise's source, on ``x0``'s device; a
            secret one for a private release. (default: :obj:`None`)
        row_clip (float, optional): clip each aggregated row to this L2 norm before the
            noise (:obj:`None`: no clipping). (default: :obj:`None`)
        progress (callable, optional): called ``("PMA hops", k, hops)`` before the first
            hop (k = 0) and after hop k. (default: :obj:`None`)
    """
    if hops < 1:
        raise DataError("PMA needs at least one hop", field="hops", value=hops)
    out = [row_normalise(x0)]
    if progress is not None:
        progress("PMA hops", 0, hops)
    for k in range(hops):
        agg = clip_rows(torch.sparse.mm(adj_t, out[-1]), row_clip)
        if sigma > 0:
            agg.add_(torch.randn(agg.shape, generator=generator, device=agg.device,
                                 dtype=agg.dtype), alpha=sigma)
        out.append(row_normalise(agg))
        if progress is not None:
            progress("PMA hops", k + 1, hops)
    return out


def sensitivity(level: str, max_degree: int | None, directed: bool,
                row_clip: float | None = None) -> float:
    """PMA's L2 sensitivity per hop on rows of norm at most 1 (see the module docstring).

    .. math::
        \\Delta_\\mathrm{edge} = 1 \\text{ (directed)}, \\ \\sqrt 2 \\text{ (undirected)};
        \\qquad
        \\Delta_\\mathrm{node}^2 = \\max_{(a, b)} \\min(c, a)^2 + b

    with (a, b) = (d_in, d_out) ranging over d_in, d_out <= D (undirected) or
    d_in + d_out <= D (directed): the removed node's own row moves by at most min(c, d_in),
    each of its d_out out-neighbours' rows by at most 1.

    Args:
        level (str): ``edge``, ``node`` or ``none`` (0).
        max_degree (int, optional): D, needed at node level.
        directed (bool): the manifest's ``directed`` flag (never inferred from the edges).
        row_clip (float, optional): c, the row clipping of :func:`pma`; :obj:`None` is
            c = ∞. (default: :obj:`None`)
    """
    if level == "edge":
        return 1.0 if directed else math.sqrt(2.0)
    if level == "node":
        if max_degree is None or int(max_degree) != max_degree or max_degree < 1:
            raise DataError("node-level PMA needs an integer degree bound D >= 1",
                            field="max_degree", value=max_degree)
        d = int(max_degree)
        c = math.inf if row_clip is None else float(row_clip)
        if directed:
            sq = max(min(c, a) ** 2 + (d - a) for a in range(d + 1))
        else:
            sq = min(c, d) ** 2 + d
        return math.sqrt(sq)
    return 0.0



__all__ = ['aggregation_matrix', 'clip_rows', 'pma', 'row_normalise', 'sensitivity']

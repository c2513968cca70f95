"""GAP's modules (Sajadmanesh et al.): the encoder of the node features and the classifier
over a node's own encoding and its private aggregations; ``norm_layer`` and ``selu_block``
are shared with ProGAP's stages. How they are trained, by level, is
:mod:`dpgnn_core.methods.gap`."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from dpgnn_core.errors import DataError
from dpgnn_core.privacy.pma import row_normalise
from dpgnn_core.specs import GapSpec


def norm_layer(norm: str, width: int) -> nn.Module:
    """The normalisation after a hidden Linear layer: ``batch`` (statistics over the rows
    of a batch: non-private training only), ``layer`` (per row, without its own affine
    parameters, which the next Linear layer absorbs: DP-Adam's per-row clipping handles
    Linear layers only) or ``none``."""
    if norm == "batch":
        return nn.BatchNorm1d(width)
    if norm == "layer":
        return nn.LayerNorm(width, elementwise_affine=False)
    if norm == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {norm!r}; choose batch, layer or none")


def selu_block(in_dim: int, out_dim: int, norm: str = "none") -> nn.Sequential:
    """``Linear -> norm -> SELU``: one hidden layer of GAP's and ProGAP's modules."""
    return nn.Sequential(nn.Linear(in_dim, out_dim), norm_layer(norm, out_dim), nn.SELU())


class GapEncoder(nn.Module):
    """``layers`` blocks ``Linear -> norm -> SELU`` (dropout between them), the last one to
    ``encoder_dim``, then a pre-training head; :meth:`encode` gives X(0) before
    normalisation.

    .. math::
        h^{(l+1)} = \\mathrm{SELU}(\\mathrm{norm}(W^{(l)}\\, \\mathrm{drop}(h^{(l)}))),
        \\qquad \\hat y = W_\\mathrm{head}\\, \\mathrm{drop}(h^{(L)})

    (no dropout on the raw features).

    Args:
        in_dim (int): input features.
        hidden (int): hidden width.
        encoder_dim (int): width of the encoding.
        num_classes (int): classes (the pre-training head).
        layers (int, optional): blocks. (default: :obj:`2`)
        dropout (float, optional): dropout probability between blocks and before the head
            (training mode only). (default: :obj:`0.0`)
        norm (str, optional): ``batch``, ``layer`` or ``none`` (:func:`norm_layer`).
            (default: ``"none"``)
    """

    def __init__(self, in_dim: int, hidden: int, encoder_dim: int, num_classes: int,
                 layers: int = 2, dropout: float = 0.0, norm: str = "none") -> None:
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [encoder_dim]
        self.blocks = nn.ModuleList(selu_block(a, b, norm) for a, b in itertools.pairwise(dims))
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(encoder_dim, num_classes)
        self.encoder_dim = encoder_dim

    def encode(self, x: Tensor) -> Tensor:
        for i, block in enumerate(self.blocks):
            x = block(self.dropout(x) if i > 0 else x)
        return x

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.head(self.dropout(self.encode(x)))
        return out


class GapClassifier(nn.Module):
    """One base block per hop, a combination, a head.

    .. math::
        h_v = \\mathrm{combine}_k\\, \\mathrm{SELU}(\\mathrm{norm}(W_k X^{(k)}_v)),
        \\qquad
        \\hat y_v = W_2\\, \\mathrm{drop}(\\mathrm{SELU}(\\mathrm{norm}(W_1\\,
                    \\mathrm{drop}(h_v))))

    Args:
        hops (int): K (the input holds K + 1 matrices).
        in_dim (int): encoding width.
        hidden (int): hidden width.
        num_classes (int): classes.
        combine (str, optional): ``cat``, ``sum`` or ``attn`` (softmax over hops of a
            learned score of each hop's representation). (default: ``"cat"``)
        dropout (float, optional): dropout probability on the combination and on the
            head's hidden layer (training mode only). (default: :obj:`0.0`)
        norm (str, optional): ``batch``, ``layer`` or ``none`` after every hidden Linear
            layer (:func:`norm_layer`). (default: ``"none"``)

    After training, :meth:`attach_encoder` adds the (private) encoder, so that
    :meth:`inputs` can recompute a node's X(0) from its own features: the stored private
    release holds X(1..K) only.
    """

    encoder: GapEncoder | None

    def __init__(self, hops: int, in_dim: int, hidden: int, num_classes: int,
                 combine: str = "cat", dropout: float = 0.0, norm: str = "none") -> None:
        super().__init__()
        if combine not in ("cat", "sum", "attn"):
            raise ValueError(f"unknown combine {combine!r}; choose cat, sum or attn")
        self.combine = combine
        self.base = nn.ModuleList(selu_block(in_dim, hidden, norm) for _ in range(hops + 1))
        self.score = nn.Linear(hidden, 1) if combine == "attn" else None
        width = hidden * (hops + 1) if combine == "cat" else hidden
        self.dropout = nn.Dropout(dropout)
        self.lin1 = selu_block(width, hidden, norm)
        self.lin2 = nn.Linear(hidden, num_classes)
        self.encoder = None

    @property
    def hops(self) -> int:
        return len(self.base) - 1

    def attach_encoder(self, encoder: GapEncoder) -> GapClassifier:
        """Keep ``encoder`` with the classifier (saved in its state dict)."""
        self.encoder = encoder
        return self

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> Any:
        """:meth:`torch.nn.Module.load_state_dict`; a state without encoder weights (a
        classifier saved before its encoder was attached) detaches the encoder first."""
        if self.encoder is not None and not any(k.startswith("encoder.") for k in state_dict):
            self.encoder = None
        return super().load_state_dict(state_dict, strict, assign)

    def inputs(self, x: Tensor, aggregations: Tensor) -> Tensor:
        """``[n, K + 1, d]`` from features ``x`` ``[n, f]`` and the private release
        X(1..K) ``[n, K, d]`` (already ``[n, K + 1, d]``: returned unchanged)."""
        return with_own_encoding(self.encoder, x, aggregations, self.hops)

    def forward(self, xs: Tensor) -> Tensor:
        """``xs`` ``[n, K + 1, d]`` -> logits ``[n, C]``."""
        hs = torch.stack([block(xs[:, k]) for k, block in enumerate(self.base)], 1)
        if self.combine == "cat":
            h = hs.flatten(1)
        elif self.combine == "sum":
            h = hs.sum(1)
        else:
            assert self.score is not None
            h = (torch.softmax(self.score(hs), dim=1) * hs).sum(1)
        out: Tensor = self.lin2(self.dropout(self.lin1(self.dropout(h))))
        return out


def new_encoder(spec: GapSpec, in_dim: int, num_classes: int) -> GapEncoder:
    """The (untrained) encoder a spec describes."""
    return GapEncoder(in_dim, spec.hidden, spec.encoder_dim, num_classes,
                      spec.encoder_layers, spec.dropout, spec.norm)


def new_classifier(spec: GapSpec, num_classes: int) -> GapClassifier:
    """The (untrained) classification module a spec describes."""
    return GapClassifier(spec.hops, spec.encoder_dim, spec.hidden, num_classes, spec.combine,
                         spec.dropout, spec.norm)


def with_own_encoding(encoder: GapEncoder | None, x: Tensor, aggregations: Tensor,
                      hops: int) -> Tensor:
    """``[X(0), X(1..K)]`` ``[n, K + 1, d]``: each node's own encoding X(0) (from its own
    features, not noised, not part of the private release) before its private aggregations
    ``[n, K, d]``. An input already ``[n, K + 1, d]`` is returned unchanged."""
    if aggregations.shape[1] == hops + 1:
        return aggregations
    if aggregations.shape[1] != hops:
        raise DataError(f"expected {hops} aggregations per node, got "
                        f"{aggregations.shape[1]}", field="aggregations",
                        value=list(aggregations.shape))
    if encoder is None:
        raise DataError("X(0) is not part of the private release: attach the encoder to "
                        "recompute it from the nodes' own features", field="encoder",
                        value=None)
    with torch.no_grad():
        x0 = row_normalise(encoder.eval().encode(x))
    return torch.cat([x0.unsqueeze(1), aggregations], 1)



__all__ = [
    'GapClassifier',
    'GapEncoder',
    'new_classifier',
    'new_encoder',
    'norm_layer',
    'selu_block',
    'with_own_encoding',
]

"""DPDGC's messages: what each node sends along the edges, the hops that sum them, and the
L2 sensitivity of every hop's release at every level (pure math and tensors; derived in
docs/privacy.md, "DPDGC's composition" and "DPDGC's label messages"; brute-forced in
tests/dpgnn_core/test_dpdgc.py and tests/dpgnn_core/test_dpdgc_labels.py).

Two message kinds (the spec's ``messages``):

* ``adjacency``: the trained adjacency embeddings W (rows of norm <= 1, an earlier private
  release of the adjacency encoder), as in the DPDGC paper;
* ``labels``: the one-hot labels of the **training** nodes, Y_train (the row of every
  validation, test or unused node is 0: their labels are never read). At edge and node
  level the rows are sent as they are; at k-neighbour and ``node_feature`` level each
  sender's row is divided by the square root of its out-degree (its number of receivers),
  so one sender's whole contribution to the release has Frobenius norm <= 1 whatever its
  degree.

Hop 1 releases :math:`\\tilde H_1 = \\mathrm{clip}_c(A W_1) + \\mathcal N(0, \\sigma_1^2)`;
hop t > 1 releases :math:`\\tilde H_t = \\mathrm{clip}_c(A\\, \\mathrm{normalise}(\\tilde
H_{t-1})) + \\mathcal N(0, \\sigma_t^2)`, an adaptive composition over the earlier noisy
output (rows of norm <= 1, fixed by the earlier release). At ``node_feature`` level the
structure is public, so a hop over released rows is post-processing: no noise, no event.

=============  =============================  ===================================
level          labels, hop 1                  hop t > 1 (and adjacency, hop 1)
=============  =============================  ===================================
edge           1 (directed), √2 (undirected)  1 (directed), √2 (undirected)
node (D)       √(min(c, D)² + D) undirected   √(min(c, D)² + D) undirected
k-neighbour    √2 + k                         √(min(2c, k)² + k) undirected
node_feature   1                              0 (post-processing)
=============  =============================  ===================================
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from dpgnn_core.errors import DataError
from dpgnn_core.privacy.pma import clip_rows, row_normalise
from dpgnn_core.specs import DpdgcSpec

#: The message kinds (the spec's ``messages``).
MESSAGE_KINDS = ("adjacency", "labels")
#: Levels whose label messages are divided by the square root of the sender's out-degree.
NORMALISED_LEVELS = ("k_neighbor", "node_feature")
#: Levels whose classifier trains on hop 2 without the node's own label sent out and back
#: (:func:`own_label_return`): the structure may be read there (public at ``node_feature``,
#: nothing private at ``none``).
OWN_RETURN_LEVELS = ("node_feature", "none")


def _bound(level: str, max_degree: int | None, k: int | None) -> int:
    """D at node level, k at k-neighbour level (validated)."""
    name, value = ("max_degree", max_degree) if level == "node" else ("k", k)
    if value is None or int(value) != value or value < 1:
        raise DataError(f"{level}-level DPDGC needs an integer {name} >= 1", field=name,
                        value=value)
    return int(value)


def aggregation_sensitivity(level: str, directed: bool, *, max_degree: int | None = None,
                            k: int | None = None, row_clip: float | None = None) -> float:
    """L2 sensitivity of :math:`\\mathrm{clip}_c(A W)` (rows of W of norm <= 1 fixed by an
    earlier release), i.e. of the whole ``[n, h]`` matrix, under one neighbouring change
    of ``level``.

    .. math::
        \\Delta_\\mathrm{edge} = 1 \\text{ (directed)}, \\sqrt 2 \\text{ (undirected)};\\quad
        \\Delta^2_\\mathrm{node} = \\max_{(a,b)} \\min(c, a)^2 + b;\\quad
        \\Delta^2_k = \\max_{(a,b)} \\min(2c, a)^2 + b

    At node level (node v removed: its record and every edge, v left isolated) v's own row
    goes to 0 (norm <= min(c, d_in)) and each of v's d_out receivers loses w_v (<= 1,
    clipping is non-expansive); (a, b) = (d_in, d_out) with d_in, d_out <= D (undirected:
    a = b = D) or d_in + d_out <= D (directed). At k-neighbour level (v's record and up to
    k of its edges) v's row moves by the sum of a <= k embeddings (<= min(2c, a): both rows
    lie in the c-ball) and b receivers by <= 1 each; a = b = k undirected (each edge is a
    message both ways), a + b <= k directed. At ``node_feature`` level (structure public)
    and ``none``: 0 (a public function of the earlier release).

    Args:
        level (str): ``edge``, ``node``, ``k_neighbor``, ``node_feature`` or ``none``.
        directed (bool): the manifest's ``directed`` flag.
        max_degree (int, optional): D (node level).
        k (int, optional): the edges of v one change may touch (k-neighbour level).
        row_clip (float, optional): c; :obj:`None` is c = ∞. (default: :obj:`None`)
    """
    if level in ("none", "node_feature"):
        return 0.0
    if level == "edge":
        return 1.0 if directed else math.sqrt(2.0)
    if level not in ("node", "k_neighbor"):
        raise DataError(f"unknown DPDGC level {level!r}", field="level", value=level)
    bound = _bound(level, max_degree, k)
    c = math.inf if row_clip is None else float(row_clip)
    own = c if level == "node" else 2.0 * c
    if directed:
        sq = max(min(own, a) ** 2 + (bound - a) for a in range(bound + 1))
    else:
        sq = min(own, bound) ** 2 + bound
    return math.sqrt(sq)


def label_sensitivity(level: str, directed: bool, *, max_degree: int | None = None,
                      k: int | None = None, row_clip: float | None = None) -> float:
    """L2 sensitivity of the first hop of label messages, :math:`\\mathrm{clip}_c(A W_1)`
    with :math:`W_1` = Y_train (edge, node) or :math:`D_\\mathrm{out}^{-1/2}` Y_train
    (k-neighbour, ``node_feature``), under one neighbouring change of ``level``.

    * edge, node: W_1's rows are one-hot or 0 and the relation never changes another
      node's row of W_1 (at node level v is left isolated, so its own label row reaches
      nobody), so the bound of :func:`aggregation_sensitivity` holds as for fixed rows;
    * k-neighbour: the release is the sum over senders j of their contributions
      :math:`E_j = \\sum_{j\\to r} e_r \\otimes y_j / \\sqrt{d_j}` (Frobenius norm
      ``||y_j|| <= 1``, entries >= 0). v's own contribution (its label and out-edges) moves
      by <= √2 (two non-negative matrices of norm <= 1); each of the <= k other endpoints
      u of a toggled edge u -> v gains or loses one receiver, moving E_u by
      :math:`\\sqrt{2 - 2\\sqrt{d/(d+1)}} \\le 1`; nobody else's degree or row changes.
      Row clipping is non-expansive: √2 + k, with or without c, directed or not;
    * ``node_feature`` (add/remove of v's features and label; degrees public): only E_v
      changes, between 0 and a matrix of norm 1: 1.
    """
    if level in ("edge", "node"):
        return aggregation_sensitivity(level, directed, max_degree=max_degree, k=k,
                                       row_clip=row_clip)
    if level == "k_neighbor":
        return math.sqrt(2.0) + _bound(level, max_degree, k)
    if level == "node_feature":
        return 1.0
    if level == "none":
        return 0.0
    raise DataError(f"unknown DPDGC level {level!r}", field="level", value=level)


def hop_sensitivities(kind: str, level: str, hops: int, directed: bool, *,
                      max_degree: int | None = None, k: int | None = None,
                      row_clip: float | None = None) -> list[float]:
    """Δ of each hop's release (0: no release, post-processing), in hop order."""
    later = aggregation_sensitivity(level, directed, max_degree=max_degree, k=k,
                                    row_clip=row_clip)
    first = (label_sensitivity(level, directed, max_degree=max_degree, k=k,
                               row_clip=row_clip) if kind == "labels" else later)
    return [first] + [later] * (hops - 1)


def released_hops(kind: str, level: str, hops: int) -> list[int]:
    """The hops (1-based) that are private releases (one Gaussian event each)."""
    if level == "none":
        return []
    if level == "node_feature":
        return [1] if kind == "labels" else []
    return list(range(1, hops + 1))


def message_width(kind: str, adj_dim: int, num_classes: int) -> int:
    """Width of one hop's rows: h (adjacency) or the number of classes (labels)."""
    return adj_dim if kind == "adjacency" else num_classes


def label_rows(y: Tensor, train: Tensor, num_classes: int) -> Tensor:
    """Y_train ``[n, C]``: the one-hot label of every training node, 0 elsewhere. Only the
    labels under ``train`` are read (the others are replaced before the one-hot)."""
    safe = torch.where(train, y, torch.zeros_like(y))
    onehot = torch.nn.functional.one_hot(safe.long(), num_classes).to(torch.float32)
    return onehot * train.to(onehot.dtype).unsqueeze(1)


def first_messages(level: str, rows: Tensor, adj_t: Tensor) -> Tensor:
    """W_1 of label messages: ``rows`` (Y_train) as they are at edge and node level,
    divided by √(out-degree) at k-neighbour and ``node_feature`` level (a sender with no
    receiver sends nothing)."""
    if level not in NORMALISED_LEVELS:
        return rows
    deg = _column_sums(adj_t, rows.dtype)
    return rows / deg.clamp_min(1.0).sqrt().unsqueeze(1)


def _column_sums(adj_t: Tensor, dtype: torch.dtype) -> Tensor:
    """Out-degrees from the CSR aggregation matrix (its column indices, counted)."""
    if adj_t.layout == torch.sparse_csr:
        cols = adj_t.col_indices()
        return torch.bincount(cols, minlength=adj_t.shape[1]).to(dtype)
    return adj_t.to_dense().sum(0).to(dtype)


def propagate(adj_t: Tensor, w1: Tensor, sigmas: list[float], row_clip: float | None,
              generator: torch.Generator | None) -> Tensor:
    """The hops ``[n, hops, width]``: hop 1 is :math:`\\mathrm{clip}_c(A W_1)`, hop t > 1
    :math:`\\mathrm{clip}_c(A\\,\\mathrm{normalise}(\\tilde H_{t-1}))`, each plus Gaussian
    noise of std ``sigmas[t-1]`` (0: none) from ``generator`` (secret)."""
    out, w = [], w1
    with torch.no_grad():
        for sigma in sigmas:
            h = clip_rows(torch.sparse.mm(adj_t, w), row_clip)
            if sigma > 0:
                h.add_(torch.randn(h.shape, generator=generator, device=h.device,
                                   dtype=h.dtype), alpha=sigma)
            out.append(h)
            w = row_normalise(h)
    return torch.stack(out, 1)


def _mutual_edges(adj_t: Tensor) -> tuple[Tensor, Tensor]:
    """(u, v) of every edge u -> v whose reverse v -> u is an edge too (every edge of a
    graph flagged undirected), from the CSR aggregation matrix (row v sums its senders)."""
    n = adj_t.shape[0]
    crow, src = adj_t.crow_indices(), adj_t.col_indices()
    dst = torch.repeat_interleave(torch.arange(n, device=src.device), crow[1:] - crow[:-1])
    keep = torch.isin(dst * n + src, src * n + dst)
    return src[keep], dst[keep]


def own_label_return(adj_t: Tensor, w1: Tensor, h: Tensor) -> Tensor:
    """``[n, w]``: the part of each node's hop-2 row that is its **own** first message sent
    out and back (v -> u -> v), to take out of a training node's classifier row.

    Hop 2 is :math:`\\mathrm{clip}_c(A\\,\\mathrm{normalise}(\\tilde H_1))`, and
    :math:`\\tilde H_{1,u}` sums the message :math:`w_{1,v}` of every sender v of u; so
    row v of hop 2 holds :math:`s_v\\, w_{1,v} \\sum_{u \\leftrightarrow v}
    1/\\|\\tilde H_{1,u}\\|` (u over v's mutual neighbours, :math:`s_v` hop 2's clipping
    factor of row v). With label messages that is v's own training label: the classifier
    would learn to read each training node's label back from its own input, which no
    validation or test node has (their row of :math:`W_1` is 0, so their return is 0).
    Exact where hop 1 is not clipped (the default); with ``row_clip`` hop 1's own factor
    (a function of the other senders' exact labels) is left out, so the return is then
    over-estimated by at most that factor.

    Reads v's own message, the released hop 1 and the structure: used only at
    :data:`OWN_RETURN_LEVELS` and only for the classifier's training rows (docs/privacy.md,
    "DPDGC's label messages").
    """
    h1, h2 = h[:, 0], h[:, 1]
    u, v = _mutual_edges(adj_t)
    norm1 = h1.norm(dim=1)
    inv = torch.where(norm1 > 0, 1.0 / norm1.clamp_min(1e-30), torch.zeros_like(norm1))
    coef = torch.zeros(h1.shape[0], dtype=h1.dtype, device=h1.device).index_add_(
        0, v, inv[u])
    before_clip = torch.sparse.mm(adj_t, row_normalise(h1)).norm(dim=1)
    scale = torch.where(before_clip > 0, h2.norm(dim=1) / before_clip.clamp_min(1e-30),
                        torch.ones_like(before_clip))
    out: Tensor = w1 * (coef * scale).unsqueeze(1)
    return out


def without_own_return(adj_t: Tensor, w1: Tensor, h: Tensor) -> Tensor:
    """The hops ``h`` ``[n, K, w]`` with :func:`own_label_return` taken out of hop 2 (a
    copy; ``h`` unchanged; one hop: ``h`` itself)."""
    if h.shape[1] < 2:
        return h
    out = h.clone()
    out[:, 1] -= own_label_return(adj_t, w1, h)
    return out


def classifier_inputs(x: Tensor, h: Tensor) -> Tensor:
    """``[x_v, normalise(H_v^1), ..., normalise(H_v^K)]``: each hop's released row scaled
    to unit norm (post-processing). ``h`` is ``[n, K, w]`` (or ``[n, w]``: one hop)."""
    if h.dim() == 2:
        h = h.unsqueeze(1)
    parts = [row_normalise(h[:, t]) for t in range(h.shape[1])]
    return torch.cat([x, *parts], 1)


#: The options the `defaults` line of a run shows (the level's recipe).
DEFAULTS_SHOWN = ("messages", "hops", "budget_split", "steps", "row_clip", "dropout")


def level_defaults_used(spec: DpdgcSpec) -> dict[str, Any]:
    """The recipe's options for the run's ``defaults`` line: each value, and which of them
    are the level's validation-chosen defaults (:attr:`DpdgcSpec.level_defaults`; a value
    equal to its level default is shown as one, given or not); at node level with label
    messages also c (√D unless given)."""
    table = spec.defaults_for({"messages": spec.messages}).get(spec.level, {})
    derived = ("row_clip",) if spec.level == "node" and spec.messages == "labels" else ()
    shown = [f for f in DEFAULTS_SHOWN if f in table or f in ("messages", "hops", *derived)]
    values = {f: (list(v) if isinstance(v := getattr(spec, f), tuple) else v) for f in shown}
    default = [f for f in shown if f in table and getattr(spec, f) == table[f]]
    return {"fields": shown, **values, "level_default": default,
            "rule": f"DPDGC {spec.level}-level defaults chosen on validation accuracy "
                    "(benchmarks/RESULTS.md, \"DPDGC label messages\")"}


def hop_deltas(spec: DpdgcSpec, directed: bool) -> list[float]:
    """Δ of each hop's release, 0 where the hop is post-processing (``node_feature``
    level over released rows, ∞)."""
    released = released_hops(spec.messages, spec.level, spec.hops)
    deltas = hop_sensitivities(spec.messages, spec.level, spec.hops, directed,
                               max_degree=spec.max_degree, k=spec.k, row_clip=spec.row_clip)
    return [d if t + 1 in released else 0.0 for t, d in enumerate(deltas)]


__all__ = ["DEFAULTS_SHOWN", "MESSAGE_KINDS", "NORMALISED_LEVELS",
           "OWN_RETURN_LEVELS", "aggregation_sensitivity", "classifier_inputs", "first_messages",
           "hop_deltas", "hop_sensitivities", "label_rows", "label_sensitivity",
           "level_defaults_used", "message_width", "own_label_return", "propagate",
           "released_hops", "without_own_return"]

"""DPDGC's adjacency encoder (:mod:`dpgnn_core.methods.dpdgc`, stage 1): the sensitivity of
one step's sum of clipped per-record gradients, the fixed random head R, the projection of
the embeddings' rows into the unit ball, the clipped gradient sum and the noisy full-batch
training of the embeddings W (derived in docs/privacy.md, section "DPDGC"; brute-forced in
tests/dpgnn_core/test_dpdgc.py)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.methods.dpdgc_messages import _bound
from dpgnn_core.privacy.pma import clip_rows
from dpgnn_core.privacy.randomness import Randomness
from dpgnn_core.specs import DpdgcSpec
from dpgnn_core.training import eager_optim
from dpgnn_core.training.loop import seeded
from dpgnn_core.training.optim import adam

# --- sensitivities (pure math) ---------------------------------------------------------


def encoder_sensitivity(level: str, directed: bool, clip: float, *,
                        max_degree: int | None = None, k: int | None = None) -> float:
    """L2 sensitivity of one step's sum of clipped per-record gradients of the adjacency
    encoder (one record per training node: its adjacency row and label).

    A record whose row changes (present in both graphs) moves its clipped gradient by at
    most 2C; a record present in one graph only by at most C. Edge: the receivers of the
    edge change their rows (1 directed, 2 undirected): 2C / 4C. Node: v's record (C) and
    its <= D receivers: (2D + 1) C. k-neighbour: v's record (kept with a changed row: 2C;
    or added / removed: C) and <= k other endpoints: 2(k + 1) C. ``node_feature`` (rows of
    A public): v's record only, added or removed: C.
    """
    if level == "none":
        return 0.0
    if level == "node_feature":
        return clip
    if level == "edge":
        return (2.0 if directed else 4.0) * clip
    if level not in ("node", "k_neighbor"):
        raise DataError(f"unknown DPDGC level {level!r}", field="level", value=level)
    bound = _bound(level, max_degree, k)
    return (2 * bound + (1 if level == "node" else 2)) * clip


# --- the modules -----------------------------------------------------------------------


def project_rows(w: Tensor) -> Tensor:
    """Each row scaled down to L2 norm at most 1 (the bound every sensitivity assumes)."""
    return clip_rows(w, 1.0)


def random_head(adj_dim: int, num_classes: int, seed: int) -> Tensor:
    """The adjacency encoder's fixed head R ``[h, C]``: a random matrix with orthonormal
    rows or columns, from the seed (public, data-independent), as in the reference code."""
    g = torch.Generator().manual_seed(int(seed) + 7919)
    q, _ = torch.linalg.qr(torch.randn(max(adj_dim, num_classes), max(adj_dim, num_classes),
                                       generator=g))
    out: Tensor = q[:adj_dim, :num_classes].contiguous()
    return out


def clipped_gradient_sum(adj_t: Tensor, adj: Tensor, w: Tensor, head: Tensor, y: Tensor,
                         train: Tensor, clip: float | None) -> tuple[Tensor, float]:
    """Sum over training nodes i of the gradient of :math:`\\mathrm{CE}((a_i W) R, y_i)`
    with respect to W, each record's gradient :math:`a_i \\otimes g_i` clipped to L2 norm
    ``clip`` (:obj:`None`: not clipped), and the records' mean loss. ``adj_t`` is
    :func:`~dpgnn_core.privacy.pma.aggregation_matrix` (row i sums the senders to i),
    ``adj`` its transpose (row j sums over the receivers of j); ``train`` a boolean
    mask."""
    h = torch.sparse.mm(adj_t, w)
    p = torch.softmax(h @ head, dim=1)
    onehot = torch.nn.functional.one_hot(y.clamp_min(0), head.shape[1]).to(p.dtype)
    loss = -(onehot * torch.log(p.clamp_min(1e-30))).sum(1)
    mean_loss = float(loss[train].mean()) if bool(train.any()) else 0.0
    g = (p - onehot) @ head.T  # dCE/dh_i, [n, h]
    g = g * train.to(g.dtype).unsqueeze(1)
    if clip is not None:
        deg = torch.sparse.mm(adj_t, torch.ones(w.shape[0], 1, dtype=w.dtype,
                                                device=w.device)).squeeze(1)
        norms = deg.sqrt() * g.norm(dim=1)  # ||a_i ⊗ g_i|| for a binary row a_i
        g = g * (clip / norms.clamp_min(1e-12)).clamp(max=1.0).unsqueeze(1)
    return torch.sparse.mm(adj, g), mean_loss


def fit_adjacency_encoder(data: GraphData, spec: DpdgcSpec, z: float, adj_t: Tensor,
                          adj: Tensor, device: torch.device
                          ) -> tuple[Tensor, list[dict[str, float]]]:
    """Stage 1: W ``[n, h]`` from random unit rows (from the seed: public), then
    ``adj_steps`` (private) or ``adj_epochs`` (∞) Adam steps on the noisy (private) or exact
    sum of per-record gradients (clipped when private); rows projected to norm <= 1 after
    every step. Noise from a secret generator."""
    with seeded(spec.seed + 1, device):  # public initialisation: unit rows, data-free
        w0 = torch.nn.functional.normalize(torch.randn(data.num_nodes, spec.adj_dim,
                                                       device=device), dim=1)
    w = w0.requires_grad_(True)
    head = random_head(spec.adj_dim, data.num_classes, spec.seed).to(device)
    y = torch.tensor(np.asarray(data.y), device=device)
    train = torch.from_numpy(data.mask("train")).to(device)
    n_train = int(train.sum())
    private = spec.level != "none"
    steps = spec.adj_steps if private else spec.adj_epochs
    sigma = z * spec.budget_split[0] * encoder_sensitivity(
        spec.level, bool(data.directed), spec.clip, max_degree=spec.max_degree, k=spec.k)
    gen = Randomness.for_spec(spec).torch_generator("adjacency/noise", device)
    opt = adam([w], lr=spec.adj_lr)
    history: list[dict[str, float]] = []
    for step in range(1, steps + 1):
        with torch.no_grad():
            grad, loss = clipped_gradient_sum(adj_t, adj, w.detach(), head, y, train,
                                              spec.clip if private else None)
            if private:
                grad.add_(torch.randn(grad.shape, generator=gen, device=device,
                                      dtype=grad.dtype), alpha=sigma)
            w.grad = grad / n_train
        eager_optim.step(opt)
        with torch.no_grad():
            w.copy_(project_rows(w))
        # a private step's loss is read off the private adjacency without noise: recorded
        # only behind log_raw_loss (the run is then marked), as train_steps does
        history.append({"step": step, **({"train_loss": loss}
                                         if not private or spec.log_raw_loss else {})})
    return w.detach(), history


__all__ = ["clipped_gradient_sum", "encoder_sensitivity", "fit_adjacency_encoder",
           "project_rows", "random_head"]

"""Disjoint random-walk subgraphs (Ayle et al., App. B): DRW, DRW-R, DRW-D.

DRW: training nodes are visited in a random order; each not yet used becomes the root of a
new subgraph and walks up to L steps, each step to a uniformly chosen neighbour (along
``src -> dst``) that is a training node not yet used by any subgraph; a walk with no such
neighbour stops early (an isolated root gives a subgraph of one node). DRW-R restarts R walks
from the same root, so a subgraph has at most R·L + 1 nodes. Every node belongs to at most
one subgraph of a partition (occurrence bound 1). Message edges are the graph's edges among a
subgraph's nodes. DRW-D draws a fresh partition every k training steps
(:func:`drw_partitions`).

The walk is sequential by nature, so it runs as a numba kernel (a per-step Python loop would
take minutes on 10^5 nodes). ``dgl.sampling.random_walk`` (the optional DGL extra) is not
used, though its plain walks are faster (benchmarks/RESULTS.md): it cannot avoid nodes used
by earlier walks (so its walks are not DRW's disjoint partition), and its only randomness is
DGL's process-global RNG, whose ``dgl.seed`` takes at most 2^31 - 1: even seeded from a fresh
``secrets`` draw per call and never stored, that is 2^31 walk sets an adversary who knows
the (public) graph can enumerate. docs/privacy.md ("Secret randomness") has the reasoning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numba
import numpy as np
import numpy.typing as npt

from dpgnn_core.errors import DataError
from dpgnn_core.graph._csr import csr
from dpgnn_core.graph.subgraphs import Subgraphs

IntArray = npt.NDArray[np.int64]
SAMPLING_SCHEME = "fixed_size_without_replacement"

#: Progress callback: (stage name, done, total).
Progress = Callable[[str, int, int], None]


@numba.njit(cache=True)
def _walks(indptr: IntArray, indices: IntArray, train: npt.NDArray[np.bool_], order: IntArray,
           walk_length: int, restarts: int, uniforms: npt.NDArray[np.float64]
           ) -> tuple[IntArray, IntArray, int]:
    # The walk's choices come from ``uniforms`` (drawn by the caller's generator): numba's
    # own RNG takes only a 32-bit seed, too small to keep a walk secret.
    n = train.shape[0]
    draw = 0
    owner = np.full(n, -1, np.int64)
    rank = np.full(n, -1, np.int64)
    buf = np.empty(max(1, int(np.max(np.diff(indptr))) if n > 0 else 1), np.int64)
    sid = 0
    counter = 0
    for root in order:
        if owner[root] >= 0:
            continue
        owner[root] = sid
        rank[root] = counter
        counter += 1
        for _ in range(restarts):
            cur = root
            for _ in range(walk_length):
                cnt = 0
                for j in range(indptr[cur], indptr[cur + 1]):
                    v = indices[j]
                    if train[v] and owner[v] < 0:
                        buf[cnt] = v
                        cnt += 1
                if cnt == 0:
                    break
                nxt = buf[min(int(uniforms[draw] * cnt), cnt - 1)]
                draw += 1
                owner[nxt] = sid
                rank[nxt] = counter
                counter += 1
                cur = nxt
        sid += 1
    return owner, rank, sid


def drw(edge_index: IntArray, num_nodes: int, train_mask: npt.NDArray[np.bool_],
        walk_length: int, *, restarts: int = 1,
        rng: np.random.Generator | int | None = None,
        progress: Progress | None = None) -> Subgraphs:
    """One disjoint random-walk partition of the training nodes (DRW; DRW-R with
    ``restarts`` > 1).

    Args:
        edge_index (np.ndarray): ``[2, E]`` edges (src -> dst).
        num_nodes (int): number of nodes.
        train_mask (np.ndarray): training nodes.
        walk_length (int): L >= 1.
        restarts (int, optional): R >= 1 walks from each root. (default: :obj:`1`)
        rng (np.random.Generator or int, optional): the source of the root order and the
            walks; privacy-relevant, so training passes a secret generator
            (:class:`~dpgnn_core.privacy.randomness.Randomness`). An int seeds a generator
            (tests only). (default: a generator from OS entropy)
        progress (callable, optional): called ``("random walks", done, 1)`` at the start
            and the end (the walk is one sequential kernel). (default: :obj:`None`)
    """
    if int(walk_length) != walk_length or walk_length < 1:
        raise DataError("walk length L must be an integer >= 1", field="walk_length",
                        value=walk_length)
    if int(restarts) != restarts or restarts < 1:
        raise DataError("restarts R must be an integer >= 1", field="restarts", value=restarts)
    if not train_mask.any():
        raise DataError("the training set is empty: no subgraph to sample", field="split",
                        value="train")
    if progress is not None:
        progress("random walks", 0, 1)
    train = np.ascontiguousarray(train_mask, dtype=np.bool_)
    indptr, indices = csr(edge_index[0], edge_index[1], num_nodes)
    gen = np.random.default_rng(rng)
    order = gen.permutation(np.flatnonzero(train)).astype(np.int64)
    uniforms = gen.random(max(1, int(train.sum()) * int(restarts) * int(walk_length)))
    owner, rank, count = _walks(indptr, indices, train, order, int(walk_length),
                                int(restarts), uniforms)
    members = np.flatnonzero(owner >= 0)
    srt = np.lexsort((rank[members], owner[members]))
    nodes = members[srt].astype(np.int64)
    sid = owner[nodes]
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(np.bincount(sid, minlength=count), out=offsets[1:])
    roots = nodes[offsets[:-1]]
    src, dst = edge_index[0], edge_index[1]
    inner = (owner[src] >= 0) & (owner[src] == owner[dst]) & (src != dst)
    esid = owner[src[inner]]
    eorder = np.lexsort((dst[inner], src[inner], esid))
    edges = np.stack([src[inner][eorder], dst[inner][eorder]]).astype(np.int64)
    eoffsets = np.zeros(count + 1, np.int64)
    np.cumsum(np.bincount(esid, minlength=count), out=eoffsets[1:])
    out = Subgraphs(roots=roots, offsets=offsets, nodes=nodes, edge_offsets=eoffsets,
                    edges=edges, occurrence_bound=1, sampling_scheme=SAMPLING_SCHEME)
    if progress is not None:
        progress("random walks", 1, 1)
    return out


def drw_partitions(edge_index: IntArray, num_nodes: int, train_mask: npt.NDArray[np.bool_],
                   walk_length: int, *, restarts: int = 1,
                   rng: np.random.Generator | int | None = None,
                   progress: Progress | None = None) -> Iterator[Subgraphs]:
    """DRW-D: an endless sequence of independent DRW partitions (use a fresh one every k
    steps), all drawn from ``rng`` (as :func:`drw`): the same int seed gives the same
    sequence. ``progress`` follows the first partition only (the later ones are drawn
    during training, which reports its steps)."""
    gen = np.random.default_rng(rng)
    first = True
    while True:
        yield drw(edge_index, num_nodes, train_mask, walk_length, restarts=restarts, rng=gen,
                  progress=progress if first else None)
        first = False

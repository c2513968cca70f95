"""DGL interop: the dataset format to and from ``DGLGraph``, and GAP's release as a DGL graph.

DGL is an optional extra (``pip install 'dpgnn[dgl]'``), pinned to ``dgl==1.1.3``: the
newest DGL whose Linux wheel loads with torch 2.13 (2.1.0 fails at import looking for its
``libgraphbolt_pytorch_2.13.0.so``; 2.2.1 has Windows wheels only). With 1.1.3,
``dgl.sparse`` does not load (no ``libdgl_sparse_pytorch_2.13.0.so``); nothing here uses it.
Every function imports DGL lazily through :func:`import_dgl`, so the core never needs it.

Conventions (those of DGL's own datasets, e.g. ``CoraGraphDataset``): node data ``feat``
(float32), ``label`` (int64, -1 for unlabeled), boolean ``train_mask`` / ``val_mask`` /
``test_mask``; edge data ``feat``. A graph-classification set is a list of graphs with a
labels dict ``{"label": [G], "train_mask": [G], ...}``, the form ``dgl.save_graphs`` writes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from dpgnn_core.data.clean import clean_edges
from dpgnn_core.data.graph import SPLIT_NAMES, TEST, TRAIN, UNUSED, VAL, GraphData
from dpgnn_core.data.splits import stratified_split
from dpgnn_core.errors import DataError, MissingExtraError
from dpgnn_core.io import atomic_file

#: The DGL release the extra pins, and the command that installs it.
DGL_VERSION = "1.1.3"
INSTALL = "pip install 'dpgnn[dgl]'"
MASKS = {"train_mask": TRAIN, "val_mask": VAL, "test_mask": TEST}


def import_dgl() -> Any:
    """Import DGL (its PyTorch backend) or raise :class:`MissingExtraError` naming the
    install command.

    Raises:
        MissingExtraError: DGL is not installed, or is installed but does not load (DGL 2.x
            on torch 2.13 fails at import for want of its graphbolt library).
    """
    # DGL otherwise writes ~/.dgl/config.json on first import to record its backend.
    os.environ.setdefault("DGLBACKEND", "pytorch")
    try:
        import dgl
    except Exception as e:  # ImportError, or DGL 2.x's FileNotFoundError / DGLError at import
        raise MissingExtraError(
            f"this needs DGL, which is not installed or does not load ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else 'no message'}); install the optional "
            f"extra with `{INSTALL}` (it pins dgl=={DGL_VERSION}, the DGL release that works "
            "with torch 2.13)") from e
    return dgl


def _np(t: Any) -> npt.NDArray[Any]:
    return np.asarray(t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t)


def _tensor(a: npt.ArrayLike, dtype: Any = None) -> torch.Tensor:
    """``a`` as a C-contiguous tensor; a read-only array (a dataset's arrays are) copied
    first: ``torch.from_numpy`` of one warned "The given NumPy array is not writable" on
    every :func:`to_dgl` (the tensor may be written to; the dataset must not be)."""
    arr = np.ascontiguousarray(a, dtype=dtype)
    return torch.from_numpy(arr if arr.flags.writeable else arr.copy())


def to_dgl(data: GraphData) -> Any:
    """``data`` as one ``DGLGraph``.

    Node data: ``feat`` (float32 ``[n, d]``), ``label`` (int64, -1 for unlabeled; ``[n, C]``
    for multi-label data), ``train_mask`` / ``val_mask`` / ``test_mask`` (bool; a node in
    none is ``unused``), and for graph-classification sets ``graph_id``; edge data ``feat``
    when the dataset has edge features. An undirected dataset holds both directions of every
    edge, as DGL expects. Graph labels do not fit on one graph: use :func:`to_dgl_graphs`.

    Args:
        data (GraphData): the dataset.
    """
    dgl = import_dgl()
    ei = _tensor(data.edge_index)
    g = dgl.graph((ei[0], ei[1]), num_nodes=data.num_nodes)
    g.ndata["feat"] = _tensor(data.x, np.float32)
    g.ndata["label"] = _tensor(data.y, np.int64)
    for key, code in MASKS.items():
        g.ndata[key] = _tensor(data.split == code)
    if data.graph_id is not None:
        g.ndata["graph_id"] = _tensor(data.graph_id, np.int64)
    if data.edge_attr is not None:
        g.edata["feat"] = _tensor(data.edge_attr)
    return g


def to_dgl_graphs(data: GraphData) -> tuple[list[Any], dict[str, torch.Tensor]]:
    """A graph-classification set as DGL's list of graphs and labels dict (what
    ``dgl.save_graphs(path, graphs, labels)`` takes).

    Each graph has :func:`to_dgl`'s node and edge ``feat``; the labels dict has ``label``
    (int64 ``[G]``) and ``train_mask`` / ``val_mask`` / ``test_mask`` (bool ``[G]``).

    Args:
        data (GraphData): a dataset with ``task == "graph"``.
    """
    if data.task != "graph" or data.graph_id is None or data.graph_y is None \
            or data.graph_split is None:
        raise DataError("to_dgl_graphs takes a graph-classification dataset", field="task",
                        value=data.task)
    dgl = import_dgl()
    sizes = np.bincount(data.graph_id, minlength=data.num_graphs)
    esizes = np.bincount(data.graph_id[data.edge_index[0]], minlength=data.num_graphs)
    order = np.argsort(data.graph_id[data.edge_index[0]], kind="stable")
    ei = _tensor(data.edge_index[:, order])
    whole = dgl.graph((ei[0], ei[1]), num_nodes=data.num_nodes)
    whole.ndata["feat"] = _tensor(data.x, np.float32)
    if data.edge_attr is not None:
        whole.edata["feat"] = _tensor(data.edge_attr[order])
    # Nodes are grouped graph by graph (validated): the batched form unbatches in place.
    whole.set_batch_num_nodes(_tensor(sizes, np.int64))
    whole.set_batch_num_edges(_tensor(esizes, np.int64))
    labels = {"label": _tensor(data.graph_y, np.int64)}
    labels.update({k: _tensor(data.graph_split == c) for k, c in MASKS.items()})
    return list(dgl.unbatch(whole)), labels


def _ndata(g: Any, key: str, path: str | Path, what: str) -> npt.NDArray[Any]:
    if key not in g.ndata:
        raise DataError(f"no node data {key!r} ({what}); the graph has "
                        f"{sorted(g.ndata) or 'none'}", path=path, field=key)
    return _np(g.ndata[key])


def _features(g: Any, names: Sequence[str], path: str | Path, data_of: str = "node"
              ) -> npt.NDArray[np.float32]:
    cols = []
    store = g.ndata if data_of == "node" else g.edata
    for key in names:
        if key not in store:
            raise DataError(f"no {data_of} data {key!r} (features); the graph has "
                            f"{sorted(store) or 'none'}", path=path, field=key)
        arr = _np(store[key])
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
            raise DataError(f"{data_of} data {key!r} is not numeric", path=path, field=key,
                            value=str(arr.dtype))
        cols.append(arr.reshape(arr.shape[0], -1).astype(np.float32))
    return np.concatenate(cols, axis=1)


def _int_labels(arr: npt.NDArray[Any], path: str | Path, field: str
                ) -> npt.NDArray[np.int64]:
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise DataError("labels must be integers (-1 for unlabeled)", path=path, field=field,
                        value=str(arr.dtype))
    if arr.ndim != 1:
        arr = arr.reshape(arr.shape[0], -1)
        if arr.shape[1] != 1:
            raise DataError("labels must be one integer per item (multi-label data: convert "
                            "it with dpgnn_core's GraphData directly)", path=path,
                            field=field, value=list(arr.shape))
        arr = arr[:, 0]
    out = arr.astype(np.int64)
    if out.size and out.min() < -1:
        raise DataError("labels must be >= 0 (or -1 for unlabeled)", path=path, field=field,
                        value=int(out.min()))
    return out


def _split_from_masks(masks: Mapping[str, Any], n: int, path: str | Path, where: str
                      ) -> npt.NDArray[np.int8] | None:
    present = [k for k in MASKS if k in masks]
    if not present:
        return None
    split = np.full(n, UNUSED, dtype=np.int8)
    taken = np.zeros(n, dtype=bool)
    for key in present:
        m = _np(masks[key]).reshape(-1).astype(bool)
        if m.shape[0] != n:
            raise DataError(f"{where} {key!r} has {m.shape[0]} entries for {n} items",
                            path=path, field=key, value=m.shape[0])
        both = m & taken
        if both.any():
            raise DataError(f"item {int(np.flatnonzero(both)[0])} is in two split masks",
                            path=path, field=key)
        split[m] = MASKS[key]
        taken |= m
    return split


def _require_symmetric(ei: npt.NDArray[np.int64], n: int, path: str | Path) -> None:
    """Refuse an edge list said to be undirected that lacks the reverse of some edge."""
    keys = ei[0] * n + ei[1]
    lonely = ~np.isin(ei[1] * n + ei[0], keys)
    if lonely.any():
        i = int(np.flatnonzero(lonely)[0])
        raise DataError(
            f"the graph is taken as undirected (the default) but edge ({int(ei[0, i])}, "
            f"{int(ei[1, i])}) has no reverse ({int(lonely.sum())} of {ei.shape[1]} edges "
            "lack one); an undirected DGL graph holds both directions of every edge. Pass "
            "-o directed=true if the graph is directed, or add the reverse edges "
            "(dgl.to_bidirected) before saving", path=path, field="directed", value=False)


def from_dgl(
    graphs: Any,
    graph_labels: Mapping[str, Any] | None = None,
    *,
    name: str = "dgl",
    features: Sequence[str] = ("feat",),
    label: str = "label",
    graph_label: str = "label",
    edge_features: Sequence[str] = (),
    num_classes: int | None = None,
    fractions: tuple[float, float, float] | None = None,
    seed: int = 0,
    remove_self_loops: bool = False,
    dedupe: bool = False,
    directed: bool = False,
    path: str | Path = "<memory>",
) -> GraphData:
    """A ``DGLGraph`` (node classification) or a list of them with a labels dict (graph
    classification) as a dataset.

    The task is graph classification when ``graph_labels`` holds ``graph_label``, else node
    classification on one graph. Splits come from the boolean ``train_mask`` / ``val_mask``
    / ``test_mask`` (node data; for graph sets, entries of ``graph_labels``) when present and
    ``fractions`` is not given; otherwise a random split stratified by label (75/10/15 of
    labelled nodes, 80/10/10 of graphs). Whether the graph is directed is the caller's
    ``directed`` (default undirected, the conservative reading: DP-GNN's node level is
    refused on it), never read off the edges, whose symmetry is itself private: an
    undirected graph must hold both directions of every edge (DGL's convention) and one
    that does not is refused, naming an edge without its reverse. Self-loops and duplicate
    edges are errors unless asked to be removed, as in every loader.

    Args:
        graphs (DGLGraph or list of DGLGraph): homogeneous graphs.
        graph_labels (dict, optional): graph-level tensors (``dgl.load_graphs``' second
            result). (default: :obj:`None`)
        name (str, optional): dataset name. (default: :obj:`"dgl"`)
        features (sequence of str, optional): node data concatenated (flattened per node)
            into the features. (default: :obj:`("feat",)`)
        label (str, optional): node data of node labels. (default: :obj:`"label"`)
        graph_label (str, optional): key of graph labels. (default: :obj:`"label"`)
        edge_features (sequence of str, optional): edge data for edge features.
            (default: :obj:`()`)
        num_classes (int, optional): number of classes (default: largest label + 1).
        fractions (tuple, optional): train/val/test fractions of a random split instead of
            the masks. (default: :obj:`None`)
        seed (int, optional): seed of a random split. (default: :obj:`0`)
        remove_self_loops (bool, optional): drop self-loops instead of raising.
        dedupe (bool, optional): drop duplicate edges instead of raising.
        directed (bool, optional): the graph is directed; otherwise it is undirected and
            its edge set must be symmetric. (default: :obj:`False`)
        path (str, optional): the source file, named in errors.
    """
    many = isinstance(graphs, list | tuple)
    glist = list(graphs) if many else [graphs]
    graph_task = graph_labels is not None and graph_label in graph_labels
    if not glist:
        raise DataError("no graph in the input", path=path, field="graphs", value=0)
    if not graph_task and len(glist) != 1:
        raise DataError(f"{len(glist)} graphs but no graph label {graph_label!r} in the "
                        f"labels dict (keys: {sorted(graph_labels or {}) or 'none'}); node "
                        "classification reads one graph", path=path, field=graph_label)
    for i, g in enumerate(glist):
        if not g.is_homogeneous:
            raise DataError(f"graph {i} is heterogeneous (node types {g.ntypes}, edge types "
                            f"{g.etypes}); convert it with dgl.to_homogeneous first",
                            path=path, field="graphs", value=i)
    if not features:
        raise DataError("give at least one node data name as features", path=path,
                        field="features")
    sizes = np.array([g.num_nodes() for g in glist], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    x = np.concatenate([_features(g, features, path) for g in glist], axis=0)
    eis = [np.stack([_np(s), _np(d)]).astype(np.int64) + offsets[i]
           for i, (s, d) in enumerate(g.edges() for g in glist)]
    ei = np.concatenate(eis, axis=1) if eis else np.zeros((2, 0), np.int64)
    eattr = (np.concatenate([_features(g, edge_features, path, "edge") for g in glist])
             if edge_features else None)
    n = int(offsets[-1])
    ei, counts, kept = clean_edges(ei, n, remove_self_loops=remove_self_loops, dedupe=dedupe,
                                   path=path)
    if eattr is not None:
        eattr = eattr[kept]
    if not directed:
        _require_symmetric(ei, n, path)
    rng = np.random.default_rng(seed)
    meta: dict[str, Any] = {"cleaning": dict(counts)}
    if graph_task:
        assert graph_labels is not None
        graph_y = _int_labels(_np(graph_labels[graph_label]), path, graph_label)
        if graph_y.shape[0] != len(glist):
            raise DataError(f"{graph_y.shape[0]} graph labels for {len(glist)} graphs",
                            path=path, field=graph_label, value=graph_y.shape[0])
        gsplit = None if fractions else _split_from_masks(graph_labels, len(glist), path,
                                                          "graph label")
        scheme = "dgl-masks"
        if gsplit is None:
            fr = fractions or (0.8, 0.1, 0.1)
            gsplit = stratified_split(graph_y, fr, rng=rng)
            scheme = "random-stratified-graphs"
            meta["split"] = {"scheme": scheme, "fractions": list(fr), "seed": seed}
        else:
            meta["split"] = {"scheme": scheme}
        graph_id = np.repeat(np.arange(len(glist), dtype=np.int64), sizes)
        k = num_classes if num_classes is not None else int(graph_y.max()) + 1
        return GraphData(name=name, task="graph", x=x, edge_index=np.ascontiguousarray(ei),
                         y=np.full(n, -1, dtype=np.int64), split=gsplit[graph_id],
                         num_classes=k, directed=directed, graph_id=graph_id,
                         graph_y=graph_y, graph_split=gsplit, edge_attr=eattr, meta=meta)
    g = glist[0]
    y = _int_labels(_ndata(g, label, path, "node labels"), path, label)
    split = None if fractions else _split_from_masks(g.ndata, n, path, "node data")
    if split is None:
        fr = fractions or (0.75, 0.10, 0.15)
        split = stratified_split(y, fr, rng=rng)
        meta["split"] = {"scheme": "random-stratified", "fractions": list(fr), "seed": seed}
    else:
        meta["split"] = {"scheme": "dgl-masks"}
    k = num_classes if num_classes is not None else int(y.max()) + 1
    return GraphData(name=name, task="node", x=x, edge_index=np.ascontiguousarray(ei), y=y,
                     split=split, num_classes=k, directed=directed,
                     edge_attr=eattr, meta=meta)


def release_to_dgl(aggregations: torch.Tensor) -> Any:
    """GAP's private release X(1..K) as a ``DGLGraph`` with node data and **no edges**.

    At edge and node level the graph's edges are what GAP protects: only the noisy
    aggregations are released, so the exported graph carries them (``agg``, ``[n, K, d]``;
    ``agg_k`` = hop k, ``[n, d]``) on the nodes and no edge. Node i is node i of the
    dataset. Post-processing of the release: no privacy cost.

    Args:
        aggregations (torch.Tensor): ``[n, K, d]``, the ``aggregations.pt`` of a GAP run.
    """
    if aggregations.ndim != 3:
        raise DataError("GAP's release is [nodes, hops, dim]", field="aggregations",
                        value=list(aggregations.shape))
    dgl = import_dgl()
    n = int(aggregations.shape[0])
    empty = torch.zeros(0, dtype=torch.int64)
    g = dgl.graph((empty, empty), num_nodes=n)
    agg = aggregations.detach().cpu().float()
    g.ndata["agg"] = agg
    for k in range(agg.shape[1]):
        g.ndata[f"agg_{k + 1}"] = agg[:, k].contiguous()
    return g


def save_release_dgl(path: str | Path, aggregations: torch.Tensor) -> Path:
    """Write :func:`release_to_dgl` with ``dgl.save_graphs``, atomically (labels dict:
    ``hops``). Returns the path written."""
    dgl = import_dgl()
    g = release_to_dgl(aggregations)
    path = Path(path)
    with atomic_file(path) as tmp:
        dgl.save_graphs(str(tmp), [g], {"hops": torch.tensor([aggregations.shape[1]])})
    return path


__all__ = ["DGL_VERSION", "INSTALL", "SPLIT_NAMES", "from_dgl", "import_dgl",
           "release_to_dgl", "save_release_dgl", "to_dgl", "to_dgl_graphs"]

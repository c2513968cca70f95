"""DGL's binary graph files (``dgl.save_graphs``): one graph for node classification, or a
list of graphs with graph labels for graph classification.

Reading needs the optional DGL extra (``pip install 'dpgnn[dgl]'``); the conversion is
:func:`dpgnn_core.interop.dgl.from_dgl`, whose conventions (node data ``feat``, ``label``,
``train_mask`` / ``val_mask`` / ``test_mask``) are the defaults here.
"""

from __future__ import annotations

from pathlib import Path

from dpgnn_core.data.graph import GraphData
from dpgnn_core.data.loader import Loader, from_source
from dpgnn_core.data.loaders._common import provenance, require_file
from dpgnn_core.data.options import DglOptions
from dpgnn_core.errors import DataError


def load_dgl(
    source: str | Path,
    name: str | None = None,
    *,
    features: list[str] | None = None,
    label: str = "label",
    graph_label: str = "label",
    edge_features: list[str] | None = None,
    fractions: tuple[float, float, float] | None = None,
    seed: int = 0,
    remove_self_loops: bool = False,
    dedupe: bool = False,
    directed: bool = False,
) -> GraphData:
    """Read a file written by ``dgl.save_graphs``.

    The labels dict saved with the graphs decides the task: with ``graph_label`` in it, the
    graphs are a graph-classification set; otherwise the file must hold one graph, whose
    nodes are classified.

    Args:
        source (str or Path): the ``.bin`` file.
        name (str, optional): dataset name (default: the file's stem).
        features (list of str, optional): node data concatenated into the features.
            (default: :obj:`["feat"]`)
        label (str, optional): node data of node labels. (default: :obj:`"label"`)
        graph_label (str, optional): key of graph labels. (default: :obj:`"label"`)
        edge_features (list of str, optional): edge data for edge features.
        fractions (tuple, optional): a random stratified split instead of the saved masks.
        seed (int, optional): seed of a random split. (default: :obj:`0`)
        remove_self_loops (bool, optional): drop self-loops instead of raising.
        dedupe (bool, optional): drop duplicate edges instead of raising.
        directed (bool, optional): the graph is directed; otherwise undirected, and its
            edge set must then be symmetric (never inferred from the edges).
            (default: :obj:`False`)
    """
    from dpgnn_core.interop.dgl import from_dgl, import_dgl

    source = require_file(Path(source), "DGL graph file (written by dgl.save_graphs)")
    dgl = import_dgl()
    try:
        graphs, labels = dgl.load_graphs(str(source))
    except Exception as e:  # DGL raises its own DGLError on a file it cannot parse
        raise DataError(f"not a DGL graph file: {type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}", path=source) from e
    feats = features or ["feat"]
    data = from_dgl(graphs, labels, name=name or source.stem, features=feats, label=label,
                    graph_label=graph_label, edge_features=edge_features or (),
                    fractions=fractions, seed=seed, remove_self_loops=remove_self_loops,
                    dedupe=dedupe, directed=directed, path=source)
    data.meta["source"] = provenance("dgl", source, [source], features=feats, label=label,
                                     graph_label=graph_label,
                                     edge_features=list(edge_features or []),
                                     directed=directed,
                                     dgl_version=dgl.__version__)
    return data


#: This module's ingest format (:mod:`dpgnn_core.data.catalog`).
LOADERS = (Loader("dgl", DglOptions, from_source(load_dgl)),)

"""A dataset folder written as partitions (issue 51): node-range partitions for the nodes
(labels, split) and features, edges partitioned by destination range, every partition's
sha256 in the one ``manifest.json``::

    nodes/part-00000.parquet     node_id, label, split of nodes [lo_0, hi_0)
    features/part-00000.parquet  x of the same nodes
    edges/part-00000.parquet     src, dst with lo_0 <= dst < hi_0, sorted by (dst, src)
    manifest.json                the keys of a single-file folder (counts, split counts,
                                 ``files`` with the sha256 and size of every partition,
                                 ``content_sha256``, ``manifest_sha256``) and two more:
                                 ``layout: "partitioned"`` and ``partitions`` (the node
                                 ranges and each edge partition's row count)

The partitioned CSBM (:func:`write_partitioned_csbm`) draws the graph block by block and
never holds more than one destination block's edges, features and labels at once: node
block b's labels, split and features come from a generator seeded with ``(seed, kind, b)``
and the pairs with source in block a and target in block b from one seeded with
``(seed, 1, a, b)``, so the edges of destination block i (pairs (i, j) and (j, i) for every
j, both directions of an undirected pair) are drawn again wherever they are needed. These
seeds are the data generator's, not privacy randomness. It draws a CSBM of the same law as
:func:`~dpgnn_core.data.synthetic.csbm` with uniform degree weights (the target's block in
proportion to its size, then a node of the chosen class in it; a pair whose class has no
node in the target block is dropped, which only happens with tiny blocks), but another
realisation: the same seed gives another graph than the single-file generator.

:func:`verify_partitioned` is the tampering check of such a folder, run before any work:
every partition's sha256 (optionally hashed by Dask workers), ``content_sha256``, the row
counts of every partition's footer and ``manifest_sha256``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from dpgnn_core import __version__
from dpgnn_core.data.graph import SPLIT_NAMES, GraphData
from dpgnn_core.data.manifest import manifest_digest
from dpgnn_core.data.splits import stratified_split
from dpgnn_core.data.store import (
    _BULK,
    SCHEMA_VERSION,
    _fixed_list,
    _matrix,
    _split_array,
    _split_codes,
    check_manifest_digest,
    read_manifest,
)
from dpgnn_core.data.validate import check_finite, validate_graph_data
from dpgnn_core.errors import DataError
from dpgnn_core.io import atomic_dir, sha256_file, sha256_json, write_json_atomic

LAYOUT = "partitioned"
KINDS = ("nodes", "features", "edges")
IntArray = npt.NDArray[np.int64]
Bounds = list[tuple[int, int]]


def part_name(kind: str, block: int) -> str:
    """The file of ``kind``'s partition ``block``, relative to the dataset folder."""
    return f"{kind}/part-{block:05d}.parquet"


def node_bounds(num_nodes: int, partition_nodes: int) -> Bounds:
    """The node ranges ``[lo, hi)`` of blocks of ``partition_nodes`` nodes."""
    if partition_nodes < 1:
        raise DataError("partitions need at least one node each", field="partition_nodes",
                        value=partition_nodes)
    return [(lo, min(lo + partition_nodes, num_nodes))
            for lo in range(0, num_nodes, partition_nodes)]


# --- the block-wise CSBM ------------------------------------------------------------------


def _block_labels(seed: int, block: int, size: int, num_classes: int) -> IntArray:
    rng = np.random.default_rng([seed, 0, block])
    return rng.integers(0, num_classes, size=size, dtype=np.int64)


def _pair_draw(seed: int, a: int, b: int, bounds: Bounds, y_a: IntArray, y_b: IntArray,
               pairs: float, homophily: float, num_classes: int) -> tuple[IntArray, IntArray]:
    """Pairs (s, t) with s in block a and t in block b: Poisson(m n_a n_b / n²) of them, s
    uniform in a, t's class s's own with probability ``homophily`` (else a uniformly chosen
    other class), t uniform among the nodes of that class in b."""
    rng = np.random.default_rng([seed, 1, a, b])
    (lo_a, hi_a), (lo_b, _) = bounds[a], bounds[b]
    k = int(rng.poisson(pairs))
    s = rng.integers(0, hi_a - lo_a, size=k)
    cls = y_a[s]
    other = (cls + rng.integers(1, num_classes, size=k)) % num_classes
    tgt_cls = np.where(rng.random(k) < homophily, cls, other)
    by_class = np.argsort(y_b, kind="stable")
    starts = np.searchsorted(y_b[by_class], np.arange(num_classes + 1))
    lo_c, size_c = starts[tgt_cls], np.diff(starts)[tgt_cls]
    keep = size_c > 0
    pick = lo_c + np.floor(rng.random(k) * np.maximum(size_c, 1)).astype(np.int64)
    t = by_class[np.minimum(pick, y_b.shape[0] - 1)]
    return s[keep] + lo_a, t[keep] + lo_b


def _dst_block_edges(seed: int, i: int, bounds: Bounds, n: int, m: float, homophily: float,
                     num_classes: int) -> tuple[IntArray, int]:
    """Destination block i's edges ``[2, E_i]`` sorted by (dst, src) (self-loops dropped,
    duplicates merged), and the pairs drawn with source in block i."""
    size = [hi - lo for lo, hi in bounds]
    y_i = _block_labels(seed, i, size[i], num_classes)
    keys, drawn = [], 0
    for j in range(len(bounds)):
        y_j = y_i if j == i else _block_labels(seed, j, size[j], num_classes)
        for a, b, ya, yb in ((i, j, y_i, y_j), (j, i, y_j, y_i))[:1 if j == i else 2]:
            s, t = _pair_draw(seed, a, b, bounds, ya, yb, m * size[a] * size[b] / n ** 2,
                              homophily, num_classes)
            drawn += s.shape[0] if a == i else 0
            keep = s != t
            s, t = s[keep], t[keep]
            if b == i:  # the edge s -> t lands in block i
                keys.append(t * n + s)
            if a == i:  # the edge t -> s lands in block i
                keys.append(s * n + t)
    flat = np.unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)
    return np.stack([flat % n, flat // n]), drawn


def _write_block(tmp: Path, b: int, lo: int, y: IntArray, split: npt.NDArray[np.int8],
                 x: npt.NDArray[np.float32], edges: IntArray) -> None:
    nodes = pa.table({"node_id": pa.array(np.arange(lo, lo + y.shape[0], dtype=np.int64)),
                      "label": pa.array(y), "split": _split_array(split)})
    pq.write_table(nodes, tmp / part_name("nodes", b), compression="zstd")
    pq.write_table(pa.table({"x": _fixed_list(x)}), tmp / part_name("features", b), **_BULK)
    pq.write_table(pa.table({"src": pa.array(edges[0]), "dst": pa.array(edges[1])}),
                   tmp / part_name("edges", b), **_BULK)


def write_partitioned_csbm(
    folder: str | Path, *, partition_nodes: int, num_nodes: int = 3000, num_classes: int = 5,
    feature_dim: int = 32, avg_degree: float = 10.0, homophily: float = 0.8,
    feature_signal: float = 1.0, seed: int = 0,
    fractions: tuple[float, float, float] = (0.5, 0.2, 0.3), name: str | None = None,
    overwrite: bool = False, ingest: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Write a CSBM dataset folder as partitions of ``partition_nodes`` nodes, block by
    block (see the module docstring), atomically.

    Args:
        folder (str or Path): the dataset folder to create.
        partition_nodes (int): nodes per partition (the last may hold fewer).
        num_nodes, num_classes, feature_dim, avg_degree, homophily, feature_signal, seed,
            fractions, name: as :func:`~dpgnn_core.data.synthetic.csbm`'s.
        overwrite (bool, optional): replace an existing folder once the new one is
            complete. (default: :obj:`False`)
        ingest (dict, optional): the manifest's ``ingest`` record (the spec). (default:
            :obj:`None`)
        progress (callable, optional): ``progress(done, total)`` after each block.

    Returns:
        dict: the manifest written.
    """
    checks = {"num_nodes": num_nodes >= 2, "num_classes": 2 <= num_classes <= num_nodes,
              "feature_dim": feature_dim >= 1, "avg_degree": avg_degree > 0,
              "homophily": 0.0 <= homophily <= 1.0, "feature_signal": feature_signal >= 0}
    for field, ok in checks.items():
        if not ok:
            raise DataError("invalid synthetic-graph parameter", field=field,
                            value=locals()[field])
    n, c = int(num_nodes), int(num_classes)
    bounds = node_bounds(n, int(partition_nodes))
    m = n * avg_degree / 2
    means = np.random.default_rng([seed, 3]).standard_normal((c, feature_dim))
    means = (means * feature_signal / np.sqrt(feature_dim)).astype(np.float32)
    edge_rows: list[int] = []
    counts = np.zeros(len(SPLIT_NAMES), dtype=np.int64)
    drawn = 0
    with atomic_dir(folder, overwrite=overwrite) as tmp:
        for kind in KINDS:
            (tmp / kind).mkdir()
        for b, (lo, hi) in enumerate(bounds):
            y = _block_labels(seed, b, hi - lo, c)
            rng = np.random.default_rng([seed, 2, b])
            x = rng.standard_normal((hi - lo, feature_dim), dtype=np.float32) + means[y]
            split = stratified_split(y, fractions, rng=rng)
            edges, pairs = _dst_block_edges(seed, b, bounds, n, m, homophily, c)
            _write_block(tmp, b, lo, y, split, x, edges)
            edge_rows.append(int(edges.shape[1]))
            counts += np.bincount(split.astype(np.int64), minlength=len(SPLIT_NAMES))
            drawn += pairs
            if progress is not None:
                progress(b + 1, len(bounds))
        params = {"num_nodes": n, "num_classes": c, "feature_dim": feature_dim,
                  "avg_degree": avg_degree, "homophily": homophily,
                  "feature_signal": feature_signal, "power_law": None, "seed": seed,
                  "partition_nodes": int(partition_nodes)}
        manifest = _manifest(tmp, name or f"csbm-n{n}-s{seed}-p{partition_nodes}", bounds,
                             edge_rows, feature_dim, c, counts, params, fractions, seed, drawn)
        if ingest:
            manifest["ingest"] = ingest
        written: dict[str, Any] = json.loads(json.dumps(manifest, default=str))
        written["manifest_sha256"] = manifest_digest(written)
        write_json_atomic(tmp / "manifest.json", written)
    return written


def write_partitioned(data: GraphData, folder: str | Path, *, partition_nodes: int,
                      overwrite: bool = False) -> dict[str, Any]:
    """An in-memory node-classification graph written as partitions of ``partition_nodes``
    nodes (the layout of :func:`write_partitioned_csbm`, its manifest and checks), for
    graphs that fit one process: tests and comparisons with the single-process path.

    Returns:
        dict: the manifest written.
    """
    validate_graph_data(data, path=folder)
    if data.task != "node" or np.asarray(data.y).ndim != 1 or data.directed:
        raise DataError("only single-label node classification on an undirected graph is "
                        "written as partitions", path=folder, field="task", value=data.task)
    bounds = node_bounds(data.num_nodes, int(partition_nodes))
    src, dst = data.edge_index[0].astype(np.int64), data.edge_index[1].astype(np.int64)
    order = np.lexsort((src, dst))
    src, dst = src[order], dst[order]
    cuts = np.searchsorted(dst, [lo for lo, _ in bounds] + [data.num_nodes])
    y, split = np.asarray(data.y, dtype=np.int64), np.asarray(data.split, dtype=np.int8)
    with atomic_dir(folder, overwrite=overwrite) as tmp:
        for kind in KINDS:
            (tmp / kind).mkdir()
        for b, (lo, hi) in enumerate(bounds):
            sel = slice(cuts[b], cuts[b + 1])
            _write_block(tmp, b, lo, y[lo:hi], split[lo:hi], data.x[lo:hi],
                         np.stack([src[sel], dst[sel]]))
        counts = np.bincount(split.astype(np.int64), minlength=len(SPLIT_NAMES))
        manifest = _manifest(tmp, data.name, bounds, list(np.diff(cuts).astype(int).tolist()),
                             int(data.num_features), int(data.num_classes), counts,
                             {"partition_nodes": int(partition_nodes)}, [], 0, 0)
        manifest["source"] = {"format": "graph", "generator": None,
                              "options": {"partition_nodes": int(partition_nodes)}}
        manifest["split"] = {"scheme": "given"}
        written: dict[str, Any] = json.loads(json.dumps(manifest, default=str))
        written["manifest_sha256"] = manifest_digest(written)
        write_json_atomic(tmp / "manifest.json", written)
    return written


def _manifest(tmp: Path, name: str, bounds: Bounds, edge_rows: list[int], feature_dim: int,
              num_classes: int, counts: npt.NDArray[np.int64], params: dict[str, Any],
              fractions: Sequence[float], seed: int, drawn: int) -> dict[str, Any]:
    files = [part_name(k, b) for b in range(len(bounds)) for k in KINDS]
    hashes = {f: {"sha256": sha256_file(tmp / f), "bytes": (tmp / f).stat().st_size}
              for f in files}
    return {
        "schema_version": SCHEMA_VERSION, "dpgnn_version": __version__, "name": name,
        "task": "node", "num_nodes": bounds[-1][1], "num_edges": int(sum(edge_rows)),
        "num_graphs": 0, "feature_dim": feature_dim, "edge_feature_dim": 0,
        "num_classes": num_classes, "multi_label": False, "directed": False,
        "split_counts": {s: int(v) for s, v in zip(SPLIT_NAMES, counts, strict=True)},
        "split": {"scheme": "random-stratified per partition",
                  "fractions": list(fractions), "seed": seed},
        "source": {"format": "synthetic", "generator": "csbm (partitioned)",
                   "options": params},
        "cleaning": {"sampled_pairs": drawn},
        "layout": LAYOUT,
        "partitions": {"bounds": [list(b) for b in bounds], "edge_rows": edge_rows},
        "files": hashes,
        "content_sha256": sha256_json({f: h["sha256"] for f, h in hashes.items()}),
    }


# --- checks and reads -----------------------------------------------------------------------


def is_partitioned(manifest: dict[str, Any]) -> bool:
    """Whether ``manifest`` is that of a partitioned folder."""
    return manifest.get("layout") == LAYOUT


def partition_bounds(folder: str | Path, manifest: dict[str, Any]) -> Bounds:
    """The node ranges the manifest states, checked to tile ``[0, num_nodes)``."""
    where = Path(folder) / "manifest.json"
    parts = manifest.get("partitions")
    if not is_partitioned(manifest) or not isinstance(parts, dict):
        raise DataError("not a partitioned dataset folder (its manifest has no layout "
                        "'partitioned'); write one with `dpgnn ingest --format synthetic "
                        "--partition-nodes N`", path=where, field="layout",
                        value=manifest.get("layout"))
    bounds = [(int(lo), int(hi)) for lo, hi in parts.get("bounds", [])]
    ends = [0] + [hi for _, hi in bounds]
    if (not bounds or any(lo != ends[k] or hi <= lo for k, (lo, hi) in enumerate(bounds))
            or ends[-1] != manifest.get("num_nodes")):
        raise DataError("partition bounds do not tile 0..num_nodes", path=where,
                        field="partitions.bounds", value=parts.get("bounds"))
    return bounds


def _hash_all(folder: Path, names: list[str], client: Any | None) -> dict[str, str]:
    if client is None:
        return {f: sha256_file(folder / f) for f in names}
    futures = client.map(sha256_file, [str(folder / f) for f in names], pure=False)
    return dict(zip(names, client.gather(futures), strict=True))


def verify_partitioned(folder: str | Path, client: Any | None = None) -> dict[str, Any]:
    """The tampering check of a partitioned folder, before any work: ``manifest_sha256``;
    every partition there with its sha256 (hashed by ``client``'s workers when given) and
    size; ``content_sha256``; every partition's footer (rows of each node partition = its
    range, of each edge partition = the stated count, the feature width).

    Returns:
        dict: the manifest (with ``path``).

    Raises:
        DataError: naming the file (or ``manifest.json``), the field and the value.
    """
    folder = Path(folder)
    manifest = read_manifest(folder)  # manifest_sha256 checked
    bounds = partition_bounds(folder, manifest)
    where, files = folder / "manifest.json", manifest["files"]
    expected = {part_name(k, b) for b in range(len(bounds)) for k in KINDS}
    if set(files) != expected:
        raise DataError("manifest does not list exactly one file of each kind per partition",
                        path=where, field="files", value=sorted(set(files) ^ expected)[:3])
    for name in sorted(files):
        if not (folder / name).is_file():
            raise DataError("file listed in the manifest is missing", path=folder / name)
    for name, digest in sorted(_hash_all(folder, sorted(files), client).items()):
        if digest != files[name]["sha256"]:
            raise DataError("checksum mismatch: the partition changed after ingest",
                            path=folder / name, field="sha256", value=digest)
    content = sha256_json({f: h["sha256"] for f, h in files.items()})
    if manifest.get("content_sha256") != content:
        raise DataError("manifest was edited after ingest: its files' sha256 do not give its "
                        f"content_sha256 (they give {content[:12]}…)", path=where,
                        field="content_sha256", value=manifest.get("content_sha256"))
    _check_footers(folder, manifest, bounds)
    check_manifest_digest(folder, manifest)
    return {**manifest, "path": str(folder)}


def _check_footers(folder: Path, manifest: dict[str, Any], bounds: Bounds) -> None:
    rows = manifest["partitions"].get("edge_rows", [])
    for b, (lo, hi) in enumerate(bounds):
        for kind, want in (("nodes", hi - lo), ("features", hi - lo),
                           ("edges", rows[b] if b < len(rows) else None)):
            got = pq.read_metadata(folder / part_name(kind, b)).num_rows
            if got != want:
                raise DataError(f"holds {got} rows, the manifest says {want}",
                                path=folder / part_name(kind, b), field="num_rows", value=got)
        width = pq.read_schema(folder / part_name("features", b)).field("x").type
        if getattr(width, "list_size", None) != manifest["feature_dim"]:
            raise DataError(f"holds feature width {width}, the manifest says "
                            f"{manifest['feature_dim']}", path=folder / part_name("features", b),
                            field="x", value=str(width))
    if sum(rows) != manifest["num_edges"]:
        raise DataError("edge partitions' rows do not sum to num_edges",
                        path=folder / "manifest.json", field="num_edges",
                        value=manifest["num_edges"])


def verify_partitioned_records(folder: str | Path) -> tuple[IntArray, npt.NDArray[np.int8]]:
    """:func:`verify_partitioned` (in this process), then every node's label and split
    code, read partition by partition (the columns only): what the pre-flight's record
    checks read of a one-file folder (:func:`~dpgnn_core.data.store.verify_folder`)."""
    manifest = verify_partitioned(folder)
    labels, splits = [], []
    for b in range(len(partition_bounds(folder, manifest))):
        p = Path(folder) / part_name("nodes", b)
        nodes = pq.read_table(p, columns=["label", "split"])
        labels.append(nodes.column("label").to_numpy().astype(np.int64))
        splits.append(_split_codes(nodes.column("split"), path=p))
    return np.concatenate(labels), np.concatenate(splits)


def read_edge_block(folder: str | Path, block: int, bounds: Bounds,
                    num_nodes: int) -> tuple[IntArray, IntArray]:
    """Edge partition ``block``: ``(src, dst)``, every dst in the block's range and every
    src in ``[0, num_nodes)`` (else a :class:`DataError` naming the file)."""
    p = Path(folder) / part_name("edges", block)
    table = pq.read_table(p, memory_map=True)
    src = table.column("src").to_numpy().astype(np.int64, copy=False)
    dst = table.column("dst").to_numpy().astype(np.int64, copy=False)
    lo, hi = bounds[block]
    if dst.size and (dst.min() < lo or dst.max() >= hi):
        bad = int(dst[(dst < lo) | (dst >= hi)][0])
        raise DataError(f"destination outside the partition's range [{lo}, {hi})", path=p,
                        field="dst", value=bad)
    if src.size and (src.min() < 0 or src.max() >= num_nodes):
        bad = int(src[(src < 0) | (src >= num_nodes)][0])
        raise DataError(f"source outside 0..{num_nodes - 1}", path=p, field="src", value=bad)
    return src, dst


def read_feature_block(folder: str | Path, block: int) -> npt.NDArray[np.float32]:
    """Feature partition ``block`` as float32 ``[n_b, d]``; NaN or inf refused, as the
    single-file reader does (naming the file and the row within the partition)."""
    p = Path(folder) / part_name("features", block)
    x = _matrix(pq.read_table(p, memory_map=True).column("x"), path=p, field="x")
    check_finite(x, path=p, field="x")
    return x


def read_partitioned(folder: str | Path) -> GraphData:
    """A (small) partitioned folder as one :class:`GraphData`, checked first
    (:func:`verify_partitioned`): for graphs that fit one process, e.g. to compare the
    partitioned path with the single-process one."""
    manifest = verify_partitioned(folder)
    bounds = partition_bounds(folder, manifest)
    n = int(manifest["num_nodes"])
    ys, splits, xs, edges = [], [], [], []
    for b in range(len(bounds)):
        p = Path(folder) / part_name("nodes", b)
        nodes = pq.read_table(p)
        ys.append(nodes.column("label").to_numpy())
        splits.append(_split_codes(nodes.column("split"), path=p))
        xs.append(read_feature_block(folder, b))
        edges.append(np.stack(read_edge_block(folder, b, bounds, n)))
    data = GraphData(name=manifest["name"], task="node", x=np.concatenate(xs),
                     edge_index=np.concatenate(edges, axis=1), y=np.concatenate(ys),
                     split=np.concatenate(splits), num_classes=int(manifest["num_classes"]),
                     directed=bool(manifest["directed"]),
                     meta={k: manifest.get(k, {}) for k in ("split", "source", "cleaning")})
    validate_graph_data(data, path=folder)
    return data


def edges_dataset(folder: str | Path) -> Any:
    """The edge partitions as one lazy :mod:`pyarrow.dataset` (read nothing yet); check
    the folder first with :func:`verify_partitioned`."""
    import pyarrow.dataset as ds

    return ds.dataset(str(Path(folder) / "edges"), format="parquet")


def ingest_partitioned(spec: Any, folder: str | Path, *, record: dict[str, Any],
                       overwrite: bool = False) -> dict[str, Any]:
    """``dpgnn ingest --format synthetic --partition-nodes N``: the spec's options checked
    (:func:`~dpgnn_core.data.catalog.validate_options`), then
    :func:`write_partitioned_csbm`; the manifest's ``ingest`` record is ``record`` (the
    caller's :func:`~dpgnn_core.data.ingest.ingest_record` of the spec)."""
    from dpgnn_core.data.catalog import validate_options

    opts = validate_options(spec.format, dict(spec.options))
    for key, bad in (("kind", opts.get("kind", "csbm") != "csbm"),
                     ("power_law", opts.get("power_law") is not None),
                     ("feature_kind", opts.get("feature_kind", "gaussian") != "gaussian"),
                     ("disjoint", bool(opts.get("disjoint"))),
                     ("allow_no_edges", bool(opts.get("allow_no_edges")))):
        if bad:
            raise DataError("not available with partition_nodes (the partitioned generator "
                            "draws a CSBM of uniform degree weights)", field=key,
                            value=opts.get(key))
    keep = ("partition_nodes", "num_nodes", "num_classes", "feature_dim", "avg_degree",
            "homophily", "feature_signal", "seed")
    kwargs = {k: opts[k] for k in keep if k in opts}
    if opts.get("fractions") is not None:
        kwargs["fractions"] = tuple(opts["fractions"])
    return write_partitioned_csbm(folder, name=spec.name, overwrite=overwrite,
                                  ingest=record, **kwargs)

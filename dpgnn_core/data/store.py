"""Read and write the canonical dataset folder.

One folder per dataset version::

    nodes.parquet     node_id int64 (0..n-1), label int64 (-1 unlabeled) or, for
                      multi-label data, FixedSizeList<int8>[C] of 0/1 (all -1 unlabeled),
                      split dictionary<int8, string>, graph_id int64 (graph datasets)
    features.parquet  x: FixedSizeList<float32>[d]
    edges.parquet     src int64, dst int64 (directed; undirected graphs hold both
                      directions), optional edge_attr FixedSizeList<float32>[k]
    graphs.parquet    graph_id, label, split (graph classification only)
    manifest.json     schema version, task, counts, dims, split scheme, provenance,
                      sha256 of every file, and ``content_sha256`` (the dataset's id);
                      ``ingest``: the ingest spec and the sha256 of its raw files, when
                      written from one (not part of ``content_sha256``);
                      ``manifest_sha256``: the sha256 of every other key (its claims:
                      ``directed``, ``num_classes``, the name, provenance, ...)

The folder is written atomically (temp folder, then rename). The reader checks the
manifest against the files (checksums, counts, id ranges, dtypes), re-derives what the
files state (counts, widths, label kind, split counts, the least number of classes) and
checks ``manifest_sha256``, so an edit of any key is refused; it raises
:class:`~dpgnn_core.errors.DataError` naming the file, column and offending value. What a
hash kept in the same file cannot stop (an editor who recomputes it) is in
``docs/privacy.md`` ("What the dataset's manifest claims").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpgnn_core import __version__
from dpgnn_core.data.graph import SPLIT_NAMES, GraphData
from dpgnn_core.data.manifest import manifest_digest
from dpgnn_core.data.target import check_replaceable
from dpgnn_core.data.validate import validate_graph_data
from dpgnn_core.data.version import FolderVersion, OtherVersionError, VersionGone
from dpgnn_core.errors import DataError
from dpgnn_core.io import atomic_dir, sha256_file, sha256_json, write_json_atomic

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
_SPLIT_TYPE = pa.dictionary(pa.int8(), pa.string())
# Features and edges are stored uncompressed, without dictionaries, in 64 MiB pages and
# 8M-row groups: they are random-looking numbers that compress poorly, and large plain pages
# read through a memory map cost about what numpy.fromfile of the same bytes costs
# (benchmarks/bench_scale_data.py).
_BULK: dict[str, Any] = {"compression": "none", "use_dictionary": False,
                         "write_statistics": False, "data_page_size": 64 << 20,
                         "row_group_size": 8 << 20}


def _fixed_list(mat: np.ndarray) -> pa.FixedSizeListArray:
    mat = np.ascontiguousarray(mat, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(mat.reshape(-1)), mat.shape[1])


def _matrix(col: pa.ChunkedArray, *, path: Path, field: str) -> np.ndarray:
    """FixedSizeList<float32> column to a float32 [rows, d] array without a Python loop."""
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not pa.types.is_fixed_size_list(arr.type) or arr.type.value_type != pa.float32():
        raise DataError("expected FixedSizeList<float32>", path=path, field=field,
                        value=str(arr.type))
    if arr.null_count:
        raise DataError("null feature rows", path=path, field=field, value=arr.null_count)
    d = arr.type.list_size
    values = arr.values.slice(arr.offset * d, len(arr) * d)
    mat: np.ndarray = values.to_numpy(zero_copy_only=False).reshape(len(arr), d)
    return mat


def _labels_array(y: np.ndarray) -> pa.Array:
    """int64 labels, or a FixedSizeList<int8>[C] column for multi-label rows."""
    if y.ndim == 1:
        return pa.array(y.astype(np.int64))
    flat = pa.array(np.ascontiguousarray(y, dtype=np.int8).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, y.shape[1])


def _split_array(codes: np.ndarray) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(
        pa.array(codes.astype(np.int8), type=pa.int8()), pa.array(list(SPLIT_NAMES))
    )


def _split_codes(col: pa.ChunkedArray, *, path: Path) -> np.ndarray:
    arr = col.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        names = arr.dictionary.to_pylist()
        idx = arr.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        names, inv = np.unique(np.asarray(arr.to_pylist(), dtype=object), return_inverse=True)
        names, idx = list(names), inv
    remap = np.empty(len(names), dtype=np.int8)
    for i, name in enumerate(names):
        if name not in SPLIT_NAMES:
            raise DataError(f"unknown split name; allowed: {list(SPLIT_NAMES)}", path=path,
                            field="split", value=name)
        remap[i] = SPLIT_NAMES.index(name)
    return remap[idx] if len(names) else np.zeros(0, dtype=np.int8)


def _read_labels(nodes: pa.Table, *, path: Path) -> np.ndarray:
    if "label" in nodes.column_names and pa.types.is_fixed_size_list(nodes.column("label").type):
        col = nodes.column("label").combine_chunks()
        if col.type.value_type != pa.int8() or col.null_count:
            raise DataError("multi-label column must be FixedSizeList<int8> without nulls",
                            path=path, field="label", value=str(col.type))
        c = col.type.list_size
        vals = col.values.slice(col.offset * c, len(col) * c).to_numpy(zero_copy_only=False)
        out: np.ndarray = vals.reshape(len(col), c).astype(np.int64)
        return out
    return _column(nodes, "label", path=path, dtype=pa.int64())


def _column(table: pa.Table, name: str, *, path: Path, dtype: pa.DataType) -> np.ndarray:
    if name not in table.column_names:
        raise DataError(f"missing column; columns present: {table.column_names}", path=path,
                        field=name)
    col = table.column(name)
    if col.type != dtype:
        raise DataError(f"column has type {col.type}, expected {dtype}", path=path, field=name,
                        value=str(col.type))
    if col.null_count:
        raise DataError("column has null values", path=path, field=name, value=col.null_count)
    out: np.ndarray = col.to_numpy()
    return out


def write_dataset(
    data: GraphData, folder: str | Path, *, overwrite: bool = False, owned: bool = False
) -> dict[str, Any]:
    """Validate ``data`` and write it as a dataset folder, atomically.

    Args:
        data (GraphData): the dataset.
        folder (str or Path): the dataset folder to create.
        overwrite (bool, optional): replace an existing dataset folder (only once the new
            one is complete); a file, or a folder that is not a dataset's, is never
            replaced (:func:`~dpgnn_core.data.target.check_replaceable`).
            (default: :obj:`False`)
        owned (bool, optional): ``folder`` is the project's own, replaced whatever it
            holds (:func:`~dpgnn_core.data.target.check_replaceable`).
            (default: :obj:`False`)

    Returns:
        dict: the manifest that was written.
    """
    folder = Path(folder)
    check_replaceable(folder, overwrite=overwrite, owned=owned)
    validate_graph_data(data, path=folder)
    n = data.num_nodes
    with atomic_dir(folder, overwrite=overwrite) as tmp:
        nodes: dict[str, pa.Array] = {
            "node_id": pa.array(np.arange(n, dtype=np.int64)),
            "label": _labels_array(data.y),
            "split": _split_array(data.split),
        }
        if data.graph_id is not None:
            nodes["graph_id"] = pa.array(data.graph_id.astype(np.int64))
        pq.write_table(pa.table(nodes), tmp / "nodes.parquet", compression="zstd")
        pq.write_table(pa.table({"x": _fixed_list(data.x)}), tmp / "features.parquet", **_BULK)
        edges: dict[str, pa.Array] = {
            "src": pa.array(data.edge_index[0].astype(np.int64, copy=False)),
            "dst": pa.array(data.edge_index[1].astype(np.int64, copy=False)),
        }
        if data.edge_attr is not None:
            edges["edge_attr"] = _fixed_list(data.edge_attr)
        pq.write_table(pa.table(edges), tmp / "edges.parquet", **_BULK)
        files = ["nodes.parquet", "features.parquet", "edges.parquet"]
        if data.task == "graph":
            assert data.graph_y is not None and data.graph_split is not None
            graphs = pa.table({
                "graph_id": pa.array(np.arange(data.num_graphs, dtype=np.int64)),
                "label": pa.array(data.graph_y.astype(np.int64)),
                "split": _split_array(data.graph_split),
            })
            pq.write_table(graphs, tmp / "graphs.parquet", compression="zstd")
            files.append("graphs.parquet")
        hashes = {f: {"sha256": sha256_file(tmp / f), "bytes": (tmp / f).stat().st_size}
                  for f in files}
        manifest: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "dpgnn_version": __version__,
            "name": data.name,
            "task": data.task,
            "num_nodes": n,
            "num_edges": data.num_edges,
            "num_graphs": data.num_graphs,
            "feature_dim": data.num_features,
            "edge_feature_dim": 0 if data.edge_attr is None else int(data.edge_attr.shape[1]),
            "num_classes": int(data.num_classes),
            "multi_label": data.multi_label,
            "directed": bool(data.directed),
            "split_counts": data.split_counts(),
            "split": data.meta.get("split", {}),
            "source": data.meta.get("source", {}),
            "cleaning": data.meta.get("cleaning", {}),
            "files": hashes,
            "content_sha256": sha256_json({f: h["sha256"] for f, h in hashes.items()}),
        }
        if data.meta.get("ingest"):  # the spec and raw files' sha256 (load_from_spec)
            manifest["ingest"] = data.meta["ingest"]
        # hashed as it will read back (numpy scalars and tuples as JSON writes them)
        manifest = json.loads(json.dumps(manifest, default=str))
        manifest["manifest_sha256"] = manifest_digest(manifest)
        write_json_atomic(tmp / MANIFEST, manifest)
    return manifest


def check_manifest_digest(folder: str | Path, manifest: dict[str, Any]) -> None:
    """Raise unless ``manifest``'s ``manifest_sha256`` is that of its other keys: an edit
    of any key (``directed``, ``num_classes``, the name, ...) after ingest is refused, as a
    tampered Parquet file is. A manifest without one was written by a dpgnn older than the
    check and is refused with what to do: ingest it again (in place, it keeps its budget).

    Raises:
        DataError: naming ``manifest.json``, the field ``manifest_sha256`` and its value.
    """
    where = Path(folder) / MANIFEST
    stated = manifest.get("manifest_sha256")
    if stated is None:
        raise DataError("manifest has no manifest_sha256 (written by dpgnn "
                        f"{manifest.get('dpgnn_version', '< 0.1.0')}, before every key was "
                        "hashed); ingest it again in place (`dpgnn ingest ... --out "
                        f"{Path(folder)} --overwrite`: a new version of a folder keeps its "
                        "budget)", path=where, field="manifest_sha256")
    digest = manifest_digest(manifest)
    if stated != digest:
        raise DataError("manifest was edited after ingest: its keys do not give its "
                        f"manifest_sha256 (they give {digest[:12]}…)", path=where,
                        field="manifest_sha256", value=stated)


def read_manifest(folder: str | Path, *, check: bool = True) -> dict[str, Any]:
    """Read and sanity-check ``manifest.json`` of a dataset folder.

    Args:
        folder (str or Path): the dataset folder.
        check (bool, optional): refuse a manifest edited after ingest
            (:func:`check_manifest_digest`). (default: :obj:`True`)
    """
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise DataError("dataset folder not found", path=folder)
    return _parse_manifest(folder, path.read_text() if path.is_file() else None, check=check)


def _parse_manifest(folder: Path, text: str | None, *, check: bool) -> dict[str, Any]:
    """:func:`read_manifest` of the manifest's ``text`` (None: there is none)."""
    path = folder / MANIFEST
    if text is None:
        raise DataError("not a dataset folder: manifest.json is missing "
                        "(create one with `dpgnn ingest`)", path=path)
    try:
        manifest: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"manifest is not valid JSON: {e}", path=path) from e
    if not isinstance(manifest, dict):
        raise DataError("manifest is not a JSON object", path=path,
                        value=type(manifest).__name__)
    for key in ("schema_version", "task", "num_nodes", "num_edges", "feature_dim", "files",
                "num_classes"):
        if key not in manifest:
            raise DataError("manifest lacks a required key", path=path, field=key)
    if manifest["schema_version"] != SCHEMA_VERSION:
        raise DataError(f"unsupported schema version (this dpgnn reads {SCHEMA_VERSION})",
                        path=path, field="schema_version", value=manifest["schema_version"])
    if check:
        check_manifest_digest(folder, manifest)
    return manifest


def verify_checksums(folder: str | Path, manifest: dict[str, Any]) -> None:
    """Raise if a file listed in the manifest is missing or its sha256 differs."""
    folder = Path(folder)
    for name, info in manifest["files"].items():
        p = folder / name
        if not p.is_file():
            raise DataError("file listed in the manifest is missing", path=p)
        digest = sha256_file(p)
        if digest != info["sha256"]:
            raise DataError("checksum mismatch: the file changed after ingest", path=p,
                            field="sha256", value=digest)


def _edited(where: Path, field: str, value: Any, holds: str) -> DataError:
    return DataError(f"manifest was edited after ingest: it says {field} = {value}, {holds}",
                     path=where, field=field, value=value)


def _check_footers(folder: Path, manifest: dict[str, Any]) -> None:
    """The row counts and widths the manifest states are those of the files' footers and
    schemas: ``num_nodes``, ``num_edges``, ``num_graphs``, ``feature_dim``,
    ``edge_feature_dim`` and the label kind (``multi_label``; its width ``num_classes``)."""
    where, files = folder / MANIFEST, manifest["files"]
    expect = {"nodes.parquet": "num_nodes", "features.parquet": "num_nodes",
              "edges.parquet": "num_edges"}
    if manifest.get("task") == "graph":
        expect["graphs.parquet"] = "num_graphs"
    for name, field in expect.items():
        if name not in files:
            if name == "graphs.parquet":  # a node dataset's manifest edited to say graph
                raise _edited(where, "task", manifest.get("task"), "there is no graphs.parquet")
            raise DataError("manifest does not list this file", path=folder / name)
        rows, value = pq.read_metadata(folder / name).num_rows, manifest.get(field)
        if rows != value:
            raise _edited(where, field, value, f"{name} holds {rows} rows")
    width = pq.read_schema(folder / "features.parquet").field("x").type
    if pa.types.is_fixed_size_list(width) and width.list_size != manifest.get("feature_dim"):
        raise _edited(where, "feature_dim", manifest.get("feature_dim"),
                      f"features.parquet holds {width.list_size}")
    edges = pq.read_schema(folder / "edges.parquet")
    k = (edges.field("edge_attr").type.list_size if "edge_attr" in edges.names
         and pa.types.is_fixed_size_list(edges.field("edge_attr").type) else 0)
    if "edge_feature_dim" in manifest and manifest["edge_feature_dim"] != k:
        raise _edited(where, "edge_feature_dim", manifest["edge_feature_dim"],
                      f"edges.parquet holds {k}")
    label = pq.read_schema(folder / "nodes.parquet").field("label").type
    multi = pa.types.is_fixed_size_list(label)
    if "multi_label" in manifest and manifest["multi_label"] != multi:
        raise _edited(where, "multi_label", manifest["multi_label"],
                      f"nodes.parquet holds {'lists of' if multi else 'single'} labels")
    if multi and label.list_size != manifest.get("num_classes"):
        raise _edited(where, "num_classes", manifest.get("num_classes"),
                      f"nodes.parquet holds {label.list_size} labels per node")


def _check_records(folder: Path, manifest: dict[str, Any], labels: np.ndarray,
                   split: np.ndarray) -> None:
    """The split counts the manifest states are those of the records, and its
    ``num_classes`` is above every label."""
    where = folder / MANIFEST
    counts = np.bincount(split.astype(np.int64), minlength=len(SPLIT_NAMES))
    held = {n: int(c) for n, c in zip(SPLIT_NAMES, counts, strict=True)}
    stated = manifest.get("split_counts")
    if isinstance(stated, dict) and stated != held:
        raise DataError(f"manifest was edited after ingest: split_counts {stated}, the files "
                        f"hold {held}", path=where, field="split_counts", value=stated)
    top = int(labels.max()) if labels.ndim == 1 and labels.size else -1
    if top >= int(manifest.get("num_classes", 0)):
        raise _edited(where, "num_classes", manifest.get("num_classes"),
                      f"the labels reach {top}")


def _refuse_partitioned(folder: Path, manifest: dict[str, Any]) -> None:
    """A partitioned folder (:mod:`dpgnn_core.data.partitioned`, issue 51) is not read
    whole: say so in one line rather than miss ``nodes.parquet``."""
    if manifest.get("layout") == "partitioned":
        raise DataError("a partitioned dataset folder (layout 'partitioned'): the "
                        "single-process path reads one-file folders; the partitioned path "
                        "is dpgnn_core.distributed (Dask)", path=folder / MANIFEST,
                        field="layout", value="partitioned")


def verify_folder(folder: str | Path,
                  manifest: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """What a run checks of a dataset folder before it starts (cheap: hashes, Parquet
    footers and the records' label and split columns): every file the manifest lists is
    there with its sha256 (:func:`verify_checksums`); the manifest's ``content_sha256`` is
    that of those sha256, so a listed hash was not edited; what the files state (row
    counts, widths, label kind, split counts, the largest label) is what the manifest says;
    and ``manifest_sha256`` is that of its keys (:func:`check_manifest_digest`), so no other
    key (``directed``, ``num_classes``, the name, ...) was edited either.

    Returns:
        tuple: the records' labels and split codes (:func:`record_labels`), read for the
        checks.

    Raises:
        DataError: naming the file (or ``manifest.json``), the field and the value.
    """
    folder = Path(folder)
    _refuse_partitioned(folder, manifest)
    where = folder / MANIFEST
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
            isinstance(v, dict) and "sha256" in v for v in files.values()):
        raise DataError("manifest lists no files with their sha256", path=where, field="files")
    verify_checksums(folder, manifest)
    content = sha256_json({f: h["sha256"] for f, h in files.items()})
    if "content_sha256" in manifest and manifest["content_sha256"] != content:
        raise DataError("manifest was edited after ingest: its files' sha256 do not give its "
                        f"content_sha256 (they give {content[:12]}…)", path=where,
                        field="content_sha256", value=manifest.get("content_sha256"))
    _check_footers(folder, manifest)
    labels, split = record_labels(folder, str(manifest.get("task")))
    _check_records(folder, manifest, labels, split)
    check_manifest_digest(folder, manifest)
    return labels, split


def record_labels(folder: str | Path, task: str) -> tuple[np.ndarray, np.ndarray]:
    """The labels and split codes of a dataset's training records: nodes
    (``nodes.parquet``) or, for graph classification, graphs (``graphs.parquet``); labels
    ``[n]`` (``[n, C]`` multi-label), split codes int8 ``[n]``."""
    name = "graphs.parquet" if task == "graph" else "nodes.parquet"
    p = Path(folder) / name
    # one file: ParquetFile reads it without importing pyarrow.dataset, which read_table
    # imports (about 1 s of CPU: most of the pre-flight of a cached run, issue 52 §7)
    table = pq.ParquetFile(p).read(columns=["label", "split"])
    labels = (_column(table, "label", path=p, dtype=pa.int64()) if task == "graph"
              else _read_labels(table, path=p))
    return labels, _split_codes(table.column("split"), path=p)


def _table(folder: str | Path, name: str, version: FolderVersion | None) -> pa.Table:
    """The table ``name`` of ``folder``: of the opened ``version`` if given, else of the
    file there now (memory-mapped either way)."""
    if version is not None:
        return pq.read_table(pa.BufferReader(pa.py_buffer(version.buffer(name))))
    return pq.read_table(Path(folder) / name, memory_map=True)


def read_features(folder: str | Path, version: FolderVersion | None = None) -> np.ndarray:
    """``features.parquet`` as a float32 ``[n, d]`` array (memory-mapped read, no loop);
    of ``version`` (:class:`~dpgnn_core.data.version.FolderVersion`) when given."""
    p = Path(folder) / "features.parquet"
    feats = _table(folder, "features.parquet", version)
    if "x" not in feats.column_names:
        raise DataError("missing column", path=p, field="x")
    return _matrix(feats.column("x"), path=p, field="x")


def read_edges(folder: str | Path, version: FolderVersion | None = None
               ) -> tuple[np.ndarray, np.ndarray | None]:
    """``edges.parquet`` as an int64 ``[2, E]`` array and the optional edge features; of
    ``version`` when given."""
    p = Path(folder) / "edges.parquet"
    edges = _table(folder, "edges.parquet", version)
    edge_index = np.empty((2, edges.num_rows), dtype=np.int64)
    edge_index[0] = _column(edges, "src", path=p, dtype=pa.int64())
    edge_index[1] = _column(edges, "dst", path=p, dtype=pa.int64())
    edge_attr = (_matrix(edges.column("edge_attr"), path=p, field="edge_attr")
                 if "edge_attr" in edges.column_names else None)
    return edge_index, edge_attr


def read_dataset(folder: str | Path, *, verify: bool = True,
                 content_sha256: str | None = None) -> GraphData:
    """Read a dataset folder into :class:`GraphData`, validating it against its manifest.

    One version is read whole, even while an ingest replaces the folder
    (:class:`~dpgnn_core.data.version.FolderVersion`): the manifest and every table are
    those of the same version, and the sha256 checked are those of the bytes parsed.

    Args:
        folder (str or Path): the dataset folder.
        verify (bool, optional): check sha256 of every file. (default: :obj:`True`)
        content_sha256 (str, optional): the version to read (a run's pinned dataset): a
            folder that holds another is refused, naming both. (default: :obj:`None`, the
            version there now)

    Raises:
        DataError: naming the file, field and value; or the folder, when it holds another
            version than ``content_sha256``.
    """
    folder = Path(folder)
    for attempt in range(3):
        with FolderVersion(folder) as version:
            manifest = _parse_manifest(folder, version.manifest_text(), check=True)
            _refuse_partitioned(folder, manifest)
            _check_pinned(folder, manifest, content_sha256)
            listed = manifest["files"] if isinstance(manifest["files"], dict) else {}
            tables = ["nodes.parquet", "features.parquet", "edges.parquet"]
            if manifest["task"] == "graph" and "graphs.parquet" in listed:
                tables.append("graphs.parquet")
            try:
                version.open_files(sorted(set(listed) | set(tables)))
            except VersionGone:
                if version.still_current() or attempt == 2:
                    raise  # the manifest lists a file that is not there
                continue  # replaced meanwhile: read the version there now
            return _read_version(folder, manifest, version, verify=verify)
    raise AssertionError("unreachable")  # pragma: no cover


def _check_pinned(folder: Path, manifest: dict[str, Any], pinned: str | None) -> None:
    """Refuse ``manifest`` unless it is of the version ``pinned`` (when given)."""
    now = manifest.get("content_sha256")
    if pinned is not None and now != pinned:
        raise OtherVersionError(
            f"dataset folder {folder} holds another version than the one this run started "
            f"with (content sha256 {str(now)[:12]}…, the run's {pinned[:12]}…): it was "
            "re-ingested meanwhile; the run stops rather than mix the two (run it again to "
            "use the new version)", path=folder / MANIFEST, field="content_sha256", value=now)


def _read_version(folder: Path, manifest: dict[str, Any], version: FolderVersion, *,
                  verify: bool) -> GraphData:
    """:func:`read_dataset` of the files of the opened ``version``."""
    if verify:
        for name, info in dict(manifest["files"]).items():
            digest = version.sha256(name)
            if not isinstance(info, dict) or digest != info.get("sha256"):
                raise DataError("checksum mismatch: the file changed after ingest",
                                path=folder / name, field="sha256", value=digest)
    n = int(manifest["num_nodes"])

    p = folder / "nodes.parquet"
    nodes = _table(folder, "nodes.parquet", version)
    if nodes.num_rows != n:
        raise DataError(f"has {nodes.num_rows} rows, manifest says {n}", path=p,
                        field="node_id", value=nodes.num_rows)
    node_id = _column(nodes, "node_id", path=p, dtype=pa.int64())
    if n and (node_id[0] != 0 or not np.array_equal(node_id, np.arange(n))):
        bad = int(np.flatnonzero(node_id != np.arange(n))[0])
        raise DataError("node ids must be 0..n-1, contiguous and in order", path=p,
                        field="node_id", value=int(node_id[bad]))
    y = _read_labels(nodes, path=p)
    if "split" not in nodes.column_names:
        raise DataError("missing column", path=p, field="split")
    split = _split_codes(nodes.column("split"), path=p)
    graph_id = (_column(nodes, "graph_id", path=p, dtype=pa.int64())
                if "graph_id" in nodes.column_names else None)

    p = folder / "features.parquet"
    x = read_features(folder, version)
    if x.shape != (n, manifest["feature_dim"]):
        raise DataError(f"features have shape {list(x.shape)}, manifest says "
                        f"[{n}, {manifest['feature_dim']}]", path=p, field="x")

    p = folder / "edges.parquet"
    edge_index, edge_attr = read_edges(folder, version)
    if edge_index.shape[1] != manifest["num_edges"]:
        raise DataError(f"has {edge_index.shape[1]} rows, manifest says "
                        f"{manifest['num_edges']}", path=p, field="src",
                        value=edge_index.shape[1])

    graph_y = graph_split = None
    if manifest["task"] == "graph":
        p = folder / "graphs.parquet"
        if "graphs.parquet" not in manifest["files"]:
            raise DataError("graph-classification dataset without graphs.parquet", path=p)
        graphs = _table(folder, "graphs.parquet", version)
        graph_y = _column(graphs, "label", path=p, dtype=pa.int64())
        graph_split = _split_codes(graphs.column("split"), path=p)

    data = GraphData(
        name=manifest.get("name", folder.name),
        task=manifest["task"],
        x=x,
        edge_index=edge_index,
        y=y,
        split=split,
        num_classes=int(manifest["num_classes"]),
        directed=bool(manifest.get("directed", False)),
        graph_id=graph_id,
        graph_y=graph_y,
        graph_split=graph_split,
        edge_attr=edge_attr,
        meta={k: manifest.get(k, {}) for k in ("split", "source", "cleaning")},
    )
    validate_graph_data(data, path=folder)
    return data

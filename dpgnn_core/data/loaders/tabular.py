"""User data: an edge list and a node table, CSV or Parquet, with column names as options."""

from __future__ import annotations

import csv
import gzip
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpgnn_core.data.clean import clean_edges, symmetric_but_directed, to_undirected
from dpgnn_core.data.graph import SPLIT_NAMES, UNUSED, GraphData
from dpgnn_core.data.loader import Loaded, Loader, LoadFn
from dpgnn_core.data.loaders._common import provenance, require_file
from dpgnn_core.data.options import TabularOptions
from dpgnn_core.data.splits import stratified_split
from dpgnn_core.data.validate import check_integral_ids, to_float32
from dpgnn_core.errors import DataError

if TYPE_CHECKING:  # pyarrow is imported where a table is read, not with the catalogue
    import pyarrow as pa


def _read_table(path: Path) -> pa.Table:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq
    require_file(path, "table")
    try:
        if path.suffix == ".parquet":
            return pq.read_table(path)
        if path.name.endswith((".csv", ".csv.gz", ".tsv")):
            _sniff_text(path)
            opts = pacsv.ParseOptions(delimiter="\t" if path.suffix == ".tsv" else ",")
            table = pacsv.read_csv(path, parse_options=opts)
            if any(pa.types.is_binary(t) or pa.types.is_large_binary(t)
                   for t in table.schema.types):  # cells pyarrow could not read as UTF-8
                _refuse_non_utf8(path)
            return table
    except UnicodeDecodeError as e:  # a header that is not UTF-8
        _refuse_non_utf8(path, e)
    except (pa.ArrowInvalid, OSError, EOFError, zlib.error) as e:  # EOFError, zlib.error:
        # a truncated or corrupt .gz, met first by the sniff's gzip read
        raise DataError(f"cannot read table: {_one_line(str(e))}", path=path) from e
    raise DataError("unsupported table type (use .csv, .csv.gz, .tsv or .parquet)", path=path)


def _one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line of printable characters (a parser quotes raw cells)."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat[:limit] + " ..." if len(flat) > limit else flat


def _open_bytes(path: Path) -> Any:
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def _sniff_text(path: Path) -> None:
    """Refuse, naming the file, what is not a text table: gzip data under a name without
    ``.gz`` (it was "'utf-8' codec can't decode byte 0x8b", no file named) and binary
    data (a NUL byte; its parse error quoted raw bytes over two lines)."""
    with open(path, "rb") as f:
        head = f.read(2)
    if head == b"\x1f\x8b" and not path.name.endswith(".gz"):
        raise DataError(f"gzip-compressed data in a file named {path.name}: name it "
                        f"{path.name}.gz (read decompressed) or decompress it", path=path)
    with _open_bytes(path) as f:
        block = f.read(1 << 16)
    nul = block.find(b"\x00")
    if nul >= 0:
        raise DataError(f"binary data, not a text table (a NUL byte at byte {nul})",
                        path=path)


def _refuse_non_utf8(path: Path, cause: Exception | None = None) -> None:
    """Refuse a table that is not UTF-8 text, naming its first such line (Latin-1 labels
    were stored as Python bytes reprs, ``b'caf\\xe9'``)."""
    with _open_bytes(path) as f:
        for number, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"not UTF-8 text: line {number} holds byte {line[e.start]:#04x} at "
                    f"column {e.start + 1}; save the table as UTF-8",
                    path=path) from cause
    raise DataError("not UTF-8 text; save the table as UTF-8", path=path) from cause


def _locate(path: Path) -> Callable[[int], str]:
    """Where row ``i`` (0-based, as pyarrow counts data rows) is in ``path``: ``"line N"``
    for a text table (1-based file lines, the header line counted, blank lines that
    pyarrow skips counted too, a quoted multi-line cell counted by its first line);
    ``"row N"`` (1-based) for Parquet. The text file is scanned only when an error needs it.
    """
    if path.suffix == ".parquet":
        return lambda i: f"row {i + 1}"

    def line_of(i: int) -> str:
        delim = "\t" if path.suffix == ".tsv" else ","
        with (gzip.open(path, "rt", newline="") if path.name.endswith(".gz")
              else open(path, newline="")) as f:
            reader = csv.reader(f, delimiter=delim)
            row, end = -1, 0  # -1: the header
            for record in reader:
                start, end = end + 1, reader.line_num
                if not record:  # a blank line
                    continue
                if row == i:
                    return f"line {start}"
                row += 1
        return f"row {i + 1}"  # not found by the csv module: the data row, 1-based

    return line_of


def _col(table: pa.Table, name: str, path: Path) -> pa.ChunkedArray:
    if name not in table.column_names:
        raise DataError(f"no such column; columns present: {table.column_names}", path=path,
                        field=name)
    col = table.column(name)
    if col.null_count:
        first = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(f"column has {col.null_count} missing values (first at "
                        f"{_locate(path)(first)})",
                        path=path, field=name, value=None)
    return col


def _int_col(table: pa.Table, name: str, path: Path) -> np.ndarray:
    import pyarrow as pa
    col = _col(table, name, path)
    check_integral_ids(col.to_numpy(), path=path, field=name)
    if pa.types.is_floating(col.type):  # report the value and its line, not the type
        values = col.to_numpy()
        i = int(np.flatnonzero(values != np.round(values))[0]) if (
            values != np.round(values)).any() else 0
        raise DataError(f"node id {values[i]:g} is not an integer (at {_locate(path)(i)}); "
                        "node ids are integers, or text with --relabel", path=path,
                        field=name, value=float(values[i]))
    if not pa.types.is_integer(col.type):
        raise DataError(f"expected integer ids, found type {col.type} (pass --relabel to map "
                        "arbitrary ids to 0..n-1)", path=path, field=name, value=str(col.type))
    out: np.ndarray = col.to_numpy().astype(np.int64)
    return out


#: Text a cell may hold for "no value" (compared stripped and lower-cased): a label cell
#: holding one is unlabelled, and a feature column's such cells are neither number nor text.
MISSING_TEXT = frozenset({"", "nan", "-nan", "na", "n/a", "#n/a", "null", "none"})


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _text_kinds(values: list[Any]) -> tuple[list[int], list[int], list[int]]:
    """Rows of a text column's cells that are numbers, missing (null or
    :data:`MISSING_TEXT`) and other text."""
    numbers: list[int] = []
    missing: list[int] = []
    text: list[int] = []
    for i, v in enumerate(values):
        if v is None or str(v).strip().lower() in MISSING_TEXT:
            missing.append(i)
        elif _is_number(str(v)):
            numbers.append(i)
        else:
            text.append(i)
    return numbers, missing, text


def _auto_feature_cols(nt: pa.Table, skip: set[str], path: Path, notes: list[str],
                       dropped: dict[str, str]) -> list[str]:
    """Every numeric column not in ``skip``. A text column whose cells are all text (a
    name, say) is left out, and said in ``notes`` and ``dropped``; one that mixes numbers
    and text (a numeric column with a stray cell) cannot be meant either way: refused."""
    import pyarrow as pa
    cols = []
    for c in nt.column_names:
        if c in skip:
            continue
        kind = nt.column(c).type
        if pa.types.is_integer(kind) or pa.types.is_floating(kind):
            cols.append(c)
            continue
        values = nt.column(c).to_pylist()
        numbers, _, text = (_text_kinds(values) if pa.types.is_string(kind)
                            or pa.types.is_large_string(kind) else ([], [], []))
        if numbers and text:
            first = text[0]
            raise DataError(
                f"feature column mixes numbers and text ({len(numbers)} numbers, "
                f"{len(text)} text cells, the first at {_locate(path)(first)}); fix the "
                "cell, or pass --feature-cols without this column", path=path, field=c,
                value=values[first])
        why = "text" if text else ("empty" if pa.types.is_null(kind) else str(kind))
        dropped[c] = why
        notes.append(f"column {c!r} ({why}) not used as a feature")
    return cols


def _labels(nt: pa.Table, label_col: str, perm: np.ndarray, path: Path, notes: list[str]
            ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Labels ``[n]`` (-1 unlabelled, node order), the class values, and the manifest's
    record of what each kind of cell became. Integers and whole-number floats are classes
    by value; text is classes in sorted order; null, blank and NaN-like cells
    (:data:`MISSING_TEXT`, a float NaN) are unlabelled. A fractional number, a negative
    one, or a column that mixes numbers and text cannot be meant as classes: refused."""
    import pyarrow as pa
    lab = nt.column(label_col)
    values = lab.to_pylist()
    kind = lab.type
    record: dict[str, Any] = {}
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_null(kind):
        nums = np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
        missing = np.isnan(nums)
        nulls = sum(v is None for v in values)
        bad = ~missing & ((nums != np.round(nums)) | (nums < 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(f"label is not a class: labels are whole numbers >= 0 or text, "
                            f"an empty cell for unlabelled (at {_locate(path)(i)})",
                            path=path, field=label_col, value=values[i])
        ints = np.where(missing, -1, np.nan_to_num(nums, nan=-1)).astype(np.int64)[perm]
        classes: np.ndarray = np.unique(ints[ints >= 0])
        y = np.where(ints >= 0, np.searchsorted(classes, ints), -1).astype(np.int64)
        record = {"kind": "number", "missing_cells": int(nulls),
                  "nan_cells": int(missing.sum()) - int(nulls)}
        unlabelled = int(missing.sum())
        if unlabelled:
            notes.append(f"{label_col}: {unlabelled} empty or NaN cells -> unlabelled")
        return y, classes, record
    strs = ["" if v is None else str(v) for v in values]
    numbers, missing_rows, text = _text_kinds(strs)
    if numbers and text:
        first = text[0]
        raise DataError(f"label column mixes numbers and text ({len(numbers)} numbers, "
                        f"{len(text)} text cells, the first at {_locate(path)(first)}); a "
                        "stray cell would become a class of its own", path=path,
                        field=label_col, value=strs[first])
    arr = np.asarray(strs, dtype=object)[perm]
    valid = np.ones(len(strs), dtype=bool)
    valid[missing_rows] = False
    valid = valid[perm]
    if numbers:  # numbers stored as text: classes by value, as a numeric column's are
        nums = np.array([float(v) if ok else -1.0 for v, ok in zip(arr, valid, strict=True)])
        bad = valid & ((nums != np.round(nums)) | (nums < 0))
        if bad.any():
            i = int(perm[np.flatnonzero(bad)[0]])
            raise DataError(f"label is not a class: labels are whole numbers >= 0 or text "
                            f"(at {_locate(path)(i)})", path=path, field=label_col,
                            value=strs[i])
        ints = np.where(valid, nums, -1).astype(np.int64)
        classes = np.unique(ints[valid])
        y = np.where(valid, np.searchsorted(classes, ints), -1).astype(np.int64)
        record = {"kind": "number (as text)"}
    else:
        texts = np.where(valid, arr, "").astype(str)
        classes = np.unique(texts[valid])
        y = np.where(valid, np.searchsorted(classes, texts), -1).astype(np.int64)
        record = {"kind": "text"}
        shown = ", ".join(f"{c!r}->{i}" for i, c in enumerate(classes[:5].tolist()))
        notes.append(f"{label_col}: {classes.shape[0]} text classes ({shown}"
                     f"{', ...' if classes.shape[0] > 5 else ''})")
    blank = sum(1 for i in missing_rows if not strs[i].strip())
    record.update({"missing_cells": blank, "nan_cells": len(missing_rows) - blank})
    if missing_rows:
        seen = sorted({strs[i].strip() for i in missing_rows} - {""})
        what = "empty" + (f" or {'/'.join(repr(t) for t in seen)}" if seen else "")
        notes.append(f"{label_col}: {len(missing_rows)} {what} cells -> unlabelled")
    return y, classes, record


_Endpoints = tuple[np.ndarray, np.ndarray, np.ndarray, Callable[[int], object]]


def _relabelled_endpoints(et: pa.Table, nt: pa.Table, edges: Path, nodes: Path, src_col: str,
                          dst_col: str, id_col: str) -> _Endpoints:
    """``--relabel``: arbitrary node ids (unique) mapped to their node-table row; every edge
    endpoint must be one of them. Returns ``(src, dst, perm, node_name)``, ``perm`` the
    node-table rows in node order (the identity here)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    n = nt.num_rows
    ids = _col(nt, id_col, nodes)
    check_integral_ids(ids.to_numpy(), path=nodes, field=id_col)
    uniq = pc.unique(ids)
    if len(uniq) != n:
        raise DataError(f"node ids are not unique ({n - len(uniq)} repeats)", path=nodes,
                        field=id_col)
    src_raw, dst_raw = _col(et, src_col, edges), _col(et, dst_col, edges)
    if et.num_rows == 0:  # a header only: nothing to map (its columns are typed null)
        src_raw = dst_raw = pa.chunked_array([], type=ids.type)
    if src_raw.type != ids.type or dst_raw.type != ids.type:
        src_raw = src_raw.cast(ids.type)
        dst_raw = dst_raw.cast(ids.type)
    ids_c = ids.combine_chunks()
    src = pc.index_in(src_raw, value_set=ids_c).to_numpy(zero_copy_only=False)
    dst = pc.index_in(dst_raw, value_set=ids_c).to_numpy(zero_copy_only=False)
    for arr, col, raw in ((src, src_col, src_raw), (dst, dst_col, dst_raw)):
        missing = np.isnan(arr) if arr.dtype.kind == "f" else np.zeros(arr.shape, bool)
        if missing.any():
            i = int(np.flatnonzero(missing)[0])
            raise DataError(f"edge endpoint is not in the node table (at "
                            f"{_locate(edges)(i)})",
                            path=edges, field=col, value=raw[i].as_py())
    src, dst = src.astype(np.int64), dst.astype(np.int64)
    perm = np.arange(n)
    id_values = ids_c

    def node_name(v: int) -> object:
        return id_values[v].as_py()
    return src, dst, perm, node_name


def _ordered_endpoints(et: pa.Table, nt: pa.Table, edges: Path, nodes: Path, src_col: str,
                       dst_col: str, id_col: str) -> _Endpoints:
    """Node ids that must be the integers 0..n-1 (any row order), edge endpoints in range.
    Returns ``(src, dst, perm, node_name)``, ``perm`` the node-table rows in id order."""
    n = nt.num_rows
    node_ids = _int_col(nt, id_col, nodes)
    perm = np.argsort(node_ids, kind="stable")
    sorted_ids = node_ids[perm]
    if sorted_ids[0] != 0 or sorted_ids[-1] != n - 1 or (np.diff(sorted_ids) != 1).any():
        bad = sorted_ids[np.flatnonzero(sorted_ids != np.arange(n))[0]]
        raise DataError(f"node ids must be the integers 0..{n - 1}, each once (or pass "
                        "--relabel)", path=nodes, field=id_col, value=int(bad))
    if et.num_rows == 0:  # a header only: its columns are typed null
        _col(et, src_col, edges), _col(et, dst_col, edges)
        src = dst = np.zeros(0, dtype=np.int64)
    else:
        src, dst = _int_col(et, src_col, edges), _int_col(et, dst_col, edges)

    def node_name(v: int) -> object:
        return v  # the user's ids are 0..n-1 already
    for arr, col in ((src, src_col), (dst, dst_col)):
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            i = int(np.flatnonzero((arr < 0) | (arr >= n))[0])
            raise DataError(f"edge endpoint out of range [0, {n}) (at "
                            f"{_locate(edges)(i)})", path=edges, field=col,
                            value=int(arr[i]))
    return src, dst, perm, node_name


def _not_numeric(col: pa.ChunkedArray, name: str, path: Path) -> None:
    """Refuse a ``--feature-cols`` column that is not numeric, naming its first text cell
    (its line and value), as a default column is."""
    import pyarrow as pa
    values = col.to_pylist()
    kind = col.type
    numbers, _, text = (_text_kinds(values) if pa.types.is_string(kind)
                        or pa.types.is_large_string(kind) else ([], [], []))
    if text:
        first = text[0]
        raise DataError(f"feature column holds text ({len(text)} text cells, "
                        f"{len(numbers)} numbers, the first text at "
                        f"{_locate(path)(first)}); fix the cell, or leave the column out of "
                        "--feature-cols", path=path, field=name, value=values[first])
    raise DataError(f"feature column is not numeric (type {kind})", path=path, field=name,
                    value=str(kind))


def _features(nt: pa.Table, feature_cols: Sequence[str] | None, skip: set[str],
              perm: np.ndarray, node_name: Callable[[int], object], nodes: Path,
              notes: list[str], dropped: dict[str, str]
              ) -> tuple[np.ndarray, Sequence[str]]:
    """The feature matrix in node order (every other numeric column when ``feature_cols``
    is None), refusing a non-numeric column or a NaN/inf cell. Returns ``(x, columns)``."""
    import pyarrow as pa
    if feature_cols is None:
        feature_cols = _auto_feature_cols(nt, skip, nodes, notes, dropped)
        if not feature_cols:
            raise DataError("no numeric feature columns found; pass --feature-cols", path=nodes)
    cols = []
    for c in feature_cols:
        col = _col(nt, c, nodes)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            _not_numeric(col, c, nodes)
        cols.append(to_float32(col.to_numpy(), path=nodes, field=c, where=_locate(nodes)))
    x = np.stack(cols, axis=1)[perm]
    finite = np.isfinite(x)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        raise DataError(f"feature is NaN or inf (node {node_name(int(r))!r} at "
                        f"{_locate(nodes)(int(perm[r]))})", path=nodes,
                        field=feature_cols[c], value=float(x[r, c]))
    return x, feature_cols


def _given_split(nt: pa.Table, split_col: str, label_col: str, y: np.ndarray,
                 perm: np.ndarray, node_name: Callable[[int], object], nodes: Path
                 ) -> tuple[np.ndarray, dict[str, Any]]:
    """The split named in ``split_col`` (train/val/test/unused), refusing an unknown name
    or an unlabelled node outside ``unused``. Returns ``(split, scheme record)``."""
    raw_split = np.asarray(_col(nt, split_col, nodes).to_pylist(), dtype=object)[perm]
    bad = ~np.isin(raw_split, SPLIT_NAMES)
    if bad.any():
        raise DataError(f"unknown split name; allowed: {list(SPLIT_NAMES)}", path=nodes,
                        field=split_col, value=raw_split[bad][0])
    split = np.array([SPLIT_NAMES.index(s) for s in raw_split], dtype=np.int8)
    unlabeled = (split != UNUSED) & (y < 0)
    if unlabeled.any():
        i = int(np.flatnonzero(unlabeled)[0])
        raise DataError(
            f"{int(unlabeled.sum())} nodes in a train/val/test split have no label "
            f"(first: node {node_name(i)!r} at {_locate(nodes)(int(perm[i]))}, split "
            f"{raw_split[i]!r}); label them or put them in the 'unused' split",
            path=nodes, field=label_col, value=node_name(i))
    return split, {"scheme": "given", "column": split_col, "seed": None}


def load_tabular(
    edges: str | Path,
    nodes: str | Path,
    *,
    name: str | None = None,
    src_col: str = "src",
    dst_col: str = "dst",
    id_col: str = "node_id",
    label_col: str = "label",
    feature_cols: Sequence[str] | None = None,
    split_col: str | None = None,
    undirected: bool = False,
    relabel: bool = False,
    remove_self_loops: bool = False,
    dedupe: bool = False,
    fractions: tuple[float, float, float] = (0.75, 0.10, 0.15),
    seed: int = 0,
) -> GraphData:
    """Read a node-classification graph from an edge list and a node table.

    Node ids must be the integers 0..n-1 (any row order) unless ``relabel`` maps arbitrary
    ids (ints or strings) to 0..n-1 in node-table order. Labels may be integers or strings
    (mapped to 0..C-1 in sorted order); an empty label is unlabeled (-1). Without
    ``split_col`` a random split stratified by label is drawn with ``seed``.

    Args:
        edges (str or Path): edge list (.csv, .csv.gz, .tsv or .parquet).
        nodes (str or Path): node table.
        name (str, optional): dataset name; the node table's stem by default.
        src_col, dst_col (str, optional): edge columns. (default: ``src``, ``dst``)
        id_col (str, optional): node id column. (default: ``node_id``)
        label_col (str, optional): label column. (default: ``label``)
        feature_cols (list of str, optional): feature columns; every other numeric column
            when omitted. (default: :obj:`None`)
        split_col (str, optional): column of train/val/test/unused. (default: :obj:`None`)
        undirected (bool, optional): add the reverse of each edge. (default: :obj:`False`)
        relabel (bool, optional): map arbitrary ids to 0..n-1. (default: :obj:`False`)
        remove_self_loops (bool, optional): drop self-loops instead of raising.
        dedupe (bool, optional): drop duplicate edges instead of raising.
        fractions (tuple, optional): split fractions. (default: ``(0.75, 0.10, 0.15)``)
        seed (int, optional): split seed. (default: :obj:`0`)
    """
    edges, nodes = Path(edges), Path(nodes)
    et, nt = _read_table(edges), _read_table(nodes)
    n = nt.num_rows
    if n == 0:
        raise DataError("node table is empty", path=nodes)
    endpoints = _relabelled_endpoints if relabel else _ordered_endpoints
    src, dst, perm, node_name = endpoints(et, nt, edges, nodes, src_col, dst_col, id_col)
    skip = {id_col, label_col, *( [split_col] if split_col else [])}
    notes: list[str] = []
    dropped: dict[str, str] = {}
    x, feature_cols = _features(nt, feature_cols, skip, perm, node_name, nodes, notes,
                                dropped)

    # Labels.
    if label_col not in nt.column_names:
        raise DataError(f"no such column; columns present: {nt.column_names}", path=nodes,
                        field=label_col)
    y, classes, label_record = _labels(nt, label_col, perm, nodes, notes)
    valid = y >= 0
    if not valid.any():
        raise DataError("no node has a label", path=nodes, field=label_col)

    # Edges.
    ei = np.stack([src, dst])
    ei, counts, _ = clean_edges(ei, n, remove_self_loops=remove_self_loops, dedupe=dedupe,
                                path=edges, node_name=node_name, locate=_locate(edges))
    if undirected:
        ei = to_undirected(ei, n)

    if split_col:
        split, scheme = _given_split(nt, split_col, label_col, y, perm, node_name, nodes)
    else:
        split = stratified_split(y, fractions, rng=np.random.default_rng(seed))
        scheme = {"scheme": "random-stratified", "fractions": list(fractions), "seed": seed}
    split[(y < 0) & (split == UNUSED)] = UNUSED
    meta = {
        "source": provenance("tabular", nodes, [edges, nodes], src_col=src_col,
                             dst_col=dst_col, id_col=id_col, label_col=label_col,
                             feature_cols=list(feature_cols), split_col=split_col,
                             undirected=undirected, relabel=relabel),
        "split": scheme,
        "cleaning": {**counts, "class_values": [str(c) for c in classes],
                     "labels": label_record, "dropped_columns": dropped, "notes": notes,
                     "self_loops_removed": counts["self_loops"] if remove_self_loops else 0,
                     "duplicates_removed": counts["duplicate_edges"] if dedupe else 0},
    }
    symmetric = symmetric_but_directed(ei, n, undirected, edges)  # issue 48 §3
    if symmetric:
        meta["cleaning"]["warnings"] = [symmetric]
    return GraphData(name=name or nodes.name.split(".")[0], task="node", x=x, edge_index=ei,
                     y=y, split=split, num_classes=int(classes.shape[0]),
                     directed=not undirected, meta=meta)


#: The file names each tabular format reads.
_SUFFIXES = {"csv": (".csv", ".csv.gz", ".tsv"), "parquet": (".parquet",)}


def _check_format(fmt: str, path: Path) -> None:
    """Refuse a table whose name says another format than ``--format`` (a CSV file given
    ``--format parquet`` would otherwise be read as CSV without a word)."""
    if fmt not in _SUFFIXES or path.name.endswith(_SUFFIXES[fmt]):
        return
    other = next((f for f, ends in _SUFFIXES.items() if path.name.endswith(ends)), None)
    hint = (f"pass --format {other}" if other else
            f"name it {' or '.join(_SUFFIXES[fmt])}, or pass the format it is in")
    raise DataError(f"--format {fmt}, but this file is "
                    f"{'a ' + other.upper() + ' file' if other else 'not ' + fmt.upper()} "
                    f"by its name; {hint}", path=path, field="format", value=fmt)


def _tabular_paths(source: Path, options: dict[str, Any],
                   fmt: str = "csv") -> tuple[Path, Path]:
    """``source`` is the edge file (``nodes`` option: the node table) or a folder holding
    ``edges.*`` and ``nodes.*`` (those of format ``fmt`` first); the edge file must be of
    format ``fmt`` by its name (the node table may be of either kind, read by its name)."""
    if source.is_dir():
        found = {}
        for stem in ("edges", "nodes"):
            hits = [p for p in sorted(source.iterdir()) if p.name.split(".")[0] == stem]
            if not hits:
                raise DataError(f"folder has no {stem}.csv / {stem}.parquet", path=source)
            ours = [p for p in hits if p.name.endswith(_SUFFIXES.get(fmt, ()))]
            found[stem] = (ours or hits)[0]
        edges, nodes = found["edges"], found["nodes"]
    else:
        given = options.pop("nodes", None)
        if not given:
            raise DataError("csv/parquet ingest needs the node table: pass --nodes FILE (or "
                            "give a folder holding edges.* and nodes.*)", path=source,
                            field="nodes")
        edges, nodes = source, Path(given)
    _check_format(fmt, edges)  # the node table is read by its own name (either kind)
    return edges, nodes


def _load(fmt: str) -> LoadFn:
    """The :class:`~dpgnn_core.data.catalog.Loader` ``load`` of format ``fmt``: the edge
    and node tables (:func:`_tabular_paths`) read by :func:`load_tabular`."""

    def load(source: Path | None, name: str | None, options: dict[str, Any]) -> Loaded:
        if source is None:  # refused before (Loader.needs_source); kept for the type
            raise DataError(f"format {fmt!r} needs a source", field="source")
        edges, nodes = _tabular_paths(source, options, fmt)
        return load_tabular(edges, nodes, name=name, **options), edges

    return load


#: This module's ingest formats (:mod:`dpgnn_core.data.catalog`).
LOADERS = tuple(Loader(fmt, TabularOptions, _load(fmt), edge_table=True) for fmt in _SUFFIXES)

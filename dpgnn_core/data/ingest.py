"""One entry point from an :class:`~dpgnn_core.specs.IngestSpec` to :class:`GraphData`
(:func:`load_from_spec`, through the loader catalogue :mod:`dpgnn_core.data.catalog`), and
one to a dataset folder (:func:`ingest`); where a folder came from (:func:`ingest_status`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from dpgnn_core.data.catalog import loader_of, validate_options
from dpgnn_core.data.graph import GraphData
from dpgnn_core.data.manifest import manifest_digest
from dpgnn_core.data.splits import make_disjoint
from dpgnn_core.data.target import check_replaceable, ingest_lock
from dpgnn_core.errors import DataError
from dpgnn_core.io import sha256_file, sha256_json
from dpgnn_core.specs import IngestSpec


def load_from_spec(spec: IngestSpec) -> GraphData:
    """Run the loader that ``spec.format`` names (:mod:`dpgnn_core.data.catalog`) with
    ``spec.options``.

    The options are checked against the loader's typed spec
    (:mod:`dpgnn_core.data.options`) before anything is read. The option ``disjoint=True``
    (node classification) additionally removes every inter-split edge (the inductive
    ``-disjoint`` variant). A graph without edges is refused unless ``allow_no_edges=True``;
    then it is loaded and a warning is recorded in ``meta["cleaning"]["warnings"]`` (the
    manifest's ``cleaning`` record). ``meta["ingest"]`` (the manifest's ``ingest`` record)
    keeps the spec and the sha256 of the raw files as they were before reading them
    (:func:`ingest_record`), so a later run can tell whether the source has changed since
    (:func:`ingest_status`).
    """
    loader = loader_of(spec.format)
    opts = validate_options(spec.format, dict(spec.options))
    disjoint = bool(opts.pop("disjoint", False))
    allow_no_edges = bool(opts.pop("allow_no_edges", False))
    src = Path(spec.source) if spec.source else None
    if src is not None and not src.exists():
        raise DataError("source not found", path=src, field="source")
    # Hashed before reading: a file that changes while it is read leaves a record that no
    # longer matches it, so the change is seen (and re-ingested) next time, never missed.
    record = ingest_record(spec)
    if src is None and loader.needs_source:
        raise DataError(f"format {spec.format!r} needs a source", field="source")
    try:
        data, edge_file = loader.load(src, spec.name, opts)
    except TypeError as e:
        raise DataError(f"bad option for format {spec.format!r}: {e}", field="options",
                        value=spec.options) from e
    if disjoint:
        data, _ = make_disjoint(data)
    if data.num_edges == 0:
        what = ("the edge list has no edges" if loader.edge_table
                else f"the {spec.format} graph has no edges")
        if disjoint:
            what += " (after --disjoint removed the edges between splits)"
        if not allow_no_edges:
            raise DataError(f"{what}; pass --allow-no-edges to ingest it anyway",
                            path=edge_file, field="edges", value=0)
        cleaning = data.meta.setdefault("cleaning", {})
        cleaning.setdefault("warnings", []).append(
            f"{what} (ingested with --allow-no-edges)"
            + (f": {edge_file}" if edge_file is not None else ""))
        cleaning["allow_no_edges"] = True
    data.meta["ingest"] = record
    return data


#: ``span(stage, text)``: a context around one stage of :func:`ingest` (``"load"`` or
#: ``"write"``, and what it does in words), e.g. a progress line.
Span = Callable[[str, str], AbstractContextManager[object]]


def ingest(spec: IngestSpec, folder: str | Path, *, overwrite: bool = False,
           owned: bool = False, span: Span | None = None) -> dict[str, Any]:
    """Ingest ``spec`` into the dataset folder ``folder``: :func:`load_from_spec`, then
    :func:`~dpgnn_core.data.store.write_dataset` (atomically).

    One ingest of ``folder`` at a time: the whole ingest, loading included, holds the
    folder's ingest lock (:func:`~dpgnn_core.data.target.ingest_lock`), so a second one is
    refused at once, naming the first. Before anything is read, ``folder`` is checked
    (:func:`~dpgnn_core.data.target.check_replaceable`): ``overwrite`` replaces only a
    dataset folder (or an empty one), never a file or a folder of other files.

    Args:
        spec (IngestSpec): what to ingest.
        folder (str or Path): the dataset folder to write.
        overwrite (bool, optional): replace an existing dataset folder (the old one stays
            until the new one is complete). (default: :obj:`False`)
        owned (bool, optional): ``folder`` is the project's own
            (``$DPGNN_HOME/datasets/<name>-<key>``): with ``overwrite``, replaced whatever
            it holds (a half-written one is ingested again). (default: :obj:`False`)
        span (callable, optional): ``span(stage, text)`` opens a context around each
            stage, ``"load"`` then ``"write"`` (a progress display; the command line's
            error message names the stage that failed). (default: :obj:`None`)

    Returns:
        dict: the manifest written.

    Raises:
        TargetBusyError: another process is ingesting into ``folder``.
        TargetExistsError: ``folder`` exists and ``overwrite`` is false.
        NotADatasetError: ``overwrite`` is given but ``folder`` is not a dataset folder.
    """
    from dpgnn_core.data.store import write_dataset  # pyarrow: not with this module

    stage = span or (lambda _stage, _text: nullcontext())
    with ingest_lock(folder):
        check_replaceable(folder, overwrite=overwrite, owned=owned)
        if spec.format == "synthetic" and spec.options.get("partition_nodes") is not None:
            from dpgnn_core.data.partitioned import ingest_partitioned  # issue 51

            with stage("write", "writing a partitioned synthetic graph, block by block"):
                return ingest_partitioned(spec, folder, record=ingest_record(spec),
                                          overwrite=overwrite)
        with stage("load", f"loading {spec.format} data"):
            data = load_from_spec(spec)
        if spec.name is None and loader_of(spec.format).edge_table:
            # A table's own name is no dataset's ("nodes"): name it after its folder. Not
            # put into the recorded spec, so every path that ingests it (the command line,
            # a scheduled re-ingest of the folder) records the same spec and the same name.
            data = dataclasses.replace(data, name=Path(folder).resolve().name)
        with stage("write", f"writing {data.num_nodes:,} nodes, {data.num_edges:,} edges"):
            return write_dataset(data, folder, overwrite=overwrite, owned=owned)


def source_fingerprint(spec: IngestSpec) -> dict[str, str]:
    """sha256 of every raw file the spec reads (for cache keys): a changed file re-ingests."""
    if spec.source is None:
        return {}
    paths = [Path(spec.source)]
    if "nodes" in spec.options:
        paths.append(Path(spec.options["nodes"]))
    out = {}
    for p in paths:
        files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
        for f in files:
            if f.exists():
                out[str(f)] = sha256_file(f)
    return out


def source_sha256(spec: IngestSpec) -> str | None:
    """sha256 of the raw files ``spec`` reads (its ``source``, and the ``nodes`` table of a
    csv/parquet spec), every file of a folder included, by path relative to the source:
    where the source lies does not change it, what it holds does. ``None`` for a spec
    without a source (the synthetic generator: its options are the whole input)."""
    if spec.source is None:
        return None
    roots = {"source": Path(spec.source)}
    if "nodes" in spec.options:
        roots["nodes"] = Path(spec.options["nodes"])
    files: dict[str, str] = {}
    for role, root in roots.items():
        if root.is_dir():
            for f in sorted(q for q in root.rglob("*") if q.is_file()):
                files[f"{role}/{f.relative_to(root).as_posix()}"] = sha256_file(f)
        elif root.is_file():
            files[role] = sha256_file(root)
        else:
            raise DataError("source not found", path=root, field=role)
    return sha256_json(files)


def absolute_spec(spec: IngestSpec) -> IngestSpec:
    """``spec`` with its raw files' paths (``source``, the ``nodes`` option) made absolute,
    so that it names the same files from any working directory."""
    options = dict(spec.options)
    if isinstance(options.get("nodes"), str):
        options["nodes"] = str(Path(options["nodes"]).expanduser().resolve())
    source = str(Path(spec.source).expanduser().resolve()) if spec.source else None
    return spec.model_copy(update={"source": source, "options": options})


def ingest_record(spec: IngestSpec) -> dict[str, Any]:
    """What a dataset folder's manifest records of how it was ingested (its ``ingest``
    key): the spec (paths made absolute: :func:`absolute_spec`) and :func:`source_sha256`
    of the raw files."""
    return {"spec": absolute_spec(spec).model_dump(mode="json"),
            "source_sha256": source_sha256(spec)}


def _comparable(spec: dict[str, Any]) -> dict[str, Any]:
    """A spec's dump without where its raw files lie (``source`` and the ``nodes`` option):
    what they hold is compared by :func:`source_sha256`."""
    options = {k: v for k, v in (spec.get("options") or {}).items() if k != "nodes"}
    return {**{k: v for k, v in spec.items() if k != "source"}, "options": options}


def ingest_status(folder: str | Path, spec: IngestSpec) -> tuple[str, str]:
    """Whether ``folder`` holds what ingesting ``spec`` would write now.

    Args:
        folder (str or Path): a dataset folder (it may not exist yet).
        spec (IngestSpec): the ingest spec naming the raw source.

    Returns:
        tuple: ``(status, reason)``, ``status`` one of ``"missing"`` (no dataset folder
        there), ``"current"`` (its manifest records this spec and the source's files are
        unchanged) and ``"stale"`` (the source's files or the spec differ from the record,
        or the manifest has no record: written before manifests kept one, or by hand; or
        its ``manifest_sha256`` is missing or not that of its keys: a run would refuse it);
        ``reason`` says which, in words.

    Raises:
        DataError: the source named by ``spec`` is not there.
    """
    manifest_path = Path(folder) / "manifest.json"
    if not manifest_path.is_file():
        return "missing", f"no dataset folder at {folder} yet"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return "stale", "its manifest cannot be read"
    record = manifest.get("ingest") if isinstance(manifest, dict) else None
    if not isinstance(record, dict) or "spec" not in record:
        return "stale", ("its manifest does not record the source it was ingested from "
                         "(ingested before manifests kept it)")
    if manifest.get("manifest_sha256") != manifest_digest(manifest):
        return "stale", ("its manifest has no manifest_sha256 (written by an older dpgnn) "
                         "or was edited after ingest")
    if _comparable(record["spec"]) != _comparable(spec.model_dump(mode="json")):
        return "stale", "it was ingested with another spec (format, name or options)"
    now = source_sha256(spec)
    if record.get("source_sha256") != now:
        return "stale", (f"the source changed since it was ingested (raw files sha256 "
                         f"{str(record.get('source_sha256'))[:12]} -> {str(now)[:12]})")
    return "current", "the source and the spec are those it was ingested from"

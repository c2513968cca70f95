"""What a spec and a dataset's manifest alone can refuse, before any work starts.

:meth:`Method.preflight <dpgnn_core.methods.registry.Method.preflight>` runs these checks;
the command line runs them before Prefect starts, so a bad run fails in well under a second
with one line. This module is light on purpose: it imports neither torch nor the
accountants (torch only for ``device='cuda'``, the edge list only for the node-level
degree checks); it reads what it needs of a method from the method catalogue
(:mod:`dpgnn_core.methods.catalog`), never from the spec's type.

The checks, in order:

0. with the dataset folder known (a ``path`` key in the manifest): its files are those the
   manifest lists, by sha256, and the manifest was not edited
   (:func:`~dpgnn_core.data.store.verify_folder`: every key is covered by the manifest's
   ``manifest_sha256`` and what the files state is re-derived), so a tampered or missing
   file or an edited manifest is refused here, not inside the flow;
1. the dataset's task is the method's (node or graph classification);
2. single labels, for every method whose entry does not take ``multi_label`` data (all
   but the non-private full-batch baselines);
3. training records exist (nodes, or graphs for graph classification);
4. a set ``batch_size`` fits in them (unset, it adapts to the data);
5. with the folder known: the split counts are the manifest's, and the training split
   holds at least two classes (a classifier of one class trains to loss 0 and says
   nothing);
6. the privacy parameters (:func:`check_privacy`): a target ε, steps and a fixed noise
   multiplier the PLD accountant can compose within memory (:func:`check_pld_plan`), and
   δ below 1/N_train unless ``allow_large_delta`` (a warning above 1/(10 N_train));
7. the requested device exists, and the requested backend's library loads (``backend='dgl'``
   needs the optional DGL extra: the error names its install command);
8. the method family's own checks, referenced from its catalogue entry (``checks``) and
   written beside its spec: DP-GNN's level ``node`` needs a directed dataset
   (:func:`dpgnn_core.specs.subgraph.dpgnn_level`); GAP-NDP, ProGAP-NDP and DPDGC-NDP
   need every degree within ``D`` (:func:`dpgnn_core.specs.base.degree_within_bound`).

9. the model's widths (``hidden``, ``encoder_dim``) fit the machine's memory
   (:func:`check_model_size`: a lower bound, the output layer of width × classes with its
   gradients; ``--hidden 1e9`` failed after 28 s with a raw allocation error);
10. a dataset in one file (not partitioned) fits the machine's memory
   (:func:`check_dataset_size`: a lower bound, its float32 features and int64 edge list
   as loaded), else the run would load for minutes and be killed by the OOM killer.

BatchNorm, which mixes the examples of a batch, is refused when the model is built
(:func:`~dpgnn_core.training.dp_sgd.check_dp_compatible`): no spec option adds it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpgnn_core.errors import DataError, DeviceError, PrivacyError
from dpgnn_core.methods.catalog import entry

_KINDS = {"node": "node classification", "graph": "graph classification"}


def task_of(spec: Any) -> str:
    """The task (``node`` or ``graph`` classification) of ``spec``'s method, from the
    method catalogue."""
    return entry(spec.method).task


def _where(manifest: Mapping[str, Any]) -> str | None:
    path = manifest.get("path")
    return f"{path}/manifest.json" if path else None


def check_data(spec: Any, manifest: Mapping[str, Any]) -> None:
    """Checks 1-4 of the module docstring.

    Raises:
        DataError: naming the manifest, the field and the value.
    """
    where, task, name = _where(manifest), manifest.get("task"), spec.method
    want = task_of(spec)
    if task != want:
        raise DataError(f"{name} is a {_KINDS[want]} method, but this dataset is a "
                        f"{_KINDS.get(str(task), str(task))} dataset", path=where,
                        field="task", value=task)
    if not entry(name).multi_label and manifest.get("multi_label"):
        raise DataError(f"{name} trains on single labels; this dataset is multi-label "
                        "(the non-private baselines mlp, gcn, sage take it)", path=where,
                        field="multi_label", value=True)
    records = "graphs" if want == "graph" else "nodes"
    n_train = int(manifest.get("split_counts", {}).get("train", 0))
    if n_train == 0:
        raise DataError(f"the dataset has no training {records[:-1]}", path=where,
                        field="split_counts.train", value=n_train)
    batch = getattr(spec, "batch_size", None)
    if batch is not None and batch > n_train:
        raise DataError(f"batch size {batch} exceeds the {n_train} training {records}; "
                        "leave --batch-size unset to adapt it to the data, or give at most "
                        f"{n_train}", path=where, field="batch_size", value=batch)


#: Folders already verified in this process, keyed by what would change on a new write
#: (a sweep checks every point against the same folder once).
_VERIFIED: dict[tuple[Any, ...], tuple[dict[str, int], Any]] = {}


def _folder_records(manifest: Mapping[str, Any]) -> tuple[dict[str, int], Any]:
    """Verify the folder (check 0) and count its records' splits and training classes:
    ``({split: count}, training labels)``, cached per folder state."""
    from dpgnn_core.data.graph import SPLIT_NAMES, TRAIN
    from dpgnn_core.data.store import verify_folder

    folder = Path(str(manifest["path"]))
    files = manifest.get("files") or {}
    stats = []
    for f in sorted(files):
        st = (folder / f).stat() if (folder / f).is_file() else None
        stats.append((f, st and st.st_size, st and st.st_mtime_ns))
    key = (str(folder.resolve()), tuple(stats), json.dumps(dict(manifest), sort_keys=True,
                                                           default=str))
    if key not in _VERIFIED:
        if manifest.get("layout") == "partitioned":  # every partition hashed, block by block
            from dpgnn_core.data.partitioned import verify_partitioned_records

            labels, split = verify_partitioned_records(folder)
        else:
            labels, split = verify_folder(folder, dict(manifest))
        import numpy as np

        counts = np.bincount(split.astype(np.int64), minlength=len(SPLIT_NAMES))
        _VERIFIED[key] = ({n: int(c) for n, c in zip(SPLIT_NAMES, counts, strict=True)},
                          labels[split == TRAIN])
    return _VERIFIED[key]


def check_records(spec: Any, manifest: Mapping[str, Any]) -> None:
    """Check 5: the split counts are the manifest's and the training split holds at least
    two classes (single-label data).

    Raises:
        DataError: naming the file, the field and the value.
    """
    if not manifest.get("path"):
        return
    import numpy as np

    counts, train = _folder_records(manifest)
    where = _where(manifest)
    stated = {k: int(v) for k, v in (manifest.get("split_counts") or {}).items()}
    if stated != counts:
        raise DataError(f"manifest was edited after ingest: split_counts {stated}, the files "
                        f"hold {counts}", path=where, field="split_counts", value=stated)
    if train.ndim != 1:  # multi-label: every column is a task of its own
        return
    classes = np.unique(train[train >= 0])
    records = "graphs" if task_of(spec) == "graph" else "nodes"
    if classes.shape[0] < 2:
        only = f"class {int(classes[0])}" if classes.shape[0] else "no label"
        raise DataError(f"a classifier needs at least two classes in the training split; "
                        f"all {train.shape[0]} training {records} of "
                        f"{manifest.get('name', 'this dataset')!r} have {only}",
                        path=where, field="split_counts.train", value=classes.tolist())


def n_train(spec: Any, manifest: Mapping[str, Any]) -> int:
    """N_train: the training records (nodes, or graphs for graph classification)."""
    return int((manifest.get("split_counts") or {}).get("train", 0))


#: The largest target ε the PLD accountant (the default) is asked to calibrate: its grid
#: of privacy losses grows as 1/noise, and a huge ε needs tiny noise. Measured on DP-MLP
#: (200 nodes, default options): ε = 4 peaks at 0.8 GB, ε = 100 at 1.8 GB, ε = 1000 at
#: 3.9 GB after 150 s, ε = 1e6 asks for an 800 GiB array. The RDP accountant has no grid
#: (ε = 1e6: 0.65 GB, 14 s).
PLD_MAX_EPSILON = 100.0


#: The most steps the PLD accountant is asked to compose: it composes T steps on a grid
#: that widens with T. Calibrating DP-MLP's 10^6 steps took 30-40 s on one core, 10^7 more
#: than 5 minutes, and 10^9 steps asked numpy for a 36 GiB array. The RDP accountant's
#: cost does not grow with T.
PLD_MAX_STEPS = 10**6
#: The largest grid of one step's privacy losses a run asks the PLD accountant for, and the
#: grid step: 2^25 points. The accountant itself refuses 2^28 (memory:
#: :data:`dpgnn_core.privacy.pld_library.MAX_PMF_POINTS`), but "train until spent" at a
#: fixed noise multiplier of 0.01 (1.2·10^8 points) ran over 200 s on one core without
#: finishing one answer; such noise spends thousands of ε per step anyway.
PLD_MAX_POINTS, PLD_GRID = 2**25, 1e-4


def check_pld_plan(spec: Any, eps: float) -> None:
    """What the PLD accountant cannot compute within memory: a target ε above
    :data:`PLD_MAX_EPSILON`, more than :data:`PLD_MAX_STEPS` steps, or a fixed noise
    multiplier z so small that one step's privacy losses (up to about 1/(2z²) + 12/z
    either side) span more than :data:`PLD_MAX_POINTS` grid points (z below about 0.02; z = 1e-9
    asked for 10^22 of them).

    Raises:
        PrivacyError: naming the option and the value, and ``--accountant rdp``.
    """
    if eps > PLD_MAX_EPSILON:
        raise PrivacyError(
            f"--epsilon {eps:g}: above {PLD_MAX_EPSILON:g} the PLD accountant cannot "
            "calibrate the noise within memory (its grid grows as 1/noise: ε = 1000 needs "
            "about 4 GB and minutes, ε = 1e6 an 800 GiB array), and e^ε rules nothing out "
            "there; use --accountant rdp for such a target, or --non-private")
    z = getattr(spec, "noise_multiplier", None)
    steps = getattr(spec, "steps", None)
    if z is None and isinstance(steps, int) and steps > PLD_MAX_STEPS:
        raise PrivacyError(
            f"--steps {steps}: the PLD accountant composes at most {PLD_MAX_STEPS:,} steps "
            "(its grid widens with the steps: 10^6 take ~40 s to calibrate, 10^9 a 36 GiB "
            "array); use --accountant rdp for a longer plan")
    if z is not None and (1 / z**2 + 24 / z) / PLD_GRID > PLD_MAX_POINTS:
        raise PrivacyError(
            f"--noise-multiplier {z:g}: one step's privacy losses reach about "
            f"{1 / (2 * z**2) + 12 / z:.3g}, more than the PLD accountant's grid holds in "
            "memory; such noise protects nothing (give more noise), or use --accountant rdp")


def check_privacy(spec: Any, manifest: Mapping[str, Any]) -> list[str]:
    """Check 6: a target ε above :data:`PLD_MAX_EPSILON` with the PLD accountant is
    refused; so is a δ of at least 1/N_train (publishing one training record at random is
    (0, 1/N_train)-DP, so such a δ rules out nothing) unless ``allow_large_delta`` is set,
    which the spec then records. A δ above 1/(10 N_train), the default, is warned about.

    Returns:
        list of str: warnings (the command line prints each as a ``warning:`` line).

    Raises:
        PrivacyError: naming the option and the value.
    """
    eps = getattr(spec, "epsilon", None)
    if eps is None:  # non-private: no budget to check
        return []
    if getattr(spec, "accountant", None) == "pld":
        check_pld_plan(spec, eps)
    delta, n = getattr(spec, "delta", None), n_train(spec, manifest)
    if delta is None or n < 1:  # the default, 1/(10 N_train)
        return []
    if delta >= 1.0 / n and not getattr(spec, "allow_large_delta", False):
        raise PrivacyError(
            f"--delta {delta:g} >= 1/N_train = 1/{n} = {1.0 / n:.3g}: publishing one "
            "training record at random is (0, 1/N_train)-DP, so this δ does not rule out "
            f"leaking a record; use δ below {1.0 / (10 * n):.3g} (the default, 1/(10 "
            "N_train)) or pass --allow-large-delta, which the run records")
    if delta > 1.0 / (10 * n):
        return [f"--delta {delta:g} is above 1/(10 N_train) = {1.0 / (10 * n):.3g} "
                f"(N_train = {n}); a δ well below 1/N_train is the usual reading of DP"
                + (" (allowed by --allow-large-delta, recorded with the run)"
                   if delta >= 1.0 / n else "")]
    return []


def check_device(spec: Any) -> None:
    """``device='cuda'`` needs a CUDA device (torch imported only then).

    Raises:
        DeviceError: no CUDA device.
    """
    if getattr(spec, "device", "auto") != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise DeviceError("--device cuda: torch sees no CUDA device (use --device auto, "
                          "which takes CUDA when present, or --device cpu)")


def check_backend(spec: Any) -> None:
    """``backend='dgl'`` needs DGL (imported only then), and the CPU: the extra installs
    DGL's CPU build.

    Raises:
        MissingExtraError: DGL is not installed or does not load; names the install command.
        DeviceError: ``backend='dgl'`` with ``device='cuda'``.
    """
    if getattr(spec, "backend", "pyg") != "dgl":
        return
    if getattr(spec, "device", "auto") == "cuda":
        raise DeviceError("--backend dgl runs on the CPU only (the dgl extra is DGL's CPU "
                          "build); use --backend auto or pyg with --device cuda")
    from dpgnn_core.interop.dgl import import_dgl

    import_dgl()


def release_levels(spec: Any) -> tuple[tuple[str, str], ...]:
    """The (level, relation) pairs of the privacy events ``spec``'s run will release,
    known before anything is calibrated or trained (no torch): what the budget's
    protected units are checked against before Prefect starts
    (:func:`tasks.budget.admit_units`). Empty for a non-private run.

    Example: ``gap-edp`` releases at ``("edge", "add_remove")``, which bounds nothing
    about a node (:func:`dpgnn_core.privacy.units.group_size` is 0)."""
    if getattr(spec, "epsilon", None) is None:
        return ()
    return entry(spec.method).release_levels(spec)


#: The model widths :func:`check_model_size` bounds.
WIDTHS = ("hidden", "encoder_dim")


def check_model_size(spec: Any, manifest: Mapping[str, Any], memory: int | None = None
                     ) -> None:
    """Check 9: refuse a width whose model clearly cannot fit ``memory`` (default: this
    machine's, :func:`dpgnn_core.environment.physical_memory`). Every model of the
    catalogue has a layer of width × classes (its output layer, or GAP's encoder head),
    whose float32 weights and gradients alone take 8 bytes per parameter: a lower bound,
    so nothing that could fit is refused.

    Raises:
        DataError: naming the option and its value.
    """
    from dpgnn_core.environment import physical_memory

    memory = physical_memory() if memory is None else memory
    classes = max(int(manifest.get("num_classes") or 0), 2)
    for field in WIDTHS:
        width = getattr(spec, field, None)
        if not isinstance(width, int) or not memory:
            continue
        need = 8 * width * classes
        if need > memory:
            option = "--" + field.replace("_", "-")
            default = type(spec).model_fields[field].default
            raise DataError(
                f"{option} {width}: the model's layer of {width} × {classes} classes alone "
                f"needs {need / 2**30:,.1f} GiB for its weights and gradients, more than this "
                f"machine's {memory / 2**30:,.1f} GiB of memory; choose a smaller {option} "
                f"(default {default})")


def check_dataset_size(manifest: Mapping[str, Any], memory: int | None = None) -> None:
    """Check 10: refuse a dataset in one file whose features and edges alone clearly
    cannot fit ``memory`` (default: this machine's,
    :func:`dpgnn_core.environment.physical_memory`): 4 bytes per feature value and 16 per
    edge (its two int64 ends), a lower bound on what loading it takes. A partitioned
    dataset is trained on a cluster's workers (issue 51) and not checked here.

    Raises:
        DataError: naming the manifest, the dataset's size and the cluster options.
    """
    from dpgnn_core.environment import physical_memory

    if manifest.get("layout") == "partitioned":
        return
    memory = physical_memory() if memory is None else memory
    nodes, edges = int(manifest.get("num_nodes") or 0), int(manifest.get("num_edges") or 0)
    need = 4 * nodes * int(manifest.get("feature_dim") or 0) + 16 * edges
    if memory and need > memory:
        where = Path(str(manifest["path"])) / "manifest.json" if manifest.get("path") else None
        raise DataError(
            f"{nodes:,} nodes × {manifest.get('feature_dim')} features and {edges:,} edges "
            f"alone need {need / 2**30:,.1f} GiB to load, more than this machine's "
            f"{memory / 2**30:,.1f} GiB of memory: a graph this size trains only from "
            "partitions on a Dask cluster (--workers N --worker-memory SIZE, or "
            "--dask-address), for the families that train from partitions; so far only "
            "the synthetic generator writes a partitioned dataset (--partition-nodes)",
            path=where, field="num_nodes", value=nodes)


def check(spec: Any, manifest: Mapping[str, Any]) -> list[str]:
    """Every check of the module docstring, in order. A ``path`` key in ``manifest`` (the
    dataset folder) is named in the errors and lets the checks read the folder (its
    hashes, labels and splits; GAP-NDP's edge list).

    Returns:
        list of str: warnings that do not stop the run (:func:`check_privacy`).

    Raises:
        DataError, DeviceError, PrivacyError, MissingExtraError: one line naming what is
            wrong.
    """
    if manifest.get("path"):
        _folder_records(manifest)
    check_data(spec, manifest)
    check_model_size(spec, manifest)
    check_dataset_size(manifest)
    check_records(spec, manifest)
    warnings = check_privacy(spec, manifest)
    check_device(spec)
    check_backend(spec)
    for family_check in entry(spec.method).checks:
        family_check(spec, manifest)
    return warnings

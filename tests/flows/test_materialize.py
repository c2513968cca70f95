"""`dpgnn materialize` and the cached `materialize_subgraphs` task."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dpgnn_core.data.store import read_dataset, write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.graph.degree_bound import degrees
from dpgnn_core.graph.subgraphs import read_subgraphs
from flows.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mat") / "ds"
    write_dataset(csbm(num_nodes=600, avg_degree=8, seed=4), path)
    return path


@pytest.mark.parametrize(("args", "bound"), [
    (["--sampler", "degree-bounded", "--max-degree", "3", "--layers", "2"], 13),
    (["--sampler", "drw", "--walk-length", "4"], 1),
    (["--sampler", "drw-r", "--walk-length", "3", "--restarts", "2"], 1),
])
def test_materialize_subgraphs(dataset: Path, tmp_path: Path, args: list[str],
                               bound: int) -> None:
    r = runner.invoke(app, ["materialize", "--dataset", str(dataset), *args, "--out",
                            str(tmp_path / "sg"), "--seed", "7", "--insecure-reproducible-noise",
                            "--json"])
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)
    assert m["occurrence_bound"] == bound and m["seed"] == 7
    assert m["sampling_scheme"] == "fixed_size_without_replacement"
    sg = read_subgraphs(tmp_path / "sg")
    data = read_dataset(dataset)
    assert sg.occurrences(data.num_nodes).max() <= bound
    train = np.flatnonzero(data.mask("train"))
    if bound > 1:  # DP-GNN: one subgraph per training node
        assert np.array_equal(np.sort(sg.roots), train)
    else:  # DRW: a partition of the training nodes
        assert np.array_equal(np.sort(sg.nodes), train)
    # Same seed, same bytes, only when asked for; by default the sample is secret.
    r2 = runner.invoke(app, ["materialize", "--dataset", str(dataset), *args, "--out",
                             str(tmp_path / "sg2"), "--seed", "7",
                             "--insecure-reproducible-noise", "--json"])
    assert json.loads(r2.stdout)["content_sha256"] == m["content_sha256"]
    secret = [json.loads(runner.invoke(app, [
        "materialize", "--dataset", str(dataset), *args, "--out", str(tmp_path / f"s{i}"),
        "--seed", "7", "--json"]).stdout) for i in range(2)]
    assert secret[0]["seed"] is None and secret[0]["randomness"].startswith("secret")
    assert secret[0]["content_sha256"] != secret[1]["content_sha256"]


def test_materialize_gap_degree(dataset: Path, tmp_path: Path) -> None:
    r = runner.invoke(app, ["materialize", "--dataset", str(dataset), "--sampler",
                            "gap-degree", "--max-degree", "4", "--out", str(tmp_path / "g")])
    assert r.exit_code == 0, r.output
    bounded = read_dataset(tmp_path / "g")
    assert degrees(bounded.edge_index, bounded.num_nodes, directed=False).max() <= 4
    orig = read_dataset(dataset)
    assert set(map(tuple, bounded.edge_index.T.tolist())) <= \
        set(map(tuple, orig.edge_index.T.tolist()))


@pytest.mark.parametrize(("args", "needle"), [
    (["--sampler", "drw"], "walk_length"),
    (["--sampler", "degree-bounded"], "max_degree"),
    (["--sampler", "degree-bounded", "--max-degree", "0"], "greater than or equal to 1"),
    (["--sampler", "drw", "--walk-length", "2", "--restarts", "3"], "drw-r"),
])
def test_materialize_bad_parameters(dataset: Path, tmp_path: Path, args: list[str],
                                    needle: str) -> None:
    r = runner.invoke(app, ["materialize", "--dataset", str(dataset), *args, "--out",
                            str(tmp_path / "x")])
    assert r.exit_code != 0 and needle in r.output
    assert not (tmp_path / "x").exists()


def test_materialize_refuses_invalid_dataset(dataset: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in dataset.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    (bad / "edges.parquet").write_bytes(b"garbage")
    r = runner.invoke(app, ["materialize", "--dataset", str(bad), "--sampler", "drw",
                            "--walk-length", "2", "--out", str(tmp_path / "x")])
    assert r.exit_code == 1 and "checksum mismatch" in r.output


@pytest.mark.xdist_group("prefect")
def test_materialize_task_is_cached(dataset: Path) -> None:
    from prefect import flow

    from dpgnn_core.specs import SamplerSpec
    from tasks.ingest import dataset_summary
    from tasks.materialize import materialize_subgraphs

    @flow
    def twice() -> list[str]:
        ds = dataset_summary(dataset)
        spec = SamplerSpec(sampler="drw", walk_length=3, seed=11)
        a = materialize_subgraphs(ds, spec, return_state=True)
        b = materialize_subgraphs(ds, spec, return_state=True)
        c = materialize_subgraphs(ds, spec.model_copy(update={"seed": 12}), return_state=True)
        return [a.name, b.name, c.name, a.result()["path"]]

    a, b, c, path = twice()
    assert (a, b, c) == ("Completed", "Cached", "Completed")
    assert read_subgraphs(path).occurrence_bound == 1

"""The dpgnn command line: ingest, datasets, run --json, bad input, light imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from flows.cli import app
from tests.flows.clirunner import CliRunner, dpgnn_here

runner = CliRunner()
BIN = Path(sys.executable).parent


def test_help_and_datasets_import_nothing_heavy(tmp_path: Path) -> None:
    """`--help` and `datasets` import none of the heavy libraries, and building the
    command line (every command's options, `run NAME --help`, `audit NAME --help`) none of
    SciPy (the audit's statistics, the sparse loaders), scikit-learn or the privacy
    accountants, which every `dpgnn` process would otherwise pay, nor evaluating a model's
    predictions scikit-learn or SciPy; and `--home` is set
    before the tasks are imported, so Prefect's results and cache records go under it
    (what a sweep run in the test process is given explicitly: tests/flows/clirunner.py)."""
    code = ("import os, sys; from flows.cli import app\n"
            "for argv in (['--help'], ['--home', sys.argv[1] + '/h', 'datasets', sys.argv[1]],\n"
            "             ['run', 'dp-mlp', '--help'], ['audit', 'dp-mlp', '--help'],\n"
            "             ['ingest', '--help']):\n"
            "    try: app(argv)\n"
            "    except SystemExit: pass\n"
            "heavy = [m for m in ('torch', 'prefect', 'mlflow', 'pyarrow', 'tasks', 'scipy',\n"
            "                     'sklearn', 'pandas', 'dp_accounting', 'dpgnn_core.privacy')\n"
            "         if m in sys.modules]\n"
            "print('HEAVY', heavy)\n"
            "from dpgnn_core.training.metrics import classification_metrics\n"
            "import numpy as np\n"
            "classification_metrics(np.array([0, 1, 2]), np.eye(3), 3)\n"
            "print('EVALUATED', [m for m in ('sklearn', 'scipy') if m in sys.modules])\n"
            "import tasks\n"
            "print('RESULTS', os.environ['PREFECT_LOCAL_STORAGE_PATH'])")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DPGNN_HOME", "PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH")}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True, env=env).stdout
    assert "HEAVY []" in out, out
    assert "EVALUATED []" in out, out  # every run and sweep worker evaluates
    assert f"RESULTS {(tmp_path / 'h').resolve() / 'cache'}" in out.splitlines(), out


def test_ingest_synthetic_and_list(tmp_path: Path) -> None:
    out = tmp_path / "ds" / "g"
    r = runner.invoke(app, ["ingest", "--format", "synthetic", "--out", str(out), "--seed", "3",
                            "-o", "num_nodes=500", "-o", "num_classes=3", "--json"])
    assert r.exit_code == 0, r.output
    manifest = json.loads(r.stdout)
    assert manifest["num_nodes"] == 500 and manifest["num_classes"] == 3
    r = runner.invoke(app, ["datasets", str(tmp_path / "ds"), "--json"])
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert rows[0]["num_nodes"] == 500 and rows[0]["content_sha256"] == manifest["content_sha256"]
    # An existing folder is not replaced without --overwrite.
    r = runner.invoke(app, ["ingest", "--format", "synthetic", "--out", str(out)])
    assert r.exit_code == 2 and "already exists" in r.output


def test_ingest_real_formats(shared: Path, tmp_path: Path) -> None:
    cases = [
        (["--format", "planetoid", "--source", str(shared / "planetoid/Cora/raw")], 2708),
        (["--format", "facebook100", "--source", str(shared / "facebook100/Caltech36.mat"),
          "--min-class-size", "50"], None),
        (["--format", "tu", "--source", str(shared / "tudataset/Fingerprint/raw"),
          "--fingerprint-merge"], 15167),
        (["--format", "ogb", "--source", str(shared / "ogbg_molbace")], 51577),
    ]
    for i, (args, nodes) in enumerate(cases):
        r = runner.invoke(app, ["ingest", *args, "--out", str(tmp_path / str(i)), "--json"])
        assert r.exit_code == 0, r.output
        if nodes is not None:
            assert json.loads(r.stdout)["num_nodes"] == nodes


@pytest.mark.parametrize(("args", "needle"), [
    (["--format", "planetoid", "--source", "/nonexistent"], "source not found"),
    (["--format", "tu"], "--source is required"),
    (["--format", "csv", "--source", "EDGES"], "--nodes"),
    (["--format", "planetoid", "--source", "SHARED", "--dedupe-edges"],
     "--dedupe-edges does not apply to --format planetoid (it applies to tu, dgl, csv"),
])
def test_ingest_bad_input(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "e.csv").write_text("src,dst\n0,1\n")
    args = [a.replace("EDGES", str(tmp_path / "e.csv")).replace("SHARED", str(tmp_path))
            for a in args]
    r = runner.invoke(app, ["ingest", *args, "--out", str(tmp_path / "out")])
    assert r.exit_code != 0
    assert needle in r.output
    assert not (tmp_path / "out").exists()


def test_run_rejects_non_dataset(tmp_path: Path) -> None:
    r = runner.invoke(app, ["run", "gcn", "--dataset", str(tmp_path)])
    assert r.exit_code == 2 and "not a dataset folder" in r.output


@pytest.mark.parametrize(("args", "needle", "help_of"), [
    (["run", "dp-mlp", "--epsilon", "1", "--hops", "3"], "No such option: --hops",
     "dpgnn run dp-mlp"),
    (["run", "dp-nope", "--epsilon", "1"], "No such command 'dp-nope'", "dpgnn run"),
    (["run", "dp-mlp", "--epsilon", "x", "--dataset", "d"], "'--epsilon'", "dpgnn run dp-mlp"),
    (["run", "dp-mlp", "--epsilon", "1"], "Missing option '--dataset'", "dpgnn run dp-mlp"),
    (["ingest", "--format", "nope", "--out", "x"], "'--format'", "dpgnn ingest"),
    (["nope"], "No such command 'nope'", "dpgnn"),
])
def test_usage_errors_are_one_line(args: list[str], needle: str, help_of: str) -> None:
    r = runner.invoke(app, args)
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith("error: ") and needle in lines[0]
    assert f"(see `{help_of} --help`)" in lines[0]


def test_usage_error_one_line_from_the_script() -> None:
    r = subprocess.run([BIN / "dpgnn", "run", "dp-mlp", "--hops", "3"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("error: No such option: --hops")
    assert r.stderr.rstrip().endswith("(see `dpgnn run dp-mlp --help`)")


@pytest.mark.slow
def test_run_json_contract(tmp_path: Path, prefect_api_url: str) -> None:
    """`dpgnn run --json` prints exactly one JSON object with the stable keys. In this
    process, through ``dpgnn``'s entry point as a child runs it; its standard output is what
    the command writes to ``sys.stdout`` and to file descriptor 1 (native code, child
    processes: ``fd=True``), as a child's would be."""
    ds = tmp_path / "ds"
    ingest = runner.invoke(app, ["ingest", "--format", "synthetic", "--out", str(ds),
                                 "-o", "num_nodes=300"])
    assert ingest.exit_code == 0, ingest.output
    r = dpgnn_here(["run", "sage", "--dataset", str(ds), "--epochs", "5", "--seed", "2",
                    "--json"],
                   home=tmp_path / "home", api_url=prefect_api_url, main=True, fd=True)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    for key in ("method", "dataset", "seed", "test_accuracy", "val_accuracy", "mlflow_run_id",
                "artifacts_dir"):
        assert key in out
    assert out["method"] == "sage" and out["seed"] == 2
    assert 0.0 <= out["test_accuracy"] <= 1.0
    assert Path(out["artifacts_dir"]).is_relative_to(tmp_path / "home")
    assert (tmp_path / "home" / "mlflow.db").is_file()


def test_ingest_killed_half_way_leaves_no_dataset(tmp_path: Path) -> None:
    """SIGKILL while edges.parquet is being written: no dataset folder, nothing listed, and
    a new ingest to the same place succeeds."""
    out = tmp_path / "ds" / "g"
    code = (
        "import os, signal, sys\n"
        "import pyarrow.parquet as pq\n"
        "real = pq.write_table\n"
        "def killer(table, where, **kw):\n"
        "    if str(where).endswith('edges.parquet'):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(table, where, **kw)\n"
        "pq.write_table = killer\n"
        "from flows.cli import app\n"
        "app(['ingest', '--format', 'synthetic', '--out', sys.argv[1], '-o', 'num_nodes=500'])\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True)
    assert r.returncode == -9
    assert not out.exists()
    listing = runner.invoke(app, ["datasets", str(tmp_path / "ds"), "--json"])
    assert listing.stdout.strip() == ""
    again = runner.invoke(app, ["ingest", "--format", "synthetic", "--out", str(out),
                                "-o", "num_nodes=500"])
    assert again.exit_code == 0, again.output
    assert (out / "manifest.json").is_file()


@pytest.mark.parametrize(("args", "needle"), [
    (["dp-gcn"], "needs --epsilon"),
    (["gcn", "--epsilon", "1"], "No such option: --epsilon"),
    (["dp-gcn", "--epsilon", "-1"], "greater than or equal to 0.001"),
    (["dp-gcn", "--epsilon", "1", "--delta", "2"], "less than 1"),
    (["drw-gcn"], "needs --epsilon"),
    (["dp-gat", "--epsilon", "1", "--layer-clips", "1,2"], "--layer-clips"),
    (["dp-gat", "--epsilon", "1", "--layer-clips", "1,x,2"], "numbers separated by commas"),
    (["dp-gat", "--epsilon", "1", "--clipping", "per-atom"], "clipping"),
    (["gap-ndp", "--epsilon", "4"], "degree bound"),
    (["gap-edp", "--epsilon", "4", "--hops", "0"], "hops"),
    (["gap-edp", "--non-private"], "No such option: --non-private"),
    (["gap-ndp", "--epsilon", "4", "--budget-split", "1,2"], "--budget-split"),
    (["dp-gcn", "--epsilon", "4", "--level", "node"], "only sound on directed"),
    (["dp-mlp", "--epsilon", "4", "--level", "node"], "No such option: --level"),
    (["dp-gcn", "--epsilon", "4", "--walk-length", "3"], "No such option: --walk-length"),
    (["dp-gcn", "--epsilon", "4", "--set", "walk_length=3"], "dp-gcn does not take walk_length"),
    (["dp-gcn", "--epsilon", "4", "--set", "conv=sage"], "implies conv='gcn'"),
])
def test_run_privacy_arguments(tmp_path: Path, args: list[str], needle: str) -> None:
    from dpgnn_core.data.store import write_dataset
    from dpgnn_core.data.synthetic import csbm

    write_dataset(csbm(num_nodes=100), tmp_path / "ds")
    r = runner.invoke(app, ["run", *args, "--dataset", str(tmp_path / "ds")])
    assert r.exit_code == 2 and needle in r.output


@pytest.mark.slow
def test_run_drw_json_reports_privacy(tmp_path: Path, prefect_api_url: str,
                                     seeded_mlflow: Callable[[Path], bool]) -> None:
    """A DRW-R run from the command line: ε within budget from its ledger, the data-dependent
    clipping threshold flagged as unaccounted in --json and in the report. In this process,
    through ``dpgnn``'s entry point (which takes the earlier ``run --method NAME`` form), its
    standard output ``sys.stdout`` and file descriptor 1, as in test_run_json_contract."""
    from dpgnn_core.privacy import Ledger, RdpAccountant

    seeded_mlflow(tmp_path / "home")  # its MLflow store already migrated
    ds = tmp_path / "ds"
    ingest = runner.invoke(app, ["ingest", "--format", "synthetic", "--out", str(ds),
                                 "-o", "num_nodes=600"])
    assert ingest.exit_code == 0, ingest.output
    r = dpgnn_here(["run", "--method", "drw-r-sage", "--dataset", str(ds), "--epsilon", "4",
                    "--steps", "20", "--batch-size", "20", "--hidden", "16",
                    "--walk-length", "3", "--restarts", "2", "--clipping", "layerwise",
                    "--clip-percentile", "75", "--json"],
                   home=tmp_path / "home", api_url=prefect_api_url, main=True, fd=True)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["method"] == "drw-r-sage" and out["private"] and out["steps"] == 20
    assert out["epsilon"] <= 4.0 and out["noise_multiplier"] > 0
    ledger = Ledger.load(out["privacy_report"])
    assert RdpAccountant().epsilon(ledger, out["delta"]) == pytest.approx(out["epsilon"])
    assert len(out["unaccounted"]) == 1 and "75th percentile" in out["unaccounted"][0]
    assert out["unaccounted_release"] == []  # no raw training loss without --log-raw-loss
    assert list(ledger.unaccounted) == out["unaccounted"]


def test_run_method_help_lists_only_its_options() -> None:
    r = runner.invoke(app, ["run", "dp-gcn", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    assert "--max-degree" in r.output and "--level" in r.output
    lines = r.output.splitlines()
    at = next(i for i, line in enumerate(lines) if "--max-degree" in line)
    degree = " ".join(lines[at:at + 4])  # the rule chosen from the structure (issue 29)
    assert "(default: from the structure)" in degree and "at level node it is 2" in degree
    assert "--walk-length" not in r.output and "--hops" not in r.output
    assert "--conv" not in r.output  # the name decides it
    r = runner.invoke(app, ["run", "gcn", "--help"], env={"COLUMNS": "200"})
    assert "--epochs" in r.output and "--epsilon" not in r.output


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_run_spec_from_a_file_with_overrides(tmp_path: Path, suffix: str) -> None:
    from flows.cli.run import build_spec

    text = {".toml": 'epsilon = 2.0\nsteps = 40\nlayer_clips = "1,2,3"\nclipping = "layerwise"\n',
            ".yaml": "epsilon: 2.0\nsteps: 40\nlayer_clips: '1,2,3'\nclipping: layerwise\n",
            ".json": '{"epsilon": 2.0, "steps": 40, "layer_clips": "1,2,3", '
                     '"clipping": "layerwise"}'}[suffix]
    (tmp_path / f"run{suffix}").write_text(text)
    spec = build_spec("dp-sage", {"steps": 60}, tmp_path / f"run{suffix}", ["hidden=32"])
    assert spec.method == "dp-sage" and spec.conv == "sage" and spec.epsilon == 2.0
    assert spec.steps == 60 and spec.hidden == 32 and spec.layer_clips == (1.0, 2.0, 3.0)
    (tmp_path / "other.json").write_text('{"method": "drw-gcn", "epsilon": 1}')
    with pytest.raises(ValueError, match="runs dp-sage"):
        build_spec("dp-sage", {}, tmp_path / "other.json")


def test_datasets_without_argument_finds_the_readme_location(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README ingests into ./data; `dpgnn datasets` alone lists them (and the home's)."""
    from dpgnn_core.data.store import write_dataset
    from dpgnn_core.data.synthetic import csbm

    monkeypatch.chdir(tmp_path)
    write_dataset(csbm(num_nodes=60, seed=1), tmp_path / "data" / "a")
    write_dataset(csbm(num_nodes=70, seed=2), tmp_path / "home" / "datasets" / "b")
    r = runner.invoke(app, ["--home", str(tmp_path / "home"), "datasets", "--json"])
    assert r.exit_code == 0, r.output
    paths = [json.loads(line)["path"] for line in r.output.splitlines()]
    assert paths == ["data/a", str(tmp_path / "home" / "datasets" / "b")]


def test_run_summary_prints_the_structure_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """`dpgnn run dp-gcn` prints the K, batch, steps and lr it used and what the rule read
    (issue 29); --json keeps them under ``structure_defaults``."""
    from flows.cli.summary import print_summary

    chosen = {"max_degree": 1, "batch_size": 2033, "steps": 60, "lr": 0.02,
              "given": ["batch_size"], "rule": "level node_feature, structure public",
              "stats": {"num_nodes": 2708, "num_train": 2033, "mean_degree": 3.9,
                        "median_degree": 3.0}}
    summary = {"method": "dp-gcn", "dataset": "cora", "seed": 0, "private": False,
               "test_accuracy": 0.7, "val_accuracy": 0.7, "structure_defaults": chosen,
               "artifacts_dir": "a", "cache": {}}
    print_summary(summary, as_json=False)
    line = [x for x in capsys.readouterr().out.splitlines() if "defaults" in x]
    assert line == ["  defaults   max_degree 1, batch_size 2033 (given), steps 60, lr 0.02 "
                    "[level node_feature, structure public; median degree 3, mean degree "
                    "3.9, N_train 2033]"]
    print_summary(summary, as_json=True)
    assert json.loads(capsys.readouterr().out)["structure_defaults"] == chosen

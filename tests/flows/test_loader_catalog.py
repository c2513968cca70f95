"""The loader catalogue is the one home of the ingest formats: ``IngestSpec``'s format
literal, ``dpgnn ingest --format`` and its option flags are generated from it, so a loader
registered there (one module with ``LOADERS``) is accepted by the spec, offered by the
command line and run by the one core ``ingest``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import typing
from pathlib import Path

from dpgnn_core.data.catalog import format_names, loaders, option_models
from dpgnn_core.specs import IngestSpec
from flows.cli import app
from tests.flows.clirunner import CliRunner


def _format_choices(output: str) -> tuple[str, ...]:
    """The choices that ``dpgnn ingest --format`` lists on a bad format (its error line)."""
    listed = output.split("is not one of", 1)[1]
    return tuple(re.findall(r"'([^']+)'", listed))


def _refused(tmp_path: Path) -> str:
    r = CliRunner().invoke(app, ["ingest", "--format", "nope", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2
    return r.output


def test_spec_and_cli_formats_are_the_catalogue(tmp_path: Path) -> None:
    names = format_names()
    assert names == tuple(loaders()) and len(set(names)) == len(names)
    assert typing.get_args(IngestSpec.model_fields["format"].annotation) == names
    assert _format_choices(_refused(tmp_path)) == names
    # Every loader's option model is behind a --format (generators by kind).
    assert {key.split(" ")[0] for key in option_models()} == set(names)


#: A loader module of a format the tree does not have: a generator without a source.
TOY = '''
from dpgnn_core.data.catalog import Loader
from dpgnn_core.data.options import _Options
from dpgnn_core.data.synthetic import csbm


class ToyOptions(_Options):
    """A toy generator.

    Args:
        toy_nodes (int): nodes. (default: 40)
    """

    toy_nodes: int = 40


def load(source, name, options):
    n = options.pop("toy_nodes", 40)
    return csbm(num_nodes=n, num_classes=2, feature_dim=4, avg_degree=4, name=name), None


LOADERS = (Loader("toy", ToyOptions, load, needs_source=False),)
'''

#: Registers the toy module in the catalogue before anything reads it, then checks the
#: spec and the command line and ingests with both.
CHECK = '''
import json, sys
import typing
from dpgnn_core.data import catalog
catalog.MODULES = (*catalog.MODULES, "toy_loader")
import typer
from typer.testing import CliRunner
from dpgnn_core.data.ingest import ingest
from dpgnn_core.specs import IngestSpec
from flows.cli import app

runner = CliRunner()
bad = runner.invoke(app, ["ingest", "--format", "nope", "--out", sys.argv[1] + "/x"]).output
command = typer.main.get_command(app).commands["ingest"]
flags = {o for p in command.params for o in p.opts}
spec_formats = typing.get_args(IngestSpec.model_fields["format"].annotation)
core = ingest(IngestSpec(format="toy", name="toy-core", options={"toy_nodes": 30}),
              sys.argv[1] + "/core")
r = runner.invoke(app, ["ingest", "--format", "toy", "--toy-nodes", "50", "--out",
                             sys.argv[1] + "/cli", "--json"])
print(json.dumps({"refused": bad, "spec": list(spec_formats),
                  "flag": "--toy-nodes" in flags, "core": core["num_nodes"],
                  "exit": r.exit_code, "cli": json.loads(r.stdout)["num_nodes"]
                  if r.exit_code == 0 else r.output}))
'''


def test_a_registered_loader_is_in_the_spec_and_the_cli(tmp_path: Path) -> None:
    (tmp_path / "toy_loader.py").write_text(TOY)
    env_path = f"{tmp_path}:{':'.join(p for p in sys.path if p)}"
    r = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path)], capture_output=True,
                       text=True, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin",
                                       "HOME": str(tmp_path), "DPGNN_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    choices = _format_choices(out["refused"])
    assert choices[-1] == "toy" and out["spec"][-1] == "toy"
    assert choices[:-1] == format_names() == tuple(out["spec"][:-1])  # the others as before
    assert out["flag"] is True  # its option is a flag of `dpgnn ingest`
    assert out["exit"] == 0, out["cli"]
    assert out["core"] == 30 and out["cli"] == 50

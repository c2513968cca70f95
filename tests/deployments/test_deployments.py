"""The served deployments and prefect.yaml describe the pipeline flow with valid parameters."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from dpgnn_core.specs import DEMO_INGEST, IngestSpec, parse_spec

ROOT = Path(__file__).resolve().parents[2]


def test_serve_deployments() -> None:
    spec = importlib.util.spec_from_file_location("serve", ROOT / "deployments" / "serve.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    deps = {d.name: d for d in mod.deployments()}
    assert set(deps) == {"nightly-gcn", "nightly-mlp", "pipeline-adhoc"}
    assert deps["nightly-gcn"].schedules and not deps["pipeline-adhoc"].schedules
    for d in deps.values():
        parse_spec(d.parameters["spec"])
        if "ingest_spec" in d.parameters:
            assert IngestSpec(**d.parameters["ingest_spec"]) == DEMO_INGEST


def test_prefect_yaml_matches_flow() -> None:
    conf = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    names = {d["name"] for d in conf["deployments"]}
    assert names == {"nightly-gcn", "nightly-mlp", "pipeline-adhoc"}
    for d in conf["deployments"]:
        path, func = d["entrypoint"].split(":")
        assert (ROOT / path).is_file() and f"def {func}(" in (ROOT / path).read_text()
        parse_spec(d["parameters"]["spec"])
        if "ingest_spec" in d["parameters"]:  # the one demo spec, also in YAML
            assert IngestSpec(**d["parameters"]["ingest_spec"]) == DEMO_INGEST

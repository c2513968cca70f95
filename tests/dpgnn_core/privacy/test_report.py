"""The privacy report stays typed from the core to the serialiser: its JSON form keeps the
keys the method wrote (tests/tasks/test_refs.py: a task's reference types it again)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from dpgnn_core.privacy.report import PrivacyReport

BASE = {"method": "dp-mlp", "private": True, "epsilon": 2.0, "delta": 1e-5,
        "accountant": "pld", "noise_multiplier": 1.3, "steps": 40, "level": "node",
        "relation": "add_remove", "protects": "one node", "unaccounted": [],
        "epsilon_by_step": [[40, 2.0]], "ledger": None, "inference": None,
        "randomness": "secret (OS entropy)"}


@pytest.mark.parametrize("extra", [
    {},
    {"release": {"id": "r1", "replaces": "r0"}},
    {"unaccounted_release": ["raw loss"], "warnings": []},
    {"public": ["the graph"], "scope": "the model", "target_epsilon": 2.0},
    {"insecure_reproducible_noise": True, "clips": [1.0, 0.5], "num_train": 120},
    {"structure_defaults": {"max_degree": 7, "why": "public degrees"}, "noise_std": 1.3},
])
def test_json_round_trip_keeps_exactly_the_methods_keys(extra: dict) -> None:
    d = {**BASE, **extra}
    report = PrivacyReport.from_dict(d)
    out = report.to_dict()
    assert json.loads(json.dumps(out)) == d  # no key added, none lost, values equal
    assert PrivacyReport.from_dict(out) == report


def test_optional_attributes_are_typed_and_none_when_absent() -> None:
    bare = PrivacyReport.from_dict(BASE)
    assert bare.release is None and bare.warnings is None and bare.clips is None
    full = PrivacyReport.from_dict({**BASE, "warnings": ["w"], "clips": [1, 2],
                                    "release": {"id": "r1"}, "target_epsilon": 2.0})
    assert full.warnings == ("w",) and full.clips == (1, 2)
    assert full.release is not None and full.release["id"] == "r1"
    assert "release" not in full.details and full.target_epsilon == 2.0


def test_with_release_is_a_new_report() -> None:
    report = PrivacyReport.from_dict(BASE)
    released = report.with_release({"id": "abc"})
    assert report.release is None  # frozen: the original is unchanged
    assert released.release == {"id": "abc"} and released.to_dict()["release"] == {"id": "abc"}
    with pytest.raises(TypeError):
        released.release["id"] = "other"  # type: ignore[index]


def test_the_report_is_a_plain_value_not_a_mapping() -> None:
    """Issue 50: readers use typed attributes, ``details`` or the JSON form; ``report[k]``
    (which serialised the whole report on every read) is gone."""
    report = PrivacyReport.from_dict({**BASE, "max_degree": 4})
    assert not isinstance(report, Mapping)
    with pytest.raises(TypeError):
        report["epsilon"]  # type: ignore[index]
    with pytest.raises(TypeError):
        dict(report)  # type: ignore[call-overload]
    assert report.epsilon == 2.0 and report.details == {"max_degree": 4}
    assert report.to_dict()["max_degree"] == 4

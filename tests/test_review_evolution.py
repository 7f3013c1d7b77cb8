"""Adversarial review of evolution applied with the data (issue 13): each test pins a defect
found in review, through the CLI on real Iceberg tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import published_pointers
from tests.test_evolution import CONTRACT, DATASETS, _event, _land, _published, _state, _to_v1_1


def test_a_required_field_without_default_is_refused_whatever_the_compat_mode(ws_path: Path, cli, ws):
    """The published tables keep the rows written before the new version and are read with its
    schema (the backward direction), whatever direction the contract's compat_mode checks. A
    forward-only contract adding a required field without a default (with a policy letting it
    through) evolved the tables with exit 0, publishing nulls in a column it declares required."""
    _published(ws_path, cli)
    text = (CONTRACT.replace('version: "1.0"', 'version: "1.1"') + "  referrer: string\n"
            + "compat_mode: forward\nevolution_policy: {add_field: feature-flag}\n")
    _to_v1_1(ws_path, text)
    before = {d: published_pointers(ws, d) for d in DATASETS}
    schemas = _state(ws_path)
    _land(ws_path / "landing" / "customers" / "p0", "0002.jsonl", [_event("c9", 1, "FR", "pro", 5, referrer="x")])
    r = cli("run", "customers_mrr", "--format", "json")
    assert r.code == 3, (r.out, r.err)
    err = json.loads(r.out)
    assert err["key"] == "fields.referrer" and "customers@v1.1.yaml" in err["file"]
    assert "required" in err["message"] and "no default" in err["message"].replace("without a default", "no default")
    assert {d: published_pointers(ws, d) for d in DATASETS} == before and _state(ws_path) == schemas


@pytest.mark.parametrize("mode", ["", "compat_mode: forward\n"])
def test_a_breaking_version_with_the_same_field_types_is_refused(ws_path: Path, cli, ws, mode):
    """v1.1 makes a nullable field required: the field types (the ledger's recorded shape) stay,
    but ``contract check`` finds it breaking (new readers cannot read the old rows, which may hold
    nulls). It was published in place with exit 0, the tables claiming v1.1; a version whose shape
    is unchanged must still be a compatible evolution of the one the tables were written for, and
    in the backward direction whatever compat_mode says (``forward`` alone does not check it)."""
    _published(ws_path, cli)
    text = (CONTRACT.replace('version: "1.0"', 'version: "1.1"')
            .replace("country: {type: string, nullable: true}", "country: string")) + mode
    _to_v1_1(ws_path, text)
    check = cli("contract", "check", str(ws_path / "catalog/contracts/customers@v1.0.yaml"),
                str(ws_path / "catalog/contracts/customers@v1.1.yaml"))
    if not mode:
        assert check.code != 0 and "COMPAT.NOW_REQUIRED" in check.out  # the oracle: it is breaking
    before = {d: published_pointers(ws, d) for d in DATASETS}
    _land(ws_path / "landing" / "customers" / "p0", "0002.jsonl", [_event("c9", 1, "FR", "pro", 5)])
    r = cli("run", "customers_mrr", "--format", "json")
    assert r.code == 3, (r.out, r.err)
    err = json.loads(r.out)
    assert err["key"] == "fields.country" and "COMPAT.NOW_REQUIRED" in err["message"]
    assert "not a compatible evolution of contracts/customers@v1.0" in err["message"]
    assert {d: published_pointers(ws, d) for d in DATASETS} == before
    # A compatible version with the same shape (a description added) still publishes.
    _to_v1_1(ws_path, CONTRACT.replace('version: "1.0"', 'version: "1.1"').replace(
        "plan: string", "plan: {type: string, description: the plan}"))
    assert cli("run", "customers_mrr").code == 0

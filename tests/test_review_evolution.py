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


@pytest.mark.parametrize("key_index", [True, False])
def test_a_resent_event_is_still_a_duplicate_after_float_becomes_double(ws_path: Path, cli, key_index):
    """The ledger keeps 0.1 as the float 0.1f, read back after the promotion as the double
    0.10000000149011612; the same event resent (at-least-once delivery) parses to the double 0.1.
    It was refused as a payload conflict (exit 3), blocking the source; it is a duplicate. A
    really different payload is still a conflict, before and after the first v1.1 publish."""
    from tests.test_evolution import NUMBERS, _dataset, _query

    if not key_index:
        config = ws_path / "lakepub.yaml"
        config.write_text(config.read_text().replace("key_index: true", "key_index: false"))
    (ws_path / "catalog" / "contracts" / "meters@v1.0.yaml").write_text(NUMBERS)
    table = {"name": "meters_now", "source": "meters", "entity": "meters", "projection": {"kind": "current"},
             "partition": "identity(site)"}
    _dataset(ws_path, table, "contracts/meters@v1.0")
    landing = ws_path / "landing" / "meters" / "p0"
    landing.mkdir(parents=True)
    first = [{"meter_id": "m1", "version": 1, "site": "a", "reading": 0.1, "price": "12.30"},
             {"meter_id": "m2", "version": 1, "site": "b", "reading": 2.5, "price": "1.05"}]
    _land(landing, "0001.jsonl", first)
    assert cli("run", "meters_now").code == 0
    (ws_path / "catalog" / "contracts" / "meters@v1.1.yaml").write_text(
        NUMBERS.replace('version: "1.0"', 'version: "1.1"').replace("type: float", "type: double"))
    _dataset(ws_path, table, "contracts/meters@v1.1")
    # In the evolving batch itself (the ledger still holds floats), then after it.
    _land(landing, "0002.jsonl", first[:1] + [{"meter_id": "m3", "version": 1, "site": "b", "reading": 0.3,
                                               "price": "1.00"}])
    r = cli("run", "meters_now", "--format", "json")
    assert r.code == 0, r.err
    assert r.json()["batches"][0]["counts"]["duplicates"] == 1
    _land(landing, "0003.jsonl", first + [{"meter_id": "m3", "version": 1, "site": "b", "reading": 0.3,
                                           "price": "1.00"}])
    r = cli("run", "meters_now", "--format", "json")
    assert r.code == 0, r.err
    assert r.json()["batches"][0]["counts"]["duplicates"] == 3
    readings = {r["meter_id"]: r["reading"] for r in _query(cli, "SELECT meter_id, reading FROM meters_now")}
    assert readings["m3"] == 0.3 and abs(readings["m1"] - 0.1) < 1e-7 and readings["m2"] == 2.5
    for changed in ({"meter_id": "m1", "version": 1, "site": "a", "reading": 0.2, "price": "12.30"},
                    {"meter_id": "m3", "version": 1, "site": "b", "reading": 0.30000001, "price": "1.00"}):
        _land(landing, "0004.jsonl", [changed])
        r = cli("run", "meters_now", "--format", "json")
        assert r.code == 3 and json.loads(r.out)["type"] == "PayloadConflict", (r.out, r.err)
    assert cli("verify", "meters_now", "--deep").code == 0


def test_a_dataset_built_under_the_new_version_before_its_first_batch_does_not_block_it(ws_path: Path, cli):
    """A dataset added together with the version bump is built from the ledger (its build record
    names v1.1) before the batch that evolves the tables; that batch was refused (a payload
    conflict, fixed by the producer). The published version was then read from the build record
    (v1.1, the dataset's own), so every later publish was refused as 'v1.1 edited in place'
    (exit 2) though nothing had been edited: the source was stuck."""
    from tests.test_evolution import NEW, OLD, _query, _setup

    landing = _setup(ws_path)
    (ws_path / "catalog" / "datasets" / "customers_all.yaml").unlink()
    _land(landing, "0001.jsonl", OLD)
    assert cli("run", "customers_mrr").code == 0
    _to_v1_1(ws_path)  # customers_all comes back, on v1.1
    _land(landing, "0002.jsonl", [{**OLD[0], "mrr_cents": 1}])  # same version, other payload
    r = cli("run", "customers_mrr", "--format", "json")
    assert r.code == 3 and json.loads(r.out)["type"] == "PayloadConflict", (r.out, r.err)
    _land(landing, "0002.jsonl", NEW)  # the producer fixes its batch
    r = cli("run", "customers_mrr")
    assert r.code == 0, r.err
    rows = {r["customer_id"]: (r["referrer"], r["seats"]) for r in _query(cli, "SELECT * FROM customers_all")}
    assert rows == {"c1": (None, 1), "c2": ("partner", 2), "c3": (None, 3), "c4": ("ads", 3_000_000_000)}
    for name in DATASETS:
        assert cli("verify", name, "--deep").code == 0


def test_a_version_published_without_a_schema_change_cannot_be_edited_in_place(ws_path: Path, cli, ws):
    """v1.1 evolves the tables (the ledger records contract-ref v1.1); v1.2 changes no field type
    and is published; then v1.2's file is edited in place to add a field. The ledger still named
    v1.1 (only an evolution updated the ref), so the edit passed as an evolution from v1.1, exit 0,
    instead of exit 2 (a published version's file edited in place, as README promises)."""
    from tests.test_evolution import V1_1, _dataset, ALL, MRR

    _published(ws_path, cli)
    _to_v1_1(ws_path)
    landing = ws_path / "landing" / "customers" / "p0"
    _land(landing, "0002.jsonl", [_event("c9", 1, "FR", "pro", 5, referrer="x")])
    assert cli("run", "customers_mrr").code == 0
    v1_2 = V1_1.replace('version: "1.1"', 'version: "1.2"').replace("plan: string", "plan: {type: string, description: p}")
    path = ws_path / "catalog" / "contracts" / "customers@v1.2.yaml"
    path.write_text(v1_2)
    for d in (MRR, ALL):
        _dataset(ws_path, d, "contracts/customers@v1.2")
    _land(landing, "0003.jsonl", [_event("c9", 2, "FR", "pro", 6, referrer="x")])
    assert cli("run", "customers_mrr").code == 0
    ledger = ws.catalog.load_table("lakepub.customers__ledger")
    assert ledger.metadata.properties["lakepub.contract-ref"] == "contracts/customers@v1.2"
    path.write_text(v1_2 + "  channel: {type: string, nullable: true}\n")  # edited in place
    before = {d: published_pointers(ws, d) for d in DATASETS}
    _land(landing, "0004.jsonl", [_event("c9", 3, "FR", "pro", 7, referrer="x", channel="web")])
    r = cli("run", "customers_mrr", "--format", "json")
    assert r.code == 2, (r.out, r.err)
    err = json.loads(r.out)
    assert "customers@v1.2.yaml" in err["message"] and "fields.channel" in err["message"]
    assert {d: published_pointers(ws, d) for d in DATASETS} == before

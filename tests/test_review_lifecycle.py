"""Adversarial review of the lifecycle commands (state, wait, retire/restore, hard delete):
each test pins a defect found in review, through the CLI on real Iceberg tables."""

from __future__ import annotations

from pathlib import Path

from conftest import write_jsonl

CUST = """
name: cust
version: "1.0"
entity:
  key: [customer_id]
  version: version
  deleted: deleted
fields:
  customer_id: string
  version: long
  signup: {type: date, nullable: true}
  deleted: boolean
"""
CUST_CURRENT = """
name: cust_current
source: cust
contract: contracts/cust@v1.0
entity: cust
projection: {kind: current}
partition: month(signup)
"""


def _cust(ws_path: Path, cli) -> None:
    (ws_path / "catalog" / "contracts" / "cust@v1.0.yaml").write_text(CUST)
    (ws_path / "catalog" / "datasets" / "cust_current.yaml").write_text(CUST_CURRENT)
    folder = ws_path / "landing" / "cust" / "p0"
    folder.mkdir(parents=True)
    write_jsonl(folder / "0.jsonl", [{"customer_id": "A", "version": 1, "signup": None, "deleted": False},
                                     {"customer_id": "B", "version": 1, "signup": "2025-10-01", "deleted": False}])
    r = cli("run", "cust_current")
    assert r.code == 0, r.err


def test_wait_accepts_the_null_partition_that_state_lists(ws_path: Path, cli):
    """A row whose partition source is null lives in partition "null" (``state`` lists it); waiting
    for it was refused as a label the dataset cannot have (exit 2)."""
    _cust(ws_path, cli)
    labels = [p["partition"] for p in cli("state", "cust_current", "--format", "json").json()["partitions"]]
    assert labels == ["2025-10", "null"]
    r = cli("wait", "cust_current", "--partition", "null", "--timeout", "1s", "--format", "json")
    assert r.code == 0, r.err
    assert r.json()["waited_for"]["partition"] == "null"
    assert cli("wait", "cust_current", "--partition", "2025-1", "--timeout", "1s").code == 2  # still refused


def test_a_retired_dataset_without_a_snapshot_reads_retired_and_wait_refuses(ws_path: Path, cli):
    """A dataset whose table exists without a snapshot (created by its entity's publisher, whose
    first publish did not land) can be retired; its state said ``never-published`` and ``wait``
    polled it until the timeout (exit 6) instead of refusing at once (exit 3) as for any retired
    dataset, though ``run`` skips it."""
    from lakepub.workspace import Workspace

    ws = Workspace.open(ws_path)
    ws.publisher("orders_daily")  # creates the entity's tables, nothing published
    assert ws.catalog.load_table("lakepub.orders_daily").metadata.current_snapshot_id is None
    assert cli("retire", "orders_daily").code == 0
    state = cli("state", "orders_daily", "--format", "json").json()
    assert state["readiness"] == "retired" and state["retired"]["state"] == "retired"
    assert state["fingerprint"] is None and state["partitions"] == []
    r = cli("wait", "orders_daily", "--timeout", "2s", "--interval", "1s")
    assert r.code == 3 and "orders_daily is retired" in r.err, (r.code, r.err)


def test_wait_refuses_a_data_version_that_can_never_match(ws_path: Path, cli):
    """A data version is matched exactly or by a prefix of at least 8 hex digits; a shorter or
    non-hex one can never match, and waited the whole timeout (exit 6) instead of exit 2."""
    _cust(ws_path, cli)
    version = cli("state", "cust_current", "--format", "json").json()["data_version"]
    assert cli("wait", "cust_current", "--data-version", version[7:15], "--timeout", "1s").code == 0
    assert cli("wait", "cust_current", "--data-version", version, "--timeout", "1s").code == 0
    for bad in (version[7:14], "sha256:" + version[7:12], "latest", version[7:15] + "xyz"):
        r = cli("wait", "cust_current", "--data-version", bad, "--timeout", "3s", "--interval", "1s")
        assert r.code == 2 and "--data-version" in r.err, (bad, r.code, r.err)

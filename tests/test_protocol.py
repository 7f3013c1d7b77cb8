"""Refusals leave the published state unchanged: conflicts, stale starts, retries, invalid input."""

from __future__ import annotations

import json
from datetime import date

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import A1, A2, B1, B2, published_pointers, summary_rows, write_jsonl
from lakepub.errors import InvalidEvent, InvalidPosition, PayloadConflict, StaleStart
from lakepub.identity import checksum_matches, partition_checksum, recorded_checksum
from lakepub.store.record import latest_record
from lakepub.workspace import Workspace


@pytest.fixture
def published(ws: Workspace) -> Workspace:
    ws.publish("orders_daily", [A1, A2], start={}, end={"p0": 2})
    return ws


def test_conflicting_payload_blocks_the_publish(published: Workspace, cli, ws_path):
    before = published_pointers(published)
    with pytest.raises(PayloadConflict, match="order_id='A' version=2"):
        published.publish("orders_daily", [B2, {**A2, "cents": 999}], start={"p0": 2}, end={"p0": 4})
    assert published_pointers(published) == before
    # Same through the CLI: exit 3, one line naming the order, nothing published.
    events = write_jsonl(ws_path / "conflict.jsonl", [{**A2, "cents": 999}])
    res = cli("publish", "orders_daily", "--events", str(events), "--start", '{"p0":2}', "--end", '{"p0":3}')
    assert res.code == 3
    assert res.err.count("\n") == 1 and "order_id='A' version=2" in res.err
    assert published_pointers(published) == before
    assert summary_rows(published) == [("2025-10-02", 150, 1)]


def test_conflict_inside_one_batch(ws: Workspace):
    with pytest.raises(PayloadConflict, match="two payloads in this batch"):
        ws.publish("orders_daily", [A1, {**A1, "day": "2025-10-03"}], start={}, end={"p0": 2})
    assert ws.catalog.load_table(("lakepub", "orders_daily")).current_snapshot() is None


def test_stale_start_is_refused_with_both_vectors(published: Workspace, cli, ws_path):
    before = published_pointers(published)
    with pytest.raises(StaleStart) as err:
        published.publish("orders_daily", [B1], start={"p0": 1}, end={"p0": 2})
    assert err.value.committed == {"p0": 2} and err.value.start == {"p0": 1}
    events = write_jsonl(ws_path / "b.jsonl", [B1])
    res = cli("publish", "orders_daily", "--events", str(events), "--start", '{"p0":5}', "--end", '{"p0":6}')
    assert res.code == 3 and '{"p0": 5}' in res.err and '{"p0": 2}' in res.err
    assert published_pointers(published) == before
    status = cli("status", "orders_daily", "--format", "json").json()[0]
    assert status["stale_refused"] == 2


def test_same_batch_retried_is_recognised(published: Workspace, cli, ws_path):
    before = published_pointers(published)
    again = published.publish("orders_daily", [A2, A1], start={}, end={"p0": 2})  # same events, any order
    assert again.status == "already-published"
    assert published_pointers(published) == before
    events = write_jsonl(ws_path / "again.jsonl", [A1, A2])
    res = cli("publish", "orders_daily", "--events", str(events), "--start", "{}", "--end", '{"p0":2}')
    assert res.code == 0 and "already published" in res.out


def test_absent_partitions_count_as_zero(published: Workspace):
    result = published.publish("orders_daily", [B2], start={"p0": 2, "p1": 0}, end={"p0": 2, "p1": 1})
    assert result.status == "published"
    assert latest_record(published.catalog.load_table(("lakepub", "orders_daily"))).positions == {
        "orders": {"p0": 2, "p1": 1}}


@pytest.mark.parametrize(
    "bad, field",
    [
        ({**A1, "version": 0}, "version"),
        ({**A1, "version": "2"}, "version"),
        ({**A1, "day": None}, "day"),
        ({**A1, "day": "2025-13-01"}, "day"),
        ({**A1, "cents": -5}, "cents"),
        ({**A1, "cents": None}, "cents"),
        ({**A1, "deleted": "no"}, "deleted"),
        ({**A1, "order_id": ""}, "order_id"),
    ],
)
def test_invalid_event_exits_2_naming_file_line_and_field(published: Workspace, cli, ws_path, bad, field):
    before = published_pointers(published)
    path = ws_path / "bad.jsonl"
    path.write_text(json.dumps(B2) + "\n\n" + json.dumps(B1) + "\n" + json.dumps(bad) + "\n")
    res = cli("publish", "orders_daily", "--events", str(path), "--start", '{"p0":2}', "--end", '{"p0":5}')
    assert res.code == 2
    assert res.err.startswith("error: ") and res.err.count("\n") == 1
    assert f"{path}:4" in res.err and f"'{field}'" in res.err
    assert "Traceback" not in res.err
    assert published_pointers(published) == before


def test_malformed_json_line(published: Workspace, cli, ws_path):
    path = ws_path / "broken.jsonl"
    path.write_text(json.dumps(B2) + "\n{not json\n")
    res = cli("publish", "orders_daily", "--events", str(path), "--start", '{"p0":2}', "--end", '{"p0":4}')
    assert res.code == 2 and f"{path}:2" in res.err and "not valid JSON" in res.err


def test_parquet_events_and_row_errors(published: Workspace, ws_path):
    good = ws_path / "ok.parquet"
    pq.write_table(pa.Table.from_pylist([B2, B1]), good)
    assert published.publish("orders_daily", good, start={"p0": 2}, end={"p0": 4}).status == "published"
    bad = ws_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([{**A1, "order_id": "C", "cents": -1}]), bad)
    with pytest.raises(InvalidEvent, match=r"row 1: field 'cents'"):
        published.publish("orders_daily", bad, start={"p0": 4}, end={"p0": 5})


def test_event_count_must_match_the_range(published: Workspace):
    before = published_pointers(published)
    with pytest.raises(InvalidPosition, match="cover 3 records"):
        published.publish("orders_daily", [B1], start={"p0": 2}, end={"p0": 5})
    with pytest.raises(InvalidPosition, match="before its start"):
        published.publish("orders_daily", [], start={"p0": 2}, end={"p0": 1})
    assert published_pointers(published) == before


def test_bad_vectors_and_unknown_dataset_are_one_line_errors(cli, ws_path):
    events = write_jsonl(ws_path / "a.jsonl", [A1])
    res = cli("publish", "orders_daily", "--events", str(events), "--start", "{p0", "--end", '{"p0":1}')
    assert res.code == 2 and "not valid JSON" in res.err
    res = cli("publish", "nope", "--events", str(events), "--start", "{}", "--end", '{"p0":1}')
    assert res.code == 2 and "unknown dataset 'nope'" in res.err
    res = cli("publish", "orders_daily", "--events", str(ws_path / "missing.jsonl"), "--start", "{}", "--end", "{}")
    assert res.code == 2


def test_snapshot_summary_records_the_protocol(published: Workspace):
    result = published.publish("orders_daily", [B2], start={"p0": 2}, end={"p0": 3}, source="orders")
    published.publish("orders_daily", [{**B1, "order_id": "C"}], source="returns", start={}, end={"r0": 1})
    table = published.catalog.load_table(("lakepub", "orders_daily"))
    props = table.current_snapshot().summary.additional_properties
    assert json.loads(props["lakepub.positions"]) == {"orders": {"p0": 3}, "returns": {"r0": 1}}
    assert props["lakepub.contract"] == "contracts/orders@v1.0"
    checksums = json.loads(props["lakepub.checksums"])
    assert checksums.keys() == {"2025-10"} and len(checksums["2025-10"]) == 16  # a 64-bit prefix
    counts = json.loads(props["lakepub.counts"])
    assert counts["events"] == 1 and counts["entities_changed"] == 1
    batch = json.loads(props["lakepub.batch"])
    assert batch["source"] == "returns" and batch["end"] == {"r0": 1} and len(batch["events_sha256"]) == 64
    assert result.snapshot_id in {s.snapshot_id for s in table.snapshots()}


def test_recorded_checksums_match_as_prefix_or_full_digest():
    rows = [(date(2025, 10, 1), 500, 2)]
    full = partition_checksum(rows)
    assert recorded_checksum(rows) == full[:16]
    assert checksum_matches(full[:16], full) and checksum_matches(full, full)  # new and earlier records
    assert not checksum_matches(full[:15], full)  # too short to count
    assert not checksum_matches(partition_checksum([(date(2025, 10, 1), 501, 2)])[:16], full)

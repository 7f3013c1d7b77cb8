"""The seed's order contract: A/v1, A/v2 (moved day), B/v2 delete, late B/v1, in every order."""

from __future__ import annotations

import itertools
from datetime import date

import pytest

from conftest import A1, A2, B1, B2, SEED_EVENTS, ledger_count, summary_rows, write_jsonl
from lakepub.store.layout import day_partition_value
from lakepub.workspace import Workspace

EXPECTED = [("2025-10-02", 150, 1)]


def test_seed_table_row_by_row(ws: Workspace):
    # A/v1 on 10-01, 100 cents: recorded with its version.
    ws.publish("orders_daily", [A1], start={}, end={"p0": 1})
    assert summary_rows(ws) == [("2025-10-01", 100, 1)]
    # A/v2 moved to 10-02, 150 cents: the old day is retracted and the new one added in one publish.
    result = ws.publish("orders_daily", [A2], start={"p0": 1}, end={"p0": 2})
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]
    assert result.partitions == ["2025-10"]
    # A/v1 again: an idempotent replay / stale version, nothing is re-added.
    result = ws.publish("orders_daily", [A1], start={"p0": 2}, end={"p0": 3})
    assert result.counts.duplicates == 1 and result.partitions == []
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]
    # B/v2 delete, then the late B/v1: the tombstone holds, B is never resurrected.
    ws.publish("orders_daily", [B2], start={"p0": 3}, end={"p0": 4})
    result = ws.publish("orders_daily", [B1], start={"p0": 4}, end={"p0": 5})
    assert result.counts.stale == 1 and result.counts.entities_changed == 0
    assert summary_rows(ws) == EXPECTED


@pytest.mark.parametrize("per_event", [False, True], ids=["one-batch", "event-per-batch"])
def test_all_24_orders_give_the_same_result_and_replay_changes_nothing(tmp_path, per_event):
    from lakepub.init import init_workspace

    for index, order in enumerate(itertools.permutations(SEED_EVENTS)):
        root = tmp_path / f"ws{index}"
        init_workspace(root)
        ws = Workspace.open(root)
        batches = [[e] for e in order] if per_event else [list(order)]
        offset = 0
        for batch in batches:
            ws.publish("orders_daily", batch, start={"p0": offset}, end={"p0": offset + len(batch)})
            offset += len(batch)
        assert summary_rows(ws) == EXPECTED, order
        ledger_rows = ledger_count(ws)
        assert ledger_rows == 4
        # Replaying everything again (as a new range of the stream) changes no sum, count or ledger row.
        ws.publish("orders_daily", list(order), start={"p0": offset}, end={"p0": offset + 4})
        assert summary_rows(ws) == EXPECTED
        assert ledger_count(ws) == ledger_rows


def test_several_versions_in_one_batch_resolve_by_version(ws: Workspace):
    a3 = {**A2, "version": 3, "day": "2025-11-05", "cents": 20}
    ws.publish("orders_daily", [a3, A1, A2], start={}, end={"p0": 3})
    assert summary_rows(ws) == [("2025-11-05", 20, 1)]


def test_correction_across_partitions_rewrites_both_in_one_publish(ws: Workspace):
    ws.publish("orders_daily", [A1], start={}, end={"p0": 1})
    moved = {**A2, "day": "2025-11-03"}
    result = ws.publish("orders_daily", [moved], start={"p0": 1}, end={"p0": 2})
    assert result.partitions == ["2025-10", "2025-11"]
    assert summary_rows(ws) == [("2025-11-03", 150, 1)]
    # One snapshot moved the pointer: no reader could see 10-01 retracted without 11-03 added.
    assert len(ws.catalog.load_table(("lakepub", "orders_daily")).history()) <= 4


def test_cli_publish_of_the_seed_example(cli, ws_path):
    events = write_jsonl(ws_path / "batch.jsonl", SEED_EVENTS)
    res = cli("publish", "orders_daily", "--events", str(events), "--source", "orders",
              "--start", '{"p0":0}', "--end", '{"p0":4}')
    assert res.code == 0, res.err
    assert "published orders_daily snapshot" in res.out
    res = cli("query", "SELECT * FROM orders_daily ORDER BY day", "--format", "json")
    assert res.json() == [{"day": "2025-10-02", "cents": 150, "orders": 1}]
    res = cli("query", "SELECT * FROM orders_daily ORDER BY day", "--format", "csv")
    assert res.out.splitlines() == ["day,cents,orders", "2025-10-02,150,1"]


@pytest.mark.parametrize("grain", ["day", "month", "year"])
def test_partition_grains_rewrite_only_the_affected_partitions(ws_path, grain):
    spec = ws_path / "catalog" / "datasets" / "orders_daily.yaml"
    spec.write_text(spec.read_text().replace("partition: month", f"partition: {grain}"))
    ws = Workspace.open(ws_path)
    other = {"order_id": "Z", "version": 1, "day": "2024-03-03", "cents": 7, "deleted": False}
    ws.publish("orders_daily", [A1, other], start={}, end={"p0": 2})
    table = ws.catalog.load_table(("lakepub", "orders_daily"))
    untouched = {t.file.file_path for t in table.scan().plan_files()
                 if t.file.partition[0] == day_partition_value(date(2024, 3, 3), grain)}
    assert len(untouched) == 1
    result = ws.publish("orders_daily", [{**A2, "day": "2025-11-03"}], start={"p0": 2}, end={"p0": 3})
    expected_parts = {"day": ["2025-10-01", "2025-11-03"], "month": ["2025-10", "2025-11"], "year": ["2025"]}
    assert result.partitions == expected_parts[grain]
    assert summary_rows(ws) == [("2024-03-03", 7, 1), ("2025-11-03", 150, 1)]
    table = ws.catalog.load_table(("lakepub", "orders_daily"))
    files = {t.file.file_path for t in table.scan().plan_files()}
    assert untouched <= files  # the 2024 partition's file was not rewritten
    assert len(files) == 2  # the emptied partition has no file left

"""Ledger compaction keeps a durable version floor: replaying every old event changes nothing."""

from __future__ import annotations

from conftest import A1, A2, B1, B2, ledger_count, summary_rows
import pytest

from lakepub import reports
from lakepub.maintenance.compact import compact_ledger
from lakepub.generate import generate_stream, read_stream
from lakepub.workspace import Workspace


def test_compact_then_replay_everything_changes_nothing(ws: Workspace, cli):
    landing = ws.config.landing_dir("orders")
    stats = generate_stream(landing, events=4000, partitions=2, days=30, seed=5, segment_size=500)
    assert cli("run", "orders_daily", "--max-batch", "500").code == 0
    before_rows = summary_rows(ws)
    before_ledger = ledger_count(ws)

    res = cli("compact", "orders_daily", "--format", "json")
    assert res.code == 0, res.err
    out = res.json()
    assert out["rows_before"] == before_ledger and out["rows_after"] == stats.orders < before_ledger
    assert out["files_before"] >= 8 and out["files_after"] == 1
    assert ledger_count(ws) == stats.orders
    assert summary_rows(ws) == before_rows
    assert reports.verify(Workspace.open(ws.config.root), "orders_daily", deep=True).ok

    # Replay every event of the stream as a new range: nothing changes, not even the ledger.
    events = list(read_stream(landing))
    replay = ws.publish("orders_daily", events, source="replay", start={}, end={"r0": len(events)})
    assert replay.counts.new_versions == 0 and replay.counts.orders_changed == 0 and replay.partitions == []
    assert summary_rows(ws) == before_rows
    assert ledger_count(ws) == stats.orders


def test_tombstone_survives_compaction(ws: Workspace, cli):
    ws.publish("orders_daily", [A2, B2], start={}, end={"p0": 2})
    assert cli("compact", "orders_daily").code == 0
    result = ws.publish("orders_daily", [B1, A1], start={"p0": 2}, end={"p0": 4})
    assert result.counts.stale == 2 and result.counts.new_versions == 0
    assert summary_rows(ws) == [("2025-10-02", 150, 1)]
    assert ledger_count(ws) == 2
    # A newer version after compaction still applies.
    ws.publish("orders_daily", [{**A2, "version": 3, "cents": 1}], start={"p0": 4}, end={"p0": 5})
    assert summary_rows(ws) == [("2025-10-02", 1, 1)]


def test_compaction_after_an_ordered_crash_leaves_out_the_unpublished_append(ws_path, monkeypatch):
    """An ordered-mode crash between the two commits leaves an append on the ledger's main that
    no publish names; neither a later atomic publish nor compaction may count it as seen."""
    import lakepub.store.commit as commit_module
    from conftest import set_commit_mode

    set_commit_mode(ws_path, "ordered")
    ws = Workspace.open(ws_path)
    ws.publish("orders_daily", [A1], start={}, end={"p0": 1})

    def crash(name: str) -> None:
        if name == "before-pointer-swap":
            raise RuntimeError("crash")

    monkeypatch.setattr(commit_module, "fault_point", crash)
    with pytest.raises(RuntimeError):
        Workspace.open(ws_path).publish("orders_daily", [B1], start={"p0": 1}, end={"p0": 2})
    monkeypatch.undo()
    set_commit_mode(ws_path, "atomic")
    fresh = Workspace.open(ws_path)
    assert fresh.publish("orders_daily", [B1], start={"p0": 1}, end={"p0": 2}).counts.new_versions == 1
    assert summary_rows(fresh) == [("2025-10-01", 170, 2)]
    compact = compact_ledger(fresh, "orders_daily")
    assert compact.rows_after == 2
    assert reports.verify(Workspace.open(ws_path), "orders_daily", deep=True).ok
    log = reports.log(Workspace.open(ws_path), "orders_daily")
    assert log[0].source == "(compaction)" and log[0].counts.events == 0


def test_dry_run_changes_nothing(ws: Workspace, cli):
    ws.publish("orders_daily", [A1, A2], start={}, end={"p0": 2})
    res = cli("compact", "orders_daily", "--dry-run")
    assert res.code == 0 and "would compact orders_daily ledger: 2 -> 1 rows" in res.out
    assert ledger_count(ws) == 2

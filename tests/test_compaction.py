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
    assert replay.counts.new_versions == 0 and replay.counts.entities_changed == 0 and replay.partitions == []
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


@pytest.mark.parametrize("index", [True, False], ids=["key-index", "duckdb-join"])
def test_a_compacted_away_version_replayed_with_another_payload_is_still_a_conflict(ws_path, cli, tmp_path, index):
    """Compaction drops A/v1 and A/v2 below A/v3 (and a second compaction A/v3 below A/v4): a
    replay of any of them with another payload is refused (exit 3) as before compaction, with
    the same payload it changes nothing (exit 0)."""
    import yaml

    from conftest import published_pointers, write_jsonl

    config = yaml.safe_load((ws_path / "lakepub.yaml").read_text())
    config["key_index"] = index
    (ws_path / "lakepub.yaml").write_text(yaml.safe_dump(config))
    position = 0

    def publish(*events):
        nonlocal position
        path = write_jsonl(tmp_path / f"{position}.jsonl", list(events))
        res = cli("publish", "orders_daily", "--events", str(path), "--source", "orders",
                  "--start", f'{{"p0":{position}}}', "--end", f'{{"p0":{position + len(events)}}}')
        if res.code == 0:
            position += len(events)
        return res

    a3 = {**A2, "version": 3, "cents": 170}
    a4 = {**A2, "version": 4, "cents": 180, "day": "2025-10-03"}
    assert publish(A1, B1).code == 0 and publish(A2).code == 0 and publish(a3).code == 0
    assert publish({**A1, "cents": 999}).code == 3  # before compaction: a conflict
    assert cli("compact", "orders_daily").code == 0
    ws = Workspace.open(ws_path)
    assert ledger_count(ws) == 2  # still one row per order
    state = summary_rows(ws), published_pointers(ws)
    for version, other in ((A1, {"cents": 999}), (A2, {"day": "2025-10-09"}), (A1, {"deleted": True, "day": None,
                                                                                  "cents": None})):
        res = publish({**version, **other})
        assert res.code == 3 and "payload conflict" in res.err, (res.code, res.err)
        assert (summary_rows(ws), published_pointers(ws)) == state
    assert publish(A1, A2).code == 0  # the same payloads: nothing changes
    assert summary_rows(ws) == state[0]
    assert publish(a4).code == 0 and cli("compact", "orders_daily").code == 0  # A/v3 compacted away too
    for version in (A1, A2, a3):
        assert publish({**version, "cents": 1}).code == 3
    assert publish(A1, A2, a3, B1).code == 0
    assert publish({**A2, "version": 5, "cents": 5}).code == 0  # above the floor: applies
    assert summary_rows(ws) == [("2025-10-01", 70, 1), ("2025-10-02", 5, 1)]
    assert cli("verify", "orders_daily", "--deep").code == 0

"""`lakepub run` drains a landing source from the committed position; status reports the backlog."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa

from conftest import published_pointers
from lakepub.generate import generate_stream, oracle_summary, read_stream
from lakepub.workspace import Workspace


def _published(ws: Workspace) -> dict:
    fresh = Workspace.open(ws.config.root)
    return {r["day"]: (r["cents"], r["orders"]) for r in fresh.query("SELECT * FROM orders_daily").to_pylist()}


def test_run_in_batches_equals_oracle_and_rerun_publishes_nothing(ws: Workspace, cli):
    landing = ws.config.landing_dir("orders")
    stats = generate_stream(landing, events=6000, partitions=2, days=40, seed=11, segment_size=1000)
    res = cli("run", "orders_daily", "--max-batch", "1500", "--format", "json")
    assert res.code == 0, res.err
    out = res.json()
    assert len(out["batches"]) == 4 and out["events"] == stats.events
    assert sum(out["end"].values()) == stats.events
    assert _published(ws) == oracle_summary(read_stream(landing))
    before = published_pointers(ws)
    again = cli("run", "orders_daily")
    assert again.code == 0 and "nothing new" in again.out
    assert published_pointers(ws) == before


def test_run_picks_up_appended_segments_and_reports_backlog_age(ws: Workspace, cli):
    landing = ws.config.landing_dir("orders")
    p0 = landing / "p0"
    p0.mkdir(parents=True)
    (p0 / "00000.jsonl").write_text(
        json.dumps({"order_id": "A", "version": 1, "day": "2025-10-01", "cents": 100, "deleted": False}) + "\n")
    assert cli("run", "orders_daily").code == 0
    seg = p0 / "00001.jsonl"
    seg.write_text(
        json.dumps({"order_id": "A", "version": 2, "day": "2025-10-02", "cents": 150, "deleted": False}) + "\n"
        + json.dumps({"order_id": "B", "version": 2, "day": None, "cents": None, "deleted": True}) + "\n")
    old = time.time() - 7200
    os.utime(seg, (old, old))
    status = cli("status", "orders_daily", "--format", "json").json()[0]
    assert status["landing"]["pending"] == 2
    assert status["landing"]["oldest_age_s"] >= 7000
    assert status["landing"]["oldest_unprocessed"].endswith("00001.jsonl")
    text = cli("status", "orders_daily").out
    assert "2 unprocessed record(s), oldest 2.0h" in text
    assert cli("run", "orders_daily", "--max-batch", "1").code == 0
    assert _published(ws) == {__import__("datetime").date(2025, 10, 2): (150, 1)}
    status = cli("status", "orders_daily", "--format", "json").json()[0]
    assert status["positions"] == {"orders": {"p0": 3}}
    assert status["landing"]["pending"] == 0
    assert status["totals"]["deletes"] == 1


def test_run_stops_at_an_invalid_record_with_file_and_line(ws: Workspace, cli):
    p0 = ws.config.landing_dir("orders") / "p0"
    p0.mkdir(parents=True)
    good = json.dumps({"order_id": "A", "version": 1, "day": "2025-10-01", "cents": 1, "deleted": False})
    (p0 / "00000.jsonl").write_text(good + "\n" + good.replace('"cents": 1', '"cents": "x"') + "\n")
    ws.publisher("orders_daily")  # creates the (empty) tables
    before = published_pointers(ws)
    res = cli("run", "orders_daily")
    assert res.code == 2 and "00000.jsonl:2" in res.err and "'cents'" in res.err
    assert published_pointers(ws) == before


def test_publish_accepts_an_arrow_table(ws: Workspace):
    from datetime import date

    import pytest

    from lakepub.errors import InvalidEvent

    table = pa.Table.from_pylist([{"order_id": "Z", "version": 1, "day": "2025-05-05", "cents": 9, "deleted": False}])
    assert ws.publish("orders_daily", table, start={}, end={"p0": 1}).counts.entities_changed == 1
    typed = pa.Table.from_pylist([{"order_id": "Y", "version": 1, "day": date(2025, 5, 5), "cents": 1, "deleted": False}])
    assert ws.publish("orders_daily", typed, start={"p0": 1}, end={"p0": 2}).counts.entities_changed == 1
    bad = pa.Table.from_pylist([{"order_id": "X", "version": 0, "day": date(2025, 5, 5), "cents": 1, "deleted": False}])
    with pytest.raises(InvalidEvent, match="row 1: field 'version'"):
        ws.publish("orders_daily", bad, start={"p0": 2}, end={"p0": 3})


def test_landing_lines_must_hold_one_record_each(ws: Workspace, cli):
    """Positions count lines: a segment whose records do not sit one per line is refused."""
    p0 = ws.config.landing_dir("orders") / "p0"
    p0.mkdir(parents=True)
    rec = lambda oid: json.dumps({"order_id": oid, "version": 1, "day": "2025-01-01", "cents": 100,  # noqa: E731
                                  "deleted": False})
    (p0 / "00000.jsonl").write_text(rec("o1") + "\r" + rec("o2") + "\n")  # a bare CR is no line break
    (p0 / "00001.jsonl").write_text(rec("o3") + "\n")
    res = cli("run", "orders_daily")
    assert res.code == 2 and "00000.jsonl" in res.err and "one object per line" in res.err
    (p0 / "00000.jsonl").write_text(rec("o1") + "\n" + rec("o2") + "\n")
    (p0 / ".00002.jsonl").write_text(rec("tmp") + "\n")  # a producer's temp file, not a segment yet
    assert cli("run", "orders_daily").code == 0
    assert _published(ws) == {__import__("datetime").date(2025, 1, 1): (300, 3)}
    (p0 / ".00002.jsonl").rename(p0 / "00002.jsonl")
    assert cli("run", "orders_daily").code == 0
    assert _published(ws) == {__import__("datetime").date(2025, 1, 1): (400, 4)}


def test_python_api_offers_the_read_commands(ws: Workspace):
    ws.publish("orders_daily", [{"order_id": "A", "version": 1, "day": "2025-10-01", "cents": 5, "deleted": False}],
               start={}, end={"p0": 1})
    status = ws.status("orders_daily")
    assert status.published and status.measures["cents"] == 5 and status.positions == {"orders": {"p0": 1}}
    assert [e.end for e in ws.log("orders_daily")] == [{"p0": 1}]
    assert ws.verify("orders_daily", deep=True).ok

"""DuckDB's view of each published snapshot equals pyiceberg's scan of it."""

from __future__ import annotations

from lakepub import duck
from lakepub.generate import generate_stream
from lakepub.store.record import published_history
from lakepub.workspace import Workspace


def test_duckdb_equals_pyiceberg_for_every_published_snapshot(ws: Workspace):
    generate_stream(ws.config.landing_dir("orders"), events=3000, partitions=2, days=60, seed=3)
    ws.run("orders_daily", max_batch=500)
    table = ws.catalog.load_table(("lakepub", "orders_daily"))
    con = duck.connect(ws.config.catalog)
    checked = 0
    for snapshot, _ in published_history(table):
        iceberg = sorted(tuple(r.values()) for r in table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().to_pylist())
        sql = f"SELECT day, cents, orders FROM {duck.scan_sql(table.metadata_location, snapshot.snapshot_id)}"
        duckdb_rows = sorted(con.execute(sql).fetchall())
        assert duckdb_rows == iceberg
        checked += 1
    assert checked >= 6


def test_connect_exposes_a_view_per_published_dataset(ws: Workspace):
    ws.publish("orders_daily", [{"order_id": "x", "version": 1, "day": "2025-01-01", "cents": 5, "deleted": False}],
               start={}, end={"p0": 1})
    con = ws.connect()
    assert con.execute("SELECT cents, orders FROM orders_daily").fetchall() == [(5, 1)]

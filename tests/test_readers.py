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


def test_published_snapshot_lists_one_manifest_with_existing_deleted_and_added_entries(ws: Workspace):
    for month in range(1, 13):  # each publish rewrites another partition
        event = {"order_id": f"m{month}", "version": 1, "day": f"2025-{month:02d}-05", "cents": month, "deleted": False}
        ws.publish("orders_daily", [event], start={"p0": month - 1}, end={"p0": month})
    correction = {"order_id": "m3", "version": 2, "day": "2025-04-06", "cents": 30, "deleted": False}
    ws.publish("orders_daily", [correction], start={"p0": 12}, end={"p0": 13})  # March loses, April gains
    table = ws.catalog.load_table(("lakepub", "orders_daily"))
    manifests = table.current_snapshot().manifests(table.io)
    assert len(manifests) == 1
    statuses = sorted(e.status.name for e in manifests[0].fetch_manifest_entry(table.io, discard_deleted=False))
    assert statuses == ["ADDED"] + ["DELETED"] * 2 + ["EXISTING"] * 10  # April re-added, March emptied
    assert len(list(table.scan().plan_files())) == 11
    expected = sum(range(1, 13)) - 3 + 30
    assert ws.query("SELECT sum(cents) FROM orders_daily").column(0)[0].as_py() == expected
    assert ws.query("SELECT count(*) FROM orders_daily WHERE month(day) = 3").column(0)[0].as_py() == 0


def test_manifest_entries_remembered_by_the_writer_equal_the_committed_manifest(ws: Workspace):
    """A publish starts from the live entries of the manifest this process wrote last
    (store/write.py) instead of decoding it: they must be exactly what a reader decodes."""
    from lakepub.store import write

    generate_stream(ws.config.landing_dir("orders"), events=2000, partitions=2, days=90, seed=4)
    ws.run("orders_daily", max_batch=400)
    table = ws.catalog.load_table(("lakepub", "orders_daily"))
    (manifest,) = table.current_snapshot().manifests(table.io)
    remembered = write._WRITTEN[manifest.manifest_path]

    def fields(e):
        return (e.status, e.snapshot_id, e.sequence_number, e.file_sequence_number, e.data_file.file_path,
                e.data_file.record_count, e.data_file.file_size_in_bytes, tuple(e.data_file.partition))

    assert sorted(map(fields, remembered)) == sorted(map(fields, manifest.fetch_manifest_entry(table.io,
                                                                                               discard_deleted=True)))
    assert any(e.status.name == "ADDED" for e in remembered) and any(e.status.name == "EXISTING" for e in remembered)

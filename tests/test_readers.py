"""DuckDB's view of each published snapshot equals pyiceberg's scan of it."""

from __future__ import annotations

import datetime as _dt

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


# --- readers outside lakepub: the table folder and its version hint ---------------------------

import duckdb as _duckdb  # noqa: E402
import pytest  # noqa: E402

from conftest import A1, A2, B1, B2, set_commit_mode, write_jsonl  # noqa: E402


def _outside_duckdb(guessing: bool) -> _duckdb.DuckDBPyConnection:
    """A plain DuckDB connection, as a user outside lakepub would open one."""
    con = _duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    for name in ("avro", "iceberg"):
        con.execute(f"LOAD '{duck.extension_path(name)}'")
    if guessing:  # the habit this defends against: "read the newest metadata file"
        con.execute("SET unsafe_enable_version_guessing=true")
    return con


def _folder_rows(ws_path, table: str, guessing: bool) -> list[tuple]:
    folder = ws_path / ".lakepub" / "warehouse" / "lakepub" / table
    con = _outside_duckdb(guessing)
    return sorted(con.execute(f"SELECT * FROM iceberg_scan('{folder}')").fetchall())


def _hint(ws_path, table: str) -> str:
    return (ws_path / ".lakepub" / "warehouse" / "lakepub" / table / "metadata" / "version-hint.text").read_text()


def _catalog_stems(ws_path) -> dict[str, str]:
    fresh = Workspace.open(ws_path)
    out = {}
    for table in ("orders_daily", "orders_daily__ledger"):
        location = fresh.catalog.load_table(("lakepub", table)).metadata_location
        out[table] = location.rsplit("/", 1)[1].removesuffix(".metadata.json")
    return out


@pytest.mark.parametrize("mode", ["atomic", "ordered"])
def test_table_folder_reads_the_published_state_after_a_crashed_publish_and_the_janitor(ws_path, cli, cli_process, mode):
    set_commit_mode(ws_path, mode)
    assert cli("publish", "orders_daily", "--events", str(write_jsonl(ws_path / "b1.jsonl", [A1, B1])),
               "--start", "{}", "--end", '{"p0":2}').code == 0
    batch = write_jsonl(ws_path / "b2.jsonl", [A2, B2])
    crashed = cli_process("publish", "orders_daily", "--events", str(batch), "--start", '{"p0":2}', "--end", '{"p0":4}',
                          env={"LAKEPUB_FAULT": "before-pointer-swap"})
    assert crashed.code == -9, crashed.err
    published = cli("query", "SELECT day, cents, orders FROM orders_daily ORDER BY day", "--format", "json")
    expected = sorted((_dt.date.fromisoformat(r["day"]), r["cents"], r["orders"]) for r in published.json())
    assert expected == [(_dt.date(2025, 10, 1), 170, 2)]

    def check() -> None:
        for guessing in (True, False):  # without the hint, guessing reads the crashed batch
            assert _folder_rows(ws_path, "orders_daily", guessing) == expected
        location = cli("status", "orders_daily", "--format", "json").json()[0]["metadata_location"]
        by_location = _outside_duckdb(False).execute(f"SELECT * FROM iceberg_scan('{location}')").fetchall()
        assert sorted(by_location) == expected  # the other way in: the catalog's metadata location
        stems = _catalog_stems(ws_path)
        for table, stem in stems.items():  # the hint names the catalog's current metadata file
            assert _hint(ws_path, table) == stem
        ledger = Workspace.open(ws_path).catalog.load_table(("lakepub", "orders_daily__ledger")).scan().to_arrow()
        assert len(_folder_rows(ws_path, "orders_daily__ledger", True)) == ledger.num_rows

    check()
    assert cli("janitor", "--older-than", "0s").code == 0  # deletes the crashed publish's metadata files
    check()
    assert cli("verify", "orders_daily", "--deep").code == 0

    retried = cli("publish", "orders_daily", "--events", str(batch), "--start", '{"p0":2}', "--end", '{"p0":4}')
    assert retried.code == 0, retried.err
    expected = [(_dt.date(2025, 10, 2), 150, 1)]
    check()


def test_compaction_and_expiry_keep_the_hint_on_the_current_metadata(ws_path, cli, ws):
    for offset, event in enumerate([A1, B1, A2, B2]):
        ws.publish("orders_daily", [event], start={"p0": offset}, end={"p0": offset + 1})
    assert cli("compact", "orders_daily").code == 0
    stems = _catalog_stems(ws_path)
    assert {t: _hint(ws_path, t) for t in stems} == stems
    assert len(_folder_rows(ws_path, "orders_daily__ledger", False)) == 2  # one row per order after compaction
    assert cli("janitor", "--older-than", "0s", "--retain-last", "1").code == 0  # expiry commits new metadata
    stems = _catalog_stems(ws_path)
    assert {t: _hint(ws_path, t) for t in stems} == stems
    assert _folder_rows(ws_path, "orders_daily", False) == [(_dt.date(2025, 10, 2), 150, 1)]
    metadata = ws_path / ".lakepub" / "warehouse" / "lakepub" / "orders_daily" / "metadata"
    assert (metadata / "version-hint.text").exists() and (metadata / f"{stems['orders_daily']}.metadata.json").exists()


def test_janitor_keeps_the_metadata_file_a_lagging_hint_names(ws_path, cli, ws):
    """A crash between a commit and its hint write leaves the hint one commit behind: the file it
    names must survive the janitor even once it has left the metadata log."""
    ws.publish("orders_daily", [A1], start={}, end={"p0": 1})
    table = ws.catalog.load_table(("lakepub", "orders_daily"))
    table.transaction().set_properties({"write.metadata.previous-versions-max": "1"}).commit_transaction()
    lagging = _hint(ws_path, "orders_daily")
    for offset, event in enumerate([B1, A2], start=1):
        ws.publish("orders_daily", [event], start={"p0": offset}, end={"p0": offset + 1})
    metadata = ws_path / ".lakepub" / "warehouse" / "lakepub" / "orders_daily" / "metadata"
    (metadata / "version-hint.text").write_text(lagging)  # as if the last two hint writes were lost
    table = ws.catalog.load_table(("lakepub", "orders_daily"))
    assert lagging not in {e.metadata_file.rsplit("/", 1)[1].removesuffix(".metadata.json") for e in table.metadata.metadata_log}

    assert cli("janitor", "--older-than", "0s", "--retain-last", "10").code == 0
    assert (metadata / f"{lagging}.metadata.json").exists()
    assert _folder_rows(ws_path, "orders_daily", False) == [(_dt.date(2025, 10, 1), 100, 1)]  # older, published

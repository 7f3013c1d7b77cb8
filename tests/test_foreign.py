"""The published table is also an Iceberg table other tools can write to: lakepub must never build
on a snapshot it did not write without knowing its data are still the published data, and the
table's real partition spec wins over a definition that changed under it (issue 9, items 1-2)."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pyarrow as pa
import yaml
from pyiceberg.expressions import EqualTo, LessThan
from pyiceberg.transforms import BucketTransform, DayTransform
from pyiceberg.types import StringType

from conftest import CliResult, published_pointers
from lakepub.generate import generate_stream, oracle_summary, read_stream
from lakepub.store.layout import ledger_id, summary_id
from lakepub.workspace import Workspace


def _published(root: Path) -> dict:
    fresh = Workspace.open(root)
    return {r["day"]: (r["cents"], r["orders"]) for r in fresh.query("SELECT * FROM orders_daily").to_pylist()}


def _summary_table(root: Path):
    ws = Workspace.open(root)
    return ws.catalog.load_table(summary_id(ws.config.namespace, "orders_daily"))


def _overwrite_day(root: Path, day: date, cents: int, orders: int) -> int:
    """What a user's pyiceberg script does: overwrite one day of the published table."""
    table = _summary_table(root)
    rows = pa.table({"day": pa.array([day], pa.date32()), "cents": pa.array([cents], pa.int64()),
                     "orders": pa.array([orders], pa.int64())})
    table.overwrite(rows, overwrite_filter=EqualTo("day", day.isoformat()))
    return _summary_table(root).metadata.current_snapshot_id


def _stream(ws: Workspace, events: int, seed: int) -> Path:
    landing = ws.config.landing_dir("orders")
    generate_stream(landing, events=events, partitions=2, days=20, seed=seed, segment_size=500)
    return landing


def _append_segment(landing: Path, name: str, events: list[dict]) -> None:
    (landing / "p0" / name).write_text("".join(json.dumps(e) + "\n" for e in events))


NEW = [{"order_id": f"new-{i}", "version": 1, "day": "2025-01-03", "cents": 10 + i, "deleted": False}
       for i in range(5)]


def test_a_data_neutral_foreign_snapshot_is_built_upon_without_starting_over(ws: Workspace, cli):
    landing = _stream(ws, 2000, seed=5)
    assert cli("run", "orders_daily").code == 0
    day, (cents, orders) = sorted(_published(ws.config.root).items())[3]
    _overwrite_day(ws.config.root, day, cents, orders)  # the same rows, a snapshot lakepub did not write

    assert cli("verify", "orders_daily", "--deep").code == 0

    _append_segment(landing, "99999.jsonl", NEW)
    res = cli("run", "orders_daily", "--format", "json")
    assert res.code == 0, res.err
    assert res.json()["events"] == len(NEW)  # not the whole landing again
    assert _published(ws.config.root) == oracle_summary(read_stream(landing))
    assert cli("verify", "orders_daily", "--deep").code == 0


def test_a_foreign_snapshot_that_changed_data_is_refused_and_reported(ws: Workspace, cli):
    landing = _stream(ws, 1000, seed=6)
    assert cli("run", "orders_daily").code == 0
    published = _published(ws.config.root)
    lakepub_snapshot = _summary_table(ws.config.root).metadata.current_snapshot_id
    day, (cents, orders) = sorted(published.items())[0]
    foreign = _overwrite_day(ws.config.root, day, cents * 2, orders)

    status = cli("status", "orders_daily", "--format", "json").json()[0]
    assert sum(status["positions"]["orders"].values()) == 1000
    assert f"snapshot {foreign}" in status["note"] and "outside lakepub" in status["note"]
    verify = cli("verify", "orders_daily")
    assert verify.code == 1 and f"snapshot {foreign}" in verify.err and "outside lakepub" in verify.err
    _append_segment(landing, "99999.jsonl", NEW)
    before = published_pointers(ws)
    res = cli("run", "orders_daily")
    assert res.code == 3, res.err
    assert f"{foreign}" in res.err and f"{lakepub_snapshot}" in res.err and day.strftime("%Y-%m") in res.err
    assert published_pointers(ws) == before
    publish = cli("publish", "orders_daily", "--events", str(landing / "p0" / "99999.jsonl"),
                  "--start", json.dumps(cli("status", "orders_daily", "--format", "json").json()[0]["positions"]["orders"]),
                  "--end", "{}")
    assert publish.code in (2, 3)  # refused either way, nothing published
    assert published_pointers(ws) == before

    # Rolling the table back to lakepub's snapshot (what the message says) makes publishing work again.
    _summary_table(ws.config.root).manage_snapshots().rollback_to_snapshot(lakepub_snapshot).commit()
    assert cli("run", "orders_daily").code == 0
    assert _published(ws.config.root) == oracle_summary(read_stream(landing))
    assert cli("verify", "orders_daily", "--deep").code == 0


def test_a_changed_partition_grain_is_refused_and_verify_uses_the_tables_spec(ws: Workspace, cli):
    landing = _stream(ws, 1000, seed=7)
    assert cli("run", "orders_daily").code == 0
    path = ws.config.root / "catalog" / "datasets" / "orders_daily.yaml"
    original = path.read_text()
    definition = yaml.safe_load(original)
    definition["partition"] = "day"
    path.write_text(yaml.safe_dump(definition))

    _append_segment(landing, "99999.jsonl", NEW)
    before = published_pointers(ws)
    res = cli("run", "orders_daily")
    assert res.code == 2, res.err
    assert "orders_daily.yaml" in res.err and "partition" in res.err and "'month(day)'" in res.err and "'day(day)'" in res.err
    assert published_pointers(ws) == before
    assert cli("verify", "orders_daily", "--deep").code == 0  # the table's spec, not the YAML's
    status = cli("status", "orders_daily", "--format", "json").json()[0]
    assert status["partitions"] == len({d.strftime("%Y-%m") for d in _published(ws.config.root)})

    path.write_text(original)
    assert cli("run", "orders_daily").code == 0
    assert _published(ws.config.root) == oracle_summary(read_stream(landing))
    assert cli("verify", "orders_daily", "--deep").code == 0


def _ledger_table(root: Path):
    ws = Workspace.open(root)
    return ws.catalog.load_table(ledger_id(ws.config.namespace, "orders_daily"))


def test_a_foreign_schema_change_is_refused_with_advice_until_undone(ws: Workspace, cli):
    """A schema change makes no snapshot, so the foreign-head check cannot see it: a column added
    by another tool (to either table) is refused by name, and dropping it again unblocks."""
    landing = _stream(ws, 1000, seed=8)
    assert cli("run", "orders_daily").code == 0
    for table_of, name in ((_summary_table, "orders_daily"), (_ledger_table, "orders_daily__ledger")):
        with table_of(ws.config.root).update_schema() as update:
            update.add_column("note", StringType())
        _append_segment(landing, f"9999{len(name)}.jsonl", [dict(NEW[0], order_id=f"schema-{name}")])
        before = published_pointers(ws)
        res = cli("run", "orders_daily")
        assert res.code == 3, res.err
        assert f"'lakepub.{name}'" in res.err and "note" in res.err and "delete_column('note')" in res.err, res.err
        assert published_pointers(ws) == before
        with table_of(ws.config.root).update_schema() as update:  # what the message says
            update.delete_column("note")
        res = cli("run", "orders_daily")
        assert res.code == 0, res.err
    assert _published(ws.config.root) == oracle_summary(read_stream(landing))
    assert cli("verify", "orders_daily", "--deep").code == 0


def test_a_foreign_append_duplicating_a_day_is_refused(ws: Workspace, cli):
    """A day appended twice (a user's script re-appending rows it read) changes the data: the
    foreign-head check checksums the rows as read, not one entry per day."""
    landing = _stream(ws, 1000, seed=9)
    assert cli("run", "orders_daily").code == 0
    lakepub_snapshot = _summary_table(ws.config.root).metadata.current_snapshot_id
    table = _summary_table(ws.config.root)
    table.append(table.scan(row_filter="day == '2025-01-03'").to_arrow())
    assert cli("verify", "orders_daily").code == 1

    _append_segment(landing, "99999.jsonl", NEW[:1])
    before = published_pointers(ws)
    res = cli("run", "orders_daily")
    assert res.code == 3, res.err
    assert "2025-01" in res.err and f"rollback_to_snapshot({lakepub_snapshot})" in res.err, res.err
    assert published_pointers(ws) == before

    _summary_table(ws.config.root).manage_snapshots().rollback_to_snapshot(lakepub_snapshot).commit()
    assert cli("run", "orders_daily").code == 0
    assert _published(ws.config.root) == oracle_summary(read_stream(landing))
    assert cli("verify", "orders_daily", "--deep").code == 0


def test_an_undone_partition_spec_evolution_lets_publishing_go_on(ws: Workspace, cli):
    """Iceberg keeps every partition spec a table had: only the current spec must be lakepub's,
    and live files written with another spec are refused until rewritten with the current one."""
    landing = _stream(ws, 1000, seed=10)
    assert cli("run", "orders_daily").code == 0
    with _summary_table(ws.config.root).update_spec() as update:
        update.add_field("day", DayTransform(), "day_day")
    _append_segment(landing, "99990.jsonl", NEW[:1])
    before = published_pointers(ws)
    res = cli("run", "orders_daily")
    assert res.code == 3 and "restore its original spec" in res.err, res.err
    assert published_pointers(ws) == before
    with _summary_table(ws.config.root).update_spec() as update:  # restored: the old spec id is reused
        update.remove_field("day_day")
    assert len(_summary_table(ws.config.root).metadata.partition_specs) == 2
    assert cli("run", "orders_daily").code == 0
    assert cli("verify", "orders_daily").code == 0

    with _summary_table(ws.config.root).update_spec() as update:
        update.add_field("cents", BucketTransform(4), "cents_bucket")
    table = _summary_table(ws.config.root)
    table.overwrite(table.scan().to_arrow())  # the same rows, written with the evolved spec
    with _summary_table(ws.config.root).update_spec() as update:
        update.remove_field("cents_bucket")
    _append_segment(landing, "99991.jsonl", NEW[1:2])
    before = published_pointers(ws)
    res = cli("run", "orders_daily")
    assert res.code == 3, res.err
    assert "another partition spec" in res.err and "table.overwrite(table.scan().to_arrow())" in res.err, res.err
    assert published_pointers(ws) == before
    table = _summary_table(ws.config.root)
    table.overwrite(table.scan().to_arrow())  # what the message says: the files now have the current spec

    assert cli("run", "orders_daily").code == 0
    assert _published(ws.config.root) == oracle_summary(read_stream(landing))
    assert cli("verify", "orders_daily", "--deep").code == 0


def _publish(cli, root: Path, name: str, events: list[dict], start: int) -> CliResult:
    path = _write(root / f"{name}.jsonl", events)
    return cli("publish", "orders_daily", "--events", str(path), "--source", "orders",
               "--start", json.dumps({"p0": start}), "--end", json.dumps({"p0": start + len(events)}))


def _event(order: str, day: str, cents: int) -> dict:
    return {"order_id": order, "version": 1, "day": day, "cents": cents, "deleted": False}


def _publish_two_months_then_delete_january(cli, root: Path) -> tuple[int, int]:
    assert _publish(cli, root, "b1", [_event("A", "2025-01-05", 100), _event("B", "2025-02-05", 200)], 0).code == 0
    s1 = _summary_table(root).metadata.current_snapshot_id
    assert _publish(cli, root, "b2", [_event("C", "2025-02-06", 300)], 2).code == 0
    s2 = _summary_table(root).metadata.current_snapshot_id
    _summary_table(root).delete(LessThan("day", "2025-02-01"))  # a user's script drops January
    return s1, s2


def test_a_foreign_partition_delete_is_refused_after_its_checksum_record_was_expired(ws: Workspace, cli):
    """Every record carries the number of non-empty partitions: a partition deleted by another tool
    is detected even once a user's expiry removed the only record of its checksum."""
    root = ws.config.root
    s1, s2 = _publish_two_months_then_delete_january(cli, root)
    _summary_table(root).maintenance.expire_snapshots().by_id(s1).commit()  # January's only checksum record

    verify = cli("verify", "orders_daily")
    assert verify.code == 1 and "1 non-empty partition(s)" in verify.err and "left 2" in verify.err, verify.err
    before = published_pointers(ws)
    res = cli("publish", "orders_daily", "--events", str(_write(root / "b3.jsonl", [_event("D", "2025-02-07", 5)])),
              "--source", "orders", "--start", '{"p0": 3}', "--end", '{"p0": 4}')
    assert res.code == 3, res.err
    assert "1 partition(s) removed outside lakepub" in res.err and f"rollback_to_snapshot({s2})" in res.err, res.err
    assert published_pointers(ws) == before

    _summary_table(root).manage_snapshots().rollback_to_snapshot(s2).commit()
    assert cli("publish", "orders_daily", "--events", str(root / "b3.jsonl"), "--source", "orders",
               "--start", '{"p0": 3}', "--end", '{"p0": 4}').code == 0
    assert _published(root) == {date(2025, 1, 5): (100, 1), date(2025, 2, 5): (200, 1), date(2025, 2, 6): (300, 1),
                                date(2025, 2, 7): (5, 1)}
    assert cli("compact", "orders_daily").code == 0  # compaction's record carries the count on
    assert _summary_table(root).current_snapshot().summary.additional_properties["lakepub.partition-count"] == "2"


def test_the_janitor_keeps_the_checksum_record_of_a_partition_deleted_outside_lakepub(ws: Workspace, cli):
    """The janitor once expired the only checksum record of a partition missing from the current
    data, so the publish on top went through (exit 0 on data missing a month) and, after the
    rollback a refusal advises, verify could no longer vouch for that partition."""
    root = ws.config.root
    s1, s2 = _publish_two_months_then_delete_january(cli, root)
    assert cli("janitor", "--older-than", "0s", "--retain-last", "1").code == 0
    assert s1 in {s.snapshot_id for s in _summary_table(root).metadata.snapshots}

    verify = cli("verify", "orders_daily")
    assert verify.code == 1 and "partition 2025-01" in verify.err and "left 2" in verify.err, verify.err
    before = published_pointers(ws)
    res = cli("publish", "orders_daily", "--events", str(_write(root / "b3.jsonl", [_event("D", "2025-02-07", 5)])),
              "--source", "orders", "--start", '{"p0": 3}', "--end", '{"p0": 4}')
    assert res.code == 3 and "2025-01" in res.err and f"rollback_to_snapshot({s2})" in res.err, res.err
    assert published_pointers(ws) == before

    _summary_table(root).manage_snapshots().rollback_to_snapshot(s2).commit()
    assert cli("publish", "orders_daily", "--events", str(root / "b3.jsonl"), "--source", "orders",
               "--start", '{"p0": 3}', "--end", '{"p0": 4}').code == 0
    assert cli("verify", "orders_daily", "--deep").code == 0


def _write(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_the_janitor_keeps_checksum_records_of_mains_lineage_not_of_a_rolled_back_snapshot(ws: Workspace, cli):
    """Publish S1, S2; roll back to S1; publish S3 from S1. S2 is newer than S1 but off main's
    lineage: the janitor must keep S1 (the record verify reads for 2025-02), not S2, and a retry
    of the rolled-back batch must not be found in S2 as "already published"."""
    root = ws.config.root
    assert _publish(cli, root, "b1", [_event("A", "2025-01-05", 100), _event("B", "2025-02-05", 200)], 0).code == 0
    s1 = _summary_table(root).metadata.current_snapshot_id
    assert _publish(cli, root, "b2", [_event("C", "2025-02-06", 300)], 2).code == 0
    s2 = _summary_table(root).metadata.current_snapshot_id
    _summary_table(root).manage_snapshots().rollback_to_snapshot(s1).commit()
    assert _publish(cli, root, "b3", [_event("D", "2025-01-07", 50)], 2).code == 0
    assert cli("verify", "orders_daily").code == 0

    assert cli("janitor", "--older-than", "0s", "--retain-last", "1").code == 0
    kept = {s.snapshot_id for s in _summary_table(root).metadata.snapshots}
    assert s1 in kept and s2 not in kept
    assert cli("verify", "orders_daily", "--deep").code == 0
    retry = _publish(cli, root, "b2", [_event("C", "2025-02-06", 300)], 2)
    assert retry.code == 3 and "stale start" in retry.err, retry.err
    assert _published(root) == {date(2025, 1, 5): (100, 1), date(2025, 1, 7): (50, 1), date(2025, 2, 5): (200, 1)}

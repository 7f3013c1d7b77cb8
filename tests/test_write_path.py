"""The publish write path's fenced pyiceberg internals (issue 10): staged metadata without the deep
copy, the catalog's staging step rebuilt on it, and partition files submitted before they are
staged; driven end to end by a drifting stream (every batch rewrites every month) read back by
DuckDB through `lakepub query`."""

from __future__ import annotations

import json
from datetime import date

import pyarrow as pa
import pytest
from click.testing import CliRunner

from lakepub.cli import main
from lakepub.generate import generate_stream, oracle_summary, read_stream
from lakepub.store.commit import TableChange, _stage
from lakepub.store.layout import ledger_id, summary_id
from lakepub.store.record import published_history
from lakepub.store.write import (_WRITTEN, add_in_one_block, append_files, fast_append, new_snapshot_id,
                                 staged_metadata, submit_partitions, transaction)
from pyiceberg.manifest import write_manifest
from pyiceberg.table.update import update_table_metadata


def _drift(ws_path, events=6_000):
    generate_stream(ws_path / "landing" / "orders", events=events, partitions=1, days=1095, seed=5,
                    segment_size=events // 4, spread=True)


def test_a_drifting_stream_publishes_every_month_per_batch_and_reads_back_exactly(ws_path):
    _drift(ws_path)
    res = CliRunner().invoke(main, ["-w", str(ws_path), "run", "orders_daily", "--max-batch", "1500",
                                    "--format", "json"])
    assert res.exit_code == 0, res.output
    batches = json.loads(res.stdout)["batches"]
    assert len(batches) == 4 and all(len(b["partitions"]) == 36 for b in batches)
    res = CliRunner().invoke(main, ["-w", str(ws_path), "query", "SELECT day, cents, orders FROM orders_daily",
                                    "--format", "json"])
    assert res.exit_code == 0, res.output
    got = {date.fromisoformat(r["day"]): (r["cents"], r["orders"]) for r in json.loads(res.stdout)}
    assert got == oracle_summary(read_stream(ws_path / "landing" / "orders"))
    res = CliRunner().invoke(main, ["-w", str(ws_path), "verify", "orders_daily", "--deep"])
    assert res.exit_code == 0, res.output


def _staged_tx(ws):
    """A transaction on the published table with a real publish's kind of updates (an append)."""
    table = ws.catalog.load_table(summary_id(ws.config.namespace, "orders_daily"))
    tx = transaction(table)
    tx.append(pa.table({"day": pa.array([date(2031, 1, 1)], pa.date32()), "cents": pa.array([1], pa.int64()),
                        "orders": pa.array([1], pa.int64())}),
              snapshot_properties={"lakepub.test": "x"})
    return table, tx


def test_staged_metadata_is_pyiceberg_update_table_metadata_without_the_deep_copy(ws, ws_path):
    _drift(ws_path, 2_000)
    ws.run("orders_daily", max_batch=1_000)
    table, tx = _staged_tx(ws)
    before = table.metadata.model_dump_json()
    ours = staged_metadata(table.metadata, tx._updates)  # noqa: SLF001
    theirs = update_table_metadata(table.metadata, tx._updates)  # noqa: SLF001
    assert ours.model_dump() == theirs.model_dump()
    assert table.metadata.model_dump_json() == before  # the base is left as it was
    assert tx.table_metadata.current_snapshot_id == ours.current_snapshot_id != table.metadata.current_snapshot_id
    # with a metadata location: the metadata log gains the current file, as in the catalog's staging
    change = TableChange(table, tx).requirements_and_updates()
    staged = _stage(ws.catalog, table, table.name(), *change)
    reference = ws.catalog._update_and_stage_table(table, table.name(), *change)  # noqa: SLF001
    assert staged.metadata.model_dump() == reference.metadata.model_dump()
    ours_dir, ours_file = staged.metadata_location.rsplit("/", 1)
    ref_dir, ref_file = reference.metadata_location.rsplit("/", 1)  # the same version, another uuid
    assert ours_dir == ref_dir and ours_file.split("-")[0] == ref_file.split("-")[0]
    assert staged.metadata.metadata_log[-1].metadata_file == table.metadata_location


def test_submitted_partition_files_are_the_files_replace_partitions_writes(ws, ws_path):
    _drift(ws_path, 2_000)
    ws.run("orders_daily", max_batch=2_000)
    table = ws.catalog.load_table(summary_id(ws.config.namespace, "orders_daily"))
    rows = table.scan().to_arrow()
    futures = submit_partitions(table, {0: rows.slice(0, 3), 1: rows.slice(3, 4)})
    files = [f.result() for f in futures]
    assert [f.record_count for f in files] == [3, 4]
    assert [f.partition[0] for f in files] == [0, 1]
    assert all(f.file_path.startswith(table.metadata.location) and "day_month=" in f.file_path for f in files)


def test_a_manifest_written_as_one_block_reads_back_like_pyiceberg_s_own(ws, ws_path, tmp_path):
    """``add_in_one_block`` (the published table's manifests) against pyiceberg's writer: same
    entries and the same manifest-list summary, in one Avro block instead of one per entry."""
    _drift(ws_path, 2_000)
    ws.run("orders_daily", max_batch=1_000)
    table = ws.catalog.load_table(summary_id(ws.config.namespace, "orders_daily"))
    [manifest] = table.current_snapshot().manifests(table.io)
    entries = manifest.fetch_manifest_entry(table.io, discard_deleted=False)
    assert len(entries) >= 36
    spec, schema = table.metadata.spec(), table.metadata.schema()
    written = {}
    for how in ("theirs", "ours"):
        out = table.io.new_output(str(tmp_path / f"{how}.avro"))
        with write_manifest(2, spec, schema, out, manifest.added_snapshot_id, "deflate") as writer:
            if how == "ours":
                add_in_one_block(writer, entries)
            else:
                for entry in entries:
                    writer.add_entry(entry)
        written[how] = writer.to_manifest_file()
    ours, theirs = written["ours"], written["theirs"]
    assert ours.manifest_length < theirs.manifest_length  # one block: one count, one deflate stream, one sync
    for field in ("added_files_count", "existing_files_count", "deleted_files_count", "added_rows_count",
                  "existing_rows_count", "deleted_rows_count", "min_sequence_number", "partitions"):
        assert getattr(ours, field) == getattr(theirs, field), field
    back = ours.fetch_manifest_entry(table.io, discard_deleted=False)
    assert [(e.status, e.snapshot_id, e.sequence_number, e.data_file.file_path, e.data_file.partition,
             e.data_file.record_count, e.data_file.lower_bounds, e.data_file.upper_bounds) for e in back] == \
        [(e.status, e.snapshot_id, e.sequence_number, e.data_file.file_path, e.data_file.partition,
          e.data_file.record_count, e.data_file.lower_bounds, e.data_file.upper_bounds)
         for e in theirs.fetch_manifest_entry(table.io, discard_deleted=False)]


def test_the_published_record_names_the_ledger_snapshot_drawn_before_the_ledger_was_staged(ws, ws_path):
    """The published tables are staged before the ledger append (its id chosen first): every
    record names the ledger snapshot committed with it, and append_files refuses an id in use."""
    _drift(ws_path, 3_000)
    ws.run("orders_daily", max_batch=1_000)
    table = ws.catalog.load_table(summary_id(ws.config.namespace, "orders_daily"))
    ledger = ws.catalog.load_table(ledger_id(ws.config.namespace, "orders_daily"))
    records = [record for _, record in published_history(table)]
    assert len(records) == 3
    assert records[0].ledger_snapshot == ledger.current_snapshot().snapshot_id
    ledger_ids = [s.snapshot_id for s in ledger.snapshots()]
    assert [r.ledger_snapshot for r in reversed(records)] == ledger_ids[-3:]
    taken = ledger.current_snapshot().snapshot_id
    with pytest.raises(ValueError, match="already in use"):
        append_files(transaction(ledger), [], {}, taken)
    fresh = new_snapshot_id(ledger)
    assert fresh not in ledger_ids


def _live_files(ws, ws_path):
    """The published table after a drifting run of two batches, and its live data files (>= 36)."""
    _drift(ws_path, 2_000)
    ws.run("orders_daily", max_batch=1_000)
    table = ws.catalog.load_table(summary_id(ws.config.namespace, "orders_daily"))
    [manifest] = table.current_snapshot().manifests(table.io)
    files = [e.data_file for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)]
    assert len(files) >= 36
    return table, manifest, files


def test_fast_append_stages_what_pyiceberg_s_fast_append_stages(ws, ws_path):
    """``fast_append`` (a derived window's new files: one Avro block, the partition type bound
    once for the summary) against pyiceberg's ``fast_append`` of the same files: the same snapshot
    summary, per-partition summaries included, and the same entries read back from the manifest,
    which is also what is remembered for the next commit."""
    table, manifest, files = _live_files(ws, ws_path)
    staged = {}
    for how in ("theirs", "ours"):
        tx = transaction(table)
        tx.set_properties({"write.summary.partition-limit": "1000"})
        if how == "ours":
            fast_append(tx, files, {"lakepub.x": "1"})
        else:
            with tx.update_snapshot(snapshot_properties={"lakepub.x": "1"}).fast_append() as append:
                for f in files:
                    append.append_data_file(f)
        staged[how] = tx.table_metadata.current_snapshot()
    ours, theirs = staged["ours"], staged["theirs"]
    assert ours.summary == theirs.summary
    assert sum(k.startswith("partitions.") for k in ours.summary.additional_properties) == len(
        {f.partition for f in files})
    ours_m, theirs_m = ours.manifests(table.io), theirs.manifests(table.io)
    assert [m.manifest_path for m in ours_m[1:]] == [m.manifest_path for m in theirs_m[1:]] == [manifest.manifest_path]

    def read(m):
        return [(e.status, e.snapshot_id == (ours if m is ours_m[0] else theirs).snapshot_id, e.sequence_number,
                 e.data_file.file_path, e.data_file.partition, e.data_file.record_count, e.data_file.lower_bounds,
                 e.data_file.upper_bounds) for e in m.fetch_manifest_entry(table.io, discard_deleted=True)]

    assert read(ours_m[0]) == read(theirs_m[0])
    assert [(e.status, e.sequence_number, e.file_sequence_number, e.data_file.file_path)
            for e in _WRITTEN[ours_m[0].manifest_path]] == \
        [(e.status, e.sequence_number, e.file_sequence_number, e.data_file.file_path)
         for e in ours_m[0].fetch_manifest_entry(table.io, discard_deleted=True)]


def test_the_overwrite_summary_is_pyiceberg_s_with_the_partition_type_bound_once(ws, ws_path, monkeypatch):
    """``replace_partitions`` (every publish: 36 partitions added and 36 deleted on a drifting
    stream) stages the snapshot summary pyiceberg's overwrite stages for the same files, per-
    partition summaries included, while building the partition type once per spec instead of
    once per added or deleted file (``_BoundSummary``)."""
    from pyiceberg.partitioning import PartitionSpec
    from lakepub.store.write import replace_partitions

    table, _, old = _live_files(ws, ws_path)
    rows = table.scan().to_arrow()
    futures = submit_partitions(table, {old[0].partition[0]: rows.slice(0, 2), old[1].partition[0]: rows.slice(2, 3)})
    new = [f.result() for f in futures]
    calls = []
    real = PartitionSpec.partition_type
    monkeypatch.setattr(PartitionSpec, "partition_type", lambda self, schema: calls.append(1) or real(self, schema))
    staged = {}
    for how in ("theirs", "ours"):
        tx = transaction(table)
        tx.set_properties({"write.summary.partition-limit": "1000"})
        calls.clear()
        if how == "ours":
            replace_partitions(tx, table, old, futures, {"lakepub.x": "1"})
            assert len(calls) <= 4, calls  # per snapshot: the summary once, the manifest writer three times
        else:
            with tx.update_snapshot(snapshot_properties={"lakepub.x": "1"}).overwrite() as overwrite:
                for f in old:
                    overwrite.delete_data_file(f)
                for f in new:
                    overwrite.append_data_file(f)
            assert len(calls) > len(old) + len(new)  # per file: what the bound type saves
        staged[how] = tx.table_metadata.current_snapshot()
    ours, theirs = staged["ours"], staged["theirs"]
    assert ours.summary == theirs.summary
    assert ours.summary["deleted-data-files"] == str(len(old)) and ours.summary["added-data-files"] == "2"
    assert sum(k.startswith("partitions.") for k in ours.summary.additional_properties) == len(
        {f.partition for f in old + new})

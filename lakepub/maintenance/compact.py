"""Ledger compaction: one row per order, with a durable version floor, in few large files.

The ledger holds every distinct (order_id, version) ever accepted, so it grows with history and
with one small file per publish. Compaction rewrites it to the current (highest) version of each
order, tombstones included, and sets ``floor`` to that version: the projection keeps rejecting
every version at or below the floor as stale, so an old event replayed after compaction can
neither resurrect a deleted order nor re-enter the ledger. The compacted ledger is committed
atomically with a published snapshot (same data, same positions) that names it, so readers and
publishers switch to it at once; a publisher racing with it recomputes against it.

The versions it drops are not forgotten: the kept row's ``history`` column (added to the ledger
by its first compaction, ``layout.HISTORY_ARROW``) lists the (version, day, cents, deleted) of
every version below it, those of earlier compactions included, and both lookups (the key index,
where they are rows of their own without the compacted flag, and the DuckDB join, which unnests
them) return them like ledger rows. So a replay of a compacted-away version is still a duplicate
with the same payload (exit 0) and a payload conflict with another (exit 3), exactly as before
compaction, and a version below the floor that was never accepted is still stale. Cost: the
ledger's row count still drops to one per order, but its payload bytes do not: per dropped
version ~21 bytes in the kept row's list before compression (its order_id, batch_id and keys are
not repeated), and the index keeps a ~33-byte row per dropped version (as before compaction), so
a publish's lookup returns every version of its orders and costs what it did before compaction.
Measured on 200k generated events (176,408 ledger rows -> 122,091): the compacted Parquet ledger
is 3.43 MB instead of 3.08 MB (~6.3 bytes per dropped version), the index 5.74 MB instead of
3.97 MB (what it was before compacting), and compaction takes 3.2 s instead of 1.7 s (the
history is aggregated once for the index, once for the ledger).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import duckdb
import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.table import Table
from pyiceberg.types import BooleanType, DateType, ListType, LongType, NestedField, StructType

from lakepub import duck
from lakepub.errors import CommitContention, ConfigError, UserError
from lakepub.identity import fingerprint
from lakepub.store.commit import CommitConflict, TableChange, commit_atomically, commit_mode, reset_main
from lakepub.store import key_index, layout
from lakepub.store.layout import SUMMARY_ARROW, has_history, has_order_keys, ledger_arrow, load_tables
from lakepub.publish import published_state
from lakepub.publish.guards import check_foreign, check_schemas, table_grain
from lakepub.store.record import Counts, latest_published
from lakepub.store.write import transaction
from lakepub.workspace import Workspace


_HISTORY = ListType(element_id=1, element_required=False, element=StructType(
    NestedField(2, "version", LongType(), required=False), NestedField(3, "day", DateType(), required=False),
    NestedField(4, "cents", LongType(), required=False), NestedField(5, "deleted", BooleanType(), required=False)))


def _compacted(scan: str, names: list[str], history: bool) -> str:
    """SQL of the compacted rows: each order's highest version, its floor set to that version,
    its ``history`` every (version, payload) below it (rows dropped now and the histories of
    earlier compactions), sorted by version."""
    earlier = "UNION ALL SELECT order_id, unnest(history, recursive := true) FROM l" if history else ""
    columns = {"floor": "l.version AS floor", "history": "h.history"}
    return f"""
        WITH l AS (SELECT * FROM {scan}),
        h AS (
            SELECT order_id, list(struct_pack(version := version, day := day, cents := cents, deleted := deleted)
                                  ORDER BY version) AS history
            FROM (SELECT order_id, version, day, cents, deleted FROM l
                  QUALIFY row_number() OVER (PARTITION BY order_id ORDER BY version DESC) > 1
                  {earlier})
            GROUP BY order_id)
        SELECT {', '.join(columns.get(name, f'l.{name}') for name in names)}
        FROM l LEFT JOIN h USING (order_id)
        QUALIFY row_number() OVER (PARTITION BY l.order_id ORDER BY l.version DESC) = 1"""


@dataclass(frozen=True)
class CompactionResult:
    dataset: str
    rows_before: int
    rows_after: int
    files_before: int
    files_after: int
    snapshot_id: int | None
    dry_run: bool

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def compact_ledger(ws: Workspace, dataset: str, *, dry_run: bool = False, max_attempts: int = 5) -> CompactionResult:
    """Compact the ledger at the snapshot the published table names, and commit the compacted
    ledger together with a published snapshot that names it (data unchanged, positions unchanged)."""
    spec = ws.dataset(dataset)
    if dataset not in ws.published_tables():
        raise UserError(f"'{dataset}' has nothing published yet, so its ledger has nothing to compact; "
                        f"run 'lakepub run {dataset}' or 'lakepub publish' first")
    if commit_mode(ws.catalog, ws.config.commit) != "atomic":
        raise ConfigError("ledger compaction needs the atomic commit of a SQL catalog (SQLite or PostgreSQL)")
    con = duck.connect(ws.config.catalog)
    for attempt in range(1, max_attempts + 1):
        tables = load_tables(ws.catalog, ws.config.namespace, dataset)
        latest = latest_published(tables.summary)
        record = latest[1] if latest else None
        base = record.ledger_snapshot if record else None
        # Its published snapshot carries the last record's positions: only onto published data.
        check_schemas(tables.summary, tables.ledger)
        grain = table_grain(spec, tables.summary)
        if record is not None and latest[0].snapshot_id != tables.summary.metadata.current_snapshot_id:
            check_foreign(tables.summary, latest, published_state.read(tables.summary)[2], grain)
        if record is None or base is None:
            return CompactionResult(dataset, 0, 0, 0, 0, None, dry_run)
        ledger = tables.ledger
        scan = duck.scan_sql(ledger.metadata_location, base)
        files_before = sum(1 for _ in ledger.scan(snapshot_id=base).plan_files())
        rows_before, rows_after = con.execute(
            f"SELECT count(*), count(DISTINCT order_id) FROM {scan}").fetchone()
        if dry_run:
            return CompactionResult(dataset, rows_before, rows_after, files_before, files_before, None, True)
        history = has_history(ledger)
        schema = ledger_arrow(ledger)
        if not history:
            schema = schema.append(layout.HISTORY_ARROW)
        compacted_sql = _compacted(scan, schema.names, history)
        index = _write_index(con, ledger, compacted_sql) if ws.config.key_index else None  # first: one result at a time
        reader = con.execute(f"{compacted_sql} ORDER BY l.order_id").to_arrow_reader(batch_size=1_000_000)
        props = {"lakepub.compaction": f"{rows_before}->{rows_after}"}
        ledger_tx = transaction(ledger)
        reset_main(ledger_tx, base)  # an append no publish names is not compacted in
        if not history:
            with ledger_tx.update_schema() as update:
                update.add_column(layout.HISTORY_ARROW.name, _HISTORY,
                                  doc="(version, payload) of the versions compaction dropped below this row")
        ledger_tx.delete(AlwaysTrue(), snapshot_properties=props)
        # Only the compacted snapshot names the index: its runs hold exactly that snapshot's rows.
        ledger_tx.append(reader.cast(schema), snapshot_properties=props if index is None else
                         {**props, key_index.INDEX_PROPERTY: key_index.encode([index])})
        compacted = ledger_tx.table_metadata.current_snapshot_id
        summary_tx = transaction(tables.summary)
        summary_tx.append(SUMMARY_ARROW.empty_table(), snapshot_properties=replace(
            record,
            batch_id=fingerprint("lakepub-compaction-v1", dataset, str(base), str(compacted)),
            batch={"kind": "compaction", "source": "(compaction)", "rows_before": rows_before,
                   "rows_after": rows_after},
            checksums={},
            counts=Counts(),
            ledger_snapshot=compacted,
        ).to_properties())
        try:
            commit_atomically(ws.catalog, [TableChange(ledger, ledger_tx), TableChange(tables.summary, summary_tx)])
        except CommitConflict:
            time.sleep(0.05 * 2 ** attempt)
            continue
        ledger = ws.catalog.load_table(ledger.name())
        files_after = sum(1 for _ in ledger.scan().plan_files())
        return CompactionResult(dataset, rows_before, rows_after, files_before, files_after, compacted, False)
    raise CommitContention(f"ledger compaction of '{dataset}' kept losing the commit race to publishers; retry it")


def _write_index(con: duckdb.DuckDBPyConnection, ledger: Table, compacted_sql: str) -> key_index.Run | None:
    """The key index of the compacted rows as one run (``store/key_index.py``): each kept row
    (compacted flag set) and a row per entry of its history (flag unset: a seen version, no
    floor); None where the ledger has no order keys or the warehouse is not local (publishes
    then scan the ledger)."""
    folder = key_index.folder_of(ledger.location())
    if folder is None or not has_order_keys(ledger):
        return None
    rows = con.execute(f"""
        WITH c AS ({compacted_sql})
        SELECT k1, k2, version, day, cents, deleted, floor FROM c
        UNION ALL
        SELECT k1, k2, h.version, h.day, h.cents, h.deleted, NULL::BIGINT AS floor
        FROM (SELECT k1, k2, unnest(history) AS h FROM c)
        ORDER BY k1""").to_arrow_reader(batch_size=key_index.BATCH_ROWS)
    return key_index.write_run(folder, (key_index.as_index_rows(pa.Table.from_batches([b])) for b in rows))

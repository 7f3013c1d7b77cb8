"""Ledger compaction: one row per order, with a durable version floor, in few large files.

The ledger holds every distinct (order_id, version) ever accepted, so it grows with history and
with one small file per publish. Compaction rewrites it to the current (highest) version of each
order, tombstones included, and sets ``floor`` to that version: the projection keeps rejecting
every version at or below the floor as stale, so an old event replayed after compaction can
neither resurrect a deleted order nor re-enter the ledger. The compacted ledger is committed
atomically with a published snapshot (same data, same positions) that names it, so readers and
publishers switch to it at once; a publisher racing with it recomputes against it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import duckdb
import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.table import Table

from lakepub import duck
from lakepub.errors import CommitContention, ConfigError, UserError
from lakepub.identity import fingerprint
from lakepub.store.commit import CommitConflict, TableChange, commit_atomically, commit_mode, reset_main
from lakepub.store import key_index
from lakepub.store.layout import SUMMARY_ARROW, has_order_keys, ledger_arrow, load_tables
from lakepub.store.record import Counts, latest_record
from lakepub.store.write import transaction
from lakepub.workspace import Workspace


# The compacted ledger: each order's highest version (tombstones included).
_LATEST = "QUALIFY row_number() OVER (PARTITION BY order_id ORDER BY version DESC) = 1"


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
    ws.dataset(dataset)
    if dataset not in ws.published_tables():
        raise UserError(f"'{dataset}' has nothing published yet, so its ledger has nothing to compact; "
                        f"run 'lakepub run {dataset}' or 'lakepub publish' first")
    if commit_mode(ws.catalog, ws.config.commit) != "atomic":
        raise ConfigError("ledger compaction needs the atomic commit of a SQL catalog (SQLite or PostgreSQL)")
    con = duck.connect(ws.config.catalog)
    for attempt in range(1, max_attempts + 1):
        tables = load_tables(ws.catalog, ws.config.namespace, dataset)
        record = latest_record(tables.summary)
        base = record.ledger_snapshot if record else None
        if record is None or base is None:
            return CompactionResult(dataset, 0, 0, 0, 0, None, dry_run)
        ledger = tables.ledger
        scan = duck.scan_sql(ledger.metadata_location, base)
        files_before = sum(1 for _ in ledger.scan(snapshot_id=base).plan_files())
        rows_before, rows_after = con.execute(
            f"SELECT count(*), count(DISTINCT order_id) FROM {scan}").fetchone()
        if dry_run:
            return CompactionResult(dataset, rows_before, rows_after, files_before, files_before, None, True)
        schema = ledger_arrow(ledger)
        index = _write_index(con, ledger, scan) if ws.config.key_index else None  # first: one result at a time
        reader = con.execute(f"""
            SELECT {', '.join('version AS floor' if name == 'floor' else name for name in schema.names)} FROM {scan}
            {_LATEST}
            ORDER BY order_id""").to_arrow_reader(batch_size=1_000_000)
        props = {"lakepub.compaction": f"{rows_before}->{rows_after}"}
        ledger_tx = transaction(ledger)
        reset_main(ledger_tx, base)  # an append no publish names is not compacted in
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


def _write_index(con: duckdb.DuckDBPyConnection, ledger: Table, scan: str) -> key_index.Run | None:
    """The key index of the compacted rows as one run (``store/key_index.py``); None where the
    ledger has no order keys or the warehouse is not local (publishes then scan the ledger)."""
    folder = key_index.folder_of(ledger.location())
    if folder is None or not has_order_keys(ledger):
        return None
    rows = con.execute(f"""
        SELECT k1, k2, version, day, cents, deleted, version AS floor FROM {scan}
        {_LATEST}
        ORDER BY k1""").to_arrow_reader(batch_size=key_index.BATCH_ROWS)
    return key_index.write_run(folder, (key_index.as_index_rows(pa.Table.from_batches([b])) for b in rows))

"""Ledger compaction: one row per order, with a durable version floor, in few large files.

The ledger holds every distinct (order_id, version) ever accepted, so it grows with history and
with one small file per publish. Compaction rewrites it to the current (highest) version of each
order, tombstones included, and sets ``floor`` to that version: the projection keeps rejecting
every version at or below the floor as stale, so an old event replayed after compaction can
neither resurrect a deleted order nor re-enter the ledger. The rewrite is one ledger commit that
asserts its parent; a publisher racing with it simply recomputes against the compacted ledger.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from lakepub import duck
from lakepub.errors import CommitContention, ConfigError
from lakepub.store.commit import CommitConflict, TableChange, commit_atomically, commit_mode
from lakepub.store.layout import LEDGER_ARROW, ledger_id
from lakepub.workspace import Workspace


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
    ws.dataset(dataset)
    if commit_mode(ws.catalog, ws.config.commit) != "atomic":
        raise ConfigError("ledger compaction needs the atomic commit of a SQL catalog (SQLite or PostgreSQL)")
    ident = ledger_id(ws.config.namespace, dataset)
    con = duck.connect(ws.config.catalog)
    for attempt in range(1, max_attempts + 1):
        ledger = ws.catalog.load_table(ident)
        if ledger.metadata.current_snapshot_id is None:
            return CompactionResult(dataset, 0, 0, 0, 0, None, dry_run)
        scan = duck.scan_sql(ledger.metadata_location)
        files_before = sum(1 for _ in ledger.scan().plan_files())
        rows_before, rows_after = con.execute(
            f"SELECT count(*), count(DISTINCT order_id) FROM {scan}").fetchone()
        if dry_run:
            return CompactionResult(dataset, rows_before, rows_after, files_before, files_before, None, True)
        reader = con.execute(f"""
            SELECT order_id, version, day, cents, deleted, batch_id, version AS floor FROM {scan}
            QUALIFY row_number() OVER (PARTITION BY order_id ORDER BY version DESC) = 1
            ORDER BY order_id""").to_arrow_reader(batch_size=1_000_000)
        tx = ledger.transaction()
        tx.overwrite(reader.cast(LEDGER_ARROW),
                     snapshot_properties={"lakepub.compaction": f"{rows_before}->{rows_after}"})
        try:
            commit_atomically(ws.catalog, [TableChange(ledger, tx)])
        except CommitConflict:
            time.sleep(0.05 * 2 ** attempt)
            continue
        ledger = ws.catalog.load_table(ident)
        files_after = sum(1 for _ in ledger.scan().plan_files())
        return CompactionResult(dataset, rows_before, rows_after, files_before, files_after,
                                ledger.metadata.current_snapshot_id, False)
    raise CommitContention(f"ledger compaction of '{dataset}' kept losing the commit race to publishers; retry it")

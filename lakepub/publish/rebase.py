"""Rebasing a publish that lost the commit race.

When another writer (typically a publisher of another source) committed first, our projection
is still valid if that commit touched none of our orders: per-day deltas commute, so they can be
re-applied as they are onto the new published partitions. Only the ledger files added since our
base snapshot are read to decide this, so the check costs what the concurrent batches wrote, not
what the ledger holds. Otherwise the projection is recomputed against the new state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import Table

from lakepub.duck import _q

if TYPE_CHECKING:  # a publish on the key-index path never opens DuckDB: imported on use
    import duckdb


def ledger_files_added_since(ledger: Table, base_snapshot_id: int | None,
                             head_snapshot_id: int | None) -> list[str] | None:
    """Data files added to the ledger between ``base_snapshot_id`` and ``head_snapshot_id``.

    Returns None when the base is not an ancestor of the head (history was rewritten, e.g. by
    compaction): the caller must then recompute.
    """
    files: list[str] = []
    snapshot = ledger.snapshot_by_id(head_snapshot_id) if head_snapshot_id is not None else None
    while snapshot is not None and snapshot.snapshot_id != base_snapshot_id:
        for manifest in snapshot.manifests(ledger.io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue  # carried over from an earlier snapshot
            for entry in manifest.fetch_manifest_entry(ledger.io, discard_deleted=True):
                if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot.snapshot_id:
                    files.append(entry.data_file.file_path)
        if snapshot.summary is not None and snapshot.summary.operation.value not in ("append",):
            return None  # a rewrite (compaction) or delete: do not try to be clever
        parent = snapshot.parent_snapshot_id
        if parent is None:  # reached the first snapshot: fine only if the base is "empty ledger"
            return files if base_snapshot_id is None else None
        snapshot = ledger.snapshot_by_id(parent)
    if snapshot is None:  # an expired snapshot cut the walk before the base: cannot tell
        return None
    return files


def touches_entities(con: duckdb.DuckDBPyConnection, files: list[str], events_view: str, key: tuple[str, ...]) -> bool:
    """Whether any of the ledger ``files`` holds an entity (key fields ``key``) of ``events_view``."""
    if not files:
        return False
    paths = ", ".join(f"'{_q(p)}'" for p in files)
    columns = ", ".join('"' + k.replace('"', '""') + '"' for k in key)
    row = con.execute(
        f"SELECT 1 FROM read_parquet([{paths}]) WHERE ({columns}) IN (SELECT ({columns}) FROM {events_view}) LIMIT 1"
    ).fetchone()
    return row is not None

"""Make sure DuckDB can plan a scan of a table snapshot before it is asked to.

DuckDB's iceberg extension aborts the whole process (C++ ``terminate``, exit 134) when a manifest
of the snapshot it scans is unparsable or missing: no Python handler runs. So before a snapshot
is handed to ``iceberg_scan``, pyiceberg reads its manifest list and every manifest (~2 ms per
manifest; the published table's snapshot lists one), and a bad file becomes ``CorruptTable``
naming it (exit 1). A corrupt metadata JSON already fails when the table is loaded
(``lakepub.failures`` names it).
"""

from __future__ import annotations

from typing import Iterator

from pyiceberg.manifest import ManifestEntry, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from lakepub.errors import CorruptTable
from lakepub.failures import corrupt_file


def check_scannable(table: Table, snapshot_id: int | None = None) -> None:
    """Raise CorruptTable if the snapshot's manifest list or a manifest cannot be read."""
    snapshot = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    if snapshot is not None:
        for _ in manifest_entries(table, snapshot):
            pass


def manifest_entries(table: Table, snapshot: Snapshot) -> Iterator[tuple[ManifestFile, ManifestEntry]]:
    """Every entry (deleted ones too) of every manifest of ``snapshot``, with its manifest; a file
    that cannot be read raises CorruptTable naming it, as ``check_scannable`` does."""
    location = snapshot.manifest_list
    try:
        for manifest in snapshot.manifests(table.io):
            location = manifest.manifest_path
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                yield manifest, entry
    except FileNotFoundError as exc:
        raise CorruptTable(exc.filename or location, f"file is missing (listed by {table.metadata_location})") from None
    except OSError:
        raise  # permissions, network: not corruption; DuckDB reports these as errors
    except Exception as exc:
        problem = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        raise CorruptTable(corrupt_file(exc) or location, problem) from None

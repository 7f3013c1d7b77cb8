"""Which files a table's metadata references, read from its metadata tree.

Referenced files of a table, as Iceberg's remove-orphan-files counts them:

* the current metadata file and every previous metadata file in its metadata log;
* statistics and partition-statistics files named in the metadata;
* for every snapshot still in the metadata: its manifest list, the manifests it lists and every
  *live* (added or existing) data or delete file in those manifests. An entry with status DELETED
  is a tombstone: the file it names is only live in older snapshots;
* lakepub's own: the key-index runs a ledger snapshot's summary names (``store/key_index.py``).
* lakepub's own: ``metadata/version-hint.text`` and the metadata file it names
  (``store/version_hint.py``), which is the current one unless a crash or a concurrent writer
  left the hint behind; then it is kept so that the hint never names a deleted file.

Manifest lists and manifests are immutable, so their contents are cached by path: a second pass
over re-loaded metadata (right before deleting) only reads what a concurrent commit added.
"""

from __future__ import annotations

from typing import Callable, Iterable

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, ManifestContent, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from lakepub.maintenance.filestore import normalize
from lakepub.store.key_index import referenced_paths
from lakepub.store.version_hint import hint_location, read_version_hint

Progress = Callable[[str, int, int], None]
"""``progress(label, done, total)``, called while manifests are read."""


class Reachability:
    """Reads manifest lists and manifests once each and answers "which files does X reference"."""

    def __init__(self, io: FileIO, progress: Progress | None = None, label: str = "scanning manifests"):
        self.io = io
        self.progress = progress
        self.label = label
        self._lists: dict[str, list[ManifestFile]] = {}
        self._entries: dict[str, list[DataFile]] = {}

    # --- reading, cached ------------------------------------------------------------------

    def manifests(self, snapshot: Snapshot) -> list[ManifestFile]:
        """The manifests a snapshot's manifest list names."""
        path = snapshot.manifest_list
        if path not in self._lists:
            self._lists[path] = list(snapshot.manifests(self.io))
        return self._lists[path]

    def live_files(self, manifest: ManifestFile) -> list[DataFile]:
        """The live (added or existing) data/delete files of one manifest."""
        if manifest.manifest_path not in self._entries:
            entries = manifest.fetch_manifest_entry(self.io, discard_deleted=True)
            self._entries[manifest.manifest_path] = [e.data_file for e in entries]
        return self._entries[manifest.manifest_path]

    def prefetch(self, snapshots: Iterable[Snapshot]) -> None:
        """Read every manifest of the snapshots not read yet, reporting progress."""
        pending: dict[str, ManifestFile] = {}
        for snapshot in snapshots:
            for manifest in self.manifests(snapshot):
                if manifest.manifest_path not in self._entries:
                    pending.setdefault(manifest.manifest_path, manifest)
        total = len(pending)
        for done, manifest in enumerate(pending.values(), start=1):
            self.live_files(manifest)
            if self.progress is not None:
                self.progress(self.label, done, total)

    # --- reference sets (normalised locations) ----------------------------------------------

    def snapshot_files(self, snapshots: Iterable[Snapshot], table_location: str) -> set[str]:
        """Manifest lists, manifests, live data/delete files and key-index runs of the given
        snapshots of the table at ``table_location``."""
        snapshots = list(snapshots)
        self.prefetch(snapshots)
        out: set[str] = set()
        for snapshot in snapshots:
            out.add(normalize(snapshot.manifest_list))
            out.update(normalize(p) for p in referenced_paths(table_location, snapshot))
            for manifest in self.manifests(snapshot):
                out.add(normalize(manifest.manifest_path))
                out.update(normalize(f.file_path) for f in self.live_files(manifest))
        return out

    @staticmethod
    def metadata_files(metadata: TableMetadata, metadata_location: str) -> set[str]:
        """The current metadata file, the metadata log and the statistics files."""
        out = {normalize(metadata_location)}
        out.update(normalize(entry.metadata_file) for entry in metadata.metadata_log)
        out.update(normalize(s.statistics_path) for s in metadata.statistics)
        out.update(normalize(s.statistics_path) for s in metadata.partition_statistics)
        return out

    def referenced(self, table: Table, keep: Callable[[Snapshot], bool] | None = None) -> set[str]:
        """Every file the table's metadata references; with ``keep``, only those snapshots'."""
        snapshots = [s for s in table.metadata.snapshots if keep is None or keep(s)]
        return (self.metadata_files(table.metadata, table.metadata_location) | self.hint_files(table)
                | self.snapshot_files(snapshots, table.location()))

    def hint_files(self, table: Table) -> set[str]:
        """The version hint and the metadata file it names (read afresh: a commit moves it)."""
        out = {normalize(hint_location(table.location()))}
        hinted = read_version_hint(self.io, table.location())
        if hinted is not None:
            out.add(normalize(hinted))
        return out


def live_partition_labels(table: Table, reach: Reachability) -> set[str]:
    """Labels of the partitions holding rows in the current snapshot, spelled as lakepub spells them.

    Iceberg's human-readable partition values (``2025-10`` for a month, ``2025-10-01`` for a day,
    ``2025`` for a year) are exactly ``lakepub.store.layout.partition_label``'s.
    """
    snapshot = table.current_snapshot()
    if snapshot is None:
        return set()
    specs, schema = table.specs(), table.schema()
    labels: set[str] = set()
    for manifest in reach.manifests(snapshot):
        if manifest.content != ManifestContent.DATA:
            continue
        spec = specs[manifest.partition_spec_id]
        for data_file in reach.live_files(manifest):
            if data_file.record_count == 0 or not spec.fields:
                continue
            parts = [field.transform.to_human_string(schema.find_type(field.source_id), data_file.partition[i])
                     for i, field in enumerate(spec.fields)]
            labels.add("/".join(parts))
    return labels

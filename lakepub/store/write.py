"""Writing the affected partitions of the published table as ONE overwrite snapshot.

pyiceberg's ``Transaction.overwrite`` makes two snapshots (a delete, then an append), each
copying the table metadata. A publish only ever replaces whole partitions, so the files to drop
are exactly the current files whose partition value is one of the rewritten partitions, and one
``overwrite`` snapshot can delete them and add the new files.

The files are chosen by their partition value rather than by planning a scan with a row filter:
pyiceberg evaluates such a filter per manifest entry in Python, which cost ~0.35 s per publish
over 36 partitions, against ~0.02 s for planning without a filter.

The published table is small (a row per day), but pyiceberg's overwrite keeps every manifest
it does not touch, so a table rewritten partition by partition ends up with about one manifest
per publish, which every reader must open. The overwrite here writes all surviving entries into
one manifest instead, so a snapshot lists at most three (kept, added, deleted) whatever the
history.
"""

from __future__ import annotations

import uuid
from datetime import date

import pyarrow as pa
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _OverwriteFiles

from lakepub.store.layout import partition_range

_EPOCH = date(1970, 1, 1)


def partition_value(label: str, grain: str) -> int:
    """The Iceberg partition value (day/month/year transform of ``day``) of a partition label."""
    first, _ = partition_range(label, grain)
    if grain == "day":
        return (first - _EPOCH).days
    if grain == "month":
        return (first.year - 1970) * 12 + first.month - 1
    return first.year - 1970


def replace_partitions(tx: Transaction, table: Table, rows: pa.Table, labels: list[str], grain: str,
                       snapshot_properties: dict[str, str]) -> None:
    """Stage in ``tx`` one snapshot replacing every file of the partitions ``labels`` with ``rows``."""
    values = {partition_value(label, grain) for label in labels}
    old_files = [task.file for task in table.scan().plan_files() if task.file.partition[0] in values] \
        if table.metadata.current_snapshot_id is not None else []
    new_files = list(_dataframe_to_data_files(table_metadata=tx.table_metadata, df=rows, io=table.io,
                                              write_uuid=uuid.uuid4())) if rows.num_rows else []
    operation = Operation.OVERWRITE if tx.table_metadata.current_snapshot_id is not None else Operation.APPEND
    with _CompactingOverwrite(operation=operation, transaction=tx, io=table.io, branch=MAIN_BRANCH,
                              snapshot_properties=snapshot_properties) as overwrite:
        for data_file in old_files:
            overwrite.delete_data_file(data_file)
        for data_file in new_files:
            overwrite.append_data_file(data_file)


class _CompactingOverwrite(_OverwriteFiles):
    """An overwrite that rewrites the surviving entries of all manifests into one manifest per spec."""

    def _existing_manifests(self) -> list[ManifestFile]:
        snapshot = self._transaction.table_metadata.snapshot_by_name(name=self._target_branch)
        if snapshot is None:
            return []
        by_spec: dict[int, list[ManifestEntry]] = {}
        for manifest in snapshot.manifests(io=self._io):
            for entry in manifest.fetch_manifest_entry(io=self._io, discard_deleted=True):
                if entry.data_file not in self._deleted_data_files:
                    by_spec.setdefault(manifest.partition_spec_id, []).append(entry)
        out = []
        for spec_id, entries in sorted(by_spec.items()):
            with self.new_manifest_writer(self.spec(spec_id)) as writer:
                for entry in entries:
                    writer.add_entry(ManifestEntry.from_args(
                        status=ManifestEntryStatus.EXISTING,
                        snapshot_id=entry.snapshot_id,
                        sequence_number=entry.sequence_number,
                        file_sequence_number=entry.file_sequence_number,
                        data_file=entry.data_file,
                    ))
            out.append(writer.to_manifest_file())
        return out
